// Read-only views: reservations, paths, topology, health, Prometheus metrics; the journal check.
#include <algorithm>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "common/prometheus.h"
#include "common/units.h"
#include "common/version.h"
#include "control/admission/planner.h"
#include "control/agent/agent_counters.h"
#include "control/agent/agent_impl.h"
#include "control/gateway/tunnel_spec.h"
#include "control/reservation/reservation_json.h"

namespace detwan::control::agent {
namespace json = boost::json;
using reservation::Reservation;
using reservation::State;

json::object Agent::Impl::view(const Reservation& r) const {
  json::object out = reservation::to_json(r);
  // The tunnel's traffic: what each site's gateway sends into it.
  json::object tunnel{{"id", r.tunnel_id}};
  auto prefixes = [](const std::vector<std::string>& list) {
    json::array a;
    for (const std::string& p : list) a.push_back(json::string(p));
    return a;
  };
  tunnel["src_prefixes"] = prefixes(r.spec.src_prefixes);
  tunnel["dst_prefixes"] = prefixes(r.spec.dst_prefixes);
  tunnel["playout_bound_ns"] = r.bound.on_time ? r.bound.playout_bound_ns : 0;
  // What a sender into the tunnel must fit and pace with (docs/control-api.md, "Reserve"): the
  // largest inner IP packet the first path's links carry after the encapsulation, and the
  // bytes each gateway adds and counts against the reserved rate.
  uint32_t link_mtu = 0;
  if (!r.paths.empty()) {
    for (const std::string& name : r.paths.front().links) {
      const uint32_t l = topology.find_link(name);
      if (l == model::kNone) continue;
      const uint32_t mtu = topology.links[l].mtu_bytes;
      link_mtu = link_mtu == 0 ? mtu : std::min(link_mtu, mtu);
    }
  }
  // An encrypted tunnel's packets also carry the AEAD tag.
  const uint32_t encap = gateway::kEncapOverheadBytes +
                         (r.spec.encrypt != "none" ? gateway::kAeadTagBytes : 0);
  tunnel["mtu_bytes"] = link_mtu > encap ? link_mtu - encap : 0;
  tunnel["frame_overhead_bytes"] = encap + (gateway::kFrameOverheadBytes -
                                            gateway::kEncapOverheadBytes);
  out["tunnel"] = std::move(tunnel);
  // Secure by default: the cipher in plain sight, and a warning when there is none (a request
  // asked for "encrypt": "none" by name, or a journal from before the default admitted it).
  out["encrypt"] = r.spec.encrypt;
  json::array warnings;
  if (r.spec.encrypt == reservation::kNoCipher) {
    warnings.push_back(json::object{
        {"code", "unencrypted"},
        {"message", fmt::format("{}'s tunnel is neither authenticated nor encrypted: its packets "
                                "cross the WAN in clear and anyone on the path can forge them "
                                "(the request said \"encrypt\": \"none\")",
                                r.id)}});
  }
  out["warnings"] = std::move(warnings);
  return out;
}

Outcome<json::object> Agent::get(const std::string& id) const {
  std::lock_guard lock(impl_->mutex);
  const Reservation* r = impl_->find(id);
  if (r != nullptr) return impl_->view(*r);
  auto old = impl_->archived(id);
  if (!old) return std::unexpected(old.error());
  if (!old->has_value()) return std::unexpected(not_found(id));
  return impl_->archived_view(**old);
}

json::array Agent::list(std::optional<State> state) const {
  ListQuery query;
  query.state = state;
  return list_page(query).reservations;
}

Agent::ListPage Agent::list_page(const ListQuery& query) const {
  std::lock_guard lock(impl_->mutex);
  if (query.archived) return impl_->list_archived(query);
  ListPage page;
  for (auto it = impl_->reservations.upper_bound(query.after_key);
       it != impl_->reservations.end(); ++it) {
    const Reservation& r = it->second;
    if (query.state && r.state != *query.state) continue;
    if (!query.site.empty() && r.spec.src != query.site && r.spec.dst != query.site) continue;
    if (query.visible && !query.visible(r.tenant)) continue;
    if (query.limit > 0 && page.reservations.size() == query.limit) {
      page.next = page.reservations.back().as_object().at("id").as_string().c_str();
      break;
    }
    json::object item = impl_->view(r);
    item.erase("history");
    page.reservations.push_back(std::move(item));
  }
  return page;
}

Outcome<json::object> Agent::paths(const PathsRequest& request) const {
  std::lock_guard lock(impl_->mutex);
  const Impl& m = *impl_;
  const model::Topology& t = m.topology;
  admission::Request a;
  a.src_site = t.find_site(request.src);
  a.dst_site = t.find_site(request.dst);
  for (const auto& [name, index] : {std::pair{"src", a.src_site}, std::pair{"dst", a.dst_site}}) {
    if (index == model::kNone) {
      return std::unexpected(
          ApiError{400, "unknown_site",
                   fmt::format("'{}' is not a site of domain '{}'",
                               std::string(name) == "src" ? request.src : request.dst, t.domain),
                   name});
    }
  }
  a.rate_bps = request.min_bandwidth_bps;
  a.burst_bytes = request.max_burst_bytes;
  a.max_latency_ns = request.max_latency_ns;
  a.max_latency_variation_ns = request.max_latency_variation_ns;
  a.max_loss = request.max_loss;
  a.start_ns = request.start_ns != 0 ? request.start_ns : m.realtime->now_ns();
  a.end_ns = a.start_ns + request.duration_ns;
  a.paths = std::max(1u, request.k);
  const auto candidates = admission::candidate_paths(t, *m.ledger, a, request.require_capacity);
  json::array paths;
  for (const admission::PathPlan& p : candidates) {
    json::array nodes;
    for (const uint32_t n : p.nodes) nodes.push_back(json::string(t.nodes[n].name));
    json::array links;
    json::array free;
    for (const uint32_t l : p.links) {
      links.push_back(json::string(t.links[l].name));
      uint64_t least = UINT64_MAX;
      for (int d = 0; d < 2; ++d)
        least = std::min(least, m.ledger->free_bps(l, d, a.start_ns, a.end_ns));
      free.push_back(least);
    }
    const bool meets = (a.max_latency_ns == 0 || p.bound.max_latency_ns <= a.max_latency_ns) &&
                       (a.max_latency_variation_ns < 0 ||
                        p.bound.max_latency_variation_ns <= a.max_latency_variation_ns) &&
                       p.bound.max_loss <= a.max_loss;
    json::array ends;
    for (const admission::PathEnd& e : p.ends) {
      json::array slots;
      for (const uint32_t s : e.slots) slots.push_back(s);
      ends.push_back(
          json::object{{"gateway", e.gateway == model::kNone ? "" : t.gateways[e.gateway].name},
                       {"link", t.links[e.link].name},
                       {"port", e.port},
                       {"slots", std::move(slots)},
                       {"guaranteed_bps", e.guaranteed_bps}});
    }
    paths.push_back(json::object{{"nodes", std::move(nodes)},
                                 {"links", std::move(links)},
                                 {"free_bps", std::move(free)},
                                 {"ends", std::move(ends)},
                                 {"bound", reservation::bound_to_json(p.bound)},
                                 {"meets_requirements", meets}});
  }
  return json::object{{"src", request.src},
                      {"dst", request.dst},
                      {"min_bandwidth_bps", request.min_bandwidth_bps},
                      {"start_unix_ns", a.start_ns},
                      {"end_unix_ns", a.end_ns},
                      {"k", a.paths},
                      {"paths", std::move(paths)}};
}

json::object Agent::topology_json() const {
  std::lock_guard lock(impl_->mutex);
  const Impl& m = *impl_;
  const model::Topology& t = m.topology;
  const int64_t now = m.realtime->now_ns();
  json::array sites;
  for (const model::Site& s : t.sites) {
    json::array prefixes;
    for (const auto& p : s.tunnel_prefixes)
      prefixes.push_back(json::string(common::format_ip_prefix(p)));
    sites.push_back(
        json::object{{"name", s.name},
                     {"gateway", s.gateway == model::kNone ? "" : t.gateways[s.gateway].name},
                     {"tunnel_prefixes", std::move(prefixes)}});
  }
  json::array gateways;
  const auto counters = m.reconciler->counters();
  for (uint32_t g = 0; g < t.gateways.size(); ++g) {
    const GatewayView& v = m.gateways[g];
    json::array ports;
    for (const auto& p : t.gateways[g].ports) {
      ports.push_back(json::object{{"name", p.name}, {"link", t.links[p.link].name}});
    }
    gateways.push_back(json::object{{"name", t.gateways[g].name},
                                    {"site", t.sites[t.gateways[g].site].name},
                                    {"admin_socket", t.gateways[g].admin_socket},
                                    {"ports", std::move(ports)},
                                    {"reachable", v.reachable},
                                    {"in_sync", counters[g].in_sync},
                                    {"generation", v.generation},
                                    {"boot_id", v.boot_id},
                                    {"error", v.error}});
  }
  json::array links;
  for (uint32_t l = 0; l < t.links.size(); ++l) {
    const model::Link& link = t.links[l];
    json::array directions;
    for (int d = 0; d < 2; ++d) {
      json::object dir{{"from", t.nodes[link.ends[d]].name},
                       {"to", t.nodes[link.ends[1 - d]].name},
                       {"reserved_bps_now", m.ledger->capacity(l, d).at_bps(now)}};
      if (const calendar::SlotCalendar* slots = m.ledger->slots(l, d)) {
        dir["slots_booked_now"] = slots->booked_at(now);
      }
      directions.push_back(std::move(dir));
    }
    links.push_back(json::object{{"name", link.name},
                                 {"ends", json::array{json::string(t.nodes[link.ends[0]].name),
                                                      json::string(t.nodes[link.ends[1]].name)}},
                                 {"capacity_bps", link.capacity_bps},
                                 {"reservable_bps", link.reservable_bps()},
                                 {"delay_ns", link.delay_ns},
                                 {"jitter_ns", link.jitter_ns},
                                 {"loss", link.loss},
                                 {"mtu_bytes", link.mtu_bytes},
                                 {"cycle_ns", link.cycle_ns},
                                 {"slot_count", link.slot_count},
                                 {"reservable_slots", link.reservable_slots()},
                                 {"guard_ns", link.guard_ns},
                                 {"directions", std::move(directions)}});
  }
  json::array transit;
  for (const model::Node& n : t.nodes) {
    if (n.site == model::kNone) transit.push_back(json::string(n.name));
  }
  return json::object{
      {"domain", t.domain},        {"agent", t.agent.name},           {"source", t.source},
      {"sites", std::move(sites)}, {"gateways", std::move(gateways)}, {"nodes", std::move(transit)},
      {"links", std::move(links)}};
}

json::object Agent::health() const {
  std::lock_guard lock(impl_->mutex);
  const Impl& m = *impl_;
  uint32_t reachable = 0;
  for (const GatewayView& v : m.gateways) reachable += v.reachable ? 1 : 0;
  std::map<std::string, uint64_t> by_state;
  for (const auto& [key, r] : m.reservations)
    ++by_state[std::string(reservation::to_string(r.state))];
  json::object states;
  for (const auto& [state, n] : by_state) states[state] = n;
  return json::object{{"status", "ok"},
                      {"version", std::string(common::kVersion)},
                      {"domain", m.topology.domain},
                      {"journal", m.journal->path()},
                      {"journal_failures", m.counters.journal_failures},
                      {"gateways", m.gateways.size()},
                      {"gateways_reachable", reachable},
                      {"reservations", std::move(states)}};
}

void Agent::count_request(const std::string& method, const std::string& route, int status,
                          int64_t latency_ns) {
  // The method (and a route that names what was asked) come from the client: bytes outside
  // printable ASCII as \xNN, so that /v1/stats stays valid UTF-8 JSON and /metrics a valid
  // exposition whatever was asked (the fuzzer sent such requests); no space (it separates them).
  const auto printable = [](const std::string& text) {
    std::string out;
    for (const char ch : text) {
      const auto byte = static_cast<unsigned char>(ch);
      if (byte > 0x20 && byte < 0x7f && ch != '"' && ch != '\\') {
        out += ch;
      } else {
        out += fmt::format("\\x{:02x}", byte);
      }
    }
    return out;
  };
  std::lock_guard lock(impl_->mutex);
  ++impl_->counters.requests[fmt::format("{} {} {}", printable(method), printable(route), status)];
  impl_->counters.request_ns.record(latency_ns);
}

void Agent::count_refused(const std::string& cause) {
  std::lock_guard lock(impl_->mutex);
  ++impl_->counters.refused[cause];
}

json::object Agent::stats() const {
  std::lock_guard lock(impl_->mutex);
  const Impl& m = *impl_;
  json::object counters;
  for (const LabelledCounters& family : kLabelledCounters) {
    json::object by_label;
    for (const auto& [label, n] : m.counters.*family.member) by_label[label] = n;
    counters[family.key] = std::move(by_label);
  }
  json::object requests;
  for (const auto& [key, n] : m.counters.requests) requests[key] = n;
  counters["requests"] = std::move(requests);
  counters["journal_commits"] = m.journal->commits();
  counters["journal_failures"] = m.counters.journal_failures;
  counters["archived"] = m.counters.archived;
  json::array gateways;
  const auto by_gateway = m.reconciler->counters();
  for (uint32_t g = 0; g < m.topology.gateways.size(); ++g) {
    const gateway::ReconcilerCounters& c = by_gateway[g];
    json::object entry{{"name", m.topology.gateways[g].name},
                       {"generation", c.generation},
                       {"in_sync", c.in_sync}};
    common::for_each_counter(c, kReconcilerFields,
                             [&](std::string_view key, uint64_t n) { entry[key] = n; });
    gateways.push_back(std::move(entry));
  }
  const auto summary = [](const common::LogLinearHistogram& h) {
    boost::system::error_code ec;
    json::value v = json::parse(h.summary_json(), ec);
    return ec ? json::value(nullptr) : v;
  };
  return json::object{
      {"counters", std::move(counters)},
      {"gateways", std::move(gateways)},
      {"latency",
       json::object{{"admission_ns", summary(m.counters.admission_ns)},
                    {"request_ns", summary(m.counters.request_ns)}}},
  };
}

std::string Agent::metrics_text() const {
  namespace prom = common::prometheus;
  std::lock_guard lock(impl_->mutex);
  const Impl& m = *impl_;
  const model::Topology& t = m.topology;
  const int64_t now = m.realtime->now_ns();
  prom::Exposition e;
  e.gauge("detwan_build_info", "The program and its version (constant 1).",
          {{"program", "detwan-agent"}, {"version", std::string(common::kVersion)}}, 1);
  std::map<std::string, uint64_t> by_state;
  for (const State s : {State::kHeld, State::kCommitted, State::kProvisioned, State::kReleased,
                        State::kTerminated, State::kFailed}) {
    by_state[std::string(reservation::to_string(s))] = 0;
  }
  uint64_t active = 0;
  for (const auto& [key, r] : m.reservations) {
    ++by_state[std::string(reservation::to_string(r.state))];
    active += r.dataplane_active ? 1 : 0;
  }
  for (const auto& [state, n] : by_state) {
    e.gauge("detwan_agent_reservations", "Reservations by state.", {{"state", state}},
            static_cast<double>(n));
  }
  e.gauge("detwan_agent_dataplane_active",
          "Provisioned reservations whose tunnels are on every gateway.", {},
          static_cast<double>(active));
  for (const LabelledCounters& family : kLabelledCounters) {
    const std::string name = fmt::format("{}{}", kAgentPrefix, family.metric);
    for (const auto& [label, n] : m.counters.*family.member) {
      prom::Labels labels;
      if (!family.const_label_name.empty()) {
        labels.emplace_back(family.const_label_name, std::string(family.const_label_value));
      }
      labels.emplace_back(family.label, label);
      e.counter(name, family.help, labels, n);
    }
  }
  e.histogram_ns("detwan_agent_admission_seconds",
                 "Time to plan one reservation (path, slots, bound).", {},
                 m.counters.admission_ns, prom::kDelayBucketsSeconds);
  for (const auto& [key, n] : m.counters.requests) {
    const size_t a = key.find(' ');
    const size_t b = key.rfind(' ');
    e.counter("detwan_agent_http_requests_total", "API requests by method, route and status.",
              {{"method", key.substr(0, a)},
               {"route", key.substr(a + 1, b - a - 1)},
               {"status", key.substr(b + 1)}},
              n);
  }
  e.histogram_ns("detwan_agent_http_request_seconds", "API request handling time.", {},
                 m.counters.request_ns, prom::kDelayBucketsSeconds);
  e.counter("detwan_agent_journal_commits_total", "Transitions written to the journal.", {},
            m.journal->commits());
  e.counter("detwan_agent_journal_failures_total",
            "Journal writes that failed (nothing changed).", {}, m.counters.journal_failures);
  e.counter("detwan_agent_reservations_archived_total",
            "Final reservations moved out of memory into the store's archive.", {},
            m.counters.archived);
  const auto counters = m.reconciler->counters();
  for (uint32_t g = 0; g < t.gateways.size(); ++g) {
    const prom::Labels labels{{"gateway", t.gateways[g].name}};
    const gateway::ReconcilerCounters& c = counters[g];
    e.counters(kGatewayPrefix, labels, c, kReconcilerFields);
    e.gauge("detwan_agent_gateway_generation", "The gateway's configuration generation.", labels,
            static_cast<double>(c.generation));
    e.gauge("detwan_agent_gateway_in_sync",
            "1 if the gateway has exactly the agent's tunnels.", labels, c.in_sync ? 1 : 0);
  }
  for (uint32_t l = 0; l < t.links.size() && l < 10'000; ++l) {
    const model::Link& link = t.links[l];
    for (int d = 0; d < 2; ++d) {
      e.gauge("detwan_agent_link_reserved_bps", "Rate reserved now on each link direction.",
              {{"link", link.name}, {"from", t.nodes[link.ends[d]].name}},
              static_cast<double>(m.ledger->capacity(l, d).at_bps(now)));
    }
  }
  return e.text();
}

common::Result<std::string> check_journal(const model::Topology& topology,
                                          const std::string& path) {
  auto journal = journal::Journal::open(path, false, topology.domain);
  if (!journal) return std::unexpected(journal.error());
  return check_store(topology, **journal);
}

common::Result<std::string> check_store(const model::Topology& topology, journal::Store& store) {
  model::Topology t = topology;
  if (auto ok = model::finish(t); !ok) return std::unexpected(ok.error());
  const std::string& path = store.path();
  std::map<std::string, uint64_t> key_of_id;  // a reservation id is one reservation
  calendar::Ledger ledger(t);
  std::string problem;
  int64_t events = 0;
  uint64_t peak_bookings = 0;
  auto replayed = store.for_each_event([&](const journal::Event& e) {
    if (!problem.empty()) return;
    ++events;
    boost::system::error_code ec;
    const json::value value = json::parse(e.body, ec);
    if (ec || !value.is_object()) {
      problem = fmt::format("event {} ({}): body is not JSON", e.seq, e.id);
      return;
    }
    auto r = reservation::from_json(value.as_object());
    if (!r) {
      problem = fmt::format("event {}: {}", e.seq, r.error().message);
      return;
    }
    if (auto [it, added] = key_of_id.emplace(r->id, r->key); !added && it->second != r->key) {
      problem = fmt::format("event {}: reservation {} has key {}, earlier {}: one id, two "
                            "reservations",
                            e.seq, r->id, r->key, it->second);
      return;
    }
    if (reservation::holds_resources(r->state)) {
      auto booking = reservation::booking_of(t, *r);
      if (!booking) {
        problem = fmt::format("event {}: {}", e.seq, booking.error().message);
        return;
      }
      ledger.book(*booking);
    } else {
      ledger.unbook(r->key);
    }
    peak_bookings = std::max<uint64_t>(peak_bookings, ledger.size());
    if (std::string over = ledger.check_booking(r->key); !over.empty()) {
      problem = fmt::format("after event {} ({} {} -> {}): {}", e.seq, e.id, e.from, e.to, over);
    }
  });
  if (!replayed) return std::unexpected(replayed.error());
  if (problem.empty()) problem = ledger.check();
  if (!problem.empty()) return common::make_error(common::ErrorCode::kInternal, problem);
  return fmt::format(
      "journal {}: {} events replayed, {} reservations, at most {} bookings at once, nothing "
      "over-booked",
      path, events, key_of_id.size(), peak_bookings);
}

}  // namespace detwan::control::agent

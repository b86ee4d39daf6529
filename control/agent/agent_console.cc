// The operator console's reads (docs/console.md): gateways as the reconciler sees them, each
// gateway's live tunnel counters and delays, and the links' calendars over the next hours.
#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "control/agent/agent_impl.h"

namespace detwan::control::agent {
namespace json = boost::json;

namespace {

constexpr int64_t kSecondNs = 1'000'000'000;
constexpr int64_t kMaxHorizonNs = 7 * 24 * 3600 * kSecondNs;
constexpr int64_t kMaxCalendarSteps = 1000;

const json::object* object_at(const json::value* v, std::string_view key) {
  if (v == nullptr || !v->is_object()) return nullptr;
  const json::value* inner = v->as_object().if_contains(key);
  return inner != nullptr && inner->is_object() ? &inner->as_object() : nullptr;
}

int64_t integer_at(const json::object* o, std::string_view key) {
  if (o == nullptr) return 0;
  const json::value* v = o->if_contains(key);
  if (v == nullptr) return 0;
  if (v->is_int64()) return v->as_int64();
  if (v->is_uint64()) return static_cast<int64_t>(std::min<uint64_t>(v->as_uint64(), INT64_MAX));
  if (v->is_double()) return static_cast<int64_t>(v->as_double());
  return 0;
}

// A playout histogram ({"count","min","mean","p50",...}) reduced to what the console shows;
// null when it has no sample.
json::value histogram(const json::object* playout, std::string_view key) {
  const json::value* h = playout != nullptr ? playout->if_contains(key) : nullptr;
  if (h == nullptr || !h->is_object()) return nullptr;
  const json::object& o = h->as_object();
  if (integer_at(&o, "count") == 0) return nullptr;
  return json::object{{"count", integer_at(&o, "count")},
                      {"p50", integer_at(&o, "p50")},
                      {"p99", integer_at(&o, "p99")},
                      {"max", integer_at(&o, "max")},
                      {"mean", integer_at(&o, "mean")}};
}

// The WAN delay of the last 10 s of the class (stats' rx.windows, docs/gateway-stats.md): what the
// console calls live; null when no packet arrived in it (or the gateway predates windows).
json::value recent_delay(const json::value* rx, std::string_view cls) {
  const json::object* windows = object_at(rx, "windows");
  const json::value* of_class = windows != nullptr ? windows->if_contains(cls) : nullptr;
  const json::object* delay = object_at(of_class, "wan_delay_ns");
  const json::value* w = delay != nullptr ? delay->if_contains("10s") : nullptr;
  if (w == nullptr || !w->is_object() || integer_at(&w->as_object(), "count") == 0) return nullptr;
  const json::object& o = w->as_object();
  return json::object{{"span_ns", integer_at(&o, "span_ns")},
                      {"count", integer_at(&o, "count")},
                      {"p50", integer_at(&o, "p50")},
                      {"p99", integer_at(&o, "p99")},
                      {"max", integer_at(&o, "max")}};
}

// One tunnel of a gateway's stats document (docs/gateway-stats.md, "stats_json") -> the
// console's row.
// The receive side is the class that carried traffic (on time if any).
json::object tunnel_summary(const json::object& t) {
  const json::value* rx = t.if_contains("rx");
  const json::object* on_time = object_at(rx, "on_time");
  const json::object* best_effort = object_at(rx, "best_effort");
  const bool timed = integer_at(on_time, "received_packets") > 0 ||
                     integer_at(best_effort, "received_packets") == 0;
  const json::object* playout = timed ? on_time : best_effort;
  const json::object* tx = nullptr;
  if (const json::value* v = t.if_contains("tx"); v != nullptr && v->is_object()) {
    tx = &v->as_object();
  }
  json::object dropped;
  if (playout != nullptr) {
    if (const json::value* d = playout->if_contains("dropped"); d != nullptr && d->is_object()) {
      dropped = d->as_object();
    }
  }
  json::object out{
      {"id", integer_at(&t, "id")},
      {"owner", t.contains("owner") ? t.at("owner") : json::value("")},
      {"peer", t.contains("peer") ? t.at("peer") : json::value("")},
      {"port", t.contains("port") ? t.at("port") : json::value("")},
      {"rate_bps", integer_at(&t, "rate_bps")},
      {"bound_ns", integer_at(&t, "bound_ns")},
      {"tx", json::object{{"sent_on_time_packets", integer_at(tx, "sent_on_time_packets")},
                          {"sent_best_effort_packets", integer_at(tx, "sent_best_effort_packets")},
                          {"missed_slot_packets", integer_at(tx, "missed_slot_packets")}}},
      {"rx",
       json::object{{"class", timed ? "on_time" : "best_effort"},
                    {"received_packets", integer_at(playout, "received_packets")},
                    {"released_packets", integer_at(playout, "released_packets")},
                    {"late_packets", integer_at(playout, "late_packets")},
                    {"dropped", std::move(dropped)},
                    {"wan_delay_ns", histogram(playout, "wan_delay_ns")},
                    {"recent_wan_delay_ns", recent_delay(rx, timed ? "on_time" : "best_effort")},
                    {"one_way_delay_ns", histogram(playout, "one_way_delay_ns")},
                    {"lateness_ns", histogram(playout, "lateness_ns")}}}};
  return out;
}

}  // namespace

json::object Agent::gateways_json() const {
  std::lock_guard lock(impl_->mutex);
  const Impl& m = *impl_;
  const model::Topology& t = m.topology;
  const auto counters = m.reconciler->counters();
  const int64_t now_mono = m.monotonic->now_ns();
  json::array out;
  for (uint32_t g = 0; g < t.gateways.size(); ++g) {
    const GatewayView& v = m.gateways[g];
    json::array in_place;
    for (const uint32_t id : v.in_place) in_place.push_back(id);
    json::object refused;
    for (const auto& [id, why] : v.refused) refused[std::to_string(id)] = why;
    const gateway::ReconcilerCounters& c = counters[g];
    out.push_back(json::object{
        {"name", t.gateways[g].name},
        {"site", t.sites[t.gateways[g].site].name},
        {"reachable", v.reachable},
        {"in_sync", c.in_sync},
        {"generation", v.generation},
        {"boot_id", v.boot_id},
        {"error", v.error},
        {"report_age_ns",
         v.last_report_ns == 0 ? json::value(nullptr) : json::value(now_mono - v.last_report_ns)},
        {"tunnels_in_place", std::move(in_place)},
        {"tunnels_refused", std::move(refused)},
        // (ReconcilerCounters' applies and refusals are not maintained by the reconciler yet.)
        {"reconciler", json::object{{"passes", c.passes},
                                    {"unreachable", c.unreachable},
                                    {"restarts_seen", c.restarts_seen}}}});
  }
  return json::object{{"gateways", std::move(out)}};
}

Outcome<json::object> Agent::gateway_tunnels(const std::string& name) {
  Impl& m = *impl_;
  // The topology never changes after open: no lock needed to find the gateway.
  uint32_t g = 0;
  while (g < m.topology.gateways.size() && m.topology.gateways[g].name != name) ++g;
  if (g == m.topology.gateways.size()) {
    return std::unexpected(ApiError{404, "not_found", fmt::format("no gateway '{}'", name), ""});
  }
  GatewayStatsCache& cache = *m.stats_cache[g];
  {
    // One caller fetches; those arriving meanwhile wait here and find the fresh answer.
    std::lock_guard fetching(cache.fetching);
    bool fresh = false;
    {
      std::lock_guard lock(cache.mutex);
      fresh = cache.fetched_mono_ns != 0 &&
              m.monotonic->now_ns() - cache.fetched_mono_ns < kGatewayStatsMaxAgeNs;
    }
    if (!fresh) {
      gateway::GatewayClient& client =
          m.options.gateway_client != nullptr ? *m.options.gateway_client : m.stats_client;
      auto answer = client.request(m.topology.gateways[g].admin_socket, R"({"cmd":"stats"})");
      bool reachable = false;
      std::string error;
      json::array tunnels;
      if (!answer) {
        error = answer.error().message;
      } else {
        boost::system::error_code ec;
        const json::value doc = json::parse(*answer, ec);
        if (ec || !doc.is_object()) {
          error = fmt::format("gateway {} answered stats with something that is not a JSON object",
                              name);
        } else if (const json::value* e = doc.as_object().if_contains("error")) {
          error = e->is_string() ? std::string(e->as_string()) : json::serialize(*e);
        } else {
          reachable = true;
          if (const json::value* list = doc.as_object().if_contains("tunnels");
              list != nullptr && list->is_array()) {
            for (const json::value& t : list->as_array()) {
              if (t.is_object()) tunnels.push_back(tunnel_summary(t.as_object()));
            }
          }
        }
      }
      std::lock_guard lock(cache.mutex);
      cache.fetched_mono_ns = m.monotonic->now_ns();
      cache.fetched_unix_ns = m.realtime->now_ns();
      cache.reachable = reachable;
      cache.error = std::move(error);
      cache.tunnels = std::move(tunnels);
    }
  }
  json::object out;
  json::array tunnels;
  {
    std::lock_guard lock(cache.mutex);
    out = json::object{{"gateway", name},
                       {"reachable", cache.reachable},
                       {"error", cache.error},
                       {"fetched_unix_ns", cache.fetched_unix_ns},
                       {"age_ns", m.monotonic->now_ns() - cache.fetched_mono_ns}};
    tunnels = cache.tunnels;
  }
  // Which reservation each of our tunnels carries.
  {
    std::lock_guard lock(m.mutex);
    std::map<uint32_t, std::string> by_tunnel;
    for (const auto& [key, r] : m.reservations) {
      if (r.tunnel_id != 0 && !reservation::is_final(r.state)) by_tunnel[r.tunnel_id] = r.id;
    }
    for (json::value& v : tunnels) {
      json::object& t = v.as_object();
      const auto id = static_cast<uint32_t>(t.at("id").as_int64());
      const auto it = by_tunnel.find(id);
      const bool ours = t.at("owner").is_string() && t.at("owner").as_string() == m.owner;
      t["reservation"] = ours && it != by_tunnel.end() ? json::value(it->second) : nullptr;
    }
  }
  out["tunnels"] = std::move(tunnels);
  return out;
}

Outcome<json::object> Agent::link_calendar(int64_t horizon_ns, int64_t step_ns) const {
  if (step_ns < kSecondNs || horizon_ns < step_ns || horizon_ns > kMaxHorizonNs ||
      horizon_ns / step_ns > kMaxCalendarSteps) {
    return std::unexpected(ApiError{
        400, "invalid_field",
        fmt::format("horizon {} s in steps of {} s: the step is at least 1 s, the horizon at most "
                    "7 days and {} steps",
                    horizon_ns / kSecondNs, step_ns / kSecondNs, kMaxCalendarSteps),
        "horizon_s"});
  }
  std::lock_guard lock(impl_->mutex);
  const Impl& m = *impl_;
  const model::Topology& t = m.topology;
  const int64_t from = m.realtime->now_ns();
  const int64_t steps = horizon_ns / step_ns;
  json::array links;
  for (uint32_t l = 0; l < t.links.size(); ++l) {
    const model::Link& link = t.links[l];
    json::array directions;
    for (int d = 0; d < 2; ++d) {
      const calendar::CapacityCalendar& booked = m.ledger->capacity(l, d);
      json::array reserved;
      for (int64_t i = 0; i < steps; ++i) {
        reserved.push_back(booked.peak_bps(from + i * step_ns, from + (i + 1) * step_ns));
      }
      directions.push_back(json::object{{"from", t.nodes[link.ends[d]].name},
                                        {"to", t.nodes[link.ends[1 - d]].name},
                                        {"reserved_bps", std::move(reserved)}});
    }
    links.push_back(json::object{{"name", link.name},
                                 {"capacity_bps", link.capacity_bps},
                                 {"reservable_bps", link.reservable_bps()},
                                 {"directions", std::move(directions)}});
  }
  return json::object{
      {"from_unix_ns", from}, {"step_ns", step_ns}, {"steps", steps}, {"links", std::move(links)}};
}

}  // namespace detwan::control::agent

// Agent setup, recovery from the journal, the timer, gateway desired state and reports.
#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include <boost/json/monotonic_resource.hpp>

#include "common/logging.h"
#include "common/strings.h"
#include "control/agent/agent_impl.h"
#include "control/reservation/reservation_json.h"

namespace detwan::control::agent {
namespace json = boost::json;
using reservation::Reservation;
using reservation::State;

boost::json::object ApiError::to_json() const {
  // Messages may quote a client's bytes (a URL path): always valid UTF-8 in the answer.
  json::object error{{"code", code}, {"message", common::printable_utf8(message)}};
  if (!field.empty()) error["field"] = common::printable_utf8(field);
  return json::object{{"error", std::move(error)}};
}

ApiError not_found(const std::string& id) {
  return ApiError{404, "not_found", fmt::format("no reservation '{}'", id), "id"};
}

ApiError wrong_state(const Reservation& r, std::string_view operation, std::string_view allowed) {
  return ApiError{
      409, "wrong_state",
      fmt::format("cannot {} {}: it is {}{} ({} needs {})", operation, r.id,
                  reservation::to_string(r.state),
                  r.reason.empty() ? "" : fmt::format(" ({})", r.reason), operation, allowed),
      ""};
}

Agent::Agent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Agent::~Agent() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->timer_wake.notify_all();
  if (impl_->timer.joinable()) impl_->timer.join();
  if (impl_->reconciler) impl_->reconciler->stop();
}

const model::Topology& Agent::topology() const { return impl_->topology; }

common::Result<std::unique_ptr<Agent>> Agent::open(model::Topology topology, AgentOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->topology = std::move(topology);
  if (auto ok = model::finish(impl->topology); !ok) return std::unexpected(ok.error());
  impl->options = options;
  impl->realtime = options.realtime != nullptr ? options.realtime : &impl->own_realtime;
  impl->monotonic = options.monotonic != nullptr ? options.monotonic : &impl->own_monotonic;
  impl->owner = "agent:" + impl->topology.agent.name;
  impl->ledger = std::make_unique<calendar::Ledger>(impl->topology);
  impl->gateways.resize(impl->topology.gateways.size());
  for (size_t g = 0; g < impl->topology.gateways.size(); ++g) {
    impl->stats_cache.push_back(std::make_unique<GatewayStatsCache>());
  }
  if (options.store) {
    impl->journal = options.store;
  } else {
    auto journal = journal::Journal::open(impl->topology.agent.journal,
                                          impl->topology.agent.journal_sync_full,
                                          impl->topology.domain);
    if (!journal) return std::unexpected(journal.error());
    impl->journal = std::move(*journal);
  }
  const int64_t load_started_ns = impl->monotonic->now_ns();
  auto loaded = impl->journal->load();
  if (!loaded) return std::unexpected(loaded.error());
  const int64_t loaded_ns = impl->monotonic->now_ns();
  impl->next_key = loaded->next_key;
  auto log = common::logger("detwan-agent");
  std::vector<Reservation> broken;
  std::vector<calendar::Booking> bookings;  // booked all at once after the loop
  // Each row parsed into one reused arena (its values' frees are no-ops and their memory is
  // taken back at once): at 100,000 reservations the allocator was a third of the startup.
  std::vector<unsigned char> arena_buffer(64 * 1024);
  json::monotonic_resource arena(arena_buffer.data(), arena_buffer.size());
  for (const std::string& body : loaded->reservations) {
    arena.release();
    boost::system::error_code ec;
    const json::value value = json::parse(body, ec, &arena);
    if (ec || !value.is_object()) {
      return common::make_error(
          common::ErrorCode::kIo,
          fmt::format("journal {}: a reservation row is not JSON", impl->journal->path()));
    }
    auto r = reservation::from_json(value.as_object());
    if (!r) return std::unexpected(r.error());
    for (const reservation::TunnelKey& key : r->keys.keys) {
      if (key.secret_hex.empty() && r->keys.key_exchange.empty()) {
        return common::make_error(
            common::ErrorCode::kIo,
            fmt::format("journal {}: reservation {} has key {} without its secret",
                        impl->journal->path(), r->id, key.id));
      }
    }
    impl->next_key = std::max(impl->next_key, r->key + 1);
    impl->next_tunnel_id = std::max(impl->next_tunnel_id, r->tunnel_id);
    if (!reservation::is_final(r->state)) impl->tunnel_ids_in_use.insert(r->tunnel_id);
    if (reservation::holds_resources(r->state)) {
      auto booking = reservation::booking_of(impl->topology, *r);
      if (!booking) {
        log->error("{}: cannot restore its booking: {}", r->id, booking.error().message);
        broken.push_back(*r);
      } else {
        bookings.push_back(std::move(*booking));
      }
    }
    impl->index_holding(*r);
    impl->reservations.emplace(r->key, std::move(*r));
  }
  impl->ledger->book_all(std::move(bookings));
  for (const journal::RequestRecord& request : loaded->requests) {
    impl->requests.emplace(request.client_request_id, request);
  }
  impl->load_federated_ends();
  for (const std::string& body : loaded->pools) {
    boost::system::error_code ec;
    const json::value value = json::parse(body, ec);
    auto pool = ec ? common::Result<compute::Pool>(std::unexpected(common::Error{
                         common::ErrorCode::kIo, "not JSON"}))
                   : compute::pool_from_json(value);
    if (!pool) {
      return common::make_error(common::ErrorCode::kIo,
                                fmt::format("journal {}: a pool row is unreadable: {}",
                                            impl->journal->path(), pool.error().message));
    }
    if (impl->topology.find_site(pool->site) == model::kNone) {
      log->warn("pool {}: site '{}' is no longer in the topology; kept, never placed on",
                pool->name, pool->site);
    }
    impl->pools.emplace(pool->name, std::move(*pool));
  }
  if (std::string problem = impl->ledger->check_calendars(); !problem.empty()) {
    return common::make_error(
        common::ErrorCode::kConfig,
        fmt::format("journal {} does not fit the topology {}: {}", impl->journal->path(),
                    impl->topology.source, problem));
  }
  Impl& m = *impl;
  for (const Reservation& r : broken) {
    Reservation next = r;
    next.state = State::kFailed;
    next.reason = "its path is no longer in the topology";
    if (auto ok = m.commit_transition(next, std::string(reservation::to_string(r.state)),
                                      next.reason, nullptr);
        !ok) {
      return common::make_error(common::ErrorCode::kIo, ok.error().message);
    }
  }
  log->info("journal {}: {} reservations, {} events (read in {:.0f} ms, restored in {:.0f} ms)",
            impl->journal->path(), impl->reservations.size(), loaded->events,
            static_cast<double>(loaded_ns - load_started_ns) / 1e6,
            static_cast<double>(impl->monotonic->now_ns() - loaded_ns) / 1e6);

  std::vector<gateway::GatewayTarget> targets;
  for (const model::Gateway& g : impl->topology.gateways)
    targets.push_back({g.name, g.admin_socket, g.public_key});
  gateway::GatewayClient* client =
      options.gateway_client != nullptr ? options.gateway_client : &impl->own_client;
  Impl* raw = impl.get();
  impl->reconciler = std::make_unique<gateway::Reconciler>(
      std::move(targets), impl->owner, *client,
      [raw](const gateway::GatewayReport& report) { raw->on_report(report); },
      impl->topology.agent.reconcile_interval_ns, *impl->monotonic);
  std::unique_ptr<Agent> agent(new Agent(std::move(impl)));
  {
    std::lock_guard lock(raw->mutex);
    raw->expire(raw->realtime->now_ns());
    raw->update_desired(raw->realtime->now_ns());
  }
  if (options.start_threads) {
    raw->reconciler->start();
    raw->timer = std::thread([raw] { raw->run_timer(); });
  }
  return agent;
}

std::optional<uint64_t> key_of_id(const std::string& id) {
  if (id.size() < 3 || id.rfind("r-", 0) != 0) return std::nullopt;
  uint64_t key = 0;
  for (size_t i = 2; i < id.size(); ++i) {
    if (id[i] < '0' || id[i] > '9') return std::nullopt;
    // An id past 2^64 is none (it must not wrap onto another reservation's key).
    const auto digit = static_cast<uint64_t>(id[i] - '0');
    if (key > (UINT64_MAX - digit) / 10) return std::nullopt;
    key = key * 10 + digit;
  }
  return key;
}

Reservation* Agent::Impl::find(const std::string& id) {
  const auto key = key_of_id(id);
  if (!key) return nullptr;
  const auto it = reservations.find(*key);
  return it == reservations.end() ? nullptr : &it->second;
}

const Reservation* Agent::Impl::find(const std::string& id) const {
  return const_cast<Impl*>(this)->find(id);
}

Outcome<void> Agent::Impl::commit_transition(Reservation next, const std::string& from,
                                             const std::string& reason,
                                             const journal::RequestRecord* request) {
  const int64_t now = realtime->now_ns();
  const std::string to(reservation::to_string(next.state));
  next.updated_ns = now;
  next.history.push_back(reservation::Transition{now, from, to, reason});
  // The booking first (it can only fail if the topology lost the path), then the journal, then
  // memory: a journal failure leaves everything as it was.
  std::optional<calendar::Booking> booking;
  if (reservation::holds_resources(next.state)) {
    auto made = reservation::booking_of(topology, next);
    if (!made) return std::unexpected(ApiError{500, "internal", made.error().message, ""});
    booking = std::move(*made);
  }
  const journal::Event event{
      0, now, next.id, from, to, reason, json::serialize(reservation::to_json(next, reservation::Secrets::kInclude))};
  const uint64_t key_after = std::max(next_key, next.key + 1);
  if (auto ok = journal->record(event, key_after, request); !ok) {
    ++counters.journal_failures;
    return std::unexpected(ApiError{503, "journal_unavailable", ok.error().message, ""});
  }
  next_key = key_after;
  if (booking) {
    ledger->book(*booking);
  } else {
    ledger->unbook(next.key);
  }
  if (request != nullptr) requests[request->client_request_id] = *request;
  ++counters.transitions[to];
  if (reservation::is_final(next.state)) {
    tunnel_ids_in_use.erase(next.tunnel_id);
  } else {
    tunnel_ids_in_use.insert(next.tunnel_id);
  }
  const uint64_t key = next.key;
  index_holding(next);
  reservations[key] = std::move(next);
  return {};
}

void Agent::Impl::index_holding(const Reservation& r) {
  auto pair = std::minmax(r.spec.src, r.spec.dst);
  auto& keys = holding_by_pair[{pair.first, pair.second}];
  if (reservation::holds_resources(r.state)) {
    keys.insert(r.key);
  } else {
    keys.erase(r.key);
  }
}

uint32_t Agent::Impl::allocate_tunnel_id() {
  const auto& a = topology.agent;
  const std::set<uint32_t>& used = tunnel_ids_in_use;
  const uint64_t span = uint64_t{a.last_tunnel_id} - a.first_tunnel_id + 1;
  uint32_t candidate = next_tunnel_id;
  for (uint64_t i = 0; i < span; ++i) {
    candidate = candidate < a.first_tunnel_id || candidate >= a.last_tunnel_id ? a.first_tunnel_id
                                                                               : candidate + 1;
    if (used.count(candidate) == 0) {
      next_tunnel_id = candidate;
      return candidate;
    }
  }
  return 0;
}

void Agent::Impl::update_desired(int64_t now_ns) {
  std::vector<std::vector<gateway::TunnelSpec>> desired(topology.gateways.size());
  for (auto& [key, r] : reservations) {
    const bool active = r.state == State::kProvisioned && r.spec.start_ns <= now_ns &&
                        now_ns < r.spec.end_ns && !r.paths.empty();
    if (!active) {
      r.dataplane_active = false;
      continue;
    }
    const reservation::PathPlacement& path = r.paths.front();
    for (int e = 0; e < 2; ++e) {
      const reservation::EndPlacement& end = path.ends[e];
      if (end.gateway.empty()) continue;
      const uint32_t g = topology.find_gateway(end.gateway);
      if (g == model::kNone) continue;
      gateway::TunnelSpec spec;
      spec.id = r.tunnel_id;
      spec.peer = end.peer;
      spec.owner = owner;
      spec.rate_bps = r.spec.min_bandwidth_bps;
      spec.slots = end.slots;
      spec.burst_bytes = r.burst_bytes;
      spec.bound_ns = r.bound.on_time ? r.bound.playout_bound_ns : 0;
      spec.max_hold_ns = std::max<int64_t>(1'000'000'000, 2 * spec.bound_ns);
      // What this end sends into the tunnel (to the far end's hosts) and from which of its own
      // hosts (the reservation's tenant): a co-tenant at this site cannot use it, and at this
      // end only packets between the two tenants leave it (docs/gateway.md, "match").
      spec.match_dst = e == 0 ? r.spec.dst_prefixes : r.spec.src_prefixes;
      spec.match_src = e == 0 ? r.spec.src_prefixes : r.spec.dst_prefixes;
      spec.reservation = r.id;
      gateway::set_auth(spec, r.spec.encrypt, r.keys, e);  // the reservation's keys
      apply_federated_end(r, end.port, &spec);  // a segment: the far end is another domain's
      // 1+1: the copies leave through this gateway's port on the second disjoint path.
      if (r.spec.protect && r.paths.size() >= 2 && r.paths[1].ends[e].gateway == end.gateway) {
        spec.protect_peer = r.paths[1].ends[e].peer;
        spec.protect_slots = r.paths[1].ends[e].slots;
        // Both copies are released at one instant: the bound of the slower path.
        if (r.bound.on_time && r.paths[1].bound.on_time) {
          spec.bound_ns = std::max(spec.bound_ns, r.paths[1].bound.playout_bound_ns);
          spec.max_hold_ns = std::max<int64_t>(1'000'000'000, 2 * spec.bound_ns);
        }
      }
      desired[g].push_back(std::move(spec));
    }
  }
  for (uint32_t g = 0; g < desired.size(); ++g) {
    gateways[g].desired_version = reconciler->set_desired(g, std::move(desired[g]));
  }
  // Which reservations are live on every gateway they need.
  for (auto& [key, r] : reservations) {
    if (r.state != State::kProvisioned || r.spec.start_ns > now_ns || now_ns >= r.spec.end_ns ||
        r.paths.empty()) {
      r.dataplane_active = false;
      r.gateways.clear();
      continue;
    }
    r.gateways.clear();
    bool all = true;
    for (const reservation::EndPlacement& end : r.paths.front().ends) {
      if (end.gateway.empty()) continue;
      const uint32_t g = topology.find_gateway(end.gateway);
      reservation::GatewayStatus status;
      status.gateway = end.gateway;
      if (g != model::kNone) {
        const GatewayView& v = gateways[g];
        status.generation = v.generation;
        status.programmed = v.in_place.count(r.tunnel_id) != 0 && v.last_report_ns != 0;
        const auto refused = v.refused.find(r.tunnel_id);
        status.error = refused != v.refused.end() ? refused->second : (v.reachable ? "" : v.error);
      }
      all = all && status.programmed;
      r.gateways.push_back(std::move(status));
    }
    r.dataplane_active = all;
  }
  advance_key_rotations(now_ns);
}

void Agent::Impl::on_report(const gateway::GatewayReport& report) {
  Deferred deferred;
  {
    std::lock_guard lock(mutex);
    if (report.gateway >= gateways.size()) return;
    GatewayView& v = gateways[report.gateway];
    v.reachable = report.reachable;
    v.error = report.error;
    if (report.reachable) {
      v.boot_id = report.boot_id;
      v.generation = report.generation;
      v.in_place = report.in_place;
      v.refused = report.refused;
    }
    v.reported_version = report.desired_version;
    v.last_report_ns = monotonic->now_ns();
    if (report.restarted) {
      common::logger("detwan-agent")
          ->warn("gateway '{}' restarted (boot {}): re-programmed",
                 topology.gateways[report.gateway].name, report.boot_id);
    }
    // A gateway that refuses a tunnel for good fails its reservation (with the gateway's words).
    const int64_t now = realtime->now_ns();
    for (const auto& [tunnel, message] : report.refused) {
      for (auto& [key, r] : reservations) {
        if (r.tunnel_id != tunnel || r.state != State::kProvisioned) continue;
        Reservation next = r;
        next.state = State::kFailed;
        next.reason = message;
        (void)commit_transition(next, "provisioned", message, nullptr);
        break;
      }
    }
    update_desired(now);
    collect_waiters(monotonic->now_ns(), false, &deferred);
  }
  for (auto& [done, body] : deferred) done(std::move(body));
}

void Agent::Impl::collect_waiters(int64_t now_mono_ns, bool expire_all, Deferred* out) {
  std::erase_if(waiters, [&](Waiter& w) {
    const Reservation* r = find(w.id);
    const bool finished = r == nullptr || r->dataplane_active || reservation::is_final(r->state) ||
                          r->state != State::kProvisioned;
    if (!finished && !expire_all && now_mono_ns < w.deadline_ns) return false;
    out->emplace_back(std::move(w.done), r != nullptr ? view(*r) : not_found(w.id).to_json());
    return true;
  });
}

void Agent::Impl::expire(int64_t now_ns) {
  std::vector<std::pair<Reservation, std::string>> changes;
  for (const auto& [key, r] : reservations) {
    if (r.state == State::kHeld && r.hold_expires_ns <= now_ns) {
      Reservation next = r;
      next.state = State::kTerminated;
      next.reason = "hold_timeout";
      changes.emplace_back(std::move(next), "held");
    } else if (reservation::holds_resources(r.state) && r.spec.end_ns <= now_ns) {
      Reservation next = r;
      next.state = State::kTerminated;
      next.reason = "end_time";
      changes.emplace_back(std::move(next), std::string(reservation::to_string(r.state)));
    }
  }
  for (auto& [next, from] : changes) {
    const std::string reason = next.reason;
    if (auto ok = commit_transition(std::move(next), from, reason, nullptr); !ok) {
      common::logger("detwan-agent")->error("{}", ok.error().message);
    }
  }
}

int64_t Agent::Impl::next_deadline_ns() const {
  int64_t next = INT64_MAX;
  const int64_t now = realtime->now_ns();
  for (const auto& [key, r] : reservations) {
    if (r.state == State::kHeld) next = std::min(next, r.hold_expires_ns);
    if (reservation::holds_resources(r.state)) next = std::min(next, r.spec.end_ns);
    if (r.state == State::kProvisioned && r.spec.start_ns > now)
      next = std::min(next, r.spec.start_ns);
  }
  return next;
}

void Agent::tick() {
  Deferred deferred;
  {
    std::lock_guard lock(impl_->mutex);
    const int64_t now = impl_->realtime->now_ns();
    impl_->expire(now);
    impl_->archive_old(now);
    impl_->update_desired(now);
    impl_->collect_waiters(impl_->monotonic->now_ns(), false, &deferred);
  }
  for (auto& [done, body] : deferred) done(std::move(body));
}

void Agent::Impl::run_timer() {
  std::unique_lock lock(mutex);
  while (!stopping) {
    const int64_t now = realtime->now_ns();
    int64_t wait_ns = 200'000'000;  // waiters' deadlines and clock steps: at least 5 times a second
    const int64_t deadline = next_deadline_ns();
    if (deadline != INT64_MAX) wait_ns = std::clamp<int64_t>(deadline - now, 0, wait_ns);
    for (const Waiter& w : waiters) {
      wait_ns = std::min(wait_ns, std::max<int64_t>(0, w.deadline_ns - monotonic->now_ns()));
    }
    if (wait_ns > 0) timer_wake.wait_for(lock, std::chrono::nanoseconds(wait_ns));
    if (stopping) break;
    Deferred deferred;
    const int64_t t = realtime->now_ns();
    expire(t);
    archive_old(t);
    update_desired(t);
    collect_waiters(monotonic->now_ns(), false, &deferred);
    lock.unlock();
    for (auto& [done, body] : deferred) done(std::move(body));
    lock.lock();
  }
}

void Agent::reconcile_now() { impl_->reconciler->reconcile_now(true); }

std::string Agent::check_ledger() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->ledger->check();
}

void Agent::when_active(const std::string& id, int64_t timeout_ns,
                        std::function<void(json::object)> done) {
  json::object now_body;
  {
    std::lock_guard lock(impl_->mutex);
    const Reservation* r = impl_->find(id);
    if (r != nullptr && r->state == State::kProvisioned && !r->dataplane_active && timeout_ns > 0) {
      impl_->waiters.push_back(
          Waiter{id, impl_->monotonic->now_ns() + timeout_ns, std::move(done)});
      impl_->reconciler->poke();
      impl_->timer_wake.notify_all();
      return;
    }
    now_body = r != nullptr ? impl_->view(*r) : not_found(id).to_json();
  }
  done(std::move(now_body));
}

}  // namespace detwan::control::agent

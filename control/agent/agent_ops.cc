// The reservation operations: reserve, commit, abort, provision, release, terminate, modify
// (key rotation: agent_rotation.cc).
#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "common/logging.h"
#include "common/net_address.h"
#include "common/units.h"
#include "control/admission/planner.h"
#include "control/agent/agent_impl.h"
#include "control/policy/policy.h"
#include "control/reservation/reservation_json.h"

namespace detwan::control::agent {
namespace json = boost::json;
using reservation::Reservation;
using reservation::State;

namespace {

constexpr uint32_t kMaxAsapCandidates = 4096;

ApiError refusal_error(const admission::Refusal& refusal) {
  const std::string& c = refusal.cause;
  int status = 422;  // the request can never be met as stated
  if (c == admission::kNoCapacity || c == admission::kNoSlots || c == admission::kTooFewPaths) {
    status = 409;  // resources are taken now; may succeed later or in another window
  }
  if (c == admission::kUnknownSite) status = 400;
  return ApiError{status, c, refusal.message, refusal.field};
}

admission::Request admission_request(const model::Topology& t, const reservation::Spec& spec) {
  admission::Request r;
  r.src_site = t.find_site(spec.src);
  r.dst_site = t.find_site(spec.dst);
  r.rate_bps = spec.min_bandwidth_bps;
  r.burst_bytes = spec.max_burst_bytes;
  r.max_latency_ns = spec.max_latency_ns;
  r.max_latency_variation_ns = spec.max_latency_variation_ns;
  r.max_loss = spec.max_loss;
  r.start_ns = spec.start_ns;
  r.end_ns = spec.end_ns;
  r.paths = spec.paths;
  return r;
}

std::string site_list(const model::Topology& t) {
  std::string out;
  for (const model::Site& s : t.sites) out += (out.empty() ? "" : ", ") + s.name;
  return out;
}

}  // namespace

// The destinations a reservation's tunnel matches at the gateway of `site` (the far side's
// hosts), and the sources (its own side's: the tenant).
static const std::vector<std::string>& match_at(const reservation::Spec& spec,
                                                const std::string& site) {
  return site == spec.src ? spec.dst_prefixes : spec.src_prefixes;
}
static const std::vector<std::string>& sources_at(const reservation::Spec& spec,
                                                  const std::string& site) {
  return site == spec.src ? spec.src_prefixes : spec.dst_prefixes;
}

static bool overlap(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  for (const std::string& x : a) {
    const auto px = common::parse_ip_prefix(x);
    for (const std::string& y : b) {
      const auto py = common::parse_ip_prefix(y);
      if (px && py && common::prefixes_overlap(*px, *py)) return true;
    }
  }
  return false;
}

// Two reservations whose tunnels would classify the same traffic at one gateway at the same
// time cannot both exist: the gateway would refuse the second tunnel. That is two reservations
// between the same sites, in overlapping windows, whose tunnels at one gateway overlap in their
// destinations and in their sources (tenants on disjoint hosts may share a destination: each
// packet still matches one tunnel). Returns the conflicting reservation, or nullptr.
static const Reservation* prefix_conflict(const Agent::Impl& m, const reservation::Spec& spec,
                                          uint64_t ignore_key) {
  auto pair = std::minmax(spec.src, spec.dst);
  const auto holding = m.holding_by_pair.find({pair.first, pair.second});
  if (holding == m.holding_by_pair.end()) return nullptr;
  for (const uint64_t key : holding->second) {
    const auto found = m.reservations.find(key);
    if (key == ignore_key || found == m.reservations.end()) continue;
    const Reservation& r = found->second;
    if (!reservation::holds_resources(r.state)) continue;
    if (r.spec.end_ns <= spec.start_ns || spec.end_ns <= r.spec.start_ns) continue;
    for (const std::string& site : {spec.src, spec.dst}) {
      if (overlap(match_at(spec, site), match_at(r.spec, site)) &&
          overlap(sources_at(spec, site), sources_at(r.spec, site))) {
        return &r;
      }
    }
  }
  return nullptr;
}

// Fills an empty prefix list with the site's tunnel prefixes; checks a given one lies within
// them. Errors name the field and the item.
static Outcome<void> resolve_prefixes(const model::Topology& t, const std::string& site_name,
                                      std::vector<std::string>* prefixes, const char* field) {
  const model::Site& site = t.sites[t.find_site(site_name)];
  std::string allowed;
  for (const auto& p : site.tunnel_prefixes)
    allowed += (allowed.empty() ? "" : ", ") + common::format_ip_prefix(p);
  if (prefixes->empty()) {
    for (const auto& p : site.tunnel_prefixes) prefixes->push_back(common::format_ip_prefix(p));
    return {};
  }
  for (size_t i = 0; i < prefixes->size(); ++i) {
    auto parsed = common::parse_ip_prefix((*prefixes)[i]);
    if (!parsed) {
      return std::unexpected(ApiError{400, "invalid_field",
                                      fmt::format("{}[{}]: {}", field, i, parsed.error().message),
                                      field});
    }
    bool inside = false;
    for (const auto& p : site.tunnel_prefixes) {
      inside =
          inside || (parsed->length >= p.length && common::prefix_contains(p, parsed->address));
    }
    if (!inside) {
      return std::unexpected(
          ApiError{400, "invalid_field",
                   fmt::format("{}[{}]: {} is not within site '{}''s tunnel prefixes ({})", field,
                               i, (*prefixes)[i], site.name, allowed.empty() ? "none" : allowed),
                   field});
    }
    (*prefixes)[i] = common::format_ip_prefix(*parsed);
  }
  return {};
}

// Owner policy (control/policy/policy.h) for a request of `tenant` / `requester_domain`, against
// their other reservations holding resources (all but `ignore_key`): before planning (plan null:
// rate, window, count) and once planned (the link share of its links). Counted by cause.
static Outcome<void> check_owner_policy(Agent::Impl& m, const std::string& tenant,
                                        const std::string& requester_domain,
                                        const reservation::Spec& spec, const admission::Plan* plan,
                                        uint64_t ignore_key) {
  if (policy::limits_for(m.topology.policy, tenant, requester_domain) == nullptr) return {};
  std::vector<policy::Holding> holdings;
  for (const auto& [key, r] : m.reservations) {
    if (key == ignore_key || !reservation::holds_resources(r.state) || r.tenant != tenant ||
        r.requester_domain != requester_domain) {
      continue;
    }
    policy::Holding h{r.id, r.spec.min_bandwidth_bps, r.spec.start_ns, r.spec.end_ns, {}};
    for (const auto& p : r.paths) h.links.insert(h.links.end(), p.links.begin(), p.links.end());
    holdings.push_back(std::move(h));
  }
  std::vector<std::string> links;
  if (plan != nullptr) {
    for (const auto& p : reservation::placement_of(m.topology, *plan)) {
      links.insert(links.end(), p.links.begin(), p.links.end());
    }
  }
  if (auto refusal = policy::check_policy(m.topology.policy, m.topology, tenant, requester_domain,
                                          spec, links, holdings)) {
    ++m.counters.refused[refusal->cause];
    return std::unexpected(
        ApiError{policy::kPolicyStatus, refusal->cause, refusal->message, refusal->field});
  }
  return {};
}

Outcome<json::object> Agent::reserve(const ReserveRequest& request) {
  std::lock_guard lock(impl_->mutex);
  Impl& m = *impl_;
  const model::Topology& t = m.topology;
  const int64_t now = m.realtime->now_ns();
  if (!request.client_request_id.empty()) {
    const auto seen = m.requests.find(request.client_request_id);
    if (seen != m.requests.end()) {
      if (seen->second.fingerprint != request.fingerprint) {
        return std::unexpected(ApiError{
            409, "idempotency_conflict",
            fmt::format("client_request_id '{}' was used for a different request (reservation {})",
                        request.client_request_id, seen->second.reservation_id),
            "client_request_id"});
      }
      if (const Reservation* r = m.find(seen->second.reservation_id)) return m.view(*r);
      auto old = m.archived(seen->second.reservation_id);  // a repeat after it was archived
      if (!old) return std::unexpected(old.error());
      if (old->has_value()) return m.archived_view(**old);
    }
  }
  for (const auto* field : {&request.spec.src, &request.spec.dst}) {
    if (t.find_site(*field) == model::kNone) {
      return std::unexpected(ApiError{400, "unknown_site",
                                      fmt::format("'{}' is not a site of domain '{}' (sites: {})",
                                                  *field, t.domain, site_list(t)),
                                      field == &request.spec.src ? "src" : "dst"});
    }
  }
  reservation::Spec spec = request.spec;
  if (auto ok = resolve_prefixes(t, spec.src, &spec.src_prefixes, "src_prefixes"); !ok) {
    return std::unexpected(ok.error());
  }
  if (auto ok = resolve_prefixes(t, spec.dst, &spec.dst_prefixes, "dst_prefixes"); !ok) {
    return std::unexpected(ok.error());
  }
  if (spec.asap || request.start_now || spec.start_ns == 0) spec.start_ns = now;
  if (spec.duration_ns > 0) spec.end_ns = spec.start_ns + spec.duration_ns;
  if (spec.end_ns <= spec.start_ns) {
    return std::unexpected(
        ApiError{400, "invalid_field", "the reservation ends before it starts", "end_unix_ns"});
  }
  if (spec.end_ns <= now) {
    return std::unexpected(
        ApiError{400, "invalid_field",
                 fmt::format("end_unix_ns {} has already passed (now {})", spec.end_ns, now),
                 "end_unix_ns"});
  }
  if (auto ok = check_owner_policy(m, request.tenant, request.requester_domain, spec, nullptr, 0);
      !ok) {
    return std::unexpected(ok.error());
  }
  const int64_t planning_started = m.monotonic->now_ns();
  admission::Decision decision = admission::plan(t, *m.ledger, admission_request(t, spec));
  if (spec.asap && std::holds_alternative<admission::Refusal>(decision)) {
    const std::string cause = std::get<admission::Refusal>(decision).cause;
    if (cause == admission::kNoCapacity || cause == admission::kNoSlots ||
        cause == admission::kTooFewPaths) {
      // Capacity only frees up when a booking ends: try those instants in order.
      uint32_t tried = 0;
      for (const int64_t start : m.ledger->ends_after(now)) {
        if (++tried > kMaxAsapCandidates) break;
        reservation::Spec later = spec;
        later.start_ns = start;
        later.end_ns = start + spec.duration_ns;
        admission::Decision d = admission::plan(t, *m.ledger, admission_request(t, later));
        if (std::holds_alternative<admission::Plan>(d) && !prefix_conflict(m, later, 0)) {
          spec = later;
          decision = std::move(d);
          break;
        }
      }
    }
  }
  m.counters.admission_ns.record(m.monotonic->now_ns() - planning_started);
  if (auto* refusal = std::get_if<admission::Refusal>(&decision)) {
    ++m.counters.refused[refusal->cause];
    return std::unexpected(refusal_error(*refusal));
  }
  if (const Reservation* other = prefix_conflict(m, spec, 0)) {
    ++m.counters.refused["prefix_conflict"];
    return std::unexpected(ApiError{
        409, "prefix_conflict",
        fmt::format("{} ({}) already carries traffic between sites {} and {} between the same "
                    "hosts in an overlapping window; a gateway classifies each packet into one "
                    "tunnel (give disjoint src_prefixes or dst_prefixes, or another window)",
                    other->id, reservation::to_string(other->state), spec.src, spec.dst),
        "dst_prefixes"});
  }
  const admission::Plan& plan = std::get<admission::Plan>(decision);
  if (auto ok = check_owner_policy(m, request.tenant, request.requester_domain, spec, &plan, 0);
      !ok) {
    return std::unexpected(ok.error());
  }
  Reservation r;
  r.key = m.next_key;
  r.id = fmt::format("r-{}", r.key);
  r.client_request_id = request.client_request_id;
  r.tenant = request.tenant;
  r.requester_domain = request.requester_domain;
  r.state = State::kHeld;
  r.spec = spec;
  r.hold_expires_ns =
      now + (request.hold_timeout_ns > 0 ? request.hold_timeout_ns : t.agent.hold_timeout_ns);
  if (request.tunnel_id != 0 && m.tunnel_ids_in_use.count(request.tunnel_id) != 0) {
    return std::unexpected(ApiError{
        409, "tunnel_id_taken",
        fmt::format("tunnel id {} is in use in domain '{}'", request.tunnel_id, t.domain),
        "tunnel_id"});
  }
  r.tunnel_id = request.tunnel_id != 0 ? request.tunnel_id : m.allocate_tunnel_id();
  if (r.tunnel_id == 0) {
    return std::unexpected(ApiError{409, "no_tunnel_id",
                                    fmt::format("every tunnel id {}-{} is in use",
                                                t.agent.first_tunnel_id, t.agent.last_tunnel_id),
                                    ""});
  }
  r.burst_bytes = plan.burst_bytes;
  r.paths = reservation::placement_of(t, plan);
  r.bound = plan.bound;
  r.created_ns = now;
  // A segment of a federated reservation (one end is a border toward another domain) gets its
  // keys at commit, by exchange with the far domain's gateway (agent_federation.cc).
  const auto at_border = [&](const std::string& site) {
    const uint32_t s = t.find_site(site);
    return s != model::kNone && t.border_at_site(s) != nullptr;
  };
  const bool segment = at_border(spec.src) || at_border(spec.dst);
  if (spec.encrypt != reservation::kNoCipher && !segment) {  // drawn here, journaled, never shown
    // Both gateways registered a public key: they derive the keys themselves (no secret here).
    const auto public_key = [&](int e) -> std::string {
      if (r.paths.empty()) return "";
      const uint32_t g = t.find_gateway(r.paths.front().ends[e].gateway);
      return g == model::kNone ? "" : t.gateways[g].public_key;
    };
    auto keys = !public_key(0).empty() && !public_key(1).empty()
                    ? reservation::x25519_keys(spec.encrypt, public_key(0), public_key(1), r.id, 1)
                    : reservation::first_keys();
    if (!keys) return std::unexpected(ApiError{500, "internal", keys.error().message, ""});
    r.keys = std::move(*keys);
  }
  const journal::RequestRecord record{request.client_request_id, request.fingerprint, r.id};
  if (auto ok = m.commit_transition(r, "", "reserved",
                                    request.client_request_id.empty() ? nullptr : &record);
      !ok) {
    return std::unexpected(ok.error());
  }
  ++m.counters.admitted["reserve"];
  if (spec.encrypt == reservation::kNoCipher) {
    common::logger("detwan-agent")
        ->warn(
            "{} ({} -> {}) runs unencrypted because the request asked for \"encrypt\": "
            "\"none\": its tunnel packets are neither authenticated nor encrypted",
            r.id, spec.src, spec.dst);
  }
  Reservation* stored = m.find(r.id);
  if (request.commit || request.provision) {
    Reservation next = *stored;
    next.state = State::kCommitted;
    next.hold_expires_ns = 0;
    if (auto ok = m.commit_transition(next, "held", "committed", nullptr); !ok) {
      return std::unexpected(ok.error());
    }
  }
  if (request.provision) {
    Reservation next = *m.find(r.id);
    next.state = State::kProvisioned;
    if (auto ok = m.commit_transition(next, "committed", "provisioned", nullptr); !ok) {
      return std::unexpected(ok.error());
    }
    m.update_desired(now);
    m.timer_wake.notify_all();
  }
  return m.view(*m.find(r.id));
}

namespace {

// A state change with no new plan: check the state is allowed, journal, update the dataplane.
template <typename Allowed>
Outcome<json::object> change(Agent::Impl& m, const std::string& id, std::string_view operation,
                             std::string_view allowed_text, Allowed allowed, State target,
                             const std::string& reason, std::initializer_list<State> already) {
  Reservation* r = m.find(id);
  if (r == nullptr) {
    // Archived: final, so a repeat of what made it final is answered, anything else refused.
    auto old = m.archived(id);
    if (!old) return std::unexpected(old.error());
    if (!old->has_value()) return std::unexpected(not_found(id));
    for (const State s : already) {
      if ((*old)->state == s) return m.archived_view(**old);
    }
    return std::unexpected(archived_read_only(**old, operation));
  }
  for (const State s : already) {
    if (r->state == s) return m.view(*r);  // repeated request: nothing to do
  }
  if (!allowed(r->state)) return std::unexpected(wrong_state(*r, operation, allowed_text));
  Reservation next = *r;
  const std::string from(reservation::to_string(r->state));
  next.state = target;
  if (target != State::kHeld) next.hold_expires_ns = 0;
  next.reason = reservation::is_final(target) ? reason : "";
  if (auto ok = m.commit_transition(std::move(next), from, reason, nullptr); !ok) {
    return std::unexpected(ok.error());
  }
  m.update_desired(m.realtime->now_ns());
  m.timer_wake.notify_all();
  return m.view(*m.find(id));
}

}  // namespace

Outcome<json::object> Agent::commit(const std::string& id) {
  std::lock_guard lock(impl_->mutex);
  Impl& m = *impl_;
  if (Reservation* r = m.find(id);
      r != nullptr && r->state == State::kTerminated && r->reason == "hold_timeout") {
    return std::unexpected(ApiError{409, "hold_expired",
                                    fmt::format("{}: its hold expired before the commit", id), ""});
  }
  return change(m, id, "commit", "held", [](State s) { return s == State::kHeld; },
                State::kCommitted, "committed",
                {State::kCommitted, State::kProvisioned, State::kReleased});
}

Outcome<json::object> Agent::abort(const std::string& id) {
  std::lock_guard lock(impl_->mutex);
  return change(*impl_, id, "abort", "held", [](State s) { return s == State::kHeld; },
                State::kTerminated, "aborted", {});
}

Outcome<json::object> Agent::provision(const std::string& id) {
  std::lock_guard lock(impl_->mutex);
  return change(*impl_, id, "provision", "committed or released",
                [](State s) { return s == State::kCommitted || s == State::kReleased; },
                State::kProvisioned, "provisioned", {State::kProvisioned});
}

Outcome<json::object> Agent::release(const std::string& id) {
  std::lock_guard lock(impl_->mutex);
  return change(*impl_, id, "release", "provisioned",
                [](State s) { return s == State::kProvisioned; }, State::kReleased, "released",
                {State::kReleased});
}

Outcome<json::object> Agent::terminate(const std::string& id) {
  std::lock_guard lock(impl_->mutex);
  return change(*impl_, id, "terminate", "any state but terminated or failed",
                [](State s) { return !reservation::is_final(s); }, State::kTerminated,
                "terminated_by_client", {State::kTerminated});
}

Outcome<json::object> Agent::modify(const std::string& id, const ModifyRequest& request) {
  std::lock_guard lock(impl_->mutex);
  Impl& m = *impl_;
  const model::Topology& t = m.topology;
  Reservation* r = m.find(id);
  if (r == nullptr) return std::unexpected(m.missing(id, "modify"));
  if (!reservation::holds_resources(r->state)) {
    return std::unexpected(wrong_state(*r, "modify", "held, committed, provisioned or released"));
  }
  if (!request.min_bandwidth_bps && !request.end_ns) {
    return std::unexpected(ApiError{
        400, "invalid_field", "nothing to modify: give min_bandwidth_bps and/or end_unix_ns", ""});
  }
  const int64_t now = m.realtime->now_ns();
  reservation::Spec spec = r->spec;
  if (request.min_bandwidth_bps) spec.min_bandwidth_bps = *request.min_bandwidth_bps;
  if (request.end_ns) {
    spec.end_ns = *request.end_ns;
    spec.duration_ns = spec.end_ns - spec.start_ns;
  }
  if (spec.end_ns <= std::max(now, spec.start_ns)) {
    return std::unexpected(ApiError{
        400, "invalid_field",
        fmt::format("end_unix_ns {} is not after now and the start", spec.end_ns), "end_unix_ns"});
  }
  if (auto ok = check_owner_policy(m, r->tenant, r->requester_domain, spec, nullptr, r->key); !ok) {
    return std::unexpected(ok.error());
  }
  if (const Reservation* other = prefix_conflict(m, spec, r->key)) {
    return std::unexpected(
        ApiError{409, "prefix_conflict",
                 fmt::format("the new end overlaps {} between the same sites (from {})", other->id,
                             other->spec.start_ns),
                 "end_unix_ns"});
  }
  // Re-plan without our own booking (exact for capacity and slots), keeping the path and slots
  // when they still fit; put the old booking back if the new plan is refused.
  const calendar::Booking old = *m.ledger->find(r->key);
  m.ledger->unbook(r->key);
  admission::Request a = admission_request(t, spec);
  a.current = &old;
  admission::Decision decision = admission::plan(t, *m.ledger, a);
  if (auto* refusal = std::get_if<admission::Refusal>(&decision)) {
    m.ledger->book(old);
    ++m.counters.refused[refusal->cause];
    return std::unexpected(refusal_error(*refusal));
  }
  const admission::Plan& plan = std::get<admission::Plan>(decision);
  if (auto ok = check_owner_policy(m, r->tenant, r->requester_domain, spec, &plan, r->key); !ok) {
    m.ledger->book(old);
    return std::unexpected(ok.error());
  }
  Reservation next = *r;
  next.spec = spec;
  next.version += 1;
  next.burst_bytes = plan.burst_bytes;
  next.paths = reservation::placement_of(t, plan);
  next.bound = plan.bound;
  const std::string state(reservation::to_string(r->state));
  const std::string reason = fmt::format(
      "modified: rate {} -> {}, end {} -> {}", common::format_rate_bps(r->spec.min_bandwidth_bps),
      common::format_rate_bps(spec.min_bandwidth_bps), r->spec.end_ns, spec.end_ns);
  if (auto ok = m.commit_transition(std::move(next), state, reason, nullptr); !ok) {
    m.ledger->book(old);
    return std::unexpected(ok.error());
  }
  ++m.counters.admitted["modify"];
  m.update_desired(now);
  m.timer_wake.notify_all();
  return m.view(*m.find(id));
}

}  // namespace detwan::control::agent

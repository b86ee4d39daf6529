// Tunnel key rotation (docs/control-api.md, rotate-key and permit-rotation): an operator's or
// aggregator's start (rotate_key), an aggregator's pacing (permit_rotation), and the steps the
// agent takes once every gateway of the tunnel reports the current one in place
// (advance_key_rotations, from update_desired).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/logging.h"
#include "control/agent/agent_impl.h"
#include "control/reservation/reservation_json.h"

namespace detwan::control::agent {
namespace json = boost::json;
using reservation::Reservation;
using reservation::State;

bool Agent::Impl::rotation_step_in_place(const Reservation& r) const {
  if (r.paths.empty()) return false;
  bool all = true;
  for (const reservation::EndPlacement& end : r.paths.front().ends) {
    if (end.gateway.empty()) continue;
    const uint32_t g = topology.find_gateway(end.gateway);
    if (g == model::kNone) continue;
    const GatewayView& v = gateways[g];
    all = all && v.reachable && v.last_report_ns != 0 &&
          v.reported_version >= v.desired_version && v.in_place.count(r.tunnel_id) != 0;
  }
  return all;
}

// A key rotation takes its next step once every gateway of the tunnel reports the current step
// in place, computed from the desired set that has it (reported_version >= desired_version).
void Agent::Impl::advance_key_rotations(int64_t now_ns) {
  std::vector<std::string> ready;
  for (const auto& [key, r] : reservations) {
    if (r.keys.rotation == reservation::KeyRotation::kNone || !r.dataplane_active) continue;
    // The old key goes only when packets sealed with it just before the switch have arrived:
    // a grace of 1 s plus the path's latency bound.
    const int64_t grace_ns = kKeyDropGraceNs + std::max<int64_t>(0, r.bound.max_latency_ns);
    if (r.keys.rotation == reservation::KeyRotation::kSwitching &&
        now_ns - r.keys.step_unix_ns < grace_ns) {
      continue;
    }
    if (!reservation::may_advance(r.keys)) continue;  // paced: the aggregator's word first
    const bool all = rotation_step_in_place(r);
    if (all) ready.push_back(r.id);
  }
  if (ready.empty()) return;
  for (const std::string& id : ready) {
    Reservation next = *find(id);
    reservation::advance_rotation(next.keys, now_ns);
    const std::string state(reservation::to_string(next.state));
    const std::string reason =
        next.keys.rotation == reservation::KeyRotation::kNone
            ? std::string("key rotation done")
            : fmt::format("key rotation: {}", reservation::to_string(next.keys.rotation));
    const bool done = next.keys.rotation == reservation::KeyRotation::kNone;
    if (auto ok = commit_transition(std::move(next), state, reason, nullptr); !ok) {
      common::logger("detwan-agent")
          ->warn("{}: key rotation step not journaled ({}); retried at the next report", id,
                 ok.error().message);
      return;
    }
    // The old key has left the reservation's row (its freed bytes zeroed: secure_delete); now
    // also the WAL frames of the earlier versions of that row.
    if (done) {
      if (auto erased = journal->erase_freed(); !erased) {
        common::logger("detwan-agent")
            ->warn("{}: the old key's bytes are still in the journal's WAL ({}); erased at the "
                   "next completed rotation",
                   id, erased.error().message);
      }
    }
  }
  update_desired(now_ns);  // the next step's keys to the gateways
}

Outcome<json::object> Agent::rotate_key(const std::string& id) {
  std::lock_guard lock(impl_->mutex);
  Impl& m = *impl_;
  Reservation* r = m.find(id);
  if (r == nullptr) return std::unexpected(m.missing(id, "rotate the key of"));
  if (r->spec.encrypt == reservation::kNoCipher) {
    return std::unexpected(ApiError{
        409, "not_encrypted",
        fmt::format("{} is not encrypted (it was reserved with \"encrypt\": \"none\")", id), ""});
  }
  if (reservation::is_final(r->state) || r->state == State::kReleased) {
    return std::unexpected(wrong_state(*r, "rotate-key", "held, committed or provisioned"));
  }
  if (r->keys.rotation != reservation::KeyRotation::kNone) {
    return std::unexpected(ApiError{409, "rotation_in_progress",
                                    fmt::format("{}: a key rotation is under way (step '{}')", id,
                                                reservation::to_string(r->keys.rotation)),
                                    ""});
  }
  Reservation next = *r;
  const int64_t now = m.realtime->now_ns();
  auto started = reservation::start_rotation(next.keys, now);
  if (!started) return std::unexpected(ApiError{500, "internal", started.error().message, ""});
  // Not on any gateway yet: the new key simply replaces the old one.
  if (r->state != State::kProvisioned) {
    while (next.keys.rotation != reservation::KeyRotation::kNone) {
      reservation::advance_rotation(next.keys, now);
    }
  }
  const std::string state(reservation::to_string(r->state));
  const bool done = next.keys.rotation == reservation::KeyRotation::kNone;
  if (auto ok = m.commit_transition(std::move(next), state, "key rotation started", nullptr); !ok) {
    return std::unexpected(ok.error());
  }
  // Replaced at once: the old key's bytes go from the journal's WAL too (agent.cc, on_report).
  if (done) (void)m.journal->erase_freed();
  m.update_desired(now);
  m.timer_wake.notify_all();
  return m.view(*m.find(id));
}

Outcome<json::object> Agent::permit_rotation(const std::string& id,
                                             reservation::KeyRotation step) {
  std::lock_guard lock(impl_->mutex);
  Impl& m = *impl_;
  Reservation* r = m.find(id);
  if (r == nullptr) return std::unexpected(m.missing(id, "pace the key rotation of"));
  if (!r->keys.paced) {
    return std::unexpected(ApiError{
        409, "not_paced",
        fmt::format("{}: its key rotation is not paced by an aggregator (it steps itself)", id),
        ""});
  }
  if (step != reservation::KeyRotation::kSwitching && step != reservation::KeyRotation::kDropping) {
    return std::unexpected(ApiError{400, "invalid_field",
                                    "step: 'switching' or 'dropping' may be permitted", "step"});
  }
  // Stable (finished, or replaced at once while not on a gateway) or already there: nothing to
  // do, said with the segment as it is (a retried permit is answered the same way).
  if (r->keys.rotation == reservation::KeyRotation::kNone || r->keys.permitted >= step) {
    return m.view(*r);
  }
  Reservation next = *r;
  const int64_t now = m.realtime->now_ns();
  next.keys.permitted = step;
  // The old key goes a grace after the last end switched, which is before this permit.
  if (step == reservation::KeyRotation::kDropping &&
      next.keys.rotation == reservation::KeyRotation::kSwitching) {
    next.keys.step_unix_ns = now;
  }
  const std::string state(reservation::to_string(r->state));
  if (auto ok = m.commit_transition(std::move(next), state,
                                    fmt::format("key rotation: {} permitted by the aggregator",
                                                reservation::to_string(step)),
                                    nullptr);
      !ok) {
    return std::unexpected(ok.error());
  }
  m.update_desired(now);
  m.timer_wake.notify_all();
  return m.view(*m.find(id));
}

}  // namespace detwan::control::agent

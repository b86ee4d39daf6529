// Run-time changes of a transmit scheduler (tx_scheduler.h, reconfigure()): a new gate control
// list and policies, with the frames already queued kept, re-placed or handed back. Setup tier:
// runs between dequeues on the port's thread and may allocate; it builds the new scheduler beside
// the old one, so a failure changes nothing.
#include <algorithm>
#include <utility>
#include <vector>

#include "dataplane/sched/tx_scheduler.h"

namespace detwan::dataplane::sched {
namespace {

// Same cycle, slots, guard, base time, line rate and max frame: windows of equal slot sets are
// equal, so an owner keeping its slots keeps every departure it was given.
bool same_timeline(const GclConfig& a, const GclConfig& b) {
  return a.cycle_ns == b.cycle_ns && a.slot_count == b.slot_count &&
         a.base_time_ns == b.base_time_ns && a.guard_ns == b.guard_ns &&
         a.line_rate_bps == b.line_rate_bps && a.max_frame_bytes == b.max_frame_bytes;
}

bool same_slots(const GateControlList& a, OwnerIndex owner_a, const GateControlList& b,
                OwnerIndex owner_b) {
  for (uint32_t slot = 0; slot < a.config().slot_count; ++slot) {
    if ((a.owner_of_slot(slot) == owner_a) != (b.owner_of_slot(slot) == owner_b)) return false;
  }
  return true;
}

}  // namespace

common::Result<void> TxScheduler::reconfigure(GateControlList gcl, const TxSchedulerConfig& config,
                                              int64_t now_ns) {
  auto next = reconfigured(std::move(gcl), config, now_ns);
  if (!next) return std::unexpected(next.error());
  *this = std::move(*next);
  return {};
}

common::Result<TxScheduler> TxScheduler::reconfigured(GateControlList gcl,
                                                      const TxSchedulerConfig& config,
                                                      int64_t now_ns) const {
  now_ns = std::max(now_ns, last_now_ns_);
  // The new wheel starts at now and must reach the latest departure it keeps.
  const int64_t latest_ns = std::max(now_ns, wheel_.last_ts_ns());
  auto next = build(std::move(gcl), config, now_ns, latest_ns);
  if (!next) return next;
  next->take_frames(*this, now_ns);
  return next;
}

void TxScheduler::hand_back(const Entry& entry, OwnerIndex counted_owner, TxDrop reason,
                            int64_t now_ns) {
  TxFrame frame;
  frame.handle = entry.handle;
  frame.bytes = entry.bytes;
  frame.tunnel_id = entry.tunnel_id;
  frame.owner = counted_owner;
  frame.best_effort = counted_owner == gcl_.best_effort_owner();
  frame.send = false;
  frame.drop = reason;
  frame.departure_ns = now_ns;
  frame.tx_end_ns = now_ns;
  const SlotPosition position = gcl_.position_at(now_ns);
  frame.cycle_id = position.cycle_id;
  frame.slot = position.slot;
  frame.enqueue_ns = entry.enqueue_ns;
  returned_.push_back(frame);
  ++port_.dropped[static_cast<int>(reason)];
  if (counted_owner != kNoOwner)
    ++owners_[counted_owner].counters.dropped[static_cast<int>(reason)];
}

void TxScheduler::take_frames(const TxScheduler& old, int64_t now_ns) {
  const GateControlList& was = old.gcl_;
  const bool timeline = same_timeline(was.config(), gcl_.config());
  port_ = old.port_;
  last_now_ns_ = now_ns;

  // Old owner index -> new one (kNoOwner: the tunnel is gone), and whose slots moved.
  std::vector<OwnerIndex> to_new(old.owners_.size(), kNoOwner);
  for (OwnerIndex owner = 0; owner < was.tunnel_count(); ++owner) {
    to_new[owner] = gcl_.find_owner(was.tunnel_id_of(owner));
  }
  to_new[was.best_effort_owner()] = gcl_.best_effort_owner();
  std::vector<bool> moved(owners_.size(), true);
  for (OwnerIndex owner = 0; owner < old.owners_.size(); ++owner) {
    const OwnerIndex n = to_new[owner];
    if (n == kNoOwner) continue;
    const OwnerState& before = old.owners_[owner];
    OwnerState& state = owners_[n];
    state.counters = before.counters;
    moved[n] = !(timeline && same_slots(was, owner, gcl_, n));
    if (!moved[n]) state.next_free = before.next_free;
    const TokenBucket& old_bucket = before.policer.bucket();
    const TokenBucket& new_bucket = state.policer.bucket();
    if (old_bucket.rate_bps() == new_bucket.rate_bps() &&
        old_bucket.burst_bytes() == new_bucket.burst_bytes() &&
        before.policer.action() == state.policer.action()) {
      state.policer = before.policer;  // tokens and counts go on
    }
    if (before.shaped == state.shaped && before.shaper.rate_bps() == state.shaper.rate_bps() &&
        before.shaper.burst_bytes() == state.shaper.burst_bytes()) {
      state.shaper = before.shaper;
    }
  }

  returned_.reserve(old.held_frames());  // at worst everything is handed back
  returned_.insert(returned_.end(),
                   old.returned_.begin() + static_cast<std::ptrdiff_t>(old.returned_next_),
                   old.returned_.end());
  const uint64_t line_rate = gcl_.config().line_rate_bps;
  old.wheel_.for_each([&](int64_t departure_ns, const Entry& queued) {
    const OwnerIndex owner = to_new[queued.owner];
    if (owner == kNoOwner) {
      hand_back(queued, kNoOwner, TxDrop::kTunnelRemoved, now_ns);
      return;
    }
    // Best effort on behalf of a tunnel that is gone goes with it.
    if (queued.owner == was.best_effort_owner() && queued.tunnel_id != kNoTunnel &&
        was.find_owner(queued.tunnel_id) != kNoOwner &&
        gcl_.find_owner(queued.tunnel_id) == kNoOwner) {
      hand_back(queued, owner, TxDrop::kTunnelRemoved, now_ns);
      return;
    }
    OwnerState& state = owners_[owner];
    Entry entry = queued;
    entry.owner = owner;
    LinkTime end;
    if (moved[owner]) {
      // Order kept: after the owner's frames already re-placed.
      const LinkTime earliest = std::max(LinkTime::at(now_ns), state.next_free);
      Departure departure;
      if (!gcl_.find_departure(owner, entry.bytes, earliest, &departure)) {
        hand_back(queued, owner, TxDrop::kReconfigured, now_ns);
        return;
      }
      departure_ns = departure.start.ceil_ns();
      if (departure_ns - entry.enqueue_ns > state.max_wait_ns) {
        hand_back(queued, owner, TxDrop::kReconfigured, now_ns);
        return;
      }
      entry.tx_end_ns = departure.end.ceil_ns();
      entry.deadline_ns =
          departure.usable_end_ns == kNever
              ? kNever
              : std::max(departure_ns,
                         departure.usable_end_ns -
                             ceil_serialisation_ns(uint64_t{entry.bytes} * 8, line_rate));
      end = departure.end;
    }
    if (wheel_.insert(departure_ns, entry) != WheelInsert::kOk) {
      hand_back(queued, owner, TxDrop::kReconfigured, now_ns);
      return;
    }
    if (moved[owner]) state.next_free = end;
    ++state.held;
  });
}

}  // namespace detwan::dataplane::sched

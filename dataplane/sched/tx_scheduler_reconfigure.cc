// Run-time changes of a transmit scheduler (tx_scheduler.h, reconfigure()): a new gate control
// list and policies, with the frames already queued kept, re-placed or handed back. Setup tier,
// in two halves: prepare_reconfigure() checks and allocates and changes nothing, so a failure
// (here or in another port's change) leaves the scheduler as it was; commit() cannot fail and
// allocates nothing. commit() works in place: owners keep their counters (moved: their
// histograms are far larger than the rest of the scheduler's state; a removed tunnel's are kept
// for the next tunnel added), the frames go into the spare wheel, the wheels change places and
// the old one is cleared to be the next spare.
#include <algorithm>
#include <cassert>
#include <iterator>
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

// As TxCounters() constructs them, clearing only the histograms' used buckets.
void clear(TxCounters& c) noexcept {
  c.offered_packets = c.offered_bytes = c.queued_packets = c.queued_bytes = 0;
  c.sent_packets = c.sent_bytes = c.downgraded_packets = c.downgraded_bytes = 0;
  c.held_for_slot = c.rescheduled = 0;
  std::fill(std::begin(c.dropped), std::end(c.dropped), 0);
  c.departure_error_ns.reset();
  c.queue_wait_ns.reset();
}

}  // namespace

common::Result<void> TxScheduler::reconfigure(GateControlList gcl, const TxSchedulerConfig& config,
                                              int64_t now_ns) {
  auto change = prepare_reconfigure(std::move(gcl), config, now_ns);
  if (!change) return std::unexpected(change.error());
  commit(std::move(*change));
  return {};
}

common::Result<TxScheduler::Change> TxScheduler::prepare_reconfigure(
    GateControlList gcl, const TxSchedulerConfig& config, int64_t now_ns) const {
  now_ns = std::max(now_ns, last_now_ns_);
  // The new wheel starts at now and must reach the latest departure it keeps.
  const int64_t latest_ns = std::max(now_ns, wheel_.last_ts_ns());
  auto plan = TxScheduler::plan(gcl, config, now_ns, latest_ns);
  if (!plan) return std::unexpected(plan.error());
  Change change(std::move(gcl), std::move(*plan));
  const GateControlList& next = change.gcl_;
  change.now_ns_ = now_ns;
  change.source_ = this;
  change.same_timeline_ = same_timeline(gcl_.config(), next.config());

  // Old owner <-> new owner, by tunnel id; best effort is best effort in both.
  const auto owner_count = static_cast<OwnerIndex>(change.plan_.owners.size());
  change.to_new_.assign(owners_.size(), kNoOwner);
  change.from_old_.assign(owner_count, kNoOwner);
  for (OwnerIndex owner = 0; owner < gcl_.tunnel_count(); ++owner) {
    const OwnerIndex n = next.find_owner(gcl_.tunnel_id_of(owner));
    change.to_new_[owner] = n;
    if (n != kNoOwner) change.from_old_[n] = owner;
  }
  change.to_new_[gcl_.best_effort_owner()] = next.best_effort_owner();
  change.from_old_[next.best_effort_owner()] = gcl_.best_effort_owner();

  // An owner keeps its frames where they are only if it owns exactly the same slots on the same
  // timeline. One pass over the slots: where a slot changed hands, its old owner lost it and its
  // new owner gained it, and both moved.
  change.moved_.assign(owner_count, !change.same_timeline_);
  if (change.same_timeline_) {
    for (uint32_t slot = 0; slot < next.config().slot_count; ++slot) {
      const OwnerIndex had = change.to_new_[gcl_.owner_of_slot(slot)];
      const OwnerIndex has = next.owner_of_slot(slot);
      if (had == has) continue;
      if (had != kNoOwner) change.moved_[had] = true;
      change.moved_[has] = true;
    }
  }

  // Everything commit() stores into: counters for the tunnels added (the others keep theirs;
  // spares and the counters of tunnels removed now are used first), room for the owners, the
  // spares and for handing back every frame held, and a new pair of wheels if their geometry
  // changes.
  size_t added = 0, removed = 0;
  for (OwnerIndex n = 0; n < owner_count; ++n) added += change.from_old_[n] == kNoOwner;
  for (OwnerIndex o = 0; o < gcl_.tunnel_count(); ++o) removed += change.to_new_[o] == kNoOwner;
  const size_t reusable = spare_counters_.size() + removed;
  for (size_t i = reusable; i < added; ++i) change.fresh_counters_.emplace_back();
  change.spare_counters_.reserve(reusable);
  change.owners_.reserve(owner_count);
  change.returned_.reserve(held_frames());
  const Plan& p = change.plan_;
  if (p.wheel_granularity_ns != spare_.granularity_ns() ||
      p.wheel_buckets != spare_.bucket_count() || p.capacity_frames != spare_.capacity()) {
    change.wheel_.emplace(p.wheel_granularity_ns, p.wheel_buckets, p.capacity_frames, now_ns);
    change.spare_.emplace(p.wheel_granularity_ns, p.wheel_buckets, p.capacity_frames, now_ns);
  }
  return change;
}

void TxScheduler::commit(Change&& change) noexcept {
  assert(change.source_ == this);
  const int64_t now_ns = change.now_ns_;

  // Spare counters: the scheduler's, then those of the tunnels removed now.
  std::vector<TxCounters>& spares = change.spare_counters_;
  for (TxCounters& counters : spare_counters_) spares.push_back(std::move(counters));
  for (OwnerIndex o = 0; o < gcl_.tunnel_count(); ++o) {
    if (change.to_new_[o] == kNoOwner) spares.push_back(std::move(owners_[o].counters));
  }
  // The new owners: the new list's rules; counters, and unless their parameters changed the
  // policer and shaper, carried over from the old owner; the next-free time too if its slots
  // did not move. An added tunnel takes a spare (cleared) or new counters.
  size_t fresh = 0;
  for (OwnerIndex n = 0; n < change.plan_.owners.size(); ++n) {
    OwnerRules& rules = change.plan_.owners[n];
    const OwnerIndex o = change.from_old_[n];
    if (o == kNoOwner) {
      if (spares.empty()) {
        change.owners_.emplace_back(std::move(rules), std::move(change.fresh_counters_[fresh++]));
      } else {
        clear(spares.back());
        change.owners_.emplace_back(std::move(rules), std::move(spares.back()));
        spares.pop_back();
      }
      continue;
    }
    OwnerState& before = owners_[o];
    if (!change.moved_[n]) rules.next_free = before.next_free;
    const TokenBucket& old_bucket = before.policer.bucket();
    const TokenBucket& new_bucket = rules.policer.bucket();
    if (old_bucket.rate_bps() == new_bucket.rate_bps() &&
        old_bucket.burst_bytes() == new_bucket.burst_bytes() &&
        before.policer.action() == rules.policer.action()) {
      rules.policer = before.policer;  // tokens and counts go on
    }
    if (before.shaped == rules.shaped && before.shaper.rate_bps() == rules.shaper.rate_bps() &&
        before.shaper.burst_bytes() == rules.shaper.burst_bytes()) {
      rules.shaper = before.shaper;
    }
    change.owners_.emplace_back(std::move(rules), std::move(before.counters));
  }
  // From here on the change holds the old list and owners (their counters moved out).
  owners_.swap(change.owners_);
  std::swap(gcl_, change.gcl_);
  spare_counters_.swap(spares);

  // Frames handed back earlier and not taken yet stay first in line.
  change.returned_.insert(change.returned_.end(),
                          returned_.begin() + static_cast<std::ptrdiff_t>(returned_next_),
                          returned_.end());
  returned_.swap(change.returned_);
  returned_next_ = 0;
  last_now_ns_ = now_ns;

  Wheel& into = change.wheel_ ? *change.wheel_ : spare_;
  into.clear(now_ns);  // empty already: this starts it at now
  take_frames(change, wheel_, into);
  if (change.wheel_) {
    std::swap(wheel_, *change.wheel_);  // the old pair is freed with the change
    std::swap(spare_, *change.spare_);
  } else {
    std::swap(wheel_, spare_);
    spare_.clear(now_ns);
  }
}

void TxScheduler::hand_back(const Entry& entry, OwnerIndex counted_owner, TxDrop reason,
                            int64_t now_ns) noexcept {
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
  frame.tag = entry.tag;
  returned_.push_back(frame);  // capacity reserved by prepare_reconfigure()
  ++port_.dropped[static_cast<int>(reason)];
  if (counted_owner != kNoOwner)
    ++owners_[counted_owner].counters.dropped[static_cast<int>(reason)];
}

void TxScheduler::take_frames(const Change& change, const Wheel& old_wheel, Wheel& into) noexcept {
  const GateControlList& was = change.gcl_;
  const int64_t now_ns = change.now_ns_;
  const uint64_t line_rate = gcl_.config().line_rate_bps;
  old_wheel.for_each([&](int64_t departure_ns, const Entry& queued) {
    const OwnerIndex owner = change.to_new_[queued.owner];
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
    const bool moved = change.moved_[owner];
    Entry entry = queued;
    entry.owner = owner;
    LinkTime end;
    if (moved) {
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
    if (into.insert(departure_ns, entry) != WheelInsert::kOk) {
      hand_back(queued, owner, TxDrop::kReconfigured, now_ns);
      return;
    }
    if (moved) state.next_free = end;
    ++state.held;
  });
}

}  // namespace detwan::dataplane::sched

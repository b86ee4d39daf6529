// Per-frame work of the transmit scheduler: police, shape, place in a slot, release.
// No allocation, no exceptions, no logging: every outcome is a status plus a counter.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "dataplane/sched/tx_scheduler.h"

namespace detwan::dataplane::sched {

using common::Status;

Status TxScheduler::drop(OwnerState& state, TxDrop reason) noexcept {
  ++state.counters.dropped[static_cast<int>(reason)];
  ++port_.dropped[static_cast<int>(reason)];
  return Status::kDropped;
}

Status TxScheduler::offer(OwnerIndex owner, uint32_t bytes, int64_t* now_ns) noexcept {
  *now_ns = std::max(*now_ns, last_now_ns_);
  last_now_ns_ = *now_ns;
  ++port_.offered_packets;
  port_.offered_bytes += bytes;
  if (owner == kNoOwner) {
    ++port_.dropped[static_cast<int>(TxDrop::kUnknownTunnel)];
    return Status::kDropped;
  }
  OwnerState& state = owners_[owner];
  ++state.counters.offered_packets;
  state.counters.offered_bytes += bytes;
  if (bytes == 0 || bytes > gcl_.config().max_frame_bytes) return drop(state, TxDrop::kOversize);
  return Status::kOk;
}

Status TxScheduler::enqueue(uint32_t tunnel_id, uint64_t handle, uint32_t bytes, int64_t now_ns,
                            uint64_t tag) noexcept {
  const OwnerIndex owner = gcl_.find_owner(tunnel_id);
  if (const Status offered = offer(owner, bytes, &now_ns); offered != Status::kOk) return offered;
  OwnerState& state = owners_[owner];
  if (state.policer.police(bytes, now_ns) == PoliceVerdict::kExceed) {
    if (state.policer.action() == OverRateAction::kDrop) return drop(state, TxDrop::kPoliced);
    ++state.counters.downgraded_packets;
    state.counters.downgraded_bytes += bytes;
    ++port_.downgraded_packets;
    port_.downgraded_bytes += bytes;
    OwnerState& best_effort = owners_.back();
    ++best_effort.counters.offered_packets;
    best_effort.counters.offered_bytes += bytes;
    return schedule(gcl_.best_effort_owner(), tunnel_id, handle, bytes, now_ns, tag);
  }
  return schedule(owner, tunnel_id, handle, bytes, now_ns, tag);
}

Status TxScheduler::enqueue_unpoliced(uint32_t tunnel_id, uint64_t handle, uint32_t bytes,
                                      int64_t now_ns) noexcept {
  const OwnerIndex owner = gcl_.find_owner(tunnel_id);
  if (const Status offered = offer(owner, bytes, &now_ns); offered != Status::kOk) return offered;
  return schedule(owner, tunnel_id, handle, bytes, now_ns);
}

Status TxScheduler::enqueue_best_effort(uint64_t handle, uint32_t bytes, int64_t now_ns) noexcept {
  return enqueue_best_effort(handle, bytes, now_ns, kNoTunnel);
}

Status TxScheduler::enqueue_best_effort(uint64_t handle, uint32_t bytes, int64_t now_ns,
                                        uint32_t tunnel_id, uint64_t tag) noexcept {
  const OwnerIndex owner = gcl_.best_effort_owner();
  if (const Status offered = offer(owner, bytes, &now_ns); offered != Status::kOk) return offered;
  return schedule(owner, tunnel_id, handle, bytes, now_ns, tag);
}

Status TxScheduler::schedule(OwnerIndex owner, uint32_t tunnel_id, uint64_t handle, uint32_t bytes,
                             int64_t now_ns, uint64_t tag) noexcept {
  OwnerState& state = owners_[owner];
  if (state.held >= state.queue_frames) return drop(state, TxDrop::kQueueFull);
  LinkTime earliest = std::max(LinkTime::at(now_ns), state.next_free);
  int64_t conform_ns = now_ns;
  if (state.shaped) {
    conform_ns = state.shaper.conform_time_ns(bytes, now_ns);
    earliest = std::max(earliest, LinkTime::at(conform_ns));
  }
  Departure departure;
  if (!this->departure(state, owner, bytes, earliest, &departure)) {
    return drop(state, TxDrop::kNoSlot);
  }
  const int64_t departure_ns = departure.start.ceil_ns();
  if (departure_ns - now_ns > state.max_wait_ns) return drop(state, TxDrop::kMaxWait);

  const uint64_t line_rate = gcl_.config().line_rate_bps;
  Entry entry;
  entry.handle = handle;
  entry.enqueue_ns = now_ns;
  entry.tx_end_ns = departure.end.ceil_ns();
  // Latest whole-ns start that still ends by the usable end; never before the scheduled
  // departure itself (an exact start of 10.5 ns is sent at 11 ns and is on time).
  entry.deadline_ns =
      departure.usable_end_ns == kNever
          ? kNever
          : std::max(departure_ns, departure.usable_end_ns -
                                       ceil_serialisation_ns(uint64_t{bytes} * 8, line_rate));
  entry.bytes = bytes;
  entry.tunnel_id = tunnel_id;
  entry.owner = owner;
  entry.tag = tag;
  // The wheel's cursor stays where the last dequeue left it (a caller only dequeues when
  // something is due, and a stalled loop dequeues late): bring it toward now, or after an idle
  // spell or a stall longer than the horizon every departure would be refused as beyond it.
  wheel_.advance_cursor_toward(now_ns);
  switch (wheel_.insert(departure_ns, entry)) {
    case WheelInsert::kOk:
      break;
    case WheelInsert::kFull:
      return drop(state, TxDrop::kNoCapacity);
    case WheelInsert::kBeyondHorizon:
      return drop(state, TxDrop::kBeyondHorizon);
  }
  state.next_free = departure.end;
  if (state.shaped) state.shaper.consume_at(bytes, conform_ns);
  ++state.held;
  const bool held_for_slot = departure.start > earliest;
  for (TxCounters* counters : {&state.counters, &port_}) {
    ++counters->queued_packets;
    counters->queued_bytes += bytes;
    if (held_for_slot) ++counters->held_for_slot;
    counters->queue_wait_ns.record(departure_ns - now_ns);
  }
  return Status::kOk;
}

int64_t TxScheduler::release_horizon_ns(int64_t now_ns, int64_t ahead_ns) const noexcept {
  now_ns = std::max(now_ns, last_now_ns_);
  if (ahead_ns <= 0) return now_ns;
  const int64_t ahead_until_ns =
      now_ns > std::numeric_limits<int64_t>::max() - ahead_ns ? now_ns : now_ns + ahead_ns;
  Window window;
  const OwnerIndex owner = gcl_.owner_of_slot(gcl_.slot_at(now_ns));
  if (!gcl_.window_at(owner, now_ns, &window)) return now_ns;
  // Departures are whole ns at or after the exact start, and a frame must end by the usable
  // end: one departing before window.end_ns is this window's.
  return std::min(ahead_until_ns, window.end_ns - 1);
}

bool TxScheduler::pop_due(int64_t now_ns, TxFrame* frame, int64_t release_until_ns) noexcept {
  now_ns = std::max(now_ns, last_now_ns_);
  last_now_ns_ = now_ns;
  // The wheel's cursor only moves forward: never ask it for less than it was asked before.
  release_until_ns = std::max({release_until_ns, now_ns, last_release_until_ns_});
  last_release_until_ns_ = release_until_ns;
  if (returned_next_ < returned_.size()) {  // handed back by reconfigure(), counted there
    *frame = returned_[returned_next_++];
    if (returned_next_ == returned_.size()) {
      returned_.clear();  // keeps its capacity: no allocation here
      returned_next_ = 0;
    }
    return true;
  }
  int64_t departure_ns = 0;
  Entry entry;
  for (;;) {
    if (!wheel_.pop_due(release_until_ns, &departure_ns, &entry)) return false;
    --owners_[entry.owner].held;
    if (now_ns <= entry.deadline_ns || !reschedule_missed(entry, now_ns)) break;
  }
  OwnerState& state = owners_[entry.owner];
  const SlotPosition position = slot_position(state.slot_cache, departure_ns);
  frame->handle = entry.handle;
  frame->bytes = entry.bytes;
  frame->tunnel_id = entry.tunnel_id;
  frame->owner = entry.owner;
  frame->best_effort = entry.owner == gcl_.best_effort_owner();
  frame->departure_ns = departure_ns;
  frame->tx_end_ns = entry.tx_end_ns;
  frame->cycle_id = position.cycle_id;
  frame->slot = position.slot;
  frame->enqueue_ns = entry.enqueue_ns;
  frame->tag = entry.tag;
  frame->send = now_ns <= entry.deadline_ns;
  frame->drop = frame->send ? TxDrop::kCount : TxDrop::kMissedSlot;
  if (!frame->send) {
    (void)drop(state, TxDrop::kMissedSlot);
    return true;
  }
  for (TxCounters* counters : {&state.counters, &port_}) {
    ++counters->sent_packets;
    counters->sent_bytes += entry.bytes;
  }
  return true;
}

SlotPosition TxScheduler::slot_position(SlotCache& c, int64_t t_ns) const noexcept {
  if (t_ns >= c.start_ns && t_ns < c.end_ns) {
    return SlotPosition{c.cycle_id, c.slot, t_ns - c.start_ns};
  }
  const SlotPosition position = gcl_.position_at(t_ns);
  c.start_ns = t_ns - position.offset_in_slot_ns;
  c.end_ns = c.start_ns + gcl_.slot_ns();
  c.cycle_id = position.cycle_id;
  c.slot = position.slot;
  return position;
}

bool TxScheduler::departure(OwnerState& state, OwnerIndex owner, uint32_t bytes, LinkTime earliest,
                            Departure* out) const noexcept {
  const Window& w = state.open_window;
  if (earliest.ns >= w.start_ns && earliest.ns < w.end_ns) {
    const LinkTime end = add_bits(earliest, uint64_t{bytes} * 8, gcl_.config().line_rate_bps);
    if (end <= LinkTime::at(w.usable_end_ns)) {
      *out = Departure{earliest, end, w.usable_end_ns};
      return true;
    }
  }
  return gcl_.find_departure(owner, bytes, earliest, out, &state.open_window);
}

bool TxScheduler::reschedule_missed(Entry& entry, int64_t now_ns) noexcept {
  OwnerState& state = owners_[entry.owner];
  if (state.missed_slot != MissedSlot::kNextWindow) return false;
  // After the owner's frames already placed, so frames of one owner never overlap on the line.
  const LinkTime earliest = std::max(LinkTime::at(now_ns), state.next_free);
  Departure departure;
  if (!gcl_.find_departure(entry.owner, entry.bytes, earliest, &departure)) return false;
  const int64_t departure_ns = departure.start.ceil_ns();
  if (departure_ns - entry.enqueue_ns > state.max_wait_ns) return false;
  const Entry original = entry;
  entry.tx_end_ns = departure.end.ceil_ns();
  entry.deadline_ns =
      departure.usable_end_ns == kNever
          ? kNever
          : std::max(departure_ns,
                     departure.usable_end_ns - ceil_serialisation_ns(uint64_t{entry.bytes} * 8,
                                                                     gcl_.config().line_rate_bps));
  // The cursor sits at this late frame's old departure: the loop stalled. Bring it toward now
  // first, or a stall longer than the horizon would refuse the new departure as beyond it.
  wheel_.advance_cursor_toward(now_ns);
  if (wheel_.insert(departure_ns, entry) != WheelInsert::kOk) {
    entry = original;
    return false;
  }
  state.next_free = departure.end;
  ++state.held;
  ++state.counters.rescheduled;
  ++port_.rescheduled;
  return true;
}

void TxScheduler::record_departure(const TxFrame& frame, int64_t actual_ns) noexcept {
  if (frame.owner >= owners_.size()) return;
  const int64_t error_ns = actual_ns - frame.departure_ns;
  owners_[frame.owner].counters.departure_error_ns.record(error_ns);
  port_.departure_error_ns.record(error_ns);
}

}  // namespace detwan::dataplane::sched

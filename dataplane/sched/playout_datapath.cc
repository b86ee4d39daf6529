// Per-packet work of on-time playout: a FIFO ring for packets in release order and a
// fixed-capacity binary heap on release time for the others (playout.h).
// No allocation, no exceptions, no logging; timestamps from the peer saturate, never overflow.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "dataplane/sched/playout.h"

namespace detwan::dataplane::sched {
namespace {

using common::Status;

int64_t saturating_add(int64_t a, int64_t b) noexcept {
  int64_t out = 0;
  if (!__builtin_add_overflow(a, b, &out)) return out;
  return b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
}

int64_t saturating_sub(int64_t a, int64_t b) noexcept {
  int64_t out = 0;
  if (!__builtin_sub_overflow(a, b, &out)) return out;
  return b < 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
}

}  // namespace

Status Playout::drop(PlayoutDrop reason) noexcept {
  ++counters_.dropped[static_cast<int>(reason)];
  return Status::kDropped;
}

bool Playout::before(uint32_t a, uint32_t b) const noexcept {
  const Entry& x = heap_[a];
  const Entry& y = heap_[b];
  return x.frame.release_ns != y.frame.release_ns ? x.frame.release_ns < y.frame.release_ns
                                                  : x.sequence < y.sequence;
}

Status Playout::push(uint64_t handle, uint32_t bytes, int64_t tx_timestamp_ns,
                     int64_t now_ns) noexcept {
  now_ns = std::max(now_ns, last_now_ns_);
  last_now_ns_ = now_ns;
  ++counters_.received_packets;
  counters_.received_bytes += bytes;
  const int64_t sender_time = saturating_add(tx_timestamp_ns, config_.clock_offset_ns);

  int64_t target_ns = now_ns;
  int64_t release_ns = now_ns;
  bool late = false;
  if (config_.bound_ns != 0) {
    target_ns = saturating_add(sender_time, config_.bound_ns);
    if (saturating_sub(now_ns, target_ns) > config_.max_hold_ns) {
      return drop(PlayoutDrop::kStale);
    }
    if (saturating_sub(target_ns, now_ns) > config_.max_hold_ns) {
      return drop(PlayoutDrop::kTooEarly);
    }
    // A plausible timestamp: its delay is a measurement, whatever happens to the packet next.
    counters_.wan_delay_ns.record(saturating_sub(now_ns, sender_time));
    if (target_ns < now_ns) {
      ++counters_.late_packets;
      counters_.lateness_ns.record(saturating_sub(now_ns, target_ns));
      if (config_.late_action == LateAction::kDrop) return drop(PlayoutDrop::kLate);
      late = true;
    } else {
      release_ns = target_ns;
    }
  }
  if (config_.bound_ns == 0) {
    // In time: no hold, but the same window around the sender's time as an on-time target.
    if (saturating_sub(now_ns, sender_time) > config_.max_hold_ns) {
      return drop(PlayoutDrop::kStale);
    }
    if (saturating_sub(sender_time, now_ns) > config_.max_hold_ns) {
      return drop(PlayoutDrop::kTooEarly);
    }
    counters_.wan_delay_ns.record(saturating_sub(now_ns, sender_time));
  }
  if (size_ == config_.capacity_frames) return drop(PlayoutDrop::kBufferFull);
  if (late) ++counters_.late_delivered;

  // Written field by field where it is kept (no struct built on the stack and copied: a copy
  // right after narrow stores stalls on store forwarding).
  ++size_;
  const bool in_order =
      ring_size_ == 0 || ring_[ring_index(ring_size_ - 1)].frame.release_ns <= release_ns;
  Entry& entry = in_order ? ring_[ring_index(ring_size_)] : heap_[heap_size_];
  entry.frame.handle = handle;
  entry.frame.bytes = bytes;
  entry.frame.late = late;
  entry.frame.tx_timestamp_ns = tx_timestamp_ns;
  entry.frame.arrival_ns = now_ns;
  entry.frame.target_ns = target_ns;
  entry.frame.release_ns = release_ns;
  entry.frame.sender_time_ns = sender_time;
  entry.sequence = next_sequence_++;
  if (in_order) {
    ++ring_size_;  // the common case: no later packet is held
  } else {
    heap_sift_up(heap_size_++);
  }
  return Status::kOk;
}

void Playout::heap_sift_up(uint32_t i) noexcept {
  while (i > 0) {
    const uint32_t parent = (i - 1) / 2;
    if (!before(i, parent)) break;
    std::swap(heap_[i], heap_[parent]);
    i = parent;
  }
}

void Playout::heap_pop() noexcept {
  heap_[0] = heap_[--heap_size_];
  uint32_t i = 0;
  for (;;) {
    const uint32_t left = 2 * i + 1;
    if (left >= heap_size_) break;
    uint32_t child = left;
    if (left + 1 < heap_size_ && before(left + 1, left)) child = left + 1;
    if (!before(child, i)) break;
    std::swap(heap_[i], heap_[child]);
    i = child;
  }
}

bool Playout::pop_due(int64_t now_ns, PlayoutFrame* frame, int64_t release_until_ns) noexcept {
  now_ns = std::max(now_ns, last_now_ns_);
  last_now_ns_ = now_ns;
  const Entry* first = first_entry();
  if (first == nullptr || first->frame.release_ns > std::max(now_ns, release_until_ns)) {
    return false;
  }
  *frame = first->frame;
  ++counters_.released_packets;
  counters_.released_bytes += frame->bytes;
  --size_;
  if (first == &heap_[0]) {
    heap_pop();
  } else {
    ring_head_ = ring_index(1);
    --ring_size_;
  }
  return true;
}

int64_t Playout::next_event_ns() const noexcept {
  const Entry* first = first_entry();
  return first == nullptr ? std::numeric_limits<int64_t>::max() : first->frame.release_ns;
}

void Playout::record_release(const PlayoutFrame& frame, int64_t actual_ns) noexcept {
  counters_.playout_error_ns.record(saturating_sub(actual_ns, frame.target_ns));
  counters_.one_way_delay_ns.record(saturating_sub(actual_ns, frame.sender_time_ns));
}

}  // namespace detwan::dataplane::sched

// Per-frame work of the emulator: offer, release, and the lazy link scheduler. No allocation,
// no exceptions, no logging: every outcome is a status plus a counter.
#include <algorithm>
#include <cstdint>

#include "tools/wanem/engine/emulator_impl.h"

namespace detwan::wanem {
namespace {

using common::Status;

constexpr int kReservedIndex = static_cast<int>(TrafficClass::kReserved);
constexpr int kBestEffortIndex = static_cast<int>(TrafficClass::kBestEffort);
constexpr int kCrossIndex = static_cast<int>(TrafficClass::kCross);

int class_index_of(TrafficClass traffic_class) noexcept {
  switch (traffic_class) {
    case TrafficClass::kReserved:
      return kReservedIndex;
    case TrafficClass::kCross:
      return kCrossIndex;
    case TrafficClass::kBestEffort:
      break;
  }
  return kBestEffortIndex;  // also for out-of-range values
}

}  // namespace

Status Emulator::Impl::drop(int class_index, DropReason reason, uint64_t count) noexcept {
  counters_.by_class[class_index].dropped[static_cast<int>(reason)] += count;
  return Status::kDropped;
}

bool Emulator::Impl::link_down_at(int64_t t_ns) const noexcept {
  const uint32_t kept = std::min(manual_down_total_, kManualDownHistory);
  for (uint32_t i = 0; i < kept; ++i) {
    if (t_ns >= manual_down_[i].start_ns && t_ns < manual_down_[i].end_ns) return true;
  }
  const int64_t relative_ns = t_ns - start_ns_;
  for (const DownWindow& window : spec_.down) {  // sorted, disjoint (validate)
    if (relative_ns < window.start_ns) break;
    if (relative_ns < window.end_ns) return true;
  }
  return false;
}

void Emulator::Impl::advance(int64_t now_ns) noexcept {
  const LinkTime limit = LinkTime::at(now_ns);
  for (;;) {
    const bool dequeue_due = !queue_empty() && link_free_ <= limit;
    const bool cross_due = cross_.enabled() && cross_.next_arrival() <= limit;
    if (!dequeue_due && !cross_due) return;
    // At equal instants the link picks its next frame before a new arrival joins the queue.
    if (dequeue_due && (!cross_due || link_free_ <= cross_.next_arrival())) {
      dequeue_one();
    } else {
      cross_arrivals(now_ns);
    }
  }
}

void Emulator::Impl::cross_arrivals(int64_t now_ns) noexcept {
  const uint32_t bytes = cross_.frame_bytes();
  ClassCounters& counters = counters_.by_class[kCrossIndex];
  const bool too_big =
      queue_limit_bytes_ != 0 && shared_queued_bytes() + bytes > queue_limit_bytes_;
  if (queue_empty() && link_free_ <= cross_.next_arrival()) {
    // Idle link: this burst's arrivals up to now go out as they arrive, back-to-back, each
    // seeing an empty queue. Handled in one step instead of frame by frame.
    const uint64_t n = cross_.arrivals_until(now_ns);
    counters.offered_packets += n;
    counters.offered_bytes += n * bytes;
    counters_.queue_depth_bytes[kCrossIndex].record_n(0, n);
    if (too_big) {
      (void)drop(kCrossIndex, DropReason::kQueueFull, n);
    } else {
      counters.forwarded_packets += n;
      counters.forwarded_bytes += n * bytes;
      link_free_ = cross_.arrival(n);
    }
    cross_.consume(n);
    return;
  }
  // Busy link: one arrival joins the best-effort FIFO (runs of cross frames share an entry).
  ++counters.offered_packets;
  counters.offered_bytes += bytes;
  counters_.queue_depth_bytes[kCrossIndex].record(static_cast<int64_t>(queued_bytes_));
  if (too_big) {
    (void)drop(kCrossIndex, DropReason::kQueueFull);
  } else if (!best_effort_queue_.empty() && best_effort_queue_.back().slot == kCrossRun &&
             best_effort_queue_.back().cross_bytes == bytes) {
    ++best_effort_queue_.back().count;
    queued_bytes_ += bytes;
  } else if (best_effort_queue_.push_back(BeEntry{kCrossRun, 1, bytes})) {
    queued_bytes_ += bytes;
  } else {
    (void)drop(kCrossIndex, DropReason::kNoCapacity);
  }
  cross_.consume(1);
}

void Emulator::Impl::dequeue_one() noexcept {
  const LinkTime start = link_free_;
  if (!reserved_queue_.empty()) {
    const uint32_t slot = reserved_queue_.front();
    reserved_queue_.pop_front();
    queued_bytes_ -= slots_[slot].frame_bytes;
    reserved_queued_bytes_ -= slots_[slot].frame_bytes;
    --queued_real_;
    start_transmission(slot, start);
  } else {
    BeEntry& entry = best_effort_queue_.front();
    if (entry.slot == kCrossRun) {
      const uint32_t bytes = entry.cross_bytes;
      if (--entry.count == 0) best_effort_queue_.pop_front();
      queued_bytes_ -= bytes;
      ClassCounters& counters = counters_.by_class[kCrossIndex];
      ++counters.forwarded_packets;
      counters.forwarded_bytes += bytes;
      link_free_ = add_bits(start, uint64_t{bytes} * 8, spec_.rate_bps);
    } else {
      const uint32_t slot = entry.slot;
      best_effort_queue_.pop_front();
      queued_bytes_ -= slots_[slot].frame_bytes;
      --queued_real_;
      start_transmission(slot, start);
    }
  }
  if (queued_real_ == 0) queued_min_offset_ns_ = INT64_MAX;
}

void Emulator::Impl::start_transmission(uint32_t slot, LinkTime start) noexcept {
  link_free_ = add_bits(start, uint64_t{slots_[slot].frame_bytes} * 8, spec_.rate_bps);
  enter_delay_line(slot, link_free_.ceil_ns());
}

void Emulator::Impl::enter_delay_line(uint32_t slot, int64_t tx_end_ns) noexcept {
  Slot& frame = slots_[slot];
  const int64_t release_ns = std::max(tx_end_ns + frame.offset_ns, tx_end_ns);
  // Both lines hold at most max_frames entries, so the pushes below cannot fail.
  if (frame.reorder) {
    frame.release_ns = std::max(release_ns, last_reorder_release_ns_);
    last_reorder_release_ns_ = frame.release_ns;
    (void)reorder_line_.push_back(slot);
    ++counters_.by_class[frame.class_index].reordered_packets;
  } else {
    frame.release_ns = std::max(release_ns, last_release_ns_);
    last_release_ns_ = frame.release_ns;
    (void)delay_line_.push_back(slot);
  }
}

Status Emulator::Impl::admit(const Frame& frame, int class_index, int64_t now_ns) noexcept {
  counters_.queue_depth_bytes[class_index].record(static_cast<int64_t>(queued_bytes_));
  const bool own_limit = class_index == kReservedIndex && prio_queue_limit_bytes_ != 0;
  const bool full =
      own_limit ? reserved_queued_bytes_ + frame.frame_bytes > prio_queue_limit_bytes_
                : queue_limit_bytes_ != 0 &&
                      shared_queued_bytes() + frame.frame_bytes > queue_limit_bytes_;
  if (full) return drop(class_index, DropReason::kQueueFull);
  if (free_count_ == 0) return drop(class_index, DropReason::kNoCapacity);
  const uint32_t slot = free_slots_[--free_count_];
  Slot& held = slots_[slot];
  held.handle = frame.handle;
  held.offer_ns = now_ns;
  held.frame_bytes = frame.frame_bytes;
  held.class_index = static_cast<uint8_t>(class_index);
  held.release_ns = 0;
  held.offset_ns = spec_.delay_ns + jitter_.sample(jitter_rng_);
  held.reorder = spec_.reorder > 0.0 && reorder_rng_.bernoulli(spec_.reorder);
  if (held.reorder) held.offset_ns -= spec_.reorder_ahead_ns;

  if (queue_empty() && link_free_ <= LinkTime::at(now_ns)) {
    start_transmission(slot, LinkTime::at(now_ns));
    return Status::kOk;
  }
  const bool queued = class_index == kReservedIndex
                          ? reserved_queue_.push_back(slot)
                          : best_effort_queue_.push_back(BeEntry{slot, 1, 0});
  if (!queued) {  // unreachable with the ring sizes chosen in the constructor
    free_slots_[free_count_++] = slot;
    return drop(class_index, DropReason::kNoCapacity);
  }
  queued_bytes_ += frame.frame_bytes;
  if (class_index == kReservedIndex) reserved_queued_bytes_ += frame.frame_bytes;
  ++queued_real_;
  queued_min_offset_ns_ = std::min(queued_min_offset_ns_, held.offset_ns);
  return Status::kOk;
}

OfferResult Emulator::offer(const Frame& frame, int64_t now_ns) noexcept {
  Impl& s = *impl_;
  s.advance(now_ns);
  const int class_index = class_index_of(frame.traffic_class);
  ClassCounters& counters = s.counters_.by_class[class_index];
  ++counters.offered_packets;
  counters.offered_bytes += frame.frame_bytes;
  if (s.link_down_at(now_ns)) return {s.drop(class_index, DropReason::kLinkDown), false};
  // Both loss processes step for every frame that reaches this stage, so each keeps its own
  // statistics; a frame both would drop is counted as random loss.
  const bool lost = BernoulliLoss::lose(s.spec_.loss, s.loss_rng_);
  const bool burst_lost = s.ge_.lose(s.ge_rng_);
  if (lost) return {s.drop(class_index, DropReason::kLoss), false};
  if (burst_lost) return {s.drop(class_index, DropReason::kBurstLoss), false};
  const bool duplicate = s.spec_.duplicate > 0.0 && s.dup_rng_.bernoulli(s.spec_.duplicate);
  if (s.admit(frame, class_index, now_ns) != Status::kOk) return {Status::kDropped, false};
  if (duplicate) ++counters.duplicated_packets;
  return {Status::kOk, duplicate};
}

Status Emulator::offer_duplicate(const Frame& frame, int64_t now_ns) noexcept {
  Impl& s = *impl_;
  s.advance(now_ns);
  const int class_index = class_index_of(frame.traffic_class);
  if (s.link_down_at(now_ns)) return s.drop(class_index, DropReason::kLinkDown);
  return s.admit(frame, class_index, now_ns);
}

bool Emulator::pop_due(int64_t now_ns, uint64_t* handle, uint32_t* frame_bytes,
                       bool* deliver) noexcept {
  Impl& s = *impl_;
  s.advance(now_ns);
  FixedRing<uint32_t>* line = nullptr;
  int64_t due_ns = INT64_MAX;
  if (!s.reorder_line_.empty()) {
    line = &s.reorder_line_;
    due_ns = s.slots_[s.reorder_line_.front()].release_ns;
  }
  // On a tie the reordered frame goes first: it is the one meant to be early.
  if (!s.delay_line_.empty() && s.slots_[s.delay_line_.front()].release_ns < due_ns) {
    line = &s.delay_line_;
    due_ns = s.slots_[s.delay_line_.front()].release_ns;
  }
  if (line == nullptr || due_ns > now_ns) return false;
  const uint32_t slot = line->front();
  line->pop_front();
  const Impl::Slot& frame = s.slots_[slot];
  *handle = frame.handle;
  *frame_bytes = frame.frame_bytes;
  *deliver = !s.link_down_at(frame.release_ns);
  if (*deliver) {
    ClassCounters& counters = s.counters_.by_class[frame.class_index];
    ++counters.forwarded_packets;
    counters.forwarded_bytes += frame.frame_bytes;
    s.counters_.sojourn_ns[frame.class_index].record(frame.release_ns - frame.offer_ns);
  } else {
    (void)s.drop(frame.class_index, DropReason::kLinkDown);
  }
  s.free_slots_[s.free_count_++] = slot;
  return true;
}

int64_t Emulator::next_event_ns() const noexcept {
  const Impl& s = *impl_;
  int64_t next_ns = INT64_MAX;
  if (!s.delay_line_.empty()) next_ns = s.slots_[s.delay_line_.front()].release_ns;
  if (!s.reorder_line_.empty()) {
    next_ns = std::min(next_ns, s.slots_[s.reorder_line_.front()].release_ns);
  }
  if (s.queued_real_ > 0) {
    // Lower bound on the release of any waiting frame: the first one in service order cannot
    // finish transmission earlier than `end` (later arrivals only push it back), the others
    // finish after it, and none gets an offset below queued_min_offset_ns_. Cross traffic
    // alone never wakes the caller.
    LinkTime end = s.link_free_;
    const uint64_t rate_bps = s.spec_.rate_bps;
    if (!s.reserved_queue_.empty()) {
      end = add_bits(end, uint64_t{s.slots_[s.reserved_queue_.front()].frame_bytes} * 8, rate_bps);
    } else {
      for (uint32_t i = 0; i < s.best_effort_queue_.size(); ++i) {
        const Impl::BeEntry& entry = s.best_effort_queue_.at(i);
        if (entry.slot == kCrossRun) {
          end = add_bits(end, uint64_t{entry.cross_bytes} * 8 * entry.count, rate_bps);
          continue;
        }
        end = add_bits(end, uint64_t{s.slots_[entry.slot].frame_bytes} * 8, rate_bps);
        break;
      }
    }
    next_ns = std::min(next_ns, end.ceil_ns() + std::max<int64_t>(0, s.queued_min_offset_ns_));
  }
  return next_ns;
}

}  // namespace detwan::wanem

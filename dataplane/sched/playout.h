#pragma once
// On-time playout at the receiving gateway (DetNet "on-time" delivery; docs/dataplane.md).
//
// Each packet is released at
//     target = tx_timestamp_ns + clock_offset_ns + bound_ns
// where tx_timestamp_ns is the sender's transmit timestamp (sender's clock), clock_offset_ns is
// receiver clock - sender clock, and bound_ns >= the path's worst-case latency. The WAN's
// jitter is absorbed; what remains is the receiver's own scheduling error (playout_error_ns).
//
//  * bound_ns == 0 ("in time"): no playout; every packet is released on receipt and never
//    counted late. Its sender time (tx + offset) must still lie within max_hold_ns of its arrival
//    (stale / too_early otherwise), as an on-time packet's target must: a packet captured and
//    replayed later than that is refused whatever the replay window says.
//  * A packet arriving after its target (arrival > target) is late: counted (late_packets,
//    lateness_ns), then released at once (LateAction::kDeliver) or dropped (kDrop, counted).
//  * A packet whose target is more than max_hold_ns ahead of its arrival (a garbled timestamp or
//    a wrong offset) is dropped (too_early): a peer can never pin the buffer. One whose target
//    is more than max_hold_ns behind its arrival is dropped whatever the late action (stale): a
//    timestamp that far outside the clocks' bound is refused, not delivered late, and an old
//    packet replayed after the sender restarted is useless.
//  * The delay histograms record accepted packets only, so a refused timestamp cannot skew them.
//  * capacity_frames packets are held at most; beyond that a packet is dropped (buffer_full).
// Release order is by release time, then arrival order. Timestamps come from the network and are
// treated as hostile: all arithmetic saturates, nothing asserts.
//
// Status of push(): kOk = held (the buffer owns the handle until the sink gets it); kDropped =
// counted, the caller frees the packet.
// Time: now_ns is the receiver's clock, must not go backwards (earlier values are treated as the
// latest seen). Threading: one owner thread. No allocation after create(), no exceptions.
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>

#include "common/counter_table.h"
#include "common/histogram.h"
#include "common/status.h"

namespace detwan::dataplane::sched {

enum class LateAction : uint8_t { kDeliver = 0, kDrop = 1 };

enum class PlayoutDrop : uint8_t {
  kLate = 0,    // arrived after its release time and the policy drops late packets
  kTooEarly,    // release time more than max_hold_ns after arrival
  kBufferFull,  // capacity_frames held
  kStale,       // release time more than max_hold_ns before arrival
  kCount
};
inline constexpr int kPlayoutDropCount = static_cast<int>(PlayoutDrop::kCount);
// "late", "too_early", "buffer_full", "stale"
std::string_view to_string(PlayoutDrop reason) noexcept;

struct PlayoutConfig {
  int64_t bound_ns = 0;         // 0 = release on receipt
  int64_t clock_offset_ns = 0;  // receiver clock - sender clock
  LateAction late_action = LateAction::kDeliver;
  int64_t max_hold_ns = 1'000'000'000;  // >= bound_ns
  uint32_t capacity_frames = 4096;
};

struct PlayoutCounters {
  uint64_t received_packets = 0;
  uint64_t received_bytes = 0;
  uint64_t released_packets = 0;
  uint64_t released_bytes = 0;
  uint64_t late_packets = 0;    // arrived after their release time (delivered or dropped)
  uint64_t late_delivered = 0;  // of those, released anyway (LateAction::kDeliver)
  uint64_t dropped[kPlayoutDropCount] = {};
  // Arrival - (tx timestamp + offset): the WAN's one-way delay, before playout.
  common::LogLinearHistogram wan_delay_ns;
  // Actual release (from record_release()) - (tx timestamp + offset): the one-way delay at
  // egress, after playout (the bound plus the receiver's playout error for an on-time packet).
  common::LogLinearHistogram one_way_delay_ns;
  // Arrival - release target, late packets only.
  common::LogLinearHistogram lateness_ns;
  // Actual release - target, from record_release().
  common::LogLinearHistogram playout_error_ns;
};

// PlayoutCounters' scalar counters, one list for counters_json(), the gateway's exposition
// (after detwan_gw_tunnel_rx_) and the sums over shards (common/counter_table.h). `dropped` and
// the histograms are written beside them.
inline constexpr common::CounterField<PlayoutCounters> kPlayoutCounterFields[] = {
    {&PlayoutCounters::received_packets, "received_packets", "received_packets_total",
     "Packets pushed to the playout"},
    {&PlayoutCounters::received_bytes, "received_bytes", "received_bytes_total",
     "Payload bytes pushed to the playout"},
    {&PlayoutCounters::released_packets, "released_packets", "released_packets_total",
     "Packets released"},
    {&PlayoutCounters::released_bytes, "released_bytes", "released_bytes_total",
     "Payload bytes released"},
    {&PlayoutCounters::late_packets, "late_packets", "late_packets_total",
     "Packets that arrived after their target"},
    {&PlayoutCounters::late_delivered, "late_delivered", "late_delivered_total",
     "Late packets delivered anyway"},
};

// One packet handed to the release_due() sink.
struct PlayoutFrame {
  uint64_t handle = 0;
  uint32_t bytes = 0;
  bool late = false;
  int64_t tx_timestamp_ns = 0;  // as received (sender's clock)
  int64_t arrival_ns = 0;
  int64_t target_ns = 0;   // tx + offset + bound (arrival when bound is 0)
  int64_t release_ns = 0;  // scheduled release: target, or arrival for a late packet
  int64_t sender_time_ns = 0;  // tx timestamp + offset (receiver's clock, saturated)
};

class Playout {
 public:
  // Setup: bound_ns >= 0, max_hold_ns >= bound_ns, capacity_frames > 0 (ErrorCode::kConfig).
  static common::Result<Playout> create(const PlayoutConfig& config);

  [[nodiscard]] common::Status push(uint64_t handle, uint32_t bytes, int64_t tx_timestamp_ns,
                                    int64_t now_ns) noexcept;
  // Calls sink(const PlayoutFrame&) for each packet with release_ns <= now_ns, in release
  // order, at most max_frames. Returns how many. Must not block.
  template <typename Sink>
  uint32_t release_due(int64_t now_ns, Sink&& sink,
                       uint32_t max_frames = std::numeric_limits<uint32_t>::max()) noexcept;
  // The next packet due at now_ns into *frame (false: none): release_due() one at a time, for a
  // caller that reads the frame's fields directly (playout_datapath.cc).
  bool pop_due(int64_t now_ns, PlayoutFrame* frame) noexcept { return pop_due(now_ns, frame, now_ns); }
  // The same, but a packet whose release time is up to release_until_ns is released already
  // (early by at most release_until_ns - now_ns: a caller that wakes once per batch). now_ns is
  // the real time (arrivals are timed by it); record_release() records the earliness as a
  // negative playout error.
  bool pop_due(int64_t now_ns, PlayoutFrame* frame, int64_t release_until_ns) noexcept;
  // Release time of the next packet; INT64_MAX when empty.
  [[nodiscard]] int64_t next_event_ns() const noexcept;
  // The caller reports when it actually released a packet: playout error = actual - target and
  // one-way delay at egress = actual - sender time are recorded here.
  void record_release(const PlayoutFrame& frame, int64_t actual_ns) noexcept;
  // Setup: the rules create() checks (kConfig naming the field).
  static common::Result<void> validate(const PlayoutConfig& config);
  // Setup: makes this playout what create(config) would return, keeping its storage (for a
  // drained playout given to a new tunnel): counters at zero, sequence and clock start again.
  // Nothing is allocated and only the counters' used buckets are cleared. Refused (false,
  // nothing changed) unless config passes validate(), has this playout's capacity_frames, and
  // nothing is held.
  [[nodiscard]] bool restart(const PlayoutConfig& config) noexcept;
  // A new bound, late action and max hold for packets pushed from now on; the packets held keep
  // their release times, the capacity stays. The values must pass validate() (with the
  // capacity): the caller checks first, so that a change of several things is all or nothing.
  void set_release_policy(int64_t bound_ns, LateAction late_action, int64_t max_hold_ns) noexcept {
    config_.bound_ns = bound_ns;
    config_.late_action = late_action;
    config_.max_hold_ns = max_hold_ns;
  }
  // New estimate of receiver - sender clock offset; applies to packets pushed from now on.
  void set_clock_offset_ns(int64_t offset_ns) noexcept { config_.clock_offset_ns = offset_ns; }

  [[nodiscard]] const PlayoutConfig& config() const noexcept { return config_; }
  [[nodiscard]] const PlayoutCounters& counters() const noexcept { return counters_; }
  [[nodiscard]] uint32_t held_frames() const noexcept { return size_; }
  // {"received_packets",...,"dropped":{"late","too_early","buffer_full"},"wan_delay_ns":H,
  //  "one_way_delay_ns":H,"lateness_ns":H,"playout_error_ns":H,"held_frames":N}
  [[nodiscard]] std::string counters_json() const;

 private:
  struct Entry {
    PlayoutFrame frame;     // sender_time_ns: tx timestamp + offset, in the receiver's clock
    uint64_t sequence = 0;  // arrival order, for ties
  };
  explicit Playout(const PlayoutConfig& config);
  common::Status drop(PlayoutDrop reason) noexcept;
  [[nodiscard]] bool before(uint32_t a, uint32_t b) const noexcept;
  void heap_sift_up(uint32_t i) noexcept;  // the entry just written at heap_[i]
  void heap_pop() noexcept;
  // The ring's slot `i` entries after its head.
  [[nodiscard]] uint32_t ring_index(uint32_t i) const noexcept {
    const uint32_t at = ring_head_ + i;
    return at >= config_.capacity_frames ? at - config_.capacity_frames : at;
  }
  // The next packet to release: the earlier (release_ns, then arrival) of the ring's head and
  // the heap's top; nullptr when nothing is held.
  [[nodiscard]] const Entry* first_entry() const noexcept {
    const Entry* ring = ring_size_ != 0 ? &ring_[ring_head_] : nullptr;
    if (heap_size_ == 0) return ring;
    const Entry* heap = &heap_[0];
    if (ring == nullptr) return heap;
    const bool ring_first = ring->frame.release_ns != heap->frame.release_ns
                                ? ring->frame.release_ns < heap->frame.release_ns
                                : ring->sequence < heap->sequence;
    return ring_first ? ring : heap;
  }

  PlayoutConfig config_;
  PlayoutCounters counters_;
  // Packets held, in two sorted sources merged at release: a FIFO ring of the packets that
  // arrived in release order (each released no earlier than the one before it: nearly every
  // packet, since the sender's timestamps grow and the bound is fixed) at O(1), and a binary
  // min-heap on (release_ns, sequence) for the others (reordered by the WAN, or a smaller
  // bound after a change). Each has room for capacity_frames.
  std::unique_ptr<Entry[]> ring_;
  std::unique_ptr<Entry[]> heap_;
  uint32_t ring_head_ = 0;  // index of the oldest entry
  uint32_t ring_size_ = 0;
  uint32_t heap_size_ = 0;
  uint32_t size_ = 0;  // ring_size_ + heap_size_
  uint64_t next_sequence_ = 0;
  int64_t last_now_ns_ = std::numeric_limits<int64_t>::min();
};

template <typename Sink>
uint32_t Playout::release_due(int64_t now_ns, Sink&& sink, uint32_t max_frames) noexcept {
  uint32_t count = 0;
  PlayoutFrame frame;
  while (count < max_frames && pop_due(now_ns, &frame)) {
    sink(static_cast<const PlayoutFrame&>(frame));
    ++count;
  }
  return count;
}

}  // namespace detwan::dataplane::sched

#pragma once
// One direction of an emulated WAN link, in (injected) time. Pure logic: no I/O, no clock
// reads, no allocation after construction, no exceptions on the datapath. The port backend
// (packet/ or dpdk/) owns the frame buffers and hands the emulator opaque handles.
//
// Pipeline for a frame offered at now_ns:
//   link down? -> loss (Bernoulli, Gilbert-Elliott) -> duplication -> queue (strict priority:
//   reserved above a FIFO best-effort class shared with synthetic cross traffic; drop-tail on
//   bytes) -> serialisation at rate_bps -> propagation delay + jitter (FIFO: never reorders,
//   except the `reorder` share which leaves reorder_ahead_ns early) -> release.
//
// Threading: every method is owned by one thread (the port's poll thread). Run-time changes
// from a control thread are posted to that thread, which calls update_spec().
//
// Time: all arguments are absolute nanoseconds of one clock and must not go backwards between
// calls. Tests drive it with common::VirtualClock values.
#include <cstdint>
#include <memory>
#include <string>

#include "common/histogram.h"
#include "common/status.h"
#include "tools/wanem/engine/spec.h"

namespace detwan::wanem {

enum class TrafficClass : uint8_t { kReserved = 0, kBestEffort = 1, kCross = 2 };
inline constexpr int kClassCount = 3;

enum class DropReason : uint8_t {
  kLoss = 0,       // random loss (Bernoulli)
  kBurstLoss,      // Gilbert-Elliott loss
  kQueueFull,      // drop-tail
  kLinkDown,       // offered, or due to leave, while the link was down
  kNoCapacity,     // emulator's fixed packet capacity exhausted (sized at construction)
  kCount
};
std::string_view to_string(DropReason reason) noexcept;

struct ClassCounters {
  uint64_t offered_packets = 0;
  uint64_t offered_bytes = 0;
  uint64_t forwarded_packets = 0;
  uint64_t forwarded_bytes = 0;
  uint64_t duplicated_packets = 0;
  uint64_t reordered_packets = 0;
  uint64_t dropped[static_cast<int>(DropReason::kCount)] = {};
};

struct Counters {
  ClassCounters by_class[kClassCount];
  // Queue depth in bytes seen by each arriving frame, per class.
  common::LogLinearHistogram queue_depth_bytes[kClassCount];
  // Total delay each released frame experienced inside the emulator (queue + serialisation +
  // propagation + jitter), per class.
  common::LogLinearHistogram sojourn_ns[kClassCount];
};

// Classifies an Ethernet frame (IPv4/IPv6, optional 802.1Q tag) by the spec's prio-dscp and
// prio-port lists. Never reads beyond frame_bytes; anything unparsable is best effort.
TrafficClass classify(const ImpairmentSpec& spec, const uint8_t* frame, uint32_t frame_bytes) noexcept;

struct Frame {
  uint64_t handle = 0;       // opaque to the emulator; returned unchanged on release
  uint32_t frame_bytes = 0;  // whole L2 frame; what the rate limiter counts
  TrafficClass traffic_class = TrafficClass::kBestEffort;
};

struct OfferResult {
  common::Status status = common::Status::kOk;  // kOk: queued; kDropped: caller frees the frame
  bool duplicate = false;  // kOk only: caller should clone the frame and offer_duplicate() it
};

class Emulator {
 public:
  // max_frames bounds the frames held at once (queue + delay line); start_ns anchors `down`
  // windows and the random processes.
  Emulator(const ImpairmentSpec& spec, int64_t start_ns, uint32_t max_frames = 65536);
  ~Emulator();
  Emulator(const Emulator&) = delete;
  Emulator& operator=(const Emulator&) = delete;

  // Datapath. Advances internal state to now_ns, then admits or drops the frame.
  [[nodiscard]] OfferResult offer(const Frame& frame, int64_t now_ns) noexcept;
  // The copy requested by OfferResult::duplicate; skips loss and duplication decisions.
  [[nodiscard]] common::Status offer_duplicate(const Frame& frame, int64_t now_ns) noexcept;

  // Datapath. Calls sink(handle, frame_bytes, deliver) for every frame due by now_ns, in release
  // order. deliver == false means the frame was dropped after admission (link went down); the
  // caller frees it either way after sending. Returns the number of frames handed to the sink.
  template <typename Sink>
  uint32_t release(int64_t now_ns, Sink&& sink) noexcept;

  // Earliest time at which release() will have something to do (INT64_MAX when idle). The poll
  // loop sleeps until min(this, next frame arrival).
  [[nodiscard]] int64_t next_event_ns() const noexcept;

  // Run-time change; frames already admitted keep the timing they were given.
  [[nodiscard]] common::Result<void> update_spec(const ImpairmentSpec& spec, int64_t now_ns);
  void set_link_up(bool up, int64_t now_ns) noexcept;  // manual override of the link state

  [[nodiscard]] const ImpairmentSpec& spec() const noexcept;
  [[nodiscard]] const Counters& counters() const noexcept;
  [[nodiscard]] std::string counters_json() const;  // documented in docs/wanem.md

 private:
  struct Impl;
  // Returns the next due frame, or false. Implemented in emulator_datapath.cc.
  bool pop_due(int64_t now_ns, uint64_t* handle, uint32_t* frame_bytes, bool* deliver) noexcept;
  std::unique_ptr<Impl> impl_;
};

template <typename Sink>
uint32_t Emulator::release(int64_t now_ns, Sink&& sink) noexcept {
  uint32_t released = 0;
  uint64_t handle = 0;
  uint32_t frame_bytes = 0;
  bool deliver = false;
  while (pop_due(now_ns, &handle, &frame_bytes, &deliver)) {
    sink(handle, frame_bytes, deliver);
    ++released;
  }
  return released;
}

}  // namespace detwan::wanem

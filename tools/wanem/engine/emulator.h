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
//
// ---- Semantics (the reference for docs/wanem.md) -------------------------------------------
// Order. offer(): (1) link down at now_ns -> drop kLinkDown. (2) loss: the Bernoulli draw and
//   one Gilbert-Elliott step are made for every frame reaching this stage (each process keeps
//   its own statistics); Bernoulli loss -> kLoss, else GE loss -> kBurstLoss. (3) duplication:
//   with probability `dup` the result asks the caller to clone the frame and hand the copy to
//   offer_duplicate(), which skips (2) and (3) and gets its own delay/jitter draw. (4) queue,
//   (5) serialisation, (6) delay + jitter, (7) release. Each random process (loss, GE, dup,
//   jitter, reorder, cross traffic) has its own seeded stream, so turning one on does not
//   change the decisions of another. Same spec, seed and call sequence -> identical output.
// Queue (only when rate_bps > 0). Two classes, strict priority: reserved above best effort; the
//   best-effort FIFO is shared with cross traffic. Non-preemptive: a reserved frame waits for
//   the frame in transmission. A frame that finds the link idle and nothing waiting starts at
//   once. Drop-tail on bytes: an arriving frame is dropped (kQueueFull) if the bytes waiting in
//   both classes (the frame in transmission excluded) + its size > effective_queue_bytes().
//   Serialisation time = frame_bytes * 8e9 / rate_bps ns, kept exact to a fraction of a ns
//   (no drift over back-to-back frames); a frame's tx_end is that instant rounded up to a ns.
//   The link scheduler is lazy and event-driven: offer(), offer_duplicate(), release(),
//   update_spec() and set_link_up() first run every transmission start and every cross-traffic
//   arrival at or before now_ns, in time order (a start before an arrival at the same instant),
//   so results do not depend on how often the caller polls.
// Cross traffic (cross > 0): an on/off source; on-periods exponential with mean cross-burst
//   (whole frames), off-periods exponential, sized so that the long-run offered load is exactly
//   `cross` of the rate. During "on" it emits cross-size frames back-to-back at line rate into
//   the best-effort FIFO. Cross frames are counted in class kCross (offered, forwarded when
//   they start transmission, queue_full drops, queue depth seen) and never reach the sink.
// Delay. Delay, jitter sample and the reorder decision are drawn when a frame is admitted to
//   the queue. release = tx_end + delay + jitter (not before tx_end), then FIFO clamp:
//   release = max(release, previous release), so jitter never reorders. With probability
//   `reorder` a frame instead gets release = tx_end + delay + jitter - reorder_ahead (not
//   before tx_end) and goes into a second FIFO (clamped among themselves); release() merges
//   both lines by time (reordered frame first on a tie) and counts reordered_packets.
//   Without rate, tx_end = the offer time.
// Link down. Scripted `down` windows [start, end) relative to start_ns, plus the manual
//   override set_link_up(false) ... set_link_up(true) (which cannot lift a scripted window).
//   A frame offered while down is dropped (kLinkDown). A frame whose release time falls in a
//   down period is handed to the sink with deliver = false and counted kLinkDown. The queue
//   keeps draining and cross traffic keeps running while the link is down. The last
//   kManualDownHistory (8) manual periods are remembered for judging late releases.
// Counters, per class. offered_*: offer() calls (duplicates not included). duplicated_packets:
//   duplicates requested. forwarded_*: frames released with deliver = true (cross: started
//   transmission). dropped[reason]. So for reserved and best effort:
//   offered + duplicated (copies offered) = forwarded + dropped + held. queue_depth_bytes: the
//   waiting bytes each frame reaching the queue stage saw on arrival (0 without rate).
//   sojourn_ns: release time - offer time of each delivered frame (scheduled time, not the
//   time the caller happened to poll).
// Run-time change (update_spec). Frames offered after the change use the new spec; frames
//   already queued keep the delay/jitter/reorder drawn at admission and are serialised at the
//   rate in force when they start (the link has one rate at a time). The delay line keeps its
//   frames and its FIFO clamp (a shorter new delay does not overtake older frames). Changing
//   cross settings or rate restarts the cross source at now_ns. A different seed is ignored:
//   the random streams continue (spec() keeps reporting the seed in use).
// Capacity. At most max_frames frames are held (queue + delay lines); beyond that a frame is
//   dropped with kNoCapacity. Memory is allocated once in the constructor: about
//   80 bytes x max_frames (5 MiB for the default 65536), plus the counters' histograms.
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
  kLoss = 0,    // random loss (Bernoulli)
  kBurstLoss,   // Gilbert-Elliott loss
  kQueueFull,   // drop-tail
  kLinkDown,    // offered, or due to leave, while the link was down
  kNoCapacity,  // emulator's fixed packet capacity exhausted (sized at construction)
  kCount
};
std::string_view to_string(DropReason reason) noexcept;           // "loss", "burst_loss", ...
std::string_view to_string(TrafficClass traffic_class) noexcept;  // "reserved", ...

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
TrafficClass classify(const ImpairmentSpec& spec, const uint8_t* frame,
                      uint32_t frame_bytes) noexcept;

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
  // windows and the random processes. Setup code: throws common::Failure if validate(spec)
  // fails or max_frames == 0.
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
  [[nodiscard]] uint32_t held_frames() const noexcept;   // queued + in the delay lines
  [[nodiscard]] uint64_t queued_bytes() const noexcept;  // waiting for the link, cross included
  [[nodiscard]] bool link_forced_down() const noexcept;  // set_link_up(false) in force
  // One JSON object: {"reserved":{C},"best_effort":{C},"cross":{C},"held_frames":N,
  // "queued_bytes":N,"link_forced_down":bool} where C = {"offered_packets","offered_bytes",
  // "forwarded_packets","forwarded_bytes","duplicated_packets","reordered_packets",
  // "dropped":{"loss","burst_loss","queue_full","link_down","no_capacity"},
  // "queue_depth_bytes":H,"sojourn_ns":H} and H = LogLinearHistogram::summary_json().
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

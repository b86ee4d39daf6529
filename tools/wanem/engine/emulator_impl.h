#pragma once
// Private to the engine: the state behind Emulator, shared by emulator.cc (setup) and
// emulator_datapath.cc (per-frame work). Everything is sized in the constructor.
#include <array>
#include <cstdint>
#include <memory>

#include "tools/wanem/engine/cross_traffic.h"
#include "tools/wanem/engine/emulator.h"
#include "tools/wanem/engine/jitter.h"
#include "tools/wanem/engine/link_time.h"
#include "tools/wanem/engine/loss.h"
#include "tools/wanem/engine/random.h"
#include "tools/wanem/engine/ring.h"

namespace detwan::wanem {

// BeEntry::slot value of a run of cross-traffic frames.
inline constexpr uint32_t kCrossRun = UINT32_MAX;
// Manual link-down periods remembered to judge frames released after the link came back.
inline constexpr uint32_t kManualDownHistory = 8;

struct Emulator::Impl {
  // A frame held by the emulator (in a queue or a delay line), in a slot of a fixed pool.
  struct Slot {
    uint64_t handle;
    int64_t offer_ns;
    int64_t offset_ns;   // release = max(tx_end + offset_ns, tx_end); drawn at admission
    int64_t release_ns;  // set when the frame enters a delay line
    uint32_t frame_bytes;
    uint8_t class_index;
    bool reorder;  // leaves through the reorder line
  };
  // Best-effort FIFO entry: one real frame (slot), or `count` cross frames of `cross_bytes`.
  struct BeEntry {
    uint32_t slot;
    uint32_t count;
    uint32_t cross_bytes;
  };

  Impl(const ImpairmentSpec& spec, int64_t start_ns, uint32_t max_frames);

  // Setup (emulator.cc).
  void configure(const ImpairmentSpec& spec, int64_t now_ns, bool initial);

  // Datapath (emulator_datapath.cc).
  void advance(int64_t now_ns) noexcept;
  common::Status admit(const Frame& frame, int class_index, int64_t now_ns) noexcept;
  void dequeue_one() noexcept;
  void cross_arrivals(int64_t now_ns) noexcept;
  void start_transmission(uint32_t slot, LinkTime start) noexcept;
  void enter_delay_line(uint32_t slot, int64_t tx_end_ns) noexcept;
  [[nodiscard]] common::Status drop(int class_index, DropReason reason,
                                    uint64_t count = 1) noexcept;
  [[nodiscard]] bool link_down_at(int64_t t_ns) const noexcept;
  [[nodiscard]] bool queue_empty() const noexcept {
    return reserved_queue_.empty() && best_effort_queue_.empty();
  }
  [[nodiscard]] uint32_t held_frames() const noexcept { return max_frames_ - free_count_; }

  ImpairmentSpec spec_;
  int64_t start_ns_;
  uint32_t max_frames_;
  uint64_t queue_limit_bytes_ = 0;  // 0: no limit (rate 0)
  JitterSampler jitter_;
  GilbertElliottLoss ge_;
  CrossTrafficSource cross_;
  Rng loss_rng_;
  Rng ge_rng_;
  Rng dup_rng_;
  Rng jitter_rng_;
  Rng reorder_rng_;

  std::unique_ptr<Slot[]> slots_;
  std::unique_ptr<uint32_t[]> free_slots_;  // stack of free slot indices
  uint32_t free_count_;
  FixedRing<uint32_t> reserved_queue_;
  FixedRing<BeEntry> best_effort_queue_;  // real frames and cross runs: <= 2 max_frames + 1
  FixedRing<uint32_t> delay_line_;
  FixedRing<uint32_t> reorder_line_;

  uint64_t queued_bytes_ = 0;  // waiting in either class, cross frames included
  uint64_t reserved_queued_bytes_ = 0;   // of which in the reserved class
  uint64_t prio_queue_limit_bytes_ = 0;  // the reserved class's own limit (0: shares the queue)
  // Bytes counted against queue_limit_bytes_: everything, or best effort + cross only when the
  // reserved class has its own limit (prio-queue).
  [[nodiscard]] uint64_t shared_queued_bytes() const noexcept {
    return prio_queue_limit_bytes_ != 0 ? queued_bytes_ - reserved_queued_bytes_ : queued_bytes_;
  }
  uint32_t queued_real_ = 0;   // real frames waiting in either class
  // Lowest offset_ns among waiting real frames (since the queue last held none): lets
  // next_event_ns() bound their release time from below.
  int64_t queued_min_offset_ns_ = INT64_MAX;
  LinkTime link_free_;                   // end of the frame in transmission (or of the last one)
  int64_t last_release_ns_ = INT64_MIN;  // FIFO clamp of the delay line
  int64_t last_reorder_release_ns_ = INT64_MIN;  // FIFO clamp of the reorder line

  bool forced_down_ = false;
  std::array<DownWindow, kManualDownHistory> manual_down_{};  // absolute times
  uint32_t manual_down_total_ = 0;                            // periods ever started

  Counters counters_;
};

}  // namespace detwan::wanem

#pragma once
// How the io_uring loop reads the time and waits for its next deadline (gw::TimingMode). Both
// give CLOCK_TAI nanoseconds that never go backwards; the loop is a template over them, so the
// choice costs nothing per turn. Private to dataplane/uring.
#include <algorithm>
#include <cstdint>

#include <liburing.h>
#include <time.h>

#include "common/clock.h"
#include "dataplane/gw/engine.h"

namespace detwan::dataplane::uring {

inline int64_t read_tai_ns() noexcept {
  timespec now{};
  clock_gettime(CLOCK_TAI, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

// Low-CPU: CLOCK_TAI; submit and sleep in the ring until the deadline or the first completion.
// The thread's timer slack is lowered to 1 ns so the kernel does not round the wake-up up.
// Coalescing (gateway.rx_coalesce, like a NIC's adaptive interrupt moderation): arrivals do
// not wake the loop one by one while it is busy. The loop counts as busy while the deadline is
// at most coalesce_ns away (it has work coming anyway) or while its last wake-up, which found
// completions, was less than coalesce_ns ago (traffic is flowing); it then sleeps until the
// deadline, or until coalesce_ns after that wake-up, unless kCoalesceCompletions pile up (a
// burst is served at once). So a busy loop wakes at most once per coalesce_ns for arrivals, an
// arrival waits at most coalesce_ns, and an idle loop (its last wait ended without a completion)
// wakes for the first packet at once. Nothing due is delayed: the deadline is the engine's.
// Waiting in the ring for kCoalesceCompletions does not stop every arrival from waking the
// thread: a receive armed on readiness queues its completion work with a forced wake-up of the
// waiter (which runs it and sleeps again; measured: 2.2-2.7 context switches per loop sleep at
// 4,000 packets/s each way). So at moderate rates (the last wake-up found fewer than
// kCoalesceCompletions) a coalesced sleep is *blind*: the loop submits, sleeps outside the ring
// (clock_nanosleep) until the window ends, then runs the completion work that piled up. Only
// with deferred completion work (IORING_SETUP_DEFER_TASKRUN): otherwise an arrival interrupts
// any sleep. At high rates the ring wait serves bursts at once as before.
// A turn that carries an on-time tunnel does not coalesce (wait(..., coalesce = false)): its
// packets are stamped when the loop reads them from the TUN device, so an arrival left waiting
// would add up to coalesce_ns to the tunnel's delay variation at the far end.
class LowCpuTiming {
 public:
  static constexpr unsigned kCoalesceCompletions = 32;

  // How one wait sleeps: at most timeout_ns, until wait_nr completions.
  struct Plan {
    int64_t timeout_ns = 0;  // <= 0: do not sleep
    unsigned wait_nr = 1;
    bool blind = false;  // sleep outside the ring: no arrival wakes it before timeout_ns
  };

  // deferred: the ring runs its completion work only inside waits (IORING_SETUP_DEFER_TASKRUN),
  // so a turn that does not sleep still asks the kernel for the completions due.
  explicit LowCpuTiming(int64_t coalesce_ns = 0, bool deferred = false)
      : coalesce_ns_(coalesce_ns), deferred_(deferred) {
    common::set_min_timer_slack();
  }
  int64_t now_ns() noexcept { return read_tai_ns(); }

  // The decision of wait(), without the ring (unit-tested).
  [[nodiscard]] Plan plan(int64_t now_ns, int64_t deadline_ns, bool coalesce) const noexcept {
    Plan plan{deadline_ns - now_ns, 1};
    if (plan.timeout_ns <= 0 || !coalesce || coalesce_ns_ <= 0) return plan;
    if (plan.timeout_ns <= coalesce_ns_) {
      plan.wait_nr = kCoalesceCompletions;
    } else if (flowing_ && now_ns - last_wake_ns_ < coalesce_ns_) {
      plan.wait_nr = kCoalesceCompletions;
      plan.timeout_ns = last_wake_ns_ + coalesce_ns_ - now_ns;
    }
    plan.blind = plan.wait_nr > 1 && deferred_ && last_completions_ < kCoalesceCompletions;
    return plan;
  }
  // What the last wait found: when it ended, and how many completions were waiting.
  void woke(int64_t now_ns, unsigned completions) noexcept {
    last_wake_ns_ = now_ns;
    flowing_ = completions > 0;
    last_completions_ = completions;
  }

  // Sleeps as plan() says; counts the sleep and how it ended in io (gw::LocalIo::loop_*).
  void wait(io_uring* ring, int64_t deadline_ns, bool coalesce, gw::LocalIo& io) noexcept {
    const Plan plan = this->plan(read_tai_ns(), deadline_ns, coalesce);
    if (plan.timeout_ns <= 0) {
      if (deferred_) {
        (void)io_uring_submit_and_get_events(ring);
      } else if (io_uring_sq_ready(ring) > 0) {
        (void)io_uring_submit(ring);
      }
      return;
    }
    if (plan.blind) {
      if (io_uring_sq_ready(ring) > 0) (void)io_uring_submit(ring);
      const timespec pause{static_cast<time_t>(plan.timeout_ns / 1'000'000'000),
                           static_cast<long>(plan.timeout_ns % 1'000'000'000)};
      (void)clock_nanosleep(CLOCK_MONOTONIC, 0, &pause, nullptr);
      (void)io_uring_submit_and_get_events(ring);  // the completion work that piled up
      ++io.loop_blind_sleeps;
    } else {
      __kernel_timespec timeout{};
      timeout.tv_sec = plan.timeout_ns / 1'000'000'000;
      timeout.tv_nsec = plan.timeout_ns % 1'000'000'000;
      io_uring_cqe* cqe = nullptr;
      (void)io_uring_submit_and_wait_timeout(ring, &cqe, plan.wait_nr, &timeout, nullptr);
    }
    const unsigned completions = io_uring_cq_ready(ring);
    woke(read_tai_ns(), completions);
    ++io.loop_sleeps;
    if (plan.wait_nr > 1) ++io.loop_coalesced_sleeps;
    ++(completions > 0 ? io.loop_io_wakeups : io.loop_timer_wakeups);
  }

 private:
  int64_t coalesce_ns_;
  bool deferred_;
  int64_t last_wake_ns_ = 0;
  bool flowing_ = false;  // the last wait ended with completions to reap
  unsigned last_completions_ = 0;  // how many it found
};

// Busy: never sleeps; submits what is pending and returns. TAI from the TSC (common::TscClock,
// ~10 ns a read), re-anchored to CLOCK_TAI every kReanchorNs so the TSC's calibration error
// cannot accumulate. Without an invariant TSC it reads CLOCK_TAI instead.
class BusyTiming {
 public:
  static constexpr int64_t kReanchorNs = 10'000'000;

  explicit BusyTiming(bool use_tsc) : use_tsc_(use_tsc) {
    if (use_tsc_) reanchor();
  }
  int64_t now_ns() noexcept {
    if (!use_tsc_) return read_tai_ns();
    if (tsc_.now_ns() - anchor_tsc_ns_ >= kReanchorNs) reanchor();
    const int64_t now = anchor_tai_ns_ + (tsc_.now_ns() - anchor_tsc_ns_);
    last_ns_ = std::max(last_ns_, now);  // a re-anchoring step back is never seen
    return last_ns_;
  }
  void wait(io_uring* ring, int64_t /*deadline_ns*/, bool /*coalesce*/, gw::LocalIo& /*io*/) noexcept {
    if (io_uring_sq_ready(ring) > 0) (void)io_uring_submit(ring);
  }

 private:
  void reanchor() noexcept {
    anchor_tsc_ns_ = tsc_.now_ns();
    anchor_tai_ns_ = read_tai_ns();
  }
  bool use_tsc_;
  common::TscClock tsc_{use_tsc_ ? 20'000'000 : 0};  // calibrated only when used
  int64_t anchor_tsc_ns_ = 0;
  int64_t anchor_tai_ns_ = 0;
  int64_t last_ns_ = 0;
};

}  // namespace detwan::dataplane::uring

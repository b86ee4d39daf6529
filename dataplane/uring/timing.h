#pragma once
// How the io_uring loop reads the time and waits for its next deadline (gw::TimingMode). Both
// give CLOCK_TAI nanoseconds that never go backwards; the loop is a template over them, so the
// choice costs nothing per turn. Private to dataplane/uring.
#include <algorithm>
#include <cstdint>

#include <liburing.h>
#include <time.h>

#include "common/clock.h"

namespace detwan::dataplane::uring {

inline int64_t read_tai_ns() noexcept {
  timespec now{};
  clock_gettime(CLOCK_TAI, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

// Low-CPU: CLOCK_TAI; submit and sleep in the ring until the deadline or the first completion.
// The thread's timer slack is lowered to 1 ns so the kernel does not round the wake-up up.
// Coalescing (gateway.rx_coalesce): when the deadline is at most coalesce_ns away the loop has
// work coming anyway, so arrivals wait for it unless kCoalesceCompletions of them pile up (a
// burst is served at once): one wake-up per batch, not per packet. The deadline is the engine's
// next departure or release, so nothing due is delayed; an arrival waits at most coalesce_ns.
class LowCpuTiming {
 public:
  static constexpr unsigned kCoalesceCompletions = 32;

  explicit LowCpuTiming(int64_t coalesce_ns = 0) : coalesce_ns_(coalesce_ns) {
    common::set_min_timer_slack();
  }
  int64_t now_ns() noexcept { return read_tai_ns(); }
  void wait(io_uring* ring, int64_t deadline_ns) noexcept {
    const int64_t timeout_ns = deadline_ns - read_tai_ns();
    if (timeout_ns <= 0) {
      if (io_uring_sq_ready(ring) > 0) (void)io_uring_submit(ring);
      return;
    }
    __kernel_timespec timeout{};
    timeout.tv_sec = timeout_ns / 1'000'000'000;
    timeout.tv_nsec = timeout_ns % 1'000'000'000;
    io_uring_cqe* cqe = nullptr;
    const unsigned wait_nr = timeout_ns <= coalesce_ns_ ? kCoalesceCompletions : 1;
    (void)io_uring_submit_and_wait_timeout(ring, &cqe, wait_nr, &timeout, nullptr);
  }

 private:
  int64_t coalesce_ns_;
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
  void wait(io_uring* ring, int64_t /*deadline_ns*/) noexcept {
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

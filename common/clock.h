#pragma once
// Clocks. Every time is int64_t nanoseconds.
//
// Per-packet code takes its clock as a template parameter satisfying `ClockSource` (no virtual
// call per packet); setup code may hold a `Clock&`. Tests inject `VirtualClock` so that slot
// schedules, delays and playout are checked exactly, independent of a noisy machine.
#include <atomic>
#include <concepts>
#include <cstdint>

namespace detwan::common {

template <typename C>
concept ClockSource = requires(const C& c) {
  { c.now_ns() } -> std::same_as<int64_t>;
};

// Interface for code that is not per-packet. Implementations are thread-safe for now_ns().
class Clock {
 public:
  virtual ~Clock() = default;
  [[nodiscard]] virtual int64_t now_ns() const = 0;
};

// CLOCK_MONOTONIC: intervals and timeouts on one host.
class MonotonicClock final : public Clock {
 public:
  [[nodiscard]] int64_t now_ns() const override;
};

// CLOCK_REALTIME: wall-clock (UTC) timestamps exchanged with peers that expect them.
class RealtimeClock final : public Clock {
 public:
  [[nodiscard]] int64_t now_ns() const override;
};

// CLOCK_TAI: cycle alignment (base_time + k * cycle_ns) and cross-site timestamps; no leap
// seconds. Equals REALTIME + the kernel's TAI offset (0 unless chrony/ptp set it).
class TaiClock final : public Clock {
 public:
  [[nodiscard]] int64_t now_ns() const override;
};

// Reads the TSC (rdtsc) and converts to CLOCK_MONOTONIC nanoseconds with a calibration taken at
// construction. Cheap (~10 ns) for busy-poll loops; requires constant_tsc/nonstop_tsc, which
// `tsc_is_invariant()` checks. On non-x86 it falls back to CLOCK_MONOTONIC.
class TscClock final : public Clock {
 public:
  // Calibrates against CLOCK_MONOTONIC over `calibration_ns` (default 20 ms).
  explicit TscClock(int64_t calibration_ns = 20'000'000);
  [[nodiscard]] int64_t now_ns() const override;
  [[nodiscard]] double ticks_per_ns() const noexcept { return ticks_per_ns_; }
  [[nodiscard]] static bool tsc_is_invariant();

 private:
  uint64_t base_ticks_ = 0;
  int64_t base_ns_ = 0;
  double ticks_per_ns_ = 1.0;
};

// Simulation clock: time moves only when the test says so. now_ns() is thread-safe so a test
// may advance it from one thread while components read it from another.
class VirtualClock final : public Clock {
 public:
  explicit VirtualClock(int64_t start_ns = 0) : now_ns_(start_ns) {}
  [[nodiscard]] int64_t now_ns() const override { return now_ns_.load(std::memory_order_acquire); }
  void advance_ns(int64_t delta_ns);  // delta_ns must be >= 0
  void set_ns(int64_t t_ns);          // must not go backwards

 private:
  std::atomic<int64_t> now_ns_;
};

// Sleeps until CLOCK_MONOTONIC reaches deadline_ns (absolute, clock_nanosleep TIMER_ABSTIME).
void sleep_until_monotonic_ns(int64_t deadline_ns);

// Lowers this thread's timer slack to 1 ns (prctl PR_SET_TIMERSLACK) so timed sleeps wake
// within tens of microseconds instead of the default 50 us slack.
void set_min_timer_slack();

}  // namespace detwan::common

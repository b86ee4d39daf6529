#pragma once
// Adaptive busy polling of the udp link (backend_config "busy_poll_us=auto"): how long the
// progress thread may spin for completions before it sleeps, decided from what spinning did.
//
//  - On an idle core spinning saves the scheduler's sleep/wake-up latency on each hop: the
//    budget stays at its maximum while spins find completions, and halves (down to kMinNs)
//    while fewer than one spin in eight does (request/response traffic that pauses spins for
//    nothing).
//  - On a busy host a spinning thread takes the CPU from whoever else wants it, the thread that
//    would answer included. Two signals make the link step aside:
//    - more threads runnable than the host has CPUs (the link samples the kernel's count,
//      /proc/loadavg's "running" field, at most once per kSampleIntervalNs): no spinning at all
//      until a sample shows a free CPU again;
//    - a spin in which the thread got less than three quarters of the wall-clock time (it was
//      preempted): no spinning for the next `backoff` waits, a backoff that doubles (up to
//      kMaxBackoffWaits) each time this repeats and halves after each uncontended spin.
//
// Pure policy (no clock of its own): the link reports each spin's wall and CPU time and each
// sample of the runnable threads.
#include <algorithm>
#include <cstdint>

namespace detwan::transport::udp {

class AdaptiveBusyPoll {
 public:
  static constexpr int64_t kMinNs = 5'000;
  static constexpr uint32_t kWindowSpins = 64;
  static constexpr uint32_t kMinBackoffWaits = 16;
  static constexpr uint32_t kMaxBackoffWaits = 16'384;
  // A spin shorter than this says nothing about preemption (timer and syscall noise).
  static constexpr int64_t kMinJudgedSpinNs = 10'000;
  static constexpr int64_t kSampleIntervalNs = 1'000'000;

  explicit AdaptiveBusyPoll(int64_t max_ns) : max_ns_(max_ns), budget_ns_(max_ns) {}

  // How long to spin before the next sleep (0: do not spin this time).
  int64_t next_budget_ns() {
    if (oversubscribed_) return 0;
    if (skip_waits_ > 0) {
      --skip_waits_;
      return 0;
    }
    return budget_ns_;
  }

  // After a spin: whether it found a completion, its wall-clock time and the CPU time the
  // thread got during it.
  void on_spin(bool found, int64_t wall_ns, int64_t cpu_ns) {
    if (wall_ns >= kMinJudgedSpinNs && cpu_ns * 4 < wall_ns * 3) {
      skip_waits_ = backoff_waits_;
      backoff_waits_ = std::min(backoff_waits_ * 2, kMaxBackoffWaits);
      ++stepped_aside_;
      return;
    }
    backoff_waits_ = std::max(backoff_waits_ / 2, kMinBackoffWaits);
    ++spins_;
    if (found) ++hits_;
    if (spins_ < kWindowSpins) return;
    if (hits_ * 8 < spins_) {
      budget_ns_ = std::max(budget_ns_ / 2, std::min(kMinNs, max_ns_));
    } else if (hits_ * 2 > spins_) {
      budget_ns_ = std::min(budget_ns_ * 2, max_ns_);
    }
    spins_ = 0;
    hits_ = 0;
  }

  // A sample of the host: threads runnable now (this one included) and CPUs online.
  void on_runnable(int64_t runnable, int64_t cpus) {
    const bool over = runnable > cpus;
    if (over && !oversubscribed_) ++stepped_aside_;
    oversubscribed_ = over;
  }

  [[nodiscard]] int64_t budget_ns() const { return budget_ns_; }
  [[nodiscard]] bool oversubscribed() const { return oversubscribed_; }
  [[nodiscard]] uint64_t stepped_aside() const { return stepped_aside_; }

 private:
  int64_t max_ns_;
  int64_t budget_ns_;
  uint32_t skip_waits_ = 0;
  uint32_t backoff_waits_ = kMinBackoffWaits;
  uint32_t spins_ = 0;
  uint32_t hits_ = 0;
  uint64_t stepped_aside_ = 0;
  bool oversubscribed_ = false;
};

}  // namespace detwan::transport::udp

#include "common/clock.h"

#include <cerrno>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

#include <sys/prctl.h>
#include <time.h>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace detwan::common {
namespace {

constexpr int64_t kNsPerSec = 1'000'000'000;

int64_t read_clock_ns(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * kNsPerSec + ts.tv_nsec;
}

uint64_t read_ticks() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return static_cast<uint64_t>(read_clock_ns(CLOCK_MONOTONIC));
#endif
}

// One (ticks, monotonic ns) pair taken as close together as the machine allows: the tick read
// bracketed by two clock reads, keeping the tightest of a few tries (a vCPU may be preempted
// in between).
struct Sample {
  uint64_t ticks;
  int64_t ns;
};

Sample paired_sample() {
  Sample best{0, 0};
  int64_t best_gap = std::numeric_limits<int64_t>::max();
  for (int i = 0; i < 16; ++i) {
    const int64_t before = read_clock_ns(CLOCK_MONOTONIC);
    const uint64_t ticks = read_ticks();
    const int64_t after = read_clock_ns(CLOCK_MONOTONIC);
    if (after - before < best_gap) {
      best_gap = after - before;
      best = Sample{ticks, before + (after - before) / 2};
    }
  }
  return best;
}

}  // namespace

int64_t MonotonicClock::now_ns() const { return read_clock_ns(CLOCK_MONOTONIC); }
int64_t RealtimeClock::now_ns() const { return read_clock_ns(CLOCK_REALTIME); }
int64_t TaiClock::now_ns() const { return read_clock_ns(CLOCK_TAI); }

TscClock::TscClock(int64_t calibration_ns) {
#if defined(__x86_64__)
  const Sample start = paired_sample();
  if (calibration_ns > 0) sleep_until_monotonic_ns(start.ns + calibration_ns);
  const Sample end = paired_sample();
  base_ticks_ = start.ticks;
  base_ns_ = start.ns;
  if (end.ns > start.ns && end.ticks > start.ticks) {
    ticks_per_ns_ =
        static_cast<double>(end.ticks - start.ticks) / static_cast<double>(end.ns - start.ns);
  }
#else
  (void)calibration_ns;
  base_ticks_ = read_ticks();
  base_ns_ = static_cast<int64_t>(base_ticks_);
  ticks_per_ns_ = 1.0;
#endif
}

int64_t TscClock::now_ns() const {
  // Signed difference: a thread on another core may read a TSC a few ticks behind base.
  const auto delta = static_cast<int64_t>(read_ticks() - base_ticks_);
  return base_ns_ + static_cast<int64_t>(static_cast<double>(delta) / ticks_per_ns_);
}

bool TscClock::tsc_is_invariant() {
#if defined(__x86_64__)
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (!line.starts_with("flags")) continue;
    bool constant = false;
    bool nonstop = false;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::string word;
    while (words >> word) {
      constant = constant || word == "constant_tsc";
      nonstop = nonstop || word == "nonstop_tsc";
    }
    return constant && nonstop;  // the first CPU's flags speak for all
  }
#endif
  return false;
}

void VirtualClock::advance_ns(int64_t delta_ns) {
  if (delta_ns < 0) {
    throw std::invalid_argument("VirtualClock::advance_ns: negative delta " +
                                std::to_string(delta_ns));
  }
  int64_t current = now_ns_.load(std::memory_order_relaxed);
  int64_t next = 0;
  do {
    if (__builtin_add_overflow(current, delta_ns, &next)) {
      throw std::invalid_argument("VirtualClock::advance_ns: overflow past INT64_MAX");
    }
  } while (!now_ns_.compare_exchange_weak(current, next, std::memory_order_acq_rel,
                                          std::memory_order_relaxed));
}

void VirtualClock::set_ns(int64_t t_ns) {
  int64_t current = now_ns_.load(std::memory_order_relaxed);
  do {
    if (t_ns < current) {
      throw std::invalid_argument("VirtualClock::set_ns: " + std::to_string(t_ns) +
                                  " is before the current time " + std::to_string(current));
    }
  } while (!now_ns_.compare_exchange_weak(current, t_ns, std::memory_order_acq_rel,
                                          std::memory_order_relaxed));
}

void sleep_until_monotonic_ns(int64_t deadline_ns) {
  if (deadline_ns <= 0) return;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(deadline_ns / kNsPerSec);
  ts.tv_nsec = static_cast<long>(deadline_ns % kNsPerSec);
  // clock_nanosleep returns the error number instead of setting errno.
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

void set_min_timer_slack() { prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL); }

}  // namespace detwan::common

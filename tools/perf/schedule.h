#pragma once
// Send schedules of a test stream: absolute departure deadlines, computed without drift (the
// i-th periodic deadline is start + i * 1e9 / pps exactly, not a sum of rounded gaps).
// Sans-I/O: the caller sleeps until next deadline and sends; tests check the deadlines alone.
#include <cstdint>
#include <random>

#include "tools/perf/options.h"

namespace detwan::perf {

class SendSchedule {
 public:
  // pps >= 1. kBurst sends burst_packets (>= 1) with the same deadline, bursts spaced
  // burst_packets / pps apart. kPoisson draws exponential gaps of mean 1/pps from `seed`.
  SendSchedule(ScheduleKind kind, uint64_t pps, uint32_t burst_packets, uint64_t seed,
               int64_t start_ns) noexcept;

  // Deadline of the next packet (non-decreasing). Never allocates.
  [[nodiscard]] int64_t next_ns() noexcept;
  [[nodiscard]] uint64_t issued() const noexcept { return issued_; }

 private:
  // Lets a test jump to packet 10^9 to check there is no drift without issuing them all.
  friend struct SendScheduleTestPeer;

  ScheduleKind kind_;
  uint64_t pps_;
  uint32_t burst_packets_;
  int64_t start_ns_;
  uint64_t issued_ = 0;
  double poisson_ns_ = 0;  // running Poisson deadline, relative to start
  std::mt19937_64 rng_;
};

}  // namespace detwan::perf

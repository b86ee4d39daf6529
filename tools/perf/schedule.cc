#include "tools/perf/schedule.h"

#include <cmath>

namespace detwan::perf {
namespace {

__extension__ typedef __int128 i128;  // -Wpedantic rejects the plain spelling

constexpr int64_t kNsPerSecond = 1'000'000'000;

// i * 1e9 / pps without overflow or accumulated rounding: the product needs up to 94 bits.
int64_t offset_of(uint64_t i, uint64_t pps) noexcept {
  return static_cast<int64_t>(static_cast<i128>(i) * kNsPerSecond / static_cast<i128>(pps));
}

}  // namespace

SendSchedule::SendSchedule(ScheduleKind kind, uint64_t pps, uint32_t burst_packets,
                           uint64_t seed, int64_t start_ns) noexcept
    : kind_(kind),
      pps_(pps == 0 ? 1 : pps),  // the contract says pps >= 1; never divide by zero anyway
      burst_packets_(burst_packets == 0 ? 1 : burst_packets),
      start_ns_(start_ns),
      rng_(seed) {}

int64_t SendSchedule::next_ns() noexcept {
  const uint64_t i = issued_++;
  switch (kind_) {
    case ScheduleKind::kPeriodic:
      return start_ns_ + offset_of(i, pps_);
    case ScheduleKind::kBurst: {
      const uint64_t burst = i / burst_packets_;
      return start_ns_ + offset_of(burst * burst_packets_, pps_);
    }
    case ScheduleKind::kPoisson: {
      // The first packet leaves at the start (as with the other kinds); each later one after an
      // exponential gap. -log(1 - U) by hand rather than std::exponential_distribution, whose
      // algorithm is left to the standard library: a seed must give the same schedule on both
      // hosts whatever they were built with. U has 53 random bits in [0, 1), so 1 - U > 0.
      if (i > 0) {
        const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
        const double mean_gap_ns = static_cast<double>(kNsPerSecond) / static_cast<double>(pps_);
        poisson_ns_ += -std::log1p(-u) * mean_gap_ns;
      }
      // Truncation is monotonic, so deadlines never decrease.
      return start_ns_ + static_cast<int64_t>(poisson_ns_);
    }
  }
  return start_ns_ + offset_of(i, pps_);
}

}  // namespace detwan::perf

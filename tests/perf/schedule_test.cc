#include "tools/perf/schedule.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

namespace detwan::perf {

struct SendScheduleTestPeer {
  static void skip(SendSchedule& s, uint64_t packets) { s.issued_ += packets; }
};

namespace {

constexpr int64_t kStartNs = 1'700'000'000'000'000'000;  // a realistic absolute start

std::vector<int64_t> take(SendSchedule& s, size_t n) {
  std::vector<int64_t> out(n);
  for (auto& d : out) d = s.next_ns();
  return out;
}

TEST(SendSchedule, PeriodicDeadlinesAreExact) {
  SendSchedule s(ScheduleKind::kPeriodic, 1000, 10, 1, kStartNs);
  const auto d = take(s, 5);
  EXPECT_EQ(d, (std::vector<int64_t>{kStartNs, kStartNs + 1'000'000, kStartNs + 2'000'000,
                                     kStartNs + 3'000'000, kStartNs + 4'000'000}));
  EXPECT_EQ(s.issued(), 5u);
}

TEST(SendSchedule, PeriodicNonIntegerGapDoesNotDrift) {
  // 1e9 / 3 is 333333333.33 ns: summing a rounded gap would be 1/3 ns off per packet, i.e.
  // 0.33 s after 10^9 packets. Deadline i is floor(i * 1e9 / 3).
  SendSchedule s(ScheduleKind::kPeriodic, 3, 1, 1, 0);
  const auto d = take(s, 4);
  EXPECT_EQ(d, (std::vector<int64_t>{0, 333'333'333, 666'666'666, 1'000'000'000}));

  SendSchedule far(ScheduleKind::kPeriodic, 3, 1, 1, 5);
  SendScheduleTestPeer::skip(far, 1'000'000'000);
  EXPECT_EQ(far.next_ns(), 5 + 333'333'333'333'333'333);  // 10^18 / 3
  EXPECT_EQ(far.next_ns(), 5 + 333'333'333'666'666'666);  // (10^18 + 10^9) / 3
  EXPECT_EQ(far.next_ns(), 5 + 333'333'334'000'000'000);  // (10^18 + 2*10^9) / 3
}

TEST(SendSchedule, PeriodicHighRateLargeIndexDoesNotOverflow) {
  // i * 1e9 exceeds 2^63 from i = 9.3e9 on: the product must not overflow.
  SendSchedule s(ScheduleKind::kPeriodic, 10'000'000, 1, 1, 0);
  SendScheduleTestPeer::skip(s, 20'000'000'000);  // 2000 s at 10 Mpps
  EXPECT_EQ(s.next_ns(), 2'000'000'000'000);
  EXPECT_EQ(s.next_ns(), 2'000'000'000'100);
}

TEST(SendSchedule, BurstSharesOneDeadlinePerBurst) {
  // 1000 pps in bursts of 4: a burst every 4 ms.
  SendSchedule s(ScheduleKind::kBurst, 1000, 4, 1, kStartNs);
  const auto d = take(s, 10);
  const std::vector<int64_t> expected{kStartNs,           kStartNs,           kStartNs,
                                      kStartNs,           kStartNs + 4000000, kStartNs + 4000000,
                                      kStartNs + 4000000, kStartNs + 4000000, kStartNs + 8000000,
                                      kStartNs + 8000000};
  EXPECT_EQ(d, expected);
}

TEST(SendSchedule, BurstWithNonIntegerSpacingDoesNotDrift) {
  // pps 3, bursts of 2: burst k at k * 2e9 / 3.
  SendSchedule s(ScheduleKind::kBurst, 3, 2, 1, 0);
  const auto d = take(s, 8);
  EXPECT_EQ(d, (std::vector<int64_t>{0, 0, 666'666'666, 666'666'666, 1'333'333'333, 1'333'333'333,
                                     2'000'000'000, 2'000'000'000}));
}

TEST(SendSchedule, PoissonIsDeterministicPerSeed) {
  SendSchedule a(ScheduleKind::kPoisson, 1000, 1, 42, kStartNs);
  SendSchedule b(ScheduleKind::kPoisson, 1000, 1, 42, kStartNs);
  SendSchedule c(ScheduleKind::kPoisson, 1000, 1, 43, kStartNs);
  const auto da = take(a, 1000);
  const auto db = take(b, 1000);
  const auto dc = take(c, 1000);
  EXPECT_EQ(da, db);
  EXPECT_NE(da, dc);
  EXPECT_EQ(da.front(), kStartNs);
  for (size_t i = 1; i < da.size(); ++i) ASSERT_GE(da[i], da[i - 1]) << "at " << i;
}

TEST(SendSchedule, PoissonRateAndExponentialGaps) {
  constexpr size_t kGaps = 200'000;
  constexpr double kMeanGapNs = 1e6;  // 1000 pps
  SendSchedule s(ScheduleKind::kPoisson, 1000, 1, 7, 0);
  const auto d = take(s, kGaps + 1);
  double sum = 0, sum_sq = 0;
  for (size_t i = 1; i < d.size(); ++i) {
    const auto gap = static_cast<double>(d[i] - d[i - 1]);
    ASSERT_GE(gap, 0) << "at " << i;
    sum += gap;
    sum_sq += gap * gap;
  }
  const double mean = sum / kGaps;
  const double stddev = std::sqrt(sum_sq / kGaps - mean * mean);
  // Standard error of the mean is 1/sqrt(200000) = 0.22 %: 1 % is ~4.5 sigma.
  EXPECT_NEAR(mean, kMeanGapNs, 0.01 * kMeanGapNs);
  // An exponential distribution has a coefficient of variation of exactly 1.
  EXPECT_GT(stddev / mean, 0.95);
  EXPECT_LT(stddev / mean, 1.05);
}

TEST(SendSchedule, DeadlinesNeverDecrease) {
  for (auto kind : {ScheduleKind::kPeriodic, ScheduleKind::kBurst, ScheduleKind::kPoisson}) {
    SendSchedule s(kind, 7, 3, 9, -5);
    int64_t last = INT64_MIN;
    for (int i = 0; i < 10'000; ++i) {
      const int64_t d = s.next_ns();
      ASSERT_GE(d, last) << "kind " << static_cast<int>(kind) << " at " << i;
      last = d;
    }
  }
}

}  // namespace
}  // namespace detwan::perf

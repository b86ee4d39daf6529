#include "tools/perf/clock_sync.h"

#include <cstdint>
#include <cstdlib>
#include <random>

#include <gtest/gtest.h>

namespace detwan::perf {
namespace {

// One exchange over a path with the given one-way delays; `offset_ns` is remote - local.
struct Exchange {
  int64_t t1, t2, t3, t4;
};
Exchange exchange(int64_t t1_ns, int64_t offset_ns, int64_t forward_ns, int64_t hold_ns,
                  int64_t back_ns) {
  const int64_t t2 = t1_ns + forward_ns + offset_ns;  // remote clock
  const int64_t t3 = t2 + hold_ns;
  const int64_t t4 = t3 - offset_ns + back_ns;        // local clock
  return {t1_ns, t2, t3, t4};
}

bool add(ClockSync& c, const Exchange& e) { return c.add(e.t1, e.t2, e.t3, e.t4); }

TEST(ClockSync, EmptyHasNoCorrection) {
  ClockSync c;
  EXPECT_FALSE(c.valid());
  EXPECT_EQ(c.samples(), 0u);
  EXPECT_EQ(c.correction_ns(ClockMode::kAuto), 0);
  EXPECT_EQ(c.correction_ns(ClockMode::kEstimate), 0);
  EXPECT_EQ(c.correction_ns(ClockMode::kSync), 0);
  EXPECT_EQ(c.rtt().count(), 0u);
}

TEST(ClockSync, SymmetricPathGivesTheExactOffset) {
  ClockSync c;
  ASSERT_TRUE(add(c, exchange(1'000'000'000, 1'234'000, 500'000, 20'000, 500'000)));
  EXPECT_TRUE(c.valid());
  EXPECT_EQ(c.offset_ns(), 1'234'000);
  EXPECT_EQ(c.error_ns(), 500'000);  // rtt 1 ms (the 20 us hold is excluded)
  EXPECT_EQ(c.rtt().min(), 1'000'000);
}

TEST(ClockSync, AsymmetricRandomPathsStayWithinTheErrorBound) {
  for (const int64_t true_offset_ns : {1'234'000L, -987'654'321L, 0L}) {
    std::mt19937_64 rng(static_cast<uint64_t>(true_offset_ns) + 11);
    std::uniform_int_distribution<int64_t> delay_ns(10'000, 5'000'000);
    std::uniform_int_distribution<int64_t> hold_ns(0, 100'000);
    ClockSync c;
    int64_t t1 = 5'000'000'000;
    int64_t previous_error_ns = INT64_MAX / 2;  // no sample yet
    for (int i = 0; i < 500; ++i) {
      const int64_t forward = delay_ns(rng);
      const int64_t back = delay_ns(rng);
      ASSERT_TRUE(add(c, exchange(t1, true_offset_ns, forward, hold_ns(rng), back)));
      t1 += 10'000'000;
      // The true offset lies within offset +- rtt/2 whatever the asymmetry.
      ASSERT_LE(std::llabs(c.offset_ns() - true_offset_ns), c.error_ns()) << "sample " << i;
      ASSERT_LE(c.error_ns(), previous_error_ns) << "the bound never widens";
      if (forward + back < 2 * previous_error_ns) {
        EXPECT_EQ(c.error_ns(), (forward + back) / 2) << "a faster sample tightens the bound";
      }
      previous_error_ns = c.error_ns();
    }
    EXPECT_EQ(c.samples(), 500u);
    EXPECT_EQ(c.rtt().count(), 500u);
    EXPECT_LT(c.error_ns(), 500'000);  // 500 draws: some round trip under 1 ms
  }
}

TEST(ClockSync, MinimumRttSampleWinsAndTiesTakeTheLatest) {
  ClockSync c;
  // rtt 2 ms, fully asymmetric (all on the way out): estimate off by +1 ms.
  ASSERT_TRUE(add(c, exchange(0, 1'000'000, 2'000'000, 0, 0)));
  EXPECT_EQ(c.offset_ns(), 2'000'000);
  EXPECT_EQ(c.error_ns(), 1'000'000);
  // rtt 1 ms: better.
  ASSERT_TRUE(add(c, exchange(10'000'000, 1'000'000, 0, 0, 1'000'000)));
  EXPECT_EQ(c.offset_ns(), 500'000);
  EXPECT_EQ(c.error_ns(), 500'000);
  // rtt 3 ms: ignored for the estimate, still recorded.
  ASSERT_TRUE(add(c, exchange(20'000'000, 1'000'000, 3'000'000, 0, 0)));
  EXPECT_EQ(c.offset_ns(), 500'000);
  EXPECT_EQ(c.rtt().max(), 3'000'000);
  // rtt 1 ms again, symmetric: a tie, the latest wins.
  ASSERT_TRUE(add(c, exchange(30'000'000, 1'000'000, 500'000, 0, 500'000)));
  EXPECT_EQ(c.offset_ns(), 1'000'000);
  EXPECT_EQ(c.error_ns(), 500'000);
  EXPECT_EQ(c.samples(), 4u);
}

TEST(ClockSync, NegativeRttIsRejected) {
  ClockSync c;
  // The remote claims it held the packet 2 ms while the local round trip took 1 ms.
  EXPECT_FALSE(c.add(0, 100, 2'000'100, 1'000'000));
  EXPECT_FALSE(c.valid());
  EXPECT_EQ(c.samples(), 0u);
  EXPECT_EQ(c.rtt().count(), 0u);
  // Timestamps far apart (garbage from the wire) must not overflow either.
  EXPECT_FALSE(c.add(INT64_MAX, INT64_MIN, INT64_MAX, INT64_MIN));
  EXPECT_EQ(c.samples(), 0u);
  // A zero rtt is possible (same host, coarse clock) and accepted.
  EXPECT_TRUE(c.add(10, 15, 15, 10));
  EXPECT_EQ(c.offset_ns(), 5);
  EXPECT_EQ(c.error_ns(), 0);
}

TEST(ClockSync, CorrectionPerMode) {
  ClockSync large;  // offset 1.234 ms, error 0.1 ms
  ASSERT_TRUE(add(large, exchange(0, 1'234'000, 100'000, 5'000, 100'000)));
  EXPECT_EQ(large.correction_ns(ClockMode::kSync), 0);
  EXPECT_EQ(large.correction_ns(ClockMode::kEstimate), 1'234'000);
  EXPECT_EQ(large.correction_ns(ClockMode::kAuto), 1'234'000);

  ClockSync negative;  // offset -1.234 ms: |offset| counts in auto mode
  ASSERT_TRUE(add(negative, exchange(0, -1'234'000, 100'000, 5'000, 100'000)));
  EXPECT_EQ(negative.correction_ns(ClockMode::kAuto), -1'234'000);

  ClockSync small;  // offset 30 us within an error of 100 us: treated as synchronised
  ASSERT_TRUE(add(small, exchange(0, 30'000, 100'000, 5'000, 100'000)));
  EXPECT_EQ(small.offset_ns(), 30'000);
  EXPECT_EQ(small.correction_ns(ClockMode::kSync), 0);
  EXPECT_EQ(small.correction_ns(ClockMode::kEstimate), 30'000);
  EXPECT_EQ(small.correction_ns(ClockMode::kAuto), 0);

  ClockSync edge;  // |offset| == error: not larger, so no correction
  ASSERT_TRUE(add(edge, exchange(0, 100'000, 100'000, 0, 100'000)));
  EXPECT_EQ(edge.error_ns(), 100'000);
  EXPECT_EQ(edge.correction_ns(ClockMode::kAuto), 0);
}

}  // namespace
}  // namespace detwan::perf

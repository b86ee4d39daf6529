// LowCpuTiming's wait decision (dataplane/uring/timing.h): how long the io_uring loop sleeps and
// for how many completions, with arrival coalescing (gateway.rx_coalesce) on and off. Pure: no
// ring, no clock (plan() takes the instants).
#include <cstdint>

#include <gtest/gtest.h>

#include "dataplane/uring/timing.h"

namespace detwan::dataplane::uring {
namespace {

constexpr int64_t kUs = 1'000;
constexpr int64_t kNow = 1'000'000'000;

TEST(LowCpuTimingPlan, WithoutCoalescingEveryArrivalWakesAndTheDeadlineBounds) {
  LowCpuTiming timing(0);
  const auto plan = timing.plan(kNow, kNow + 300 * kUs, true);
  EXPECT_EQ(plan.timeout_ns, 300 * kUs);
  EXPECT_EQ(plan.wait_nr, 1U);
  EXPECT_LE(timing.plan(kNow, kNow - 1, true).timeout_ns, 0);  // due: no sleep
}

TEST(LowCpuTimingPlan, ANearDeadlineLetsArrivalsWaitForIt) {
  LowCpuTiming timing(500 * kUs);
  const auto plan = timing.plan(kNow, kNow + 200 * kUs, true);
  EXPECT_EQ(plan.timeout_ns, 200 * kUs);
  EXPECT_EQ(plan.wait_nr, LowCpuTiming::kCoalesceCompletions);
}

TEST(LowCpuTimingPlan, FlowingTrafficWakesOncePerWindowAndAnIdleLoopAtOnce) {
  LowCpuTiming timing(500 * kUs);
  timing.woke(kNow - 100 * kUs, 3);  // the last wake-up found completions 100 us ago
  auto plan = timing.plan(kNow, kNow + 10 * 1000 * kUs, true);
  EXPECT_EQ(plan.timeout_ns, 400 * kUs);  // the rest of the window after that wake-up
  EXPECT_EQ(plan.wait_nr, LowCpuTiming::kCoalesceCompletions);

  timing.woke(kNow - 100 * kUs, 0);  // it found nothing: idle, the first packet wakes it
  plan = timing.plan(kNow, kNow + 10 * 1000 * kUs, true);
  EXPECT_EQ(plan.timeout_ns, 10 * 1000 * kUs);
  EXPECT_EQ(plan.wait_nr, 1U);

  timing.woke(kNow - 600 * kUs, 3);  // the window has passed
  plan = timing.plan(kNow, kNow + 10 * 1000 * kUs, true);
  EXPECT_EQ(plan.wait_nr, 1U);
}

TEST(LowCpuTimingPlan, AnOnTimeTunnelTurnsCoalescingOff) {
  LowCpuTiming timing(500 * kUs);
  timing.woke(kNow - 100 * kUs, 3);
  for (int64_t deadline : {kNow + 200 * kUs, kNow + 10 * 1000 * kUs}) {
    const auto plan = timing.plan(kNow, deadline, false);  // coalesce = false
    EXPECT_EQ(plan.timeout_ns, deadline - kNow);
    EXPECT_EQ(plan.wait_nr, 1U);
  }
}

// With deferred completion work a coalesced sleep at a moderate rate is taken outside the ring,
// where no arrival wakes it; after a wake-up that found a burst the ring wait serves the next
// burst at once; without deferred work (an arrival would interrupt any sleep) it never is.
TEST(LowCpuTimingPlan, ModerateRatesSleepBlindBurstsAndUndeferredRingsDoNot) {
  LowCpuTiming deferred(500 * kUs, true);
  deferred.woke(kNow - 100 * kUs, LowCpuTiming::kCoalesceCompletions - 1);
  auto plan = deferred.plan(kNow, kNow + 10 * 1000 * kUs, true);
  EXPECT_TRUE(plan.blind);
  EXPECT_EQ(plan.timeout_ns, 400 * kUs);
  EXPECT_TRUE(deferred.plan(kNow, kNow + 200 * kUs, true).blind);  // a near deadline, too

  deferred.woke(kNow - 100 * kUs, LowCpuTiming::kCoalesceCompletions);  // a burst
  plan = deferred.plan(kNow, kNow + 10 * 1000 * kUs, true);
  EXPECT_FALSE(plan.blind);
  EXPECT_EQ(plan.wait_nr, LowCpuTiming::kCoalesceCompletions);

  deferred.woke(kNow - 100 * kUs, 0);  // idle: the first arrival wakes it, so never blind
  EXPECT_FALSE(deferred.plan(kNow, kNow + 10 * 1000 * kUs, true).blind);
  deferred.woke(kNow - 100 * kUs, 3);
  EXPECT_FALSE(deferred.plan(kNow, kNow + 10 * 1000 * kUs, false).blind);  // on-time tunnel

  LowCpuTiming undeferred(500 * kUs, false);
  undeferred.woke(kNow - 100 * kUs, 3);
  EXPECT_FALSE(undeferred.plan(kNow, kNow + 10 * 1000 * kUs, true).blind);
}

}  // namespace
}  // namespace detwan::dataplane::uring

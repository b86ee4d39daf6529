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
  timing.woke(kNow - 100 * kUs, true);  // the last wake-up found completions 100 us ago
  auto plan = timing.plan(kNow, kNow + 10 * 1000 * kUs, true);
  EXPECT_EQ(plan.timeout_ns, 400 * kUs);  // the rest of the window after that wake-up
  EXPECT_EQ(plan.wait_nr, LowCpuTiming::kCoalesceCompletions);

  timing.woke(kNow - 100 * kUs, false);  // it found nothing: idle, the first packet wakes it
  plan = timing.plan(kNow, kNow + 10 * 1000 * kUs, true);
  EXPECT_EQ(plan.timeout_ns, 10 * 1000 * kUs);
  EXPECT_EQ(plan.wait_nr, 1U);

  timing.woke(kNow - 600 * kUs, true);  // the window has passed
  plan = timing.plan(kNow, kNow + 10 * 1000 * kUs, true);
  EXPECT_EQ(plan.wait_nr, 1U);
}

TEST(LowCpuTimingPlan, AnOnTimeTunnelTurnsCoalescingOff) {
  LowCpuTiming timing(500 * kUs);
  timing.woke(kNow - 100 * kUs, true);
  for (int64_t deadline : {kNow + 200 * kUs, kNow + 10 * 1000 * kUs}) {
    const auto plan = timing.plan(kNow, deadline, false);  // coalesce = false
    EXPECT_EQ(plan.timeout_ns, deadline - kNow);
    EXPECT_EQ(plan.wait_nr, 1U);
  }
}

}  // namespace
}  // namespace detwan::dataplane::uring

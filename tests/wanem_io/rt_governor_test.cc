// The poll thread's scheduling class under load (tools/wanem/rt_governor.h), with a scripted CPU
// clock: it leaves SCHED_FIFO when the thread's share nears the kernel's real-time budget, comes
// back when the share falls, does nothing without a budget or a priority, and counts each move.
#include "tools/wanem/rt_governor.h"

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

namespace detwan::wanem {
namespace {

constexpr int64_t kMs = 1'000'000;

struct Script {
  int64_t cpu_ns = 0;
  std::vector<bool> calls;  // what set_realtime was asked
  int refuse = 0;           // error returned by set_realtime (0: accepted)

  RtGovernor governor(RtGovernor::Config config) {
    return RtGovernor(
        config, [this] { return cpu_ns; },
        [this](bool realtime) {
          calls.push_back(realtime);
          return refuse;
        });
  }
};

// Runs `windows` windows of 50 ms in which the thread uses `share` of the time.
void run(RtGovernor& g, Script& s, int64_t& now_ns, double share, int windows) {
  for (int w = 0; w < windows; ++w) {
    for (int step = 0; step < 10; ++step) {
      now_ns += 5 * kMs;
      s.cpu_ns += static_cast<int64_t>(share * 5 * kMs);
      g.tick(now_ns);
    }
  }
}

TEST(RtGovernor, LeavesTheRealTimeClassWhileBusyAndReturnsWhenIdle) {
  Script s;
  RtGovernor g = s.governor({});
  int64_t now = 1'000 * kMs;
  ASSERT_EQ(g.start(now), 0);
  EXPECT_TRUE(g.realtime());
  run(g, s, now, 0.30, 4);  // a sleeping emulator: stays real-time
  EXPECT_TRUE(g.realtime());
  EXPECT_EQ(g.demotions(), 0u);
  run(g, s, now, 0.99, 1);  // forwarding at line rate: leaves within a window
  EXPECT_FALSE(g.realtime());
  EXPECT_EQ(g.demotions(), 1u);
  run(g, s, now, 0.70, 4);  // between the thresholds: stays where it is
  EXPECT_FALSE(g.realtime());
  run(g, s, now, 0.20, 1);  // idle again: back to SCHED_FIFO
  EXPECT_TRUE(g.realtime());
  EXPECT_EQ(g.promotions(), 1u);
  EXPECT_EQ(s.calls, (std::vector<bool>{true, false, true}));
}

TEST(RtGovernor, NothingToDoWithoutABudgetOrAPriority) {
  Script unlimited;
  RtGovernor::Config config;
  config.budget_share = 1.0;  // sched_rt_runtime_us -1: the kernel never stops the thread
  RtGovernor g = unlimited.governor(config);
  int64_t now = 0;
  ASSERT_EQ(g.start(now), 0);
  run(g, unlimited, now, 1.0, 4);
  EXPECT_TRUE(g.realtime());
  EXPECT_EQ(unlimited.calls, (std::vector<bool>{true}));

  Script off;
  config = {};
  config.priority = 0;  // --rt-priority 0
  RtGovernor h = off.governor(config);
  EXPECT_EQ(h.start(now), 0);
  run(h, off, now, 1.0, 4);
  EXPECT_FALSE(h.realtime());
  EXPECT_TRUE(off.calls.empty());
}

TEST(RtGovernor, ARefusedClassIsReportedAndNotGoverned) {
  Script s;
  s.refuse = 1;  // EPERM
  RtGovernor g = s.governor({});
  int64_t now = 0;
  EXPECT_EQ(g.start(now), 1);
  EXPECT_FALSE(g.realtime());
  run(g, s, now, 0.1, 4);
  EXPECT_EQ(s.calls.size(), 1u);  // never asked again
  EXPECT_EQ(g.promotions(), 0u);
}

TEST(RtGovernor, TheSystemBudgetIsRead) {
  const double share = RtGovernor::system_budget_share();
  EXPECT_GT(share, 0.0);
  EXPECT_LE(share, 1.0);
}

}  // namespace
}  // namespace detwan::wanem

// The udp link's adaptive busy-poll policy (transport/udp/busy_poll.h), fed spins by hand: it
// keeps spinning while spins find completions on an uncontended core, shrinks a spin that rarely
// finds anything, steps aside, for longer each time, when spins are preempted, and does not spin
// while more threads are runnable than there are CPUs.
#include <gtest/gtest.h>

#include "transport/udp/busy_poll.h"

namespace detwan::transport::udp {
namespace {

constexpr int64_t kMax = 50'000;

// `count` spins of the whole budget (or less, when found) with the CPU time the thread got.
void spins(AdaptiveBusyPoll& poll, int count, bool found, double cpu_share) {
  for (int i = 0; i < count; ++i) {
    const int64_t budget = poll.next_budget_ns();
    if (budget == 0) continue;  // stepped aside: no spin this wait
    const int64_t wall = found ? budget / 2 : budget;
    poll.on_spin(found, wall, static_cast<int64_t>(static_cast<double>(wall) * cpu_share));
  }
}

TEST(AdaptiveBusyPoll, KeepsSpinningWhileSpinsFindCompletionsOnAnIdleCore) {
  AdaptiveBusyPoll poll(kMax);
  spins(poll, 1000, true, 1.0);
  EXPECT_EQ(poll.budget_ns(), kMax);
  EXPECT_EQ(poll.next_budget_ns(), kMax);
  EXPECT_EQ(poll.stepped_aside(), 0u);
}

TEST(AdaptiveBusyPoll, ShrinksASpinThatRarelyFindsAnythingAndGrowsBack) {
  AdaptiveBusyPoll poll(kMax);
  spins(poll, 64, false, 1.0);
  EXPECT_EQ(poll.budget_ns(), kMax / 2);
  spins(poll, 64 * 10, false, 1.0);
  EXPECT_EQ(poll.budget_ns(), AdaptiveBusyPoll::kMinNs);  // never below the floor
  spins(poll, 64 * 2, true, 1.0);  // traffic again: every spin finds its completion
  EXPECT_EQ(poll.budget_ns(), AdaptiveBusyPoll::kMinNs * 4);
  spins(poll, 64 * 10, true, 1.0);
  EXPECT_EQ(poll.budget_ns(), kMax);  // never above the maximum
}

TEST(AdaptiveBusyPoll, StepsAsideOnAContendedCoreForLongerEachTime) {
  AdaptiveBusyPoll poll(kMax);
  // A preempted spin: the thread got 40 % of the wall-clock time.
  EXPECT_EQ(poll.next_budget_ns(), kMax);
  poll.on_spin(false, kMax, kMax * 4 / 10);
  EXPECT_EQ(poll.stepped_aside(), 1u);
  int skipped = 0;
  while (poll.next_budget_ns() == 0) ++skipped;
  EXPECT_EQ(skipped, static_cast<int>(AdaptiveBusyPoll::kMinBackoffWaits));
  // Preempted again right away: twice as long.
  poll.on_spin(false, kMax, kMax / 10);
  skipped = 0;
  while (poll.next_budget_ns() == 0) ++skipped;
  EXPECT_EQ(skipped, static_cast<int>(AdaptiveBusyPoll::kMinBackoffWaits * 2));
  // Uncontended spins bring the backoff back down; short spins are never judged.
  spins(poll, 8, true, 1.0);
  poll.on_spin(false, AdaptiveBusyPoll::kMinJudgedSpinNs - 1, 0);
  EXPECT_EQ(poll.stepped_aside(), 2u);
  poll.on_spin(false, kMax, kMax / 10);
  skipped = 0;
  while (poll.next_budget_ns() == 0) ++skipped;
  EXPECT_EQ(skipped, static_cast<int>(AdaptiveBusyPoll::kMinBackoffWaits));
  // A core that stays contended: the pause grows to its cap, never beyond.
  for (int i = 0; i < 20; ++i) {
    while (poll.next_budget_ns() == 0) {
    }
    poll.on_spin(false, kMax, 0);
  }
  skipped = 0;
  while (poll.next_budget_ns() == 0) ++skipped;
  EXPECT_EQ(skipped, static_cast<int>(AdaptiveBusyPoll::kMaxBackoffWaits));
}

TEST(AdaptiveBusyPoll, NoSpinWhileMoreThreadsAreRunnableThanThereAreCpus) {
  AdaptiveBusyPoll poll(kMax);
  poll.on_runnable(2, 2);  // this thread and its peer on two CPUs: spinning is fine
  EXPECT_EQ(poll.next_budget_ns(), kMax);
  poll.on_runnable(5, 2);
  EXPECT_TRUE(poll.oversubscribed());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(poll.next_budget_ns(), 0);
  EXPECT_EQ(poll.stepped_aside(), 1u);  // counted once per oversubscribed stretch
  poll.on_runnable(6, 2);
  EXPECT_EQ(poll.stepped_aside(), 1u);
  poll.on_runnable(1, 2);
  EXPECT_EQ(poll.next_budget_ns(), kMax);
}

}  // namespace
}  // namespace detwan::transport::udp

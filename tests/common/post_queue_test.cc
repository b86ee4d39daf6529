// common::PostQueue: posting order, one wake-up per batch and none for the owner's own posts,
// refusal after close (the job left to the caller), and the blocking owner of an executor.
// Also run under ThreadSanitizer (tools/run-tests' tsan_tests).
#include "common/post_queue.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace detwan::common {
namespace {

TEST(PostQueue, KeepsEachPostersOrderAndWakesOncePerBatchFromOtherThreads) {
  std::atomic<int> wakes{0};
  PostQueue<std::pair<int, int>> queue([&] { wakes.fetch_add(1); });
  constexpr int kPosters = 4;
  constexpr int kEach = 2000;
  std::atomic<bool> done{false};
  std::vector<int> next(kPosters, 0);
  int taken = 0;
  std::thread owner([&] {
    queue.set_owner(std::this_thread::get_id());
    std::vector<std::pair<int, int>> batch;
    while (taken < kPosters * kEach) {
      queue.drain_st(batch);
      for (const auto& [poster, sequence] : batch) {
        EXPECT_EQ(sequence, next[poster]) << "poster " << poster;  // posting order
        next[poster] = sequence + 1;
        ++taken;
      }
      batch.clear();
      if (!queue.pending()) std::this_thread::yield();
    }
    done = true;
  });
  std::vector<std::thread> posters;
  for (int p = 0; p < kPosters; ++p) {
    posters.emplace_back([&, p] {
      for (int i = 0; i < kEach; ++i) ASSERT_TRUE(queue.post(std::pair{p, i}));
    });
  }
  for (auto& t : posters) t.join();
  owner.join();
  EXPECT_TRUE(done);
  EXPECT_EQ(taken, kPosters * kEach);
  // A wake-up only when the queue went from empty to not empty: at least one, at most one per
  // job.
  EXPECT_GE(wakes.load(), 1);
  EXPECT_LE(wakes.load(), kPosters * kEach);
  EXPECT_FALSE(queue.pending());
}

TEST(PostQueue, TheOwnersOwnPostsWakeNobody) {
  int wakes = 0;
  PostQueue<int> queue([&] { ++wakes; });
  queue.set_owner(std::this_thread::get_id());
  ASSERT_TRUE(queue.post(1));
  ASSERT_TRUE(queue.post(2));
  EXPECT_EQ(wakes, 0);
  EXPECT_TRUE(queue.pending());
  std::thread other([&] { ASSERT_TRUE(queue.post(3)); });  // not empty: already to be drained
  other.join();
  EXPECT_EQ(wakes, 0);
  std::vector<int> got;
  queue.drain_st(got);
  EXPECT_EQ(got, (std::vector<int>{1, 2, 3}));
  std::thread again([&] { ASSERT_TRUE(queue.post(4)); });  // empty again: wakes the owner
  again.join();
  EXPECT_EQ(wakes, 1);
}

TEST(PostQueue, AfterCloseAPostIsRefusedAndTheJobStaysWithTheCaller) {
  PostQueue<std::unique_ptr<int>> queue;
  queue.set_owner(std::this_thread::get_id());
  auto first = std::make_unique<int>(1);
  ASSERT_TRUE(queue.post(first));
  EXPECT_EQ(first, nullptr);  // moved into the queue
  std::vector<std::unique_ptr<int>> left;
  queue.close(left);  // what was queued goes back to the caller to complete
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(*left[0], 1);
  auto late = std::make_unique<int>(2);
  EXPECT_FALSE(queue.post(late));
  ASSERT_NE(late, nullptr);  // untouched: the caller completes it
  EXPECT_EQ(*late, 2);
  EXPECT_TRUE(queue.closed());
  EXPECT_TRUE(queue.empty());
}

TEST(PostQueue, ABlockingOwnerRunsEverythingPostedBeforeCloseThenEnds) {
  PostQueue<int> queue;  // no wake callback: the owner blocks in wait_drain_st
  std::vector<int> ran;
  std::thread owner([&] {
    queue.set_owner(std::this_thread::get_id());
    std::vector<int> batch;
    while (queue.wait_drain_st(batch)) {
      for (int job : batch) ran.push_back(job);
      batch.clear();
    }
  });
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(queue.post(i));
  queue.close();  // the owner drains the rest, then wait_drain_st says false
  owner.join();
  ASSERT_EQ(ran.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(ran[static_cast<size_t>(i)], i);
}

#ifndef NDEBUG
TEST(PostQueueDeathTest, DrainingOffTheOwningThreadFailsLoudly) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  PostQueue<int> queue;
  std::thread([&] { queue.set_owner(std::this_thread::get_id()); }).join();
  std::vector<int> out;
  EXPECT_DEATH(queue.drain_st(out), "off its owning thread");
}
#endif

}  // namespace
}  // namespace detwan::common

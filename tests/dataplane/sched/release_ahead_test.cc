// Release ahead of time (issue 33: one wake-up per batch, not per packet): the transmit
// scheduler's release horizon never lets a frame leave outside its owner's slots, and the
// playout's early release is bounded, counted as a negative error, and never moves the clock
// that times arrivals. Virtual time throughout.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "dataplane/sched/playout.h"
#include "dataplane/sched/tx_scheduler.h"
#include "tests/dataplane/sched/sched_test_util.h"

namespace detwan::dataplane::sched {
namespace {

using common::Status;
using testing::Random;

constexpr int64_t kUs = 1'000;

// The tests' 10-slot port (sched_test_util.h): tunnel 7 in slots 0-3, tunnel 9 in slot 5.
GateControlList gcl() {
  auto list = GateControlList::create(testing::ten_slot_port());
  EXPECT_TRUE(list.has_value()) << list.error().describe();
  return std::move(list).value();
}

TxScheduler scheduler() {
  TxSchedulerConfig config;
  for (const uint32_t id : {7U, 9U}) {
    TunnelTxPolicy policy;
    policy.tunnel_id = id;
    policy.burst_bytes = 100'000'000;  // the policer stays out of the way
    config.tunnels.push_back(policy);
  }
  auto made = TxScheduler::create(gcl(), config, 0);
  EXPECT_TRUE(made.has_value()) << made.error().describe();
  return std::move(made).value();
}

TEST(ReleaseAheadTest, HorizonIsNowPlusAheadButNeverPastTheOpenWindow) {
  TxScheduler s = scheduler();
  EXPECT_EQ(s.release_horizon_ns(5 * kUs, 0), 5 * kUs);
  EXPECT_EQ(s.release_horizon_ns(5 * kUs, 10 * kUs), 15 * kUs);
  EXPECT_EQ(s.release_horizon_ns(5 * kUs, 500 * kUs), 40 * kUs - 1);  // tunnel 7's window ends
  EXPECT_EQ(s.release_horizon_ns(45 * kUs, 500 * kUs), 50 * kUs - 1);  // best effort's slot 4
  EXPECT_EQ(s.release_horizon_ns(55 * kUs, 500 * kUs), 60 * kUs - 1);  // tunnel 9's slot 5
  EXPECT_EQ(s.release_horizon_ns(61 * kUs, 500 * kUs), 100 * kUs - 1);
}

TEST(ReleaseAheadTest, AWindowsFramesLeaveInOneBatchAndNoOtherOwnersFrame) {
  TxScheduler s = scheduler();
  // Ten frames of tunnel 7 (1 us each on the line), two of tunnel 9 and two best effort.
  for (uint64_t h = 1; h <= 10; ++h) ASSERT_EQ(s.enqueue(7, h, 1250, 0), Status::kOk);
  ASSERT_EQ(s.enqueue(9, 20, 1250, 0), Status::kOk);
  ASSERT_EQ(s.enqueue(9, 21, 1250, 0), Status::kOk);
  ASSERT_EQ(s.enqueue_best_effort(30, 1250, 0), Status::kOk);
  ASSERT_EQ(s.enqueue_best_effort(31, 1250, 0), Status::kOk);

  std::vector<TxFrame> batch;
  TxFrame frame;
  const int64_t horizon = s.release_horizon_ns(0, 1'000 * kUs);
  while (s.pop_due(0, &frame, horizon)) batch.push_back(frame);
  ASSERT_EQ(batch.size(), 10U);  // the whole window's frames, at once
  for (uint64_t i = 0; i < batch.size(); ++i) {
    EXPECT_EQ(batch[i].handle, i + 1);  // in departure order
    EXPECT_EQ(batch[i].tunnel_id, 7U);
    EXPECT_TRUE(batch[i].send);
    EXPECT_EQ(batch[i].departure_ns, static_cast<int64_t>(i) * 1'000);  // the schedule's own
  }
  EXPECT_EQ(s.next_event_ns(), 40 * kUs);  // best effort's slot 4: the next wake-up
  // The best-effort slot opens: its two frames go, tunnel 9's (slot 5) stay.
  batch.clear();
  while (s.pop_due(40 * kUs, &frame, s.release_horizon_ns(40 * kUs, 1'000 * kUs))) {
    batch.push_back(frame);
  }
  ASSERT_EQ(batch.size(), 2U);
  EXPECT_TRUE(batch[0].best_effort);
  EXPECT_TRUE(batch[1].best_effort);
  EXPECT_EQ(s.port_counters().sent_packets, 12U);
}

// The property that matters, under random load and random wake-ups: whatever leaves at a wake-up
// belongs to the owner whose window is open then, and leaves inside that window.
TEST(ReleaseAheadTest, EveryEarlyFrameLeavesInsideTheWindowOpenAtItsRelease) {
  TxScheduler s = scheduler();
  const GateControlList list = gcl();
  Random random(33);
  int64_t now = 0;
  uint64_t handle = 1;
  uint64_t released = 0;
  uint64_t early = 0;
  for (int step = 0; step < 20'000; ++step) {
    now += static_cast<int64_t>(random.between(1, 30'000));
    const uint32_t pick = static_cast<uint32_t>(random.between(0, 2));
    const auto bytes = static_cast<uint32_t>(random.between(64, 1500));
    const Status status = pick == 0   ? s.enqueue(7, handle, bytes, now)
                          : pick == 1 ? s.enqueue(9, handle, bytes, now)
                                      : s.enqueue_best_effort(handle, bytes, now);
    if (status == Status::kOk) ++handle;
    const int64_t ahead = static_cast<int64_t>(random.between(0, 200'000));
    const int64_t horizon = s.release_horizon_ns(now, ahead);
    ASSERT_GE(horizon, now);
    ASSERT_LE(horizon, now + ahead);
    TxFrame frame;
    while (s.pop_due(now, &frame, horizon)) {
      ++released;
      if (!frame.send) continue;
      Window open;
      ASSERT_TRUE(list.window_at(frame.owner, now, &open))
          << "frame of owner " << frame.owner << " departing " << frame.departure_ns
          << " released at " << now << ": its owner's slots are closed then";
      EXPECT_GE(frame.departure_ns, open.start_ns);  // the window open now is the frame's own
      EXPECT_LT(frame.departure_ns, open.end_ns);
      EXPECT_LE(frame.tx_end_ns, open.usable_end_ns);
      EXPECT_LE(frame.departure_ns, horizon);
      if (frame.departure_ns > now) ++early;
    }
  }
  EXPECT_GT(released, 10'000U);
  EXPECT_GT(early, 1'000U);  // the early path really ran
}

TEST(ReleaseAheadTest, PlayoutReleasesUpToTheHorizonAndTimesArrivalsByTheRealClock) {
  PlayoutConfig config;
  config.bound_ns = 1'000 * kUs;
  auto made = Playout::create(config);
  ASSERT_TRUE(made.has_value());
  Playout p = std::move(made).value();
  // Sent at 0, 30 and 80 us: targets 1000, 1030 and 1080 us.
  ASSERT_EQ(p.push(1, 100, 0, 500 * kUs), Status::kOk);
  ASSERT_EQ(p.push(2, 100, 30 * kUs, 510 * kUs), Status::kOk);
  ASSERT_EQ(p.push(3, 100, 80 * kUs, 520 * kUs), Status::kOk);
  PlayoutFrame frame;
  const int64_t now = 1'000 * kUs;
  std::vector<uint64_t> released;
  while (p.pop_due(now, &frame, now + 50 * kUs)) {
    p.record_release(frame, now);
    released.push_back(frame.handle);
  }
  EXPECT_EQ(released, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(p.next_event_ns(), 1'080 * kUs);
  // The early one is a negative playout error of 30 us, not hidden.
  EXPECT_EQ(p.counters().playout_error_ns.min(), -30 * kUs);
  // A packet arriving now is timed at now, not at the horizon: its WAN delay is its own.
  ASSERT_EQ(p.push(4, 100, 990 * kUs, now + 1), Status::kOk);
  EXPECT_EQ(p.counters().wan_delay_ns.min(), 10 * kUs + 1);  // the others waited 440+ us
}

}  // namespace
}  // namespace detwan::dataplane::sched

// Behaviour of the port transmit scheduler, case by case, in virtual time.
#include "dataplane/sched/tx_scheduler.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/clock.h"
#include "tests/dataplane/sched/sched_test_util.h"

namespace detwan::dataplane::sched {
namespace {

using common::Status;
using ::testing::HasSubstr;

constexpr int kDrop(TxDrop reason) { return static_cast<int>(reason); }

GclConfig port_config() { return testing::ten_slot_port(); }

TunnelTxPolicy generous(uint32_t tunnel_id) {
  TunnelTxPolicy policy;
  policy.tunnel_id = tunnel_id;
  policy.burst_bytes = 10'000'000;  // out of the way unless a test wants it
  return policy;
}

TxScheduler make(const TxSchedulerConfig& config, int64_t start_ns = 0) {
  auto gcl = GateControlList::create(port_config());
  EXPECT_TRUE(gcl.has_value()) << gcl.error().describe();
  auto scheduler = TxScheduler::create(std::move(gcl).value(), config, start_ns);
  EXPECT_TRUE(scheduler.has_value()) << scheduler.error().describe();
  return std::move(scheduler).value();
}

TxSchedulerConfig generous_config() {
  TxSchedulerConfig config;
  config.tunnels = {generous(7), generous(9)};
  return config;
}

std::vector<TxFrame> dequeue(TxScheduler& scheduler, int64_t now_ns) {
  std::vector<TxFrame> out;
  (void)scheduler.dequeue_due(now_ns, [&](const TxFrame& f) { out.push_back(f); });
  return out;
}

// Dequeues at every departure time up to until_ns, as a poll loop that is never late would.
std::vector<TxFrame> dequeue_on_time(TxScheduler& scheduler, int64_t until_ns) {
  std::vector<TxFrame> out;
  while (scheduler.next_event_ns() <= until_ns) {
    const int64_t now = scheduler.next_event_ns();
    (void)scheduler.dequeue_due(now, [&](const TxFrame& f) {
      EXPECT_TRUE(f.send);
      EXPECT_EQ(f.departure_ns, now);
      out.push_back(f);
    });
  }
  return out;
}

TEST(TxSchedulerTest, FrameLeavesAtOnceInsideItsSlot) {
  common::VirtualClock clock(0);
  TxScheduler s = make(generous_config());
  EXPECT_EQ(s.next_event_ns(), INT64_MAX);
  ASSERT_EQ(s.enqueue(7, 42, 1250, clock.now_ns()), Status::kOk);
  EXPECT_EQ(s.next_event_ns(), 0);
  EXPECT_EQ(s.held_frames(), 1u);
  const auto frames = dequeue(s, clock.now_ns());
  ASSERT_EQ(frames.size(), 1u);
  const TxFrame& f = frames[0];
  EXPECT_EQ(f.handle, 42u);
  EXPECT_EQ(f.tunnel_id, 7u);
  EXPECT_FALSE(f.best_effort);
  EXPECT_TRUE(f.send);
  EXPECT_EQ(f.departure_ns, 0);
  EXPECT_EQ(f.tx_end_ns, 1'000);
  EXPECT_EQ(f.cycle_id, 0);
  EXPECT_EQ(f.slot, 0u);
  const TxCounters& c = *s.tunnel_counters(7);
  EXPECT_EQ(c.offered_packets, 1u);
  EXPECT_EQ(c.queued_packets, 1u);
  EXPECT_EQ(c.sent_packets, 1u);
  EXPECT_EQ(c.sent_bytes, 1250u);
  EXPECT_EQ(c.held_for_slot, 0u);
  EXPECT_EQ(s.port_counters().sent_bytes, 1250u);
  EXPECT_EQ(s.held_frames(), 0u);
  EXPECT_EQ(s.tunnel_counters(8), nullptr);
}

TEST(TxSchedulerTest, FillsItsWindowThenHoldsForTheNextOwnedSlot) {
  TxScheduler s = make(generous_config());
  for (uint64_t i = 0; i < 40; ++i) ASSERT_EQ(s.enqueue(7, i, 1250, 0), Status::kOk);
  // 39 frames end by the usable end (39 us); the 40th waits for the next cycle's window.
  const auto first = dequeue_on_time(s, 99'999);
  ASSERT_EQ(first.size(), 39u);
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i].departure_ns, static_cast<int64_t>(i) * 1'000);
    EXPECT_EQ(first[i].handle, i);
  }
  EXPECT_EQ(first.back().tx_end_ns, 39'000);
  EXPECT_EQ(s.next_event_ns(), 100'000);
  const auto second = dequeue(s, 100'000);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].cycle_id, 1);
  EXPECT_EQ(second[0].slot, 0u);
  EXPECT_EQ(s.tunnel_counters(7)->held_for_slot, 1u);
  EXPECT_EQ(s.port_counters().held_for_slot, 1u);
  // A frame offered outside the window is held too, and says so.
  ASSERT_EQ(s.enqueue(9, 100, 1250, 100'000), Status::kOk);
  EXPECT_EQ(s.next_event_ns(), 150'000);
  EXPECT_EQ(s.tunnel_counters(9)->held_for_slot, 1u);
  EXPECT_EQ(s.tunnel_counters(9)->queue_wait_ns.max(), 50'000);
}

TEST(TxSchedulerTest, DropsWhenTheWaitWouldExceedMaxWait) {
  TxSchedulerConfig config = generous_config();
  config.tunnels[1].max_wait_ns = 30'000;
  TxScheduler s = make(config);
  EXPECT_EQ(s.enqueue(9, 1, 1250, 0), Status::kDropped);  // slot 5 starts in 50 us
  EXPECT_EQ(s.tunnel_counters(9)->dropped[kDrop(TxDrop::kMaxWait)], 1u);
  EXPECT_EQ(s.enqueue(9, 2, 1250, 20'000), Status::kOk);  // waits exactly 30 us
  EXPECT_EQ(s.port_counters().dropped[kDrop(TxDrop::kMaxWait)], 1u);
  EXPECT_EQ(s.tunnel_counters(9)->queued_packets, 1u);
}

TEST(TxSchedulerTest, BoundedQueuesAndCapacityAreCountedNeverExceeded) {
  TxSchedulerConfig config = generous_config();
  config.tunnels[0].queue_frames = 2;
  config.capacity_frames = 3;
  TxScheduler s = make(config);
  EXPECT_EQ(s.enqueue(7, 1, 1250, 45'000), Status::kOk);
  EXPECT_EQ(s.enqueue(7, 2, 1250, 45'000), Status::kOk);
  EXPECT_EQ(s.enqueue(7, 3, 1250, 45'000), Status::kDropped);
  EXPECT_EQ(s.tunnel_counters(7)->dropped[kDrop(TxDrop::kQueueFull)], 1u);
  EXPECT_EQ(s.enqueue(9, 4, 1250, 45'000), Status::kOk);
  EXPECT_EQ(s.enqueue(9, 5, 1250, 45'000), Status::kDropped);  // whole port holds 3
  EXPECT_EQ(s.tunnel_counters(9)->dropped[kDrop(TxDrop::kNoCapacity)], 1u);
  EXPECT_EQ(s.enqueue_best_effort(6, 1250, 45'000), Status::kDropped);
  EXPECT_EQ(s.best_effort_counters().dropped[kDrop(TxDrop::kNoCapacity)], 1u);
  EXPECT_EQ(s.port_counters().dropped[kDrop(TxDrop::kNoCapacity)], 2u);
  EXPECT_EQ(s.held_frames(), 3u);
  EXPECT_EQ(s.held_frames(s.gcl().find_owner(7)), 2u);
  EXPECT_EQ(dequeue_on_time(s, 200'000).size(), 3u);
  EXPECT_EQ(s.enqueue(7, 7, 1250, 200'000), Status::kOk);  // room again
}

TEST(TxSchedulerTest, DropsDeparturesBeyondTheWheelHorizon) {
  TxSchedulerConfig config = generous_config();
  config.wheel_granularity_ns = 500;
  config.wheel_buckets = 64;  // horizon 32 us from the cursor, which follows now
  TxScheduler s = make(config);
  EXPECT_EQ(s.enqueue(9, 1, 1250, 20'000), Status::kOk);       // leaves at 50 us
  EXPECT_EQ(s.enqueue(7, 2, 1250, 39'500), Status::kDropped);  // would leave at 100 us
  EXPECT_EQ(s.tunnel_counters(7)->dropped[kDrop(TxDrop::kBeyondHorizon)], 1u);
  EXPECT_EQ(dequeue(s, 50'000).size(), 1u);
  EXPECT_EQ(s.enqueue(7, 3, 1250, 70'000), Status::kOk);  // the horizon moved on with now
}

TEST(TxSchedulerTest, CountsUnknownTunnelsAndBadSizes) {
  TxScheduler s = make(generous_config());
  EXPECT_EQ(s.enqueue(8, 1, 100, 0), Status::kDropped);
  EXPECT_EQ(s.port_counters().dropped[kDrop(TxDrop::kUnknownTunnel)], 1u);
  EXPECT_EQ(s.enqueue(7, 2, 1501, 0), Status::kDropped);
  EXPECT_EQ(s.enqueue(7, 3, 0, 0), Status::kDropped);
  EXPECT_EQ(s.enqueue_best_effort(4, 9000, 0), Status::kDropped);
  EXPECT_EQ(s.tunnel_counters(7)->dropped[kDrop(TxDrop::kOversize)], 2u);
  EXPECT_EQ(s.best_effort_counters().dropped[kDrop(TxDrop::kOversize)], 1u);
  EXPECT_EQ(s.port_counters().dropped[kDrop(TxDrop::kOversize)], 3u);
  EXPECT_EQ(s.port_counters().offered_packets, 4u);
  EXPECT_EQ(s.held_frames(), 0u);
}

TEST(TxSchedulerTest, AFrameDequeuedTooLateForItsWindowIsNeverSent) {
  TxSchedulerConfig config = generous_config();
  config.tunnels[0].missed_slot = MissedSlot::kDrop;
  TxScheduler s = make(config);
  ASSERT_EQ(s.enqueue(7, 1, 1250, 0), Status::kOk);
  ASSERT_EQ(s.enqueue(7, 2, 1250, 0), Status::kOk);
  // Frame 1 may still start at 38 us (ends at the usable end, 39 us); frame 2 leaves at 1 us and
  // could start as late as 38 us too. Polled at 38 us: both still fit.
  auto frames = dequeue(s, 38'000);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_TRUE(frames[0].send);
  EXPECT_TRUE(frames[1].send);
  ASSERT_EQ(s.enqueue(7, 3, 1250, 38'000), Status::kOk);  // scheduled at 38 us
  frames = dequeue(s, 38'001);  // one ns too late: would end inside the guard band
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_FALSE(frames[0].send);
  EXPECT_EQ(frames[0].handle, 3u);
  EXPECT_EQ(s.tunnel_counters(7)->dropped[kDrop(TxDrop::kMissedSlot)], 1u);
  EXPECT_EQ(s.tunnel_counters(7)->sent_packets, 2u);
  EXPECT_EQ(s.port_counters().dropped[kDrop(TxDrop::kMissedSlot)], 1u);
}

TEST(TxSchedulerTest, AFrameThatMissedItsWindowMovesToTheOwnersNextWindowByDefault) {
  TxScheduler s = make(generous_config());
  ASSERT_EQ(s.enqueue(7, 1, 1250, 0), Status::kOk);  // leaves at 0, may start until 38 us
  ASSERT_EQ(s.enqueue(7, 2, 1250, 0), Status::kOk);  // leaves at 1 us
  // The poll loop wakes at 45 us: both missed tunnel 7's window [0, 39 us). They are not sent
  // now (outside the slots) but moved, in order, to the next window: 100 us and 101 us.
  EXPECT_TRUE(dequeue(s, 45'000).empty());
  EXPECT_EQ(s.tunnel_counters(7)->rescheduled, 2u);
  EXPECT_EQ(s.port_counters().rescheduled, 2u);
  EXPECT_EQ(s.tunnel_counters(7)->dropped[kDrop(TxDrop::kMissedSlot)], 0u);
  EXPECT_EQ(s.held_frames(), 2u);
  EXPECT_EQ(s.next_event_ns(), 100'000);
  const auto frames = dequeue_on_time(s, 200'000);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].handle, 1u);
  EXPECT_EQ(frames[0].departure_ns, 100'000);
  EXPECT_EQ(frames[0].enqueue_ns, 0);  // the original enqueue time is kept
  EXPECT_EQ(frames[1].handle, 2u);
  EXPECT_EQ(frames[1].departure_ns, 101'000);
  EXPECT_EQ(s.tunnel_counters(7)->sent_packets, 2u);
  EXPECT_THAT(s.counters_json(), HasSubstr("\"rescheduled\":2"));
}

TEST(TxSchedulerTest, ABurstDequeuedLongerThanTheWheelHorizonLateIsMovedNotDropped) {
  // The wheel sized automatically (horizon >= 4 cycles of 100 us): the poll loop stalls for ten
  // cycles while a burst is held. Every frame moves to tunnel 7's next window, none is dropped,
  // and a frame enqueued during the late dequeue's aftermath still fits.
  TxScheduler s = make(generous_config());
  for (uint64_t handle = 1; handle <= 10; ++handle) {
    ASSERT_EQ(s.enqueue(7, handle, 1250, 0), Status::kOk);  // leave at 0 .. 9 us
  }
  ASSERT_EQ(s.enqueue(9, 11, 1250, 0), Status::kOk);  // tunnel 9's frame, at 50 us
  EXPECT_TRUE(dequeue(s, 1'045'000).empty());
  EXPECT_EQ(s.tunnel_counters(7)->rescheduled, 10u);
  EXPECT_EQ(s.tunnel_counters(9)->rescheduled, 1u);
  EXPECT_EQ(s.port_counters().dropped[kDrop(TxDrop::kMissedSlot)], 0u);
  EXPECT_EQ(s.port_counters().dropped[kDrop(TxDrop::kBeyondHorizon)], 0u);
  ASSERT_EQ(s.enqueue(7, 12, 1250, 1'046'000), Status::kOk);
  const auto frames = dequeue_on_time(s, 1'200'000);
  ASSERT_EQ(frames.size(), 12u);
  EXPECT_EQ(frames[0].handle, 11u);  // tunnel 9's next window, 50 us into the cycle
  EXPECT_EQ(frames[0].departure_ns, 1'050'000);
  for (uint64_t i = 0; i < 10; ++i) {
    EXPECT_EQ(frames[i + 1].handle, i + 1);
    EXPECT_EQ(frames[i + 1].departure_ns, 1'100'000 + static_cast<int64_t>(i) * 1'000);
  }
  EXPECT_EQ(frames[11].handle, 12u);  // after the moved burst, in tunnel 7's window
  EXPECT_EQ(frames[11].departure_ns, 1'110'000);
  EXPECT_EQ(s.tunnel_counters(7)->sent_packets, 11u);
  EXPECT_EQ(s.held_frames(), 0u);
}

TEST(TxSchedulerTest, AMissedFrameThatWouldExceedMaxWaitIsDroppedNotMoved) {
  TxSchedulerConfig config = generous_config();
  config.tunnels[0].max_wait_ns = 50'000;
  TxScheduler s = make(config);
  ASSERT_EQ(s.enqueue(7, 1, 1250, 0), Status::kOk);
  const auto frames = dequeue(s, 45'000);  // next window at 100 us: 100 us after enqueue
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_FALSE(frames[0].send);
  EXPECT_EQ(s.tunnel_counters(7)->rescheduled, 0u);
  EXPECT_EQ(s.tunnel_counters(7)->dropped[kDrop(TxDrop::kMissedSlot)], 1u);
  EXPECT_EQ(s.held_frames(), 0u);
}

TEST(TxSchedulerTest, PolicesExcessByDropOrDowngradeToBestEffort) {
  TxSchedulerConfig config;
  TunnelTxPolicy drop_policy = generous(7);
  drop_policy.burst_bytes = 1'500;
  TunnelTxPolicy downgrade_policy = generous(9);
  downgrade_policy.burst_bytes = 1'500;
  downgrade_policy.over_rate = OverRateAction::kBestEffort;
  config.tunnels = {drop_policy, downgrade_policy};
  TxScheduler s = make(config);
  EXPECT_EQ(s.enqueue(7, 1, 1250, 0), Status::kOk);
  EXPECT_EQ(s.enqueue(7, 2, 1250, 0), Status::kDropped);
  EXPECT_EQ(s.tunnel_counters(7)->dropped[kDrop(TxDrop::kPoliced)], 1u);
  EXPECT_EQ(s.enqueue(9, 3, 1250, 0), Status::kOk);
  EXPECT_EQ(s.enqueue(9, 4, 1250, 0), Status::kOk);  // over the rate: best effort
  const TxCounters& t9 = *s.tunnel_counters(9);
  EXPECT_EQ(t9.downgraded_packets, 1u);
  EXPECT_EQ(t9.downgraded_bytes, 1250u);
  EXPECT_EQ(t9.queued_packets, 1u);
  EXPECT_EQ(s.best_effort_counters().offered_packets, 1u);
  EXPECT_EQ(s.best_effort_counters().queued_packets, 1u);
  const auto frames = dequeue_on_time(s, 100'000);
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[1].handle, 4u);  // best-effort slot 4 (40 us) before tunnel 9's slot 5
  EXPECT_EQ(frames[1].tunnel_id, 9u);
  EXPECT_TRUE(frames[1].best_effort);
  EXPECT_EQ(frames[1].slot, 4u);
  EXPECT_EQ(frames[1].departure_ns, 40'000);
  EXPECT_EQ(frames[2].handle, 3u);
  EXPECT_FALSE(frames[2].best_effort);
  EXPECT_EQ(frames[2].departure_ns, 50'000);
  EXPECT_EQ(s.best_effort_counters().sent_packets, 1u);
  EXPECT_EQ(s.port_counters().downgraded_packets, 1u);
}

TEST(TxSchedulerTest, ShaperPacesFramesInsideTheSlot) {
  TxSchedulerConfig config = generous_config();
  config.tunnels[0].shaper_rate_bps = 1'000'000'000;  // 1250 bytes every 10 us
  config.tunnels[0].shaper_burst_bytes = 1'500;
  TxScheduler s = make(config);
  for (uint64_t i = 0; i < 6; ++i) ASSERT_EQ(s.enqueue(7, i, 1250, 0), Status::kOk);
  std::vector<int64_t> departures;
  for (const TxFrame& f : dequeue_on_time(s, 100'000)) departures.push_back(f.departure_ns);
  // 0 from the burst; then 1000 more bytes (8 us), then 10 us each. The fifth conforms at
  // 38 us and ends exactly at the usable end (39 us); the sixth conforms at 48 us, outside
  // the window: next cycle.
  EXPECT_EQ(departures, (std::vector<int64_t>{0, 8'000, 18'000, 28'000, 38'000, 100'000}));
}

TEST(TxSchedulerTest, RecordsDepartureErrorAndReportsJson) {
  TxScheduler s = make(generous_config());
  ASSERT_EQ(s.enqueue(7, 1, 1250, 0), Status::kOk);
  const auto frames = dequeue(s, 0);
  ASSERT_EQ(frames.size(), 1u);
  s.record_departure(frames[0], 150);
  EXPECT_EQ(s.tunnel_counters(7)->departure_error_ns.count(), 1u);
  EXPECT_EQ(s.tunnel_counters(7)->departure_error_ns.max(), 150);
  EXPECT_EQ(s.port_counters().departure_error_ns.max(), 150);
  EXPECT_EQ(s.best_effort_counters().departure_error_ns.count(), 0u);
  const std::string json = s.counters_json();
  EXPECT_THAT(json, HasSubstr("\"tunnels\":{\"7\":{\"offered_packets\":1,"));
  EXPECT_THAT(json, HasSubstr("\"missed_slot\":0"));
  EXPECT_THAT(json, HasSubstr("\"departure_error_ns\":{\"count\":1,"));
  EXPECT_THAT(json, HasSubstr("\"held_frames\":0}"));
  const std::string text = s.describe();
  EXPECT_THAT(text,
              HasSubstr("tunnel 7 policy: police 3gbit burst 10000000 bytes, over rate drop"));
  EXPECT_THAT(text, HasSubstr("best effort policy: queue 4096 frames, max wait unlimited"));
}

TEST(TxSchedulerTest, DefaultPolicerBurstIsOneCycleAtTheReservedRate) {
  TxScheduler s = make(TxSchedulerConfig{});
  // 3 Gbit/s for 100 us = 37500 bytes = 30 frames of 1250.
  int admitted = 0;
  for (uint64_t i = 0; i < 40; ++i) admitted += s.enqueue(7, i, 1250, 0) == Status::kOk ? 1 : 0;
  EXPECT_EQ(admitted, 30);
  EXPECT_EQ(s.tunnel_counters(7)->dropped[kDrop(TxDrop::kPoliced)], 10u);
}

TEST(TxSchedulerTest, TimeGoingBackwardsIsTreatedAsTheLatestTime) {
  TxScheduler s = make(generous_config());
  ASSERT_EQ(s.enqueue(7, 1, 1250, 5'000), Status::kOk);
  ASSERT_EQ(s.enqueue(7, 2, 1250, 3'000), Status::kOk);
  const auto frames = dequeue(s, 10'000);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].departure_ns, 5'000);
  EXPECT_EQ(frames[1].departure_ns, 6'000);
  EXPECT_EQ(frames[1].enqueue_ns, 5'000);
}

TEST(TxSchedulerTest, DequeueHonoursTheBurstLimit) {
  TxScheduler s = make(generous_config());
  for (uint64_t i = 0; i < 5; ++i) ASSERT_EQ(s.enqueue(7, i, 1250, 0), Status::kOk);
  int calls = 0;
  EXPECT_EQ(s.dequeue_due(
                10'000, [&](const TxFrame&) { ++calls; }, 2),
            2u);
  EXPECT_EQ(s.dequeue_due(10'000, [&](const TxFrame&) { ++calls; }), 3u);
  EXPECT_EQ(calls, 5);
}

struct BadPolicy {
  std::string name;
  std::function<void(TxSchedulerConfig&)> change;
  std::function<void(GclConfig&)> change_list;
  std::string message;
};

class TxSchedulerErrorTest : public ::testing::TestWithParam<BadPolicy> {};

TEST_P(TxSchedulerErrorTest, NamesTheProblem) {
  GclConfig list = port_config();
  if (GetParam().change_list) GetParam().change_list(list);
  auto gcl = GateControlList::create(list);
  ASSERT_TRUE(gcl.has_value()) << gcl.error().describe();
  TxSchedulerConfig config = generous_config();
  GetParam().change(config);
  const auto s = TxScheduler::create(std::move(gcl).value(), config, 0);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, common::ErrorCode::kConfig);
  EXPECT_THAT(s.error().message, HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    All, TxSchedulerErrorTest,
    ::testing::Values(
        BadPolicy{"UnknownTunnel", [](TxSchedulerConfig& c) { c.tunnels.push_back(generous(8)); },
                  nullptr,
                  "tx scheduler: tunnel 8: has a policy but no slots in the gate control list"},
        BadPolicy{"PolicyTwice", [](TxSchedulerConfig& c) { c.tunnels.push_back(generous(7)); },
                  nullptr, "tunnel 7: policy given twice"},
        BadPolicy{"BurstBelowMaxFrame",
                  [](TxSchedulerConfig& c) { c.tunnels[0].burst_bytes = 1'000; }, nullptr,
                  "tunnel 7: policer burst_bytes 1000 is smaller than max_frame_bytes 1500"},
        BadPolicy{"ShaperBurstBelowMaxFrame",
                  [](TxSchedulerConfig& c) {
                    c.tunnels[1].shaper_rate_bps = 1'000'000;
                    c.tunnels[1].shaper_burst_bytes = 100;
                  },
                  nullptr, "tunnel 9: shaper_burst_bytes 100 is smaller than max_frame_bytes 1500"},
        BadPolicy{"ZeroQueue", [](TxSchedulerConfig& c) { c.tunnels[0].queue_frames = 0; }, nullptr,
                  "tunnel 7: queue_frames must be > 0"},
        BadPolicy{"NegativeWait", [](TxSchedulerConfig& c) { c.tunnels[1].max_wait_ns = -1; },
                  nullptr, "tunnel 9: max_wait_ns must be >= 0"},
        BadPolicy{
            "DowngradeWithoutBestEffortSlots",
            [](TxSchedulerConfig& c) { c.tunnels[0].over_rate = OverRateAction::kBestEffort; },
            [](GclConfig& l) { l.tunnels[0].slots = {0, 1, 2, 3, 4, 6, 7, 8, 9}; },
            "tunnel 7: over_rate best_effort, but every slot is reserved"},
        BadPolicy{"ZeroBestEffortQueue",
                  [](TxSchedulerConfig& c) { c.best_effort.queue_frames = 0; }, nullptr,
                  "best effort: queue_frames must be > 0"},
        BadPolicy{"ZeroCapacity", [](TxSchedulerConfig& c) { c.capacity_frames = 0; }, nullptr,
                  "capacity_frames must be > 0"},
        BadPolicy{"HugeWheel",
                  [](TxSchedulerConfig& c) {
                    c.wheel_granularity_ns = 1;
                    c.tunnels[0].max_wait_ns = 1000000000;  // 1 s
                  },
                  nullptr, "the timing wheel would need 1000200001 buckets of 1ns"}),
    [](const ::testing::TestParamInfo<BadPolicy>& info) { return info.param.name; });

}  // namespace
}  // namespace detwan::dataplane::sched

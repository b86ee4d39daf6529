// Rate, drop-tail, strict priority, cross traffic and capacity: exact in virtual time.
#include <algorithm>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "tests/wanem/engine_driver.h"

namespace detwan::wanem {
namespace {

using common::Status;
using testing::Driver;
using testing::kMs;
using testing::kSec;
using testing::kUs;
using testing::spec_of;

constexpr auto kReserved = TrafficClass::kReserved;
constexpr auto kBestEffort = TrafficClass::kBestEffort;
constexpr auto kCross = TrafficClass::kCross;

TEST(Rate, BackToBackFramesLeaveExactlyOneFrameTimeApart) {
  // 1500 bytes at 1 Gbit/s = 12 us.
  Emulator emulator(spec_of("rate=1gbit"), 0);
  Driver driver(emulator);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(driver.offer(i, 1500, 0), Status::kOk);
  driver.drain();
  ASSERT_EQ(driver.released().size(), 200u);
  for (size_t i = 0; i < 200; ++i) {
    EXPECT_EQ(driver.released()[i].handle, i);
    EXPECT_EQ(driver.released()[i].at_ns, static_cast<int64_t>(i + 1) * 12'000);
  }
  EXPECT_EQ(driver.empty_wakeups(), 0u);
}

TEST(Rate, FractionalFrameTimesDoNotDrift) {
  // 1514 bytes at 3 Gbit/s = 4037.33 ns: tx end k = ceil((k + 1) * 12112 / 3) exactly.
  Emulator emulator(spec_of("rate=3gbit,delay=5ms"), 0);
  Driver driver(emulator);
  constexpr int kFrames = 10'000;
  for (int i = 0; i < kFrames; ++i) ASSERT_EQ(driver.offer(i, 1514, 0), Status::kOk);
  driver.drain();
  ASSERT_EQ(driver.released().size(), static_cast<size_t>(kFrames));
  for (int64_t k = 0; k < kFrames; ++k) {
    const int64_t bits_ns_times_3 = (k + 1) * 1514 * 8;  // tx end = this / 3 ns
    const int64_t tx_end = (bits_ns_times_3 + 2) / 3;
    ASSERT_EQ(driver.released()[k].at_ns, tx_end + 5 * kMs) << k;
  }
}

TEST(Rate, IdleLinkStartsAtArrivalAndSerialisationAddsToDelay) {
  Emulator emulator(spec_of("rate=100mbit,delay=2ms"), 0);
  Driver driver(emulator);
  ASSERT_EQ(driver.offer(1, 1000, 5 * kMs), Status::kOk);   // 80 us on the wire
  ASSERT_EQ(driver.offer(2, 1000, 50 * kMs), Status::kOk);  // link idle again
  driver.drain();
  ASSERT_EQ(driver.released().size(), 2u);
  EXPECT_EQ(driver.released()[0].at_ns, 5 * kMs + 80 * kUs + 2 * kMs);
  EXPECT_EQ(driver.released()[1].at_ns, 50 * kMs + 80 * kUs + 2 * kMs);
}

TEST(Queue, DropTailExactlyAtTheByteLimit) {
  // 15000-byte queue = ten 1500-byte frames waiting; the first frame goes straight to the link.
  Emulator emulator(spec_of("rate=1gbit,queue=15000b"), 0);
  Driver driver(emulator);
  for (int i = 0; i < 11; ++i) ASSERT_EQ(driver.offer(i, 1500, 0), Status::kOk) << i;
  EXPECT_EQ(emulator.queued_bytes(), 15'000u);
  EXPECT_EQ(driver.offer(11, 1500, 0), Status::kDropped);  // 15000 + 1500 > 15000
  EXPECT_EQ(driver.offer(12, 1, 0), Status::kDropped);     // even one byte more
  EXPECT_EQ(driver.offer(13, 0, 0), Status::kOk);          // 15000 + 0 == limit: fits
  // At 12 us frame 1 starts: 13500 bytes wait, so exactly one 1500-byte frame fits again.
  EXPECT_EQ(driver.offer(14, 1500, 12 * kUs), Status::kOk);
  EXPECT_EQ(driver.offer(15, 1500, 12 * kUs), Status::kDropped);
  EXPECT_EQ(testing::dropped(emulator, kBestEffort, DropReason::kQueueFull), 3u);
  driver.drain();
  EXPECT_EQ(driver.released().size(), 13u);
  // Queue depth seen by each arrival: 0 for the first frame, 15000 for the drops.
  const auto& depth = emulator.counters().queue_depth_bytes[static_cast<int>(kBestEffort)];
  EXPECT_EQ(depth.count(), 16u);
  EXPECT_EQ(depth.min(), 0);
  EXPECT_EQ(depth.max(), 15'000);
}

TEST(Queue, BothClassesShareTheByteLimit) {
  Emulator emulator(spec_of("rate=1gbit,queue=3000b"), 0);
  Driver driver(emulator);
  ASSERT_EQ(driver.offer(1, 1500, 0, kBestEffort), Status::kOk);  // on the wire
  ASSERT_EQ(driver.offer(2, 1500, 0, kBestEffort), Status::kOk);
  ASSERT_EQ(driver.offer(3, 1500, 0, kReserved), Status::kOk);
  EXPECT_EQ(driver.offer(4, 1500, 0, kReserved), Status::kDropped);
  EXPECT_EQ(testing::dropped(emulator, kReserved, DropReason::kQueueFull), 1u);
}

TEST(Queue, PrioQueueGivesTheReservedClassItsOwnByteLimit) {
  // Best effort fills the shared 3000-byte queue; with prio-queue the reserved class is
  // admitted against its own 3000 bytes, and best effort no longer counts reserved bytes.
  Emulator emulator(spec_of("rate=1gbit,queue=3000b,prio-queue=3000b"), 0);
  Driver driver(emulator);
  ASSERT_EQ(driver.offer(1, 1500, 0, kBestEffort), Status::kOk);  // on the wire
  ASSERT_EQ(driver.offer(2, 1500, 0, kBestEffort), Status::kOk);
  ASSERT_EQ(driver.offer(3, 1500, 0, kBestEffort), Status::kOk);  // shared queue now full
  EXPECT_EQ(driver.offer(4, 1500, 0, kBestEffort), Status::kDropped);
  ASSERT_EQ(driver.offer(5, 1500, 0, kReserved), Status::kOk);
  ASSERT_EQ(driver.offer(6, 1500, 0, kReserved), Status::kOk);
  EXPECT_EQ(driver.offer(7, 1500, 0, kReserved), Status::kDropped);  // its own limit
  EXPECT_EQ(driver.offer(8, 1, 0, kBestEffort), Status::kDropped);   // reserved bytes aside
  EXPECT_EQ(emulator.queued_bytes(), 6000u);
  EXPECT_EQ(testing::dropped(emulator, kReserved, DropReason::kQueueFull), 1u);
  EXPECT_EQ(testing::dropped(emulator, kBestEffort, DropReason::kQueueFull), 2u);
  // Once the reserved frames have left (strict priority: right after frame 1), both fit again.
  driver.run_until(40 * kUs);
  EXPECT_EQ(driver.offer(9, 1500, 40 * kUs, kReserved), Status::kOk);
  driver.drain();
  EXPECT_EQ(driver.released().size(), 6u);
  EXPECT_EQ(emulator.queued_bytes(), 0u);
}

TEST(Priority, ReservedWaitsAtMostTheFrameInTransmission) {
  Emulator emulator(spec_of("rate=1gbit"), 0);
  Driver driver(emulator);
  for (int i = 0; i < 50; ++i) ASSERT_EQ(driver.offer(i, 1500, 0), Status::kOk);
  // Offered 1 us into frame 0's transmission: waits 11 us, then 100 bytes = 0.8 us.
  ASSERT_EQ(driver.offer(100, 100, 1 * kUs, kReserved), Status::kOk);
  driver.drain();
  ASSERT_EQ(driver.released().size(), 51u);
  EXPECT_EQ(driver.released()[0].handle, 0u);
  EXPECT_EQ(driver.released()[0].at_ns, 12'000);
  EXPECT_EQ(driver.released()[1].handle, 100u);
  EXPECT_EQ(driver.released()[1].at_ns, 12'800);
  const int64_t wait = driver.released()[1].at_ns - 800 - 1 * kUs;
  EXPECT_LE(wait, 12'000);  // at most one best-effort frame time
  // Best effort behind it is shifted by exactly the reserved frame's 800 ns.
  EXPECT_EQ(driver.released()[2].handle, 1u);
  EXPECT_EQ(driver.released()[2].at_ns, 24'800);
  EXPECT_EQ(driver.released()[50].at_ns, 50 * 12'000 + 800);
}

TEST(Priority, StartAtTheSameInstantAsAnArrivalGoesFirst) {
  // The link picks its next frame at 12 us before the reserved frame offered at 12 us joins:
  // non-preemptive, the reserved frame waits for BE frame 1.
  Emulator emulator(spec_of("rate=1gbit"), 0);
  Driver driver(emulator);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(driver.offer(i, 1500, 0), Status::kOk);
  ASSERT_EQ(driver.offer(100, 1500, 12 * kUs, kReserved), Status::kOk);
  driver.drain();
  ASSERT_EQ(driver.released().size(), 4u);
  EXPECT_EQ(driver.released()[1].handle, 1u);
  EXPECT_EQ(driver.released()[2].handle, 100u);
  EXPECT_EQ(driver.released()[2].at_ns, 36'000);
}

TEST(Priority, ReservedFramesAreFifoAmongThemselves) {
  Emulator emulator(spec_of("rate=1gbit"), 0);
  Driver driver(emulator);
  for (int i = 0; i < 10; ++i) ASSERT_EQ(driver.offer(i, 1500, 0), Status::kOk);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(driver.offer(100 + i, 1500, 0, kReserved), Status::kOk);
  driver.drain();
  std::vector<uint64_t> order;
  for (const auto& r : driver.released()) order.push_back(r.handle);
  EXPECT_EQ(order, (std::vector<uint64_t>{0, 100, 101, 102, 103, 104, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(CrossTraffic, LongRunShareMatches) {
  for (const double share : {0.1, 0.3, 0.7}) {
    // ~50000 on/off cycles in 100 s: the share's standard error is below 0.6 %.
    ImpairmentSpec spec = spec_of("rate=1gbit,cross-burst=200us");
    spec.cross_share = share;
    Emulator emulator(spec, 0);
    constexpr int64_t kDuration = 100 * kSec;
    for (int64_t t = 0; t <= kDuration; t += 10 * kMs) {
      EXPECT_EQ(emulator.release(t, [](uint64_t, uint32_t, bool) {}), 0u);  // never emitted
      EXPECT_EQ(emulator.next_event_ns(), INT64_MAX);  // cross traffic alone never wakes
    }
    const auto& c = testing::class_counters(emulator, kCross);
    const double carried = static_cast<double>(c.forwarded_bytes) * 8 / 1e9 / 100.0;
    EXPECT_NEAR(carried, share, 0.03 * share) << share;
    EXPECT_EQ(c.offered_packets, c.forwarded_packets);  // each starts when it arrives
    EXPECT_EQ(testing::total_dropped(c), 0u);           // alone it never builds a queue
  }
}

TEST(CrossTraffic, BestEffortQueuesBehindItReservedDoesNot) {
  // 100 Mbit/s; cross 50 % in 5 ms line-rate bursts; best effort 40 Mbit/s of 1000-byte frames;
  // reserved 200-byte frames every 1 ms.
  Emulator emulator(spec_of("rate=100mbit,cross=50%,cross-burst=5ms"), 0);
  Driver driver(emulator);
  uint64_t handle = 0;
  for (int64_t t = 0; t < 20 * kSec; t += 200 * kUs) {
    ASSERT_EQ(driver.offer(handle++, 1000, t, kBestEffort), Status::kOk);
    if (t % kMs == 200 * kUs) {
      ASSERT_EQ(driver.offer(handle++, 200, t, kReserved), Status::kOk);
    }
  }
  driver.drain();
  const auto& reserved = emulator.counters().sojourn_ns[static_cast<int>(kReserved)];
  const auto& best_effort = emulator.counters().sojourn_ns[static_cast<int>(kBestEffort)];
  ASSERT_EQ(reserved.count(), 20'000u);
  // Own 16 us + at most one 1500-byte cross frame (120 us) in transmission.
  EXPECT_LE(reserved.max(), 16 * kUs + 120 * kUs);
  EXPECT_GT(best_effort.percentile(0.99), 1 * kMs);
  EXPECT_GT(best_effort.mean(), 4.0 * static_cast<double>(reserved.mean()));
  const auto& cross = testing::class_counters(emulator, kCross);
  const double cross_share = static_cast<double>(cross.forwarded_bytes) * 8 / 100e6 / 20.0;
  EXPECT_NEAR(cross_share, 0.5, 0.05);
}

TEST(CrossTraffic, FramesAreDroppedTailFirstWhenTheQueueIsFull) {
  // Best-effort load alone fills the small queue during cross bursts: some cross frames and
  // some BE frames are dropped, nothing crashes, and the counters balance.
  Emulator emulator(spec_of("rate=10mbit,queue=20kb,cross=60%,cross-burst=20ms"), 0);
  Driver driver(emulator);
  for (int i = 0; i < 20'000; ++i) (void)driver.offer(i, 1200, i * 2 * kMs);
  driver.drain();
  const auto& be = testing::class_counters(emulator, kBestEffort);
  const auto& cross = testing::class_counters(emulator, kCross);
  EXPECT_GT(be.dropped[static_cast<int>(DropReason::kQueueFull)], 0u);
  EXPECT_GT(cross.dropped[static_cast<int>(DropReason::kQueueFull)], 0u);
  EXPECT_EQ(be.offered_packets, be.forwarded_packets + testing::total_dropped(be));
  EXPECT_LE(emulator.counters().queue_depth_bytes[static_cast<int>(kBestEffort)].max(), 20 * 1024);
}

TEST(Capacity, ExhaustionDropsWithNoCapacityAndRecovers) {
  Emulator emulator(spec_of("delay=1s"), 0, /*max_frames=*/8);
  Driver driver(emulator);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(driver.offer(i, 100, i * kMs), i < 8 ? Status::kOk : Status::kDropped) << i;
  }
  EXPECT_EQ(testing::dropped(emulator, kBestEffort, DropReason::kNoCapacity), 12u);
  EXPECT_EQ(emulator.held_frames(), 8u);
  driver.run_until(1 * kSec + 3 * kMs);  // frames 0..3 released: 4 slots free again
  EXPECT_EQ(emulator.held_frames(), 4u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(driver.offer(100 + i, 100, 1 * kSec + 3 * kMs),
              i < 4 ? Status::kOk : Status::kDropped);
  }
  driver.drain();
  EXPECT_EQ(driver.released().size(), 12u);
}

TEST(Capacity, QueueAndCrossTrafficWithATinyPoolNeverCrash) {
  Emulator emulator(spec_of("rate=10mbit,queue=1mb,cross=40%,cross-burst=2ms,dup=30%,reorder=20%"),
                    0, /*max_frames=*/3);
  Driver driver(emulator);
  for (int i = 0; i < 5000; ++i) {
    (void)driver.offer(i, 1500, i * 100 * kUs, i % 3 == 0 ? kReserved : kBestEffort);
  }
  driver.drain();
  uint64_t no_capacity = 0;
  for (auto cls : {kReserved, kBestEffort}) {
    const auto& c = testing::class_counters(emulator, cls);
    no_capacity += c.dropped[static_cast<int>(DropReason::kNoCapacity)];
    EXPECT_EQ(c.offered_packets + c.duplicated_packets,
              c.forwarded_packets + testing::total_dropped(c));
  }
  EXPECT_GT(no_capacity, 0u);
  EXPECT_EQ(emulator.held_frames(), 0u);
}

}  // namespace
}  // namespace detwan::wanem

// Link down, determinism, polling independence, run-time changes, next_event_ns, counters.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "tests/wanem/engine_driver.h"

namespace detwan::wanem {
namespace {

using common::Status;
using testing::Driver;
using testing::kMs;
using testing::kSec;
using testing::kUs;
using testing::Released;
using testing::spec_of;

constexpr auto kReserved = TrafficClass::kReserved;
constexpr auto kBestEffort = TrafficClass::kBestEffort;

TEST(LinkDown, ScriptedWindowsDropOffersAndInFlightFrames) {
  constexpr int64_t kStart = 5 * kSec;  // windows are relative to the emulator's start
  Emulator emulator(spec_of("delay=100ms,down=1s-2s"), kStart);
  Driver driver(emulator, kStart);
  for (int i = 0; i < 300; ++i) (void)driver.offer(i, 100, kStart + i * 10 * kMs);
  driver.drain();
  // Offered in [1 s, 2 s): dropped at the door. Offered in [0.9 s, 1 s): due inside the window,
  // handed back with deliver = false. Everything else delivered.
  EXPECT_EQ(testing::dropped(emulator, kBestEffort, DropReason::kLinkDown), 100u + 10u);
  ASSERT_EQ(driver.released().size(), 200u);
  for (const Released& r : driver.released()) {
    const int64_t offered = static_cast<int64_t>(r.handle) * 10 * kMs;
    EXPECT_EQ(r.at_ns, kStart + offered + 100 * kMs);
    EXPECT_EQ(r.deliver, !(offered >= 900 * kMs && offered < 1 * kSec)) << r.handle;
    EXPECT_FALSE(offered >= 1 * kSec && offered < 2 * kSec);
  }
  EXPECT_EQ(testing::class_counters(emulator, kBestEffort).forwarded_packets, 190u);
}

TEST(LinkDown, ManualOverrideAlsoJudgesLateReleases) {
  Emulator emulator(spec_of("delay=50ms"), 0);
  Driver driver(emulator);
  ASSERT_EQ(driver.offer(1, 100, 0), Status::kOk);         // due at 50 ms: in the down period
  ASSERT_EQ(driver.offer(2, 100, 10 * kMs), Status::kOk);  // due at 60 ms: link up again
  emulator.set_link_up(false, 20 * kMs);
  EXPECT_TRUE(emulator.link_forced_down());
  EXPECT_EQ(driver.offer(3, 100, 30 * kMs), Status::kDropped);
  emulator.set_link_up(true, 55 * kMs);
  // The caller polls late, at 100 ms: frame 1 is still judged at its release time (50 ms).
  std::vector<std::pair<uint64_t, bool>> out;
  emulator.release(100 * kMs,
                   [&](uint64_t h, uint32_t, bool deliver) { out.emplace_back(h, deliver); });
  EXPECT_EQ(out, (std::vector<std::pair<uint64_t, bool>>{{1, false}, {2, true}}));
  EXPECT_EQ(testing::dropped(emulator, kBestEffort, DropReason::kLinkDown), 2u);
}

TEST(LinkDown, ManualUpDoesNotLiftAScriptedWindow) {
  Emulator emulator(spec_of("down=1s-2s"), 0);
  emulator.set_link_up(true, 1500 * kMs);
  EXPECT_EQ(emulator.offer({1, 100}, 1500 * kMs).status, Status::kDropped);
  EXPECT_EQ(emulator.offer({2, 100}, 2 * kSec).status, Status::kOk);  // end is exclusive
}

// A busy mixed scenario used by the determinism tests.
std::vector<Released> run_mixed(uint64_t seed, int64_t poll_every_ns, std::string* json = nullptr) {
  ImpairmentSpec spec = spec_of(
      "delay=5ms,jitter=500us,jitter-dist=normal,loss=1%,ge=0.5%/20%,dup=1%,reorder=2%,"
      "rate=50mbit,queue=200kb,cross=30%,cross-burst=3ms,down=700ms-750ms");
  spec.seed = seed;
  Emulator emulator(spec, 0);
  std::vector<Released> out;
  auto sink_at = [&](int64_t t) {
    return [&out, t](uint64_t h, uint32_t b, bool d) { out.push_back(Released{h, b, d, t}); };
  };
  int64_t next_poll = 0;
  for (int i = 0; i < 20'000; ++i) {
    const int64_t t = i * 150 * kUs;
    // Coarse pollers only look every poll_every_ns; fine ones follow next_event_ns().
    while (true) {
      const int64_t due = poll_every_ns > 0 ? next_poll : emulator.next_event_ns();
      if (due > t) break;
      emulator.release(due, sink_at(due));
      if (poll_every_ns > 0) next_poll += poll_every_ns;
    }
    const Frame frame{static_cast<uint64_t>(i), static_cast<uint32_t>(64 + (i * 37) % 1400),
                      i % 5 == 0 ? kReserved : kBestEffort};
    const OfferResult r = emulator.offer(frame, t);
    if (r.duplicate) {
      (void)emulator.offer_duplicate(
          {frame.handle | testing::kDuplicateBit, frame.frame_bytes, frame.traffic_class}, t);
    }
  }
  emulator.release(100 * kSec, sink_at(100 * kSec));
  EXPECT_EQ(emulator.held_frames(), 0u);
  if (json != nullptr) *json = emulator.counters_json();
  return out;
}

TEST(Determinism, SameSeedSameTraceDifferentSeedDifferentTrace) {
  const auto a = run_mixed(42, 0);
  const auto b = run_mixed(42, 0);
  const auto c = run_mixed(43, 0);
  ASSERT_GT(a.size(), 15'000u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Determinism, OutcomeDoesNotDependOnHowOftenTheCallerPolls) {
  // Exact polling (at every next_event_ns) and coarse polling (every 20 ms) release the same
  // frames in the same order with the same verdicts, and count the same (scheduled) sojourns.
  std::string exact_json;
  std::string coarse_json;
  const auto exact = run_mixed(7, 0, &exact_json);
  const auto coarse = run_mixed(7, 20 * kMs, &coarse_json);
  ASSERT_EQ(exact.size(), coarse.size());
  for (size_t i = 0; i < exact.size(); ++i) {
    ASSERT_EQ(exact[i].handle, coarse[i].handle) << i;
    ASSERT_EQ(exact[i].deliver, coarse[i].deliver) << i;
    ASSERT_GE(coarse[i].at_ns, exact[i].at_ns);  // late polling only releases later
  }
  EXPECT_EQ(exact_json, coarse_json);
}

TEST(Counters, ConservationInAMixedScenario) {
  std::string json;
  const auto released = run_mixed(11, 0, &json);
  const auto doc = boost::json::parse(json).as_object();
  for (const char* cls : {"reserved", "best_effort"}) {
    const auto& c = doc.at(cls).as_object();
    uint64_t dropped = 0;
    for (const auto& [reason, n] : c.at("dropped").as_object()) dropped += n.to_number<uint64_t>();
    EXPECT_EQ(c.at("offered_packets").to_number<uint64_t>() +
                  c.at("duplicated_packets").to_number<uint64_t>(),
              c.at("forwarded_packets").to_number<uint64_t>() + dropped)
        << cls;
  }
  uint64_t delivered = 0;
  for (const auto& r : released) delivered += r.deliver ? 1 : 0;
  EXPECT_EQ(delivered, doc.at("reserved").at("forwarded_packets").to_number<uint64_t>() +
                           doc.at("best_effort").at("forwarded_packets").to_number<uint64_t>());
}

TEST(Counters, JsonHasEveryClassReasonAndHistogram) {
  Emulator emulator(spec_of("delay=1ms,loss=50%,rate=1gbit,cross=10%"), 0);
  Driver driver(emulator);
  for (int i = 0; i < 100; ++i)
    (void)driver.offer(i, 1000, i * kMs, i % 2 ? kReserved : kBestEffort);
  driver.run_until(10 * kSec);  // cross traffic: ~10 on/off cycles of 100 ms
  const auto doc = boost::json::parse(emulator.counters_json()).as_object();
  for (const char* cls : {"reserved", "best_effort", "cross"}) {
    const auto& c = doc.at(cls).as_object();
    for (const char* key : {"offered_packets", "offered_bytes", "forwarded_packets",
                            "forwarded_bytes", "duplicated_packets", "reordered_packets"}) {
      EXPECT_TRUE(c.at(key).is_number()) << cls << "." << key;
    }
    for (const char* reason : {"loss", "burst_loss", "queue_full", "link_down", "no_capacity"}) {
      EXPECT_TRUE(c.at("dropped").at(reason).is_number()) << reason;
    }
    for (const char* h : {"queue_depth_bytes", "sojourn_ns"}) {
      for (const char* k : {"count", "min", "mean", "p50", "p99", "p99_9", "max"}) {
        EXPECT_TRUE(c.at(h).at(k).is_number()) << h << "." << k;
      }
    }
  }
  EXPECT_EQ(doc.at("best_effort").at("offered_packets").to_number<uint64_t>(), 50u);
  EXPECT_EQ(doc.at("reserved").at("dropped").at("loss").to_number<uint64_t>() +
                doc.at("reserved").at("forwarded_packets").to_number<uint64_t>(),
            50u);
  EXPECT_GT(doc.at("cross").at("forwarded_packets").to_number<uint64_t>(), 0u);
  EXPECT_EQ(doc.at("cross").at("sojourn_ns").at("count").to_number<uint64_t>(), 0u);
  EXPECT_EQ(doc.at("held_frames").to_number<uint64_t>(), 0u);
  EXPECT_FALSE(doc.at("link_forced_down").as_bool());
}

TEST(UpdateSpec, NewFramesUseTheNewSpecOldOnesKeepTheirs) {
  Emulator emulator(spec_of("delay=10ms"), 0);
  Driver driver(emulator);
  ASSERT_EQ(driver.offer(1, 100, 0), Status::kOk);
  ASSERT_TRUE(emulator.update_spec(spec_of("delay=20ms"), 1 * kMs).has_value());
  ASSERT_EQ(driver.offer(2, 100, 2 * kMs), Status::kOk);
  // Shorter delay: the FIFO clamp keeps frame 3 behind frame 2 (jitter-free FIFO).
  ASSERT_TRUE(emulator.update_spec(spec_of("delay=1ms"), 3 * kMs).has_value());
  ASSERT_EQ(driver.offer(3, 100, 4 * kMs), Status::kOk);
  ASSERT_EQ(driver.offer(4, 100, 30 * kMs), Status::kOk);
  driver.drain();
  ASSERT_EQ(driver.released().size(), 4u);
  EXPECT_EQ(driver.released()[0].at_ns, 10 * kMs);
  EXPECT_EQ(driver.released()[1].at_ns, 22 * kMs);
  EXPECT_EQ(driver.released()[2].at_ns, 22 * kMs);  // max(5 ms, 22 ms)
  EXPECT_EQ(driver.released()[3].at_ns, 31 * kMs);
}

TEST(UpdateSpec, ApplyTokensLossAndSeedIsKept) {
  Emulator emulator(spec_of("delay=1ms,seed=9"), 0);
  auto next = apply_spec(emulator.spec(), "loss=100%,seed=1234");
  ASSERT_TRUE(next.has_value());
  ASSERT_TRUE(emulator.update_spec(*next, 5 * kMs).has_value());
  EXPECT_EQ(emulator.spec().seed, 9u);  // documented: a seed change is ignored
  EXPECT_DOUBLE_EQ(emulator.spec().loss, 1.0);
  EXPECT_EQ(emulator.offer({1, 100}, 6 * kMs).status, Status::kDropped);
  EXPECT_EQ(testing::dropped(emulator, kBestEffort, DropReason::kLoss), 1u);
}

TEST(UpdateSpec, InvalidSpecIsRefusedAndNothingChanges) {
  Emulator emulator(spec_of("delay=1ms"), 0);
  ImpairmentSpec bad = emulator.spec();
  bad.cross_share = 0.5;  // without rate
  auto result = emulator.update_spec(bad, 0);
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().message, "'cross=50%': cross needs rate");
  EXPECT_EQ(emulator.spec(), spec_of("delay=1ms"));
}

TEST(UpdateSpec, RateChangeAppliesToFramesThatStartAfterIt) {
  Emulator emulator(spec_of("rate=1gbit"), 0);
  Driver driver(emulator);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(driver.offer(i, 1500, 0), Status::kOk);
  // At 18 us frame 1 is on the wire (12..24 us); frames 2, 3 wait and go at 100 Mbit/s.
  ASSERT_TRUE(emulator.update_spec(spec_of("rate=100mbit"), 18 * kUs).has_value());
  driver.drain();
  ASSERT_EQ(driver.released().size(), 4u);
  EXPECT_EQ(driver.released()[1].at_ns, 24 * kUs);
  EXPECT_EQ(driver.released()[2].at_ns, 24 * kUs + 120 * kUs);
  EXPECT_EQ(driver.released()[3].at_ns, 24 * kUs + 240 * kUs);
}

TEST(NextEvent, IdleIsMaxAndOtherwiseTheFirstRelease) {
  Emulator emulator(spec_of("delay=7ms,rate=1gbit"), 0);
  EXPECT_EQ(emulator.next_event_ns(), INT64_MAX);
  (void)emulator.offer({1, 1500}, 1 * kMs);
  (void)emulator.offer({2, 1500}, 1 * kMs);
  EXPECT_EQ(emulator.next_event_ns(), 1 * kMs + 12 * kUs + 7 * kMs);
  uint32_t n = emulator.release(1 * kMs + 12 * kUs + 7 * kMs - 1, [](uint64_t, uint32_t, bool) {});
  EXPECT_EQ(n, 0u);
  n = emulator.release(emulator.next_event_ns(), [](uint64_t, uint32_t, bool) {});
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(emulator.next_event_ns(), 1 * kMs + 24 * kUs + 7 * kMs);
}

TEST(Construction, InvalidSpecOrZeroCapacityThrows) {
  ImpairmentSpec bad;
  bad.loss = 3;
  EXPECT_THROW(Emulator(bad, 0), common::Failure);
  EXPECT_THROW(Emulator(ImpairmentSpec{}, 0, 0), common::Failure);
}

}  // namespace
}  // namespace detwan::wanem

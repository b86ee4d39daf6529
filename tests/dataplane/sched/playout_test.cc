#include "dataplane/sched/playout.h"

#include <algorithm>
#include <cstdint>
#include <limits>
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
using testing::Random;

constexpr int64_t kUs = 1'000;
constexpr int64_t kMs = 1'000'000;
constexpr int kLate = static_cast<int>(PlayoutDrop::kLate);
constexpr int kTooEarly = static_cast<int>(PlayoutDrop::kTooEarly);
constexpr int kBufferFull = static_cast<int>(PlayoutDrop::kBufferFull);
constexpr int kStale = static_cast<int>(PlayoutDrop::kStale);

Playout make(const PlayoutConfig& config) {
  auto playout = Playout::create(config);
  EXPECT_TRUE(playout.has_value()) << playout.error().describe();
  return std::move(playout).value();
}

std::vector<PlayoutFrame> release(Playout& p, int64_t now_ns) {
  std::vector<PlayoutFrame> out;
  (void)p.release_due(now_ns, [&](const PlayoutFrame& f) {
    out.push_back(f);
    p.record_release(f, now_ns);  // released at the instant it became due
  });
  return out;
}

struct Arrival {
  int64_t arrival_ns;
  int64_t tx_ns;
  uint64_t handle;
  bool late;  // the WAN delay exceeded the bound
};

// A sender emits a packet every ~100 us for 20000 packets; the WAN delays each by 1-5 ms
// (jitter 4 ms), 3 % of them by more than the 5 ms bound. The receiver's clock runs 7.5 us
// ahead of the sender's. Every on-time packet must leave exactly at tx + offset + bound.
void run_jittery_wan(LateAction action) {
  const int64_t bound = 5 * kMs;
  const int64_t offset = 7'500;
  PlayoutConfig config;
  config.bound_ns = bound;
  config.clock_offset_ns = offset;
  config.late_action = action;
  config.capacity_frames = 1024;
  Playout p = make(config);

  Random rng(4242);
  std::vector<Arrival> arrivals;
  int64_t tx = 1'000 * kMs;
  uint64_t expected_late = 0;
  for (uint64_t i = 0; i < 20'000; ++i) {
    tx += static_cast<int64_t>(rng.between(50 * kUs, 150 * kUs));
    const bool late = rng.between(0, 99) < 3;
    const int64_t delay = late ? bound + static_cast<int64_t>(rng.between(1, 2 * kMs))
                               : static_cast<int64_t>(rng.between(1 * kMs, bound));
    expected_late += late ? 1 : 0;
    arrivals.push_back(Arrival{tx + offset + delay, tx, i, late});
  }
  std::stable_sort(arrivals.begin(), arrivals.end(),
                   [](const Arrival& a, const Arrival& b) { return a.arrival_ns < b.arrival_ns; });

  common::VirtualClock clock(0);
  size_t next = 0;
  uint64_t on_time = 0;
  uint64_t late_released = 0;
  int64_t previous_release = 0;
  for (;;) {
    int64_t t = p.next_event_ns();
    if (next < arrivals.size()) t = std::min(t, arrivals[next].arrival_ns);
    if (t == std::numeric_limits<int64_t>::max()) break;
    clock.set_ns(t);
    while (next < arrivals.size() && arrivals[next].arrival_ns == t) {
      const Arrival& a = arrivals[next++];
      const Status status = p.push(a.handle, 1200, a.tx_ns, clock.now_ns());
      EXPECT_EQ(status, a.late && action == LateAction::kDrop ? Status::kDropped : Status::kOk);
    }
    (void)p.release_due(clock.now_ns(), [&](const PlayoutFrame& f) {
      EXPECT_EQ(f.release_ns, clock.now_ns()) << "released at its scheduled time";
      EXPECT_GE(f.release_ns, previous_release);
      previous_release = f.release_ns;
      if (f.late) {
        ++late_released;
        EXPECT_EQ(f.release_ns, f.arrival_ns);
        EXPECT_GT(f.arrival_ns, f.target_ns);
      } else {
        ++on_time;
        EXPECT_EQ(f.release_ns, f.tx_timestamp_ns + offset + bound);  // exactly on time
        EXPECT_EQ(f.target_ns, f.release_ns);
      }
      p.record_release(f, clock.now_ns());
    });
  }
  const PlayoutCounters& c = p.counters();
  EXPECT_GT(expected_late, 400u);
  EXPECT_EQ(c.received_packets, 20'000u);
  EXPECT_EQ(c.late_packets, expected_late);
  EXPECT_EQ(c.lateness_ns.count(), expected_late);
  EXPECT_GT(c.lateness_ns.min(), 0);
  EXPECT_LE(c.lateness_ns.max(), 2 * kMs);
  EXPECT_EQ(on_time, 20'000u - expected_late);
  EXPECT_GE(c.wan_delay_ns.min(), 1 * kMs);
  EXPECT_GT(c.wan_delay_ns.max(), bound);
  if (action == LateAction::kDeliver) {
    EXPECT_EQ(late_released, expected_late);
    EXPECT_EQ(c.late_delivered, expected_late);
    EXPECT_EQ(c.released_packets, 20'000u);
    EXPECT_EQ(c.dropped[kLate], 0u);
  } else {
    EXPECT_EQ(late_released, 0u);
    EXPECT_EQ(c.late_delivered, 0u);
    EXPECT_EQ(c.released_packets, on_time);
    EXPECT_EQ(c.dropped[kLate], expected_late);
    // Only on-time packets left: the one-way delay at egress is the bound, exactly.
    EXPECT_EQ(c.one_way_delay_ns.min(), bound);
    EXPECT_EQ(c.one_way_delay_ns.max(), bound);
  }
  EXPECT_EQ(c.one_way_delay_ns.count(), c.released_packets);
  EXPECT_EQ(c.playout_error_ns.count(), c.released_packets);
  EXPECT_EQ(c.playout_error_ns.min(), 0);
  EXPECT_EQ(p.held_frames(), 0u);
}

TEST(PlayoutTest, ReleasesExactlyAtTimestampPlusBoundAndDeliversLatePackets) {
  run_jittery_wan(LateAction::kDeliver);
}

TEST(PlayoutTest, ReleasesExactlyAtTimestampPlusBoundAndDropsLatePackets) {
  run_jittery_wan(LateAction::kDrop);
}

TEST(PlayoutTest, BoundZeroReleasesOnReceiptAndNothingIsLate) {
  Playout p = make(PlayoutConfig{});
  ASSERT_EQ(p.push(1, 100, 0, 50 * kMs), Status::kOk);  // sent long ago
  EXPECT_EQ(p.next_event_ns(), 50 * kMs);
  const auto frames = release(p, 50 * kMs);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].release_ns, 50 * kMs);
  EXPECT_FALSE(frames[0].late);
  EXPECT_EQ(p.counters().late_packets, 0u);
  EXPECT_EQ(p.counters().wan_delay_ns.max(), 50 * kMs);
  EXPECT_EQ(p.counters().one_way_delay_ns.max(), 50 * kMs);
}

TEST(PlayoutTest, PacketAtItsTargetIsNotLate) {
  PlayoutConfig config;
  config.bound_ns = 10 * kMs;
  config.late_action = LateAction::kDrop;
  Playout p = make(config);
  EXPECT_EQ(p.push(1, 100, 0, 10 * kMs), Status::kOk);           // exactly at tx + bound
  EXPECT_EQ(p.push(2, 100, 0, 10 * kMs + 1), Status::kDropped);  // one ns after
  EXPECT_EQ(p.counters().late_packets, 1u);
  EXPECT_EQ(p.counters().dropped[kLate], 1u);
  EXPECT_EQ(release(p, 10 * kMs + 1).size(), 1u);
}

TEST(PlayoutTest, HostileTimestampsAreDroppedNotHeldOrOverflowed) {
  PlayoutConfig config;
  config.bound_ns = 10 * kMs;
  config.clock_offset_ns = 5 * kMs;
  config.max_hold_ns = 100 * kMs;
  Playout p = make(config);
  const int64_t now = 1'000 * kMs;
  EXPECT_EQ(p.push(1, 100, now + 10'000 * kMs, now), Status::kDropped);  // 10 s ahead
  EXPECT_EQ(p.push(2, 100, std::numeric_limits<int64_t>::max(), now), Status::kDropped);
  EXPECT_EQ(p.counters().dropped[kTooEarly], 2u);
  // Far in the past: refused as stale, not delivered late (whatever the late action).
  EXPECT_EQ(p.push(3, 100, std::numeric_limits<int64_t>::min(), now), Status::kDropped);
  EXPECT_EQ(p.counters().dropped[kStale], 1u);
  EXPECT_EQ(p.counters().late_packets, 0u);
  // Late by exactly max_hold: still delivered late; by 1 ns more: stale.
  EXPECT_EQ(p.push(5, 100, now - 115 * kMs, now), Status::kOk);
  EXPECT_EQ(p.counters().late_packets, 1u);
  EXPECT_EQ(p.push(6, 100, now - 115 * kMs - 1, now), Status::kDropped);
  EXPECT_EQ(p.counters().dropped[kStale], 2u);
  EXPECT_EQ(p.push(4, 100, now + 85 * kMs, now), Status::kOk);  // held 100 ms: the limit
  EXPECT_EQ(p.held_frames(), 2u);
  // Refused timestamps never reach the delay histogram.
  EXPECT_EQ(p.counters().wan_delay_ns.count(), 2u);
  const auto frames = release(p, now);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].handle, 5u);
  EXPECT_EQ(p.next_event_ns(), now + 100 * kMs);
}

TEST(PlayoutTest, FullBufferDropsAndCounts) {
  PlayoutConfig config;
  config.bound_ns = 1 * kMs;
  config.capacity_frames = 2;
  Playout p = make(config);
  EXPECT_EQ(p.push(1, 100, 0, 0), Status::kOk);
  EXPECT_EQ(p.push(2, 100, 0, 0), Status::kOk);
  EXPECT_EQ(p.push(3, 100, 0, 0), Status::kDropped);
  EXPECT_EQ(p.counters().dropped[kBufferFull], 1u);
  EXPECT_EQ(p.held_frames(), 2u);
  EXPECT_EQ(release(p, 1 * kMs).size(), 2u);
  EXPECT_EQ(p.push(4, 100, 1 * kMs, 1 * kMs), Status::kOk);
}

TEST(PlayoutTest, EqualTargetsLeaveInArrivalOrderAndOffsetChangesApplyToNewPackets) {
  PlayoutConfig config;
  config.bound_ns = 2 * kMs;
  Playout p = make(config);
  // Same target (tx 0 + 2 ms), different arrivals; then an earlier target arriving last.
  ASSERT_EQ(p.push(1, 100, 0, 100 * kUs), Status::kOk);
  ASSERT_EQ(p.push(2, 100, 0, 200 * kUs), Status::kOk);
  ASSERT_EQ(p.push(3, 100, -500 * kUs, 300 * kUs), Status::kOk);
  p.set_clock_offset_ns(-1 * kMs);                       // the receiver is 1 ms behind the sender
  ASSERT_EQ(p.push(4, 100, 0, 400 * kUs), Status::kOk);  // target 1 ms
  std::vector<uint64_t> order;
  std::vector<int64_t> at;
  for (const PlayoutFrame& f : release(p, 10 * kMs)) {
    order.push_back(f.handle);
    at.push_back(f.release_ns);
  }
  EXPECT_EQ(order, (std::vector<uint64_t>{4, 3, 1, 2}));
  EXPECT_EQ(at, (std::vector<int64_t>{1 * kMs, 1'500 * kUs, 2 * kMs, 2 * kMs}));
}

// Packets in release order go to the ring, the others to the heap (playout.h): whatever the
// mix, packets leave in (release time, arrival) order, across many wraps of a small ring, with
// the buffer filling up now and then.
TEST(PlayoutTest, InOrderAndReorderedPacketsLeaveInReleaseThenArrivalOrder) {
  PlayoutConfig config;
  config.bound_ns = 1 * kMs;
  config.max_hold_ns = 1'000 * kMs;
  config.capacity_frames = 13;
  Playout p = make(config);
  Random rng(99);
  struct Held {
    int64_t release_ns;
    uint64_t arrival;
    uint64_t handle;
  };
  std::vector<Held> reference;  // what the playout holds, in arrival order
  int64_t now = 0;
  int64_t tx = 0;
  uint64_t arrival = 0;
  uint64_t released = 0;
  uint64_t full = 0;
  for (uint64_t handle = 1; handle <= 20'000; ++handle) {
    now += static_cast<int64_t>(rng.between(0, 40 * kUs));
    // Mostly growing timestamps, some equal, some from the past (reordered by the WAN).
    const uint64_t kind = rng.between(0, 9);
    if (kind < 6) tx = now - static_cast<int64_t>(rng.between(0, 30 * kUs));  // WAN delay
    const int64_t packet_tx = kind == 9 ? tx - static_cast<int64_t>(rng.between(1, 200 * kUs)) : tx;
    const int64_t release_ns = std::max(packet_tx + config.bound_ns, now);
    const Status status = p.push(handle, 100, packet_tx, now);
    if (reference.size() == config.capacity_frames) {
      EXPECT_EQ(status, Status::kDropped);
      ++full;
    } else {
      ASSERT_EQ(status, Status::kOk);
      reference.push_back(Held{release_ns, arrival++, handle});
    }
    ASSERT_EQ(p.held_frames(), reference.size());
    if (rng.between(0, 2) != 0) continue;
    const int64_t at = now + static_cast<int64_t>(rng.between(0, 300 * kUs));
    now = at;
    std::stable_sort(reference.begin(), reference.end(), [](const Held& a, const Held& b) {
      return a.release_ns != b.release_ns ? a.release_ns < b.release_ns : a.arrival < b.arrival;
    });
    std::vector<uint64_t> expected;
    std::size_t due = 0;
    while (due < reference.size() && reference[due].release_ns <= at) {
      expected.push_back(reference[due++].handle);
    }
    reference.erase(reference.begin(), reference.begin() + static_cast<std::ptrdiff_t>(due));
    std::vector<uint64_t> got;
    for (const PlayoutFrame& f : release(p, at)) got.push_back(f.handle);
    ASSERT_EQ(got, expected) << "after packet " << handle;
    released += got.size();
    const int64_t next = reference.empty() ? std::numeric_limits<int64_t>::max()
                                           : std::min_element(reference.begin(), reference.end(),
                                                              [](const Held& a, const Held& b) {
                                                                return a.release_ns < b.release_ns;
                                                              })
                                                 ->release_ns;
    ASSERT_EQ(p.next_event_ns(), next);
  }
  EXPECT_GT(released, 10'000u);
  EXPECT_GT(full, 0u);
  EXPECT_EQ(p.counters().dropped[kBufferFull], full);
}

TEST(PlayoutTest, RecordsPlayoutErrorAndReportsJson) {
  PlayoutConfig config;
  config.bound_ns = 1 * kMs;
  Playout p = make(config);
  ASSERT_EQ(p.push(1, 100, 0, 0), Status::kOk);
  const auto frames = release(p, 1 * kMs + 300);  // the caller polled 300 ns late
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].sender_time_ns, 0);
  EXPECT_EQ(p.counters().playout_error_ns.count(), 1u);
  EXPECT_EQ(p.counters().playout_error_ns.max(), 300);
  // The one-way delay at egress is measured at the actual release: bound + playout error.
  EXPECT_EQ(p.counters().one_way_delay_ns.max(), 1 * kMs + 300);
  const std::string json = p.counters_json();
  EXPECT_THAT(json, HasSubstr("\"received_packets\":1,"));
  EXPECT_THAT(json, HasSubstr("\"dropped\":{\"late\":0,\"too_early\":0,\"buffer_full\":0,\"stale\":0}"));
  EXPECT_THAT(json, HasSubstr("\"playout_error_ns\":{\"count\":1,"));
}

TEST(PlayoutTest, RejectsBadConfiguration) {
  PlayoutConfig config;
  config.bound_ns = -1;
  EXPECT_THAT(Playout::create(config).error().message, HasSubstr("bound_ns must be >= 0"));
  config.bound_ns = 2 * kMs;
  config.max_hold_ns = 1 * kMs;
  EXPECT_THAT(Playout::create(config).error().message,
              HasSubstr("max_hold_ns 1000000 is below bound_ns 2000000"));
  config.max_hold_ns = 2 * kMs;
  config.capacity_frames = 0;
  EXPECT_THAT(Playout::create(config).error().message, HasSubstr("capacity_frames must be > 0"));
  config.capacity_frames = 1;
  EXPECT_TRUE(Playout::create(config).has_value());
}

// Random pushes (on time, late, too early, past capacity) and releases at increasing times from
// start_ns, the same on every playout given; every answer must be the same on all of them.
void drive_alike(std::vector<Playout*> playouts, uint64_t seed, int64_t start_ns) {
  Random rng(seed);
  int64_t now = start_ns;
  for (uint64_t handle = 1; handle <= 3'000; ++handle) {
    now += static_cast<int64_t>(rng.between(0, 200 * kUs));
    const int64_t tx = now - static_cast<int64_t>(rng.between(0, 4 * kMs)) +
                       (rng.between(0, 99) == 0 ? 10'000 * kMs : 0);  // 1 %: far future
    const Status first = playouts[0]->push(handle, 100 + handle % 1000, tx, now);
    for (size_t i = 1; i < playouts.size(); ++i) {
      ASSERT_EQ(playouts[i]->push(handle, 100 + handle % 1000, tx, now), first) << handle;
    }
    if (rng.between(0, 3) != 0) continue;
    const auto frames = release(*playouts[0], now);
    for (size_t i = 1; i < playouts.size(); ++i) {
      const auto other = release(*playouts[i], now);
      ASSERT_EQ(other.size(), frames.size());
      for (size_t k = 0; k < frames.size(); ++k) {
        ASSERT_EQ(other[k].handle, frames[k].handle);
        ASSERT_EQ(other[k].release_ns, frames[k].release_ns);
        ASSERT_EQ(other[k].arrival_ns, frames[k].arrival_ns);
        ASSERT_EQ(other[k].late, frames[k].late);
      }
      ASSERT_EQ(playouts[i]->next_event_ns(), playouts[0]->next_event_ns());
    }
  }
}

// A playout that was used (late, too-early and buffer-full drops, histograms filled) and then
// drained is restarted with another release policy: it behaves exactly like a new playout of
// that policy, also at times earlier than its last use.
TEST(PlayoutTest, ARestartedPlayoutBehavesLikeANewOne) {
  PlayoutConfig before;
  before.bound_ns = 2 * kMs;
  before.clock_offset_ns = 100;
  before.max_hold_ns = 50 * kMs;
  before.capacity_frames = 64;
  Playout used = make(before);
  drive_alike({&used}, 1, 100 * kMs);
  const PlayoutCounters& c = used.counters();
  ASSERT_GT(c.dropped[kBufferFull] + c.dropped[kTooEarly], 0u);
  ASSERT_GT(c.late_packets, 0u);
  ASSERT_GT(used.held_frames(), 0u);

  PlayoutConfig after = before;
  after.bound_ns = 3 * kMs;
  after.clock_offset_ns = -250;
  after.late_action = LateAction::kDrop;
  after.max_hold_ns = 20 * kMs;
  const std::string held_json = used.counters_json();
  EXPECT_FALSE(used.restart(after));  // it still holds packets
  EXPECT_EQ(used.counters_json(), held_json);
  (void)release(used, INT64_MAX - 1);
  ASSERT_EQ(used.held_frames(), 0u);
  PlayoutConfig other_capacity = after;
  other_capacity.capacity_frames = 128;
  EXPECT_FALSE(used.restart(other_capacity));
  PlayoutConfig invalid = after;
  invalid.max_hold_ns = invalid.bound_ns - 1;
  EXPECT_FALSE(used.restart(invalid));
  EXPECT_EQ(used.config().bound_ns, before.bound_ns);  // refused: unchanged

  ASSERT_TRUE(used.restart(after));
  Playout fresh = make(after);
  EXPECT_EQ(used.counters_json(), fresh.counters_json());
  drive_alike({&fresh, &used}, 2, 50 * kMs);  // starts before the first run ended
  EXPECT_EQ(used.counters_json(), fresh.counters_json());
  EXPECT_EQ(used.held_frames(), fresh.held_frames());
}

}  // namespace
}  // namespace detwan::dataplane::sched

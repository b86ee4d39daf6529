// TxScheduler::reconfigure(): a new slot list and policies at run time. Each test keeps a twin
// scheduler that is never reconfigured, fed the same frames, as the reference for "undisturbed".
// The binary counts allocations (tests/common/counting_new.h) to check that a change reuses the
// spare wheel instead of allocating one.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dataplane/sched/tx_scheduler.h"
#include "tests/common/counting_new.h"
#include "tests/dataplane/sched/sched_test_util.h"

namespace detwan::dataplane::sched {
namespace {

using common::Status;
using ::testing::HasSubstr;
using testing::slot_range;
using testing::SlotOracle;

constexpr uint32_t kFrameBytes = 1250;  // 1000 ns at 10 Gbit/s
constexpr int kDrop(TxDrop reason) { return static_cast<int>(reason); }

// The scheduler tests' port (testing::ten_slot_port: 10 Gbit/s, 10 slots of 10 us, guard
// 1 us) with these tunnels (t7: slots 0-3, t9: slot 5 by default).
GclConfig port_config(std::vector<GclTunnel> tunnels) {
  GclConfig config = testing::ten_slot_port();
  config.tunnels = std::move(tunnels);
  return config;
}
GclTunnel t7(std::vector<uint32_t> slots = slot_range(0, 3), uint64_t rate = 2'000'000'000) {
  return GclTunnel{7, rate, std::move(slots)};
}
GclTunnel t9(std::vector<uint32_t> slots = {5}) { return GclTunnel{9, 500'000'000, slots}; }

TunnelTxPolicy policy(uint32_t id, int64_t max_wait_ns = kNoMaxWait) {
  TunnelTxPolicy p;
  p.tunnel_id = id;
  p.burst_bytes = 10'000'000;
  p.max_wait_ns = max_wait_ns;
  return p;
}

TxSchedulerConfig tx_config(std::vector<TunnelTxPolicy> policies) {
  TxSchedulerConfig config;
  config.tunnels = std::move(policies);
  return config;
}

GateControlList gcl(const GclConfig& config) {
  auto list = GateControlList::create(config);
  EXPECT_TRUE(list.has_value()) << list.error().describe();
  return std::move(list).value();
}

TxScheduler make(const GclConfig& config, const TxSchedulerConfig& tx) {
  auto scheduler = TxScheduler::create(gcl(config), tx, 0);
  EXPECT_TRUE(scheduler.has_value()) << scheduler.error().describe();
  return std::move(scheduler).value();
}

// Every frame handed over up to until_ns by a loop that is never late.
std::vector<TxFrame> drain(TxScheduler& scheduler, int64_t until_ns) {
  std::vector<TxFrame> out;
  while (scheduler.next_event_ns() <= until_ns) {
    const int64_t now = scheduler.next_event_ns();
    (void)scheduler.dequeue_due(now, [&](const TxFrame& f) { out.push_back(f); });
  }
  return out;
}

std::vector<TxFrame> of_tunnel(const std::vector<TxFrame>& frames, uint32_t id, bool send = true) {
  std::vector<TxFrame> out;
  for (const TxFrame& f : frames) {
    if (f.tunnel_id == id && !f.best_effort && f.send == send) out.push_back(f);
  }
  return out;
}

// Two identical schedulers with 20 frames of tunnel 7 (handles 100..), 5 of tunnel 9 (200..) and
// 5 best-effort frames (300..) enqueued at 0.
struct Twins {
  TxScheduler changed;
  TxScheduler reference;
  explicit Twins(const TxSchedulerConfig& tx = tx_config({policy(7), policy(9)}))
      : changed(make(port_config({t7(), t9()}), tx)),
        reference(make(port_config({t7(), t9()}), tx)) {
    for (TxScheduler* s : {&changed, &reference}) {
      for (uint64_t i = 0; i < 20; ++i)
        EXPECT_EQ(s->enqueue(7, 100 + i, kFrameBytes, 0), Status::kOk);
      for (uint64_t i = 0; i < 5; ++i)
        EXPECT_EQ(s->enqueue(9, 200 + i, kFrameBytes, 0), Status::kOk);
      for (uint64_t i = 0; i < 5; ++i) {
        EXPECT_EQ(s->enqueue_best_effort(300 + i, kFrameBytes, 0), Status::kOk);
      }
    }
  }
};

void expect_same_departures(const std::vector<TxFrame>& a, const std::vector<TxFrame>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].handle, b[i].handle) << i;
    EXPECT_EQ(a[i].departure_ns, b[i].departure_ns) << i;
    EXPECT_EQ(a[i].send, b[i].send) << i;
  }
}

// Each frame inside its owner's slots of `config` and the handles in increasing order.
void expect_in_slots_in_order(const std::vector<TxFrame>& frames, const GclConfig& config,
                              uint32_t owner) {
  const SlotOracle oracle(config);
  uint64_t last_handle = 0;
  for (const TxFrame& f : frames) {
    EXPECT_TRUE(f.send);
    EXPECT_EQ(oracle.check(owner, f.departure_ns, f.tx_end_ns), "") << f.handle;
    EXPECT_GT(f.handle, last_handle);
    last_handle = f.handle;
  }
}

TEST(TxSchedulerReconfigure, UnchangedOwnersKeepTheirDepartures) {
  Twins twins;
  // Tunnel 9 moves from slot 5 to slots 6-7 (which best effort loses); tunnel 7 is untouched.
  const GclConfig next = port_config({t7(), t9({6, 7})});
  ASSERT_TRUE(twins.changed.reconfigure(gcl(next), tx_config({policy(7), policy(9)}), 500));
  const auto changed = drain(twins.changed, 1'000'000);
  const auto reference = drain(twins.reference, 1'000'000);
  expect_same_departures(of_tunnel(changed, 7), of_tunnel(reference, 7));
  EXPECT_EQ(of_tunnel(changed, 7).size(), 20u);
  // Tunnel 9's frames left in its new slots, in order, within the first cycle after the change.
  const auto nine = of_tunnel(changed, 9);
  ASSERT_EQ(nine.size(), 5u);
  expect_in_slots_in_order(nine, next, 9);
  EXPECT_EQ(nine.front().departure_ns, 60'000);
  EXPECT_NE(of_tunnel(reference, 9).front().departure_ns, 60'000);  // it did move
  // Counters went on: tunnel 7 counted 20 queued and 20 sent in both.
  EXPECT_EQ(twins.changed.tunnel_counters(7)->queued_packets, 20u);
  EXPECT_EQ(twins.changed.tunnel_counters(7)->sent_packets, 20u);
  EXPECT_EQ(twins.changed.port_counters().queued_packets, 30u);
  EXPECT_EQ(twins.changed.port_counters().dropped[kDrop(TxDrop::kReconfigured)], 0u);
}

TEST(TxSchedulerReconfigure, AnUnchangedOwnerKeepsTheGapsBetweenItsDepartures) {
  // Tunnel 7's frames arrive 5 us apart and leave as they arrive (0, 5, ..., 25 us). Changed at
  // 25 us, before any was taken: kept, they leave at those instants; re-placed from now they
  // would leave back to back from 25 us.
  TxScheduler scheduler = make(port_config({t7(), t9()}), tx_config({policy(7), policy(9)}));
  for (int64_t i = 0; i < 6; ++i) {
    ASSERT_EQ(scheduler.enqueue(7, 100 + static_cast<uint64_t>(i), kFrameBytes, i * 5'000),
              Status::kOk);
  }
  ASSERT_TRUE(scheduler.reconfigure(gcl(port_config({t7(), t9({6})})),
                                    tx_config({policy(7), policy(9)}), 25'000));
  const auto frames = drain(scheduler, 1'000'000);
  ASSERT_EQ(frames.size(), 6u);
  for (size_t i = 0; i < frames.size(); ++i) {
    EXPECT_TRUE(frames[i].send);
    EXPECT_EQ(frames[i].departure_ns, static_cast<int64_t>(i) * 5'000) << i;
  }
}

TEST(TxSchedulerReconfigure, ChangedSlotOwnerIsReplacedInItsNewWindowsOnly) {
  Twins twins;
  // 11 of tunnel 7's frames leave (0 .. 10 us), then it moves to slots 6-8 ([60, 90) us).
  const auto before = drain(twins.changed, 10'500);
  ASSERT_EQ(of_tunnel(before, 7).size(), 11u);
  const GclConfig next = port_config({t7({6, 7, 8}), t9()});
  ASSERT_TRUE(twins.changed.reconfigure(gcl(next), tx_config({policy(7), policy(9)}), 10'500));
  const auto after = drain(twins.changed, 1'000'000);
  const auto seven = of_tunnel(after, 7);
  ASSERT_EQ(seven.size(), 9u);  // 20 - 11: nothing lost
  expect_in_slots_in_order(seven, next, 7);
  for (size_t i = 0; i < seven.size(); ++i) {
    EXPECT_EQ(seven[i].handle, 111 + i);
    EXPECT_EQ(seven[i].departure_ns, 60'000 + static_cast<int64_t>(i) * 1'000);  // back to back
  }
  // Tunnel 9 kept its slot and its departures.
  expect_same_departures(of_tunnel(after, 9), of_tunnel(drain(twins.reference, 1'000'000), 9));
  // A new frame of tunnel 7 queues behind the re-placed ones, in the new slots.
  ASSERT_EQ(twins.changed.enqueue(7, 999, kFrameBytes, 1'000'000), Status::kOk);
  const auto later = drain(twins.changed, 2'000'000);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].departure_ns, 1'060'000);
  EXPECT_EQ(twins.changed.port_counters().dropped[kDrop(TxDrop::kReconfigured)], 0u);
}

TEST(TxSchedulerReconfigure, RemovedTunnelsFramesAreHandedBackUnsentAndCounted) {
  Twins twins;
  // Best effort on behalf of tunnel 9 goes with it; plain best effort stays.
  ASSERT_EQ(twins.changed.enqueue_best_effort(400, kFrameBytes, 0, 9), Status::kOk);
  const GclConfig next = port_config({t7()});
  ASSERT_TRUE(twins.changed.reconfigure(gcl(next), tx_config({policy(7)}), 500));
  EXPECT_EQ(twins.changed.tunnel_counters(9), nullptr);
  EXPECT_EQ(twins.changed.held_frames(), 20u + 5u + 5u + 1u);  // handed-back ones until taken
  EXPECT_EQ(twins.changed.next_event_ns(), 500);               // due at once
  std::vector<TxFrame> returned, rest;
  (void)twins.changed.dequeue_due(
      500, [&](const TxFrame& f) { (f.send ? rest : returned).push_back(f); });
  ASSERT_EQ(returned.size(), 6u);
  std::map<uint64_t, TxDrop> by_handle;
  for (const TxFrame& f : returned) by_handle[f.handle] = f.drop;
  for (uint64_t h : {200, 201, 202, 203, 204, 400}) {
    ASSERT_TRUE(by_handle.count(h)) << h;
    EXPECT_EQ(by_handle[h], TxDrop::kTunnelRemoved) << h;
  }
  EXPECT_EQ(twins.changed.port_counters().dropped[kDrop(TxDrop::kTunnelRemoved)], 6u);
  for (const TxFrame& f : drain(twins.changed, 1'000'000)) rest.push_back(f);
  for (const TxFrame& f : rest) EXPECT_TRUE(f.send) << f.handle;
  expect_same_departures(of_tunnel(rest, 7), of_tunnel(drain(twins.reference, 1'000'000), 7));
  size_t best_effort = 0;
  for (const TxFrame& f : rest) best_effort += f.best_effort ? 1 : 0;
  EXPECT_EQ(best_effort, 5u);
  EXPECT_EQ(twins.changed.held_frames(), 0u);
}

TEST(TxSchedulerReconfigure, BestEffortIsReplacedOnlyWhenTheUnreservedSlotsChange) {
  {
    // Tunnel 7's rate changes, its slots do not: nobody's slots moved.
    Twins twins;
    const GclConfig next = port_config({t7(slot_range(0, 3), 3'000'000'000), t9()});
    ASSERT_TRUE(twins.changed.reconfigure(gcl(next), tx_config({policy(7), policy(9)}), 500));
    expect_same_departures(drain(twins.changed, 1'000'000), drain(twins.reference, 1'000'000));
  }
  {
    // Tunnel 9 takes slot 4 too: best effort, queued for slot 4 (40 .. 44 us), moves to 6-9.
    Twins twins;
    const auto reference = drain(twins.reference, 1'000'000);
    std::vector<TxFrame> best_effort_before;
    for (const TxFrame& f : reference) {
      if (f.best_effort) best_effort_before.push_back(f);
    }
    ASSERT_EQ(best_effort_before.size(), 5u);
    EXPECT_EQ(best_effort_before.front().departure_ns, 40'000);
    const GclConfig next = port_config({t7(), t9({4, 5})});
    ASSERT_TRUE(twins.changed.reconfigure(gcl(next), tx_config({policy(7), policy(9)}), 500));
    const auto after = drain(twins.changed, 1'000'000);
    std::vector<TxFrame> best_effort;
    for (const TxFrame& f : after) {
      if (f.best_effort) best_effort.push_back(f);
    }
    ASSERT_EQ(best_effort.size(), 5u);
    expect_in_slots_in_order(best_effort, next, testing::kUnreserved);
    EXPECT_EQ(best_effort.front().departure_ns, 60'000);
    expect_same_departures(of_tunnel(after, 7), of_tunnel(reference, 7));
  }
}

TEST(TxSchedulerReconfigure, AFrameNoNewWindowTakesIsHandedBack) {
  // Tunnel 7 may wait 65 us. Moved at 0 to slots 6-8, its frames would leave at 60, 61, ... us:
  // the first six within 65 us of their enqueue time, the other 14 not.
  Twins twins(tx_config({policy(7, 65'000), policy(9)}));
  const GclConfig next = port_config({t7({6, 7, 8}), t9()});
  ASSERT_TRUE(twins.changed.reconfigure(gcl(next), tx_config({policy(7, 65'000), policy(9)}), 0));
  const auto after = drain(twins.changed, 1'000'000);
  const auto sent = of_tunnel(after, 7, true);
  const auto returned = of_tunnel(after, 7, false);
  ASSERT_EQ(sent.size(), 6u);
  ASSERT_EQ(returned.size(), 14u);
  expect_in_slots_in_order(sent, next, 7);
  for (const TxFrame& f : returned) EXPECT_EQ(f.drop, TxDrop::kReconfigured);
  EXPECT_EQ(twins.changed.tunnel_counters(7)->dropped[kDrop(TxDrop::kReconfigured)], 14u);
  EXPECT_EQ(twins.changed.port_counters().dropped[kDrop(TxDrop::kReconfigured)], 14u);
}

TEST(TxSchedulerReconfigure, FailureLeavesTheSchedulerAsItWas) {
  Twins twins;
  TunnelTxPolicy bad = policy(9);
  bad.burst_bytes = 100;  // below one max frame
  auto refused = twins.changed.reconfigure(gcl(port_config({t7({6, 7, 8}), t9({4, 5})})),
                                           tx_config({policy(7), bad}), 500);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, common::ErrorCode::kConfig);
  EXPECT_THAT(refused.error().message, HasSubstr("tunnel 9"));
  EXPECT_EQ(twins.changed.held_frames(), twins.reference.held_frames());
  EXPECT_EQ(twins.changed.next_event_ns(), twins.reference.next_event_ns());
  expect_same_departures(drain(twins.changed, 1'000'000), drain(twins.reference, 1'000'000));
  EXPECT_EQ(twins.changed.port_counters().sent_packets, 30u);
  EXPECT_EQ(twins.changed.describe(), twins.reference.describe());
}

TEST(TxSchedulerReconfigure, PolicerIsKeptUnlessItsParametersChange) {
  // A 1-frame burst at 10 Mbit/s: the second frame at the same instant is policed.
  TunnelTxPolicy tight = policy(7);
  tight.burst_bytes = 1500;
  GclConfig config = port_config({t7(slot_range(0, 3), 10'000'000), t9()});
  TxScheduler scheduler = make(config, tx_config({tight, policy(9)}));
  ASSERT_EQ(scheduler.enqueue(7, 1, kFrameBytes, 0), Status::kOk);
  // Tunnel 9 changes: tunnel 7's bucket stays empty.
  ASSERT_TRUE(scheduler.reconfigure(gcl(port_config({t7(slot_range(0, 3), 10'000'000), t9({6})})),
                                    tx_config({tight, policy(9)}), 10));
  EXPECT_EQ(scheduler.enqueue(7, 2, kFrameBytes, 10), Status::kDropped);
  // Tunnel 7's burst changes: a fresh, full bucket.
  tight.burst_bytes = 3000;
  ASSERT_TRUE(scheduler.reconfigure(gcl(port_config({t7(slot_range(0, 3), 10'000'000), t9({6})})),
                                    tx_config({tight, policy(9)}), 20));
  EXPECT_EQ(scheduler.enqueue(7, 3, kFrameBytes, 20), Status::kOk);
  EXPECT_EQ(scheduler.enqueue(7, 4, kFrameBytes, 20), Status::kOk);
  EXPECT_EQ(scheduler.tunnel_counters(7)->dropped[kDrop(TxDrop::kPoliced)], 1u);
}

// Bytes allocated by one reconfigure() call.
uint64_t bytes_allocated_by_reconfigure(TxScheduler& scheduler, GateControlList list,
                                        const TxSchedulerConfig& config, int64_t now_ns) {
  const uint64_t before = g_allocated_bytes.load();
  const auto done = scheduler.reconfigure(std::move(list), config, now_ns);
  const uint64_t bytes = g_allocated_bytes.load() - before;
  EXPECT_TRUE(done) << done.error().describe();
  return bytes;
}

// The default capacity (65536 frames) makes a wheel of several MB: a change that allocated one
// would stand out. Sixty changes in a row: each re-places tunnel 9's frames through the spare
// wheel and allocates only a few kB; tunnel 7, untouched, leaves exactly as in the twin that
// never changed.
TEST(TxSchedulerReconfigure, ManyChangesReuseTheSpareWheelAndLeaveOtherOwnersAlone) {
  Twins twins;
  std::vector<TxFrame> changed, reference;
  uint64_t most_bytes = 0, handle = 1000;
  int64_t now = 0;
  for (int round = 0; round < 60; ++round) {
    now += 100'000;  // one cycle
    for (TxScheduler* s : {&twins.changed, &twins.reference}) {
      for (const TxFrame& f : drain(*s, now))
        (s == &twins.changed ? changed : reference).push_back(f);
    }
    for (int i = 0; i < 6; ++i) {
      ++handle;
      for (TxScheduler* s : {&twins.changed, &twins.reference}) {
        ASSERT_EQ(s->enqueue(7, handle, kFrameBytes, now), Status::kOk);
        ASSERT_EQ(s->enqueue(9, handle + 100'000, kFrameBytes, now), Status::kOk);
      }
    }
    const GclConfig next = port_config(
        {t7(), t9(round % 2 == 0 ? std::vector<uint32_t>{6} : std::vector<uint32_t>{5})});
    most_bytes = std::max(
        most_bytes, bytes_allocated_by_reconfigure(twins.changed, gcl(next),
                                                   tx_config({policy(7), policy(9)}), now + 500));
  }
  for (const TxFrame& f : drain(twins.changed, now + 1'000'000)) changed.push_back(f);
  for (const TxFrame& f : drain(twins.reference, now + 1'000'000)) reference.push_back(f);
  EXPECT_LT(most_bytes, 16'384u) << most_bytes;
  expect_same_departures(of_tunnel(changed, 7), of_tunnel(reference, 7));
  EXPECT_EQ(of_tunnel(changed, 7).size(), 20u + 360u);
  EXPECT_EQ(of_tunnel(changed, 9).size(), 5u + 360u);  // re-placed every time, none lost
  EXPECT_EQ(of_tunnel(changed, 9, false).size(), 0u);
  EXPECT_EQ(twins.changed.held_frames(), 0u);
  EXPECT_EQ(twins.changed.tunnel_counters(9)->sent_packets, 365u);
}

// Another wheel geometry (a max_wait beyond the horizon needs more buckets): a new wheel and
// its spare are allocated as create() does; the next change with that geometry allocates none.
TEST(TxSchedulerReconfigure, AChangeNeedingALongerHorizonAllocatesANewPairOfWheels) {
  Twins twins;
  // Granularity 10 us / 8; 4 cycles of horizon: 400 us / 1.25 us -> 512 buckets.
  EXPECT_THAT(twins.changed.describe(), HasSubstr("timing wheel: 512 buckets of 1.25us"));
  const uint64_t bytes = bytes_allocated_by_reconfigure(
      twins.changed, gcl(port_config({t7(), t9({6})})),
      tx_config({policy(7), policy(9, 10'000'000)}), 500);  // 10 ms: 10.2 ms of horizon
  EXPECT_GT(bytes, 2u * 65'536u * 48u);  // two wheels of 65536 entries of at least 48 bytes
  EXPECT_THAT(twins.changed.describe(), HasSubstr("timing wheel: 8192 buckets of 1.25us"));
  EXPECT_LT(bytes_allocated_by_reconfigure(twins.changed, gcl(port_config({t7(), t9({5})})),
                                           tx_config({policy(7), policy(9, 10'000'000)}), 600),
            16'384u);
  expect_same_departures(of_tunnel(drain(twins.changed, 1'000'000), 7),
                         of_tunnel(drain(twins.reference, 1'000'000), 7));
}

// The counters object of tunnel `id` in counters_json() (balanced braces from "id":{).
std::string tunnel_json(const std::string& json, uint32_t id) {
  const std::string key = "\"" + std::to_string(id) + "\":{";
  const size_t from = json.find(key);
  if (from == std::string::npos) return "";
  int depth = 0;
  for (size_t i = from + key.size() - 1; i < json.size(); ++i) {
    depth += json[i] == '{' ? 1 : json[i] == '}' ? -1 : 0;
    if (depth == 0) return json.substr(from, i + 1 - from);
  }
  return "";
}

// A removed tunnel's counters are kept, cleared, for the next tunnel added: replacing tunnel 9
// by tunnel 11, and 11 by 9 in one change, allocates no histogram, and the added tunnel's
// counters read exactly as a new tunnel's while tunnel 7's go on.
TEST(TxSchedulerReconfigure, AnAddedTunnelTakesTheCountersARemovedOneLeft) {
  Twins twins;
  const auto t11 = GclTunnel{11, 500'000'000, {5}};
  const auto new_json = [](const GclTunnel& tunnel, uint32_t id) {
    return tunnel_json(
        make(port_config({t7(), tunnel}), tx_config({policy(7), policy(id)})).counters_json(), id);
  };
  ASSERT_EQ(drain(twins.changed, 1'000'000).size(), 30u);  // 9 counted 5 frames, 7 counted 20
  ASSERT_TRUE(
      twins.changed.reconfigure(gcl(port_config({t7()})), tx_config({policy(7)}), 2'000'000));
  EXPECT_LT(bytes_allocated_by_reconfigure(twins.changed, gcl(port_config({t7(), t11})),
                                           tx_config({policy(7), policy(11)}), 2'000'100),
            16'384u);
  EXPECT_EQ(tunnel_json(twins.changed.counters_json(), 11), new_json(t11, 11));
  EXPECT_EQ(twins.changed.tunnel_counters(7)->sent_packets, 20u);
  ASSERT_EQ(twins.changed.enqueue(11, 1, kFrameBytes, 2'000'200), Status::kOk);
  const auto eleven = drain(twins.changed, 3'000'000);
  ASSERT_EQ(eleven.size(), 1u);
  EXPECT_EQ(twins.changed.tunnel_counters(11)->queue_wait_ns.count(), 1u);
  EXPECT_NE(tunnel_json(twins.changed.counters_json(), 11), new_json(t11, 11));
  // 9 replaces 11 in one change: 11's counters, cleared, become 9's.
  EXPECT_LT(bytes_allocated_by_reconfigure(twins.changed, gcl(port_config({t7(), t9()})),
                                           tx_config({policy(7), policy(9)}), 3'000'000),
            16'384u);
  EXPECT_EQ(tunnel_json(twins.changed.counters_json(), 9), new_json(t9(), 9));
  EXPECT_EQ(twins.changed.tunnel_counters(7)->sent_packets, 20u);
}

// After changes that used the spare wheel (it was filled, swapped in, and the old wheel cleared
// to become the spare), a change prepared and then abandoned (as when another port's change
// fails) and a change refused leave the scheduler exactly as its twin.
TEST(TxSchedulerReconfigure, AnAbandonedOrRefusedChangeAfterTheSpareWasUsedChangesNothing) {
  Twins twins;
  for (TxScheduler* s : {&twins.changed, &twins.reference}) {
    ASSERT_TRUE(
        s->reconfigure(gcl(port_config({t7(), t9({6})})), tx_config({policy(7), policy(9)}), 500));
    ASSERT_TRUE(
        s->reconfigure(gcl(port_config({t7(), t9({5})})), tx_config({policy(7), policy(9)}), 600));
  }
  {
    auto abandoned = twins.changed.prepare_reconfigure(
        gcl(port_config({t7({6, 7, 8}), t9({4, 5})})), tx_config({policy(7), policy(9)}), 700);
    ASSERT_TRUE(abandoned) << abandoned.error().describe();
  }
  TunnelTxPolicy bad = policy(9);
  bad.burst_bytes = 100;
  ASSERT_FALSE(twins.changed.reconfigure(gcl(port_config({t7({6, 7, 8}), t9({4, 5})})),
                                         tx_config({policy(7), bad}), 800));
  EXPECT_EQ(twins.changed.held_frames(), twins.reference.held_frames());
  EXPECT_EQ(twins.changed.next_event_ns(), twins.reference.next_event_ns());
  EXPECT_EQ(twins.changed.describe(), twins.reference.describe());
  EXPECT_EQ(twins.changed.counters_json(), twins.reference.counters_json());
  const auto changed = drain(twins.changed, 1'000'000);
  const auto reference = drain(twins.reference, 1'000'000);
  expect_same_departures(changed, reference);
  EXPECT_EQ(changed.size(), 30u);
  EXPECT_EQ(twins.changed.counters_json(), twins.reference.counters_json());
}

// Frames handed back by one change and not yet taken are still handed over, first, after
// another change.
TEST(TxSchedulerReconfigure, FramesHandedBackStayFirstThroughAnotherChange) {
  Twins twins;
  ASSERT_TRUE(twins.changed.reconfigure(gcl(port_config({t7()})), tx_config({policy(7)}), 500));
  ASSERT_TRUE(
      twins.changed.reconfigure(gcl(port_config({t7({6, 7, 8})})), tx_config({policy(7)}), 600));
  EXPECT_EQ(twins.changed.held_frames(), 30u);
  const auto frames = drain(twins.changed, 1'000'000);
  ASSERT_EQ(frames.size(), 30u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_FALSE(frames[i].send);
    EXPECT_EQ(frames[i].handle, 200 + i);
    EXPECT_EQ(frames[i].drop, TxDrop::kTunnelRemoved);
  }
  const auto seven = of_tunnel(frames, 7);
  ASSERT_EQ(seven.size(), 20u);
  expect_in_slots_in_order(seven, port_config({t7({6, 7, 8})}), 7);
  EXPECT_EQ(twins.changed.held_frames(), 0u);
}

}  // namespace
}  // namespace detwan::dataplane::sched

// Two gateways over the loopback WAN in virtual time, thousands of cycles (issue 3, item 8):
// slot adherence of every frame, reserved rates under saturation, best effort only in free
// slots, on-time release at tx timestamp + offset + bound under WAN jitter, late packets, and
// policing (drop vs downgrade).
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "tests/dataplane/gw/engine_sim_util.h"

namespace detwan::dataplane::gw {
namespace {

using loopback::Delivery;
using loopback::LinkFaults;
using loopback::TxRecord;
using namespace testing;  // NOLINT(google-build-using-namespace): test helpers

constexpr int64_t kCycles = 2000;  // of 1 ms

TEST(EngineSim, SlotsReservedRatesAndBestEffortUnderSaturation) {
  SiteOptions a;
  a.peer_clock_offset_ns = 0;
  SiteOptions b = a;
  auto g = two_sites(a, b);
  ASSERT_NE(g, nullptr);
  g->set_default_faults({.delay_ns = 2 * kMs});
  SlotChecker slots(*g);
  g->set_tx_observer([&](const TxRecord& r) { slots.check(r); });
  DeliveryLog log;
  uint64_t early_or_late = 0, on_time_7 = 0, best_effort_at_b = 0;
  g->set_delivery_observer([&](const Delivery& d) {
    log.add(d);
    if (d.engine != 1) return;
    if (d.best_effort) {
      ++best_effort_at_b;
      return;
    }
    if (d.tunnel_id == 7) {
      ++on_time_7;
      // Offsets are 0: released exactly at tx timestamp + bound, in true time too.
      if (d.late || d.release_ns != d.target_ns ||
          d.true_release_ns != d.tx_timestamp_ns + 5 * kMs) {
        ++early_or_late;
      }
    }
  });
  // Tunnel 7 offered 450 Mbit/s (reserved 350), tunnel 9 200 (reserved 150), best effort on
  // behalf of tunnel 9 (its prefix, port 80) 150, and tunnel 7 back from site b.
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 450e6));
  flows.push_back(flow(0, 102, 5001, 2, 200e6));
  flows.push_back(flow(0, 102, 80, 3, 150e6));
  flows.push_back(flow(1, 1, 443, 4, 100e6));
  const int64_t end = kStartNs + kCycles * kMs;
  drive(*g, flows, end);
  const auto sent7 = slots.sent_bytes(0, 7, false);
  const auto sent9 = slots.sent_bytes(0, 9, false);
  g->run_until(end + 20 * kMs);  // drain: everything accepted is delivered
  ASSERT_FALSE(g->stalled());
  slots.expect_clean();

  // Reserved rates met within 0.1 % (the policer's burst of one cycle is 0.05 % of the run).
  const double seconds = static_cast<double>(kCycles) * 1e-3;
  EXPECT_NEAR(static_cast<double>(sent7) * 8 / seconds / kRate7Bps, 1.0, 0.001);
  EXPECT_NEAR(static_cast<double>(sent9) * 8 / seconds / kRate9Bps, 1.0, 0.001);
  EXPECT_GT(slots.sent_frames(0, 9, true), 10'000u);  // best effort flowed, in free slots
  const sched::TxCounters* c7 = g->engine(0).scheduler(0).tunnel_counters(7);
  ASSERT_NE(c7, nullptr);
  EXPECT_GT(c7->dropped[static_cast<int>(sched::TxDrop::kPoliced)], 10'000u);

  // Nothing accepted was lost, nothing came twice, every on-time packet exactly on time.
  EXPECT_EQ(log.repeated(), 0u);
  for (const Flow& f : flows) {
    EXPECT_EQ(log.count(f.source.id()), f.accepted) << "flow " << f.source.id();
    EXPECT_GT(f.accepted, 1000u);
  }
  EXPECT_EQ(early_or_late, 0u);
  EXPECT_EQ(on_time_7, flows[0].accepted);
  EXPECT_EQ(best_effort_at_b, flows[2].accepted);
  // Drained: only control packets still on the WAN hold buffers.
  EXPECT_EQ(g->buffers_in_use(), g->in_flight());
  EXPECT_EQ(g->bad_frees(), 0u);
  const sched::Playout& playout = g->engine(1).playout(0);
  EXPECT_EQ(playout.counters().playout_error_ns.max(), 0);
  EXPECT_EQ(playout.counters().one_way_delay_ns.min(), 5 * kMs);
  EXPECT_EQ(playout.counters().one_way_delay_ns.max(), 5 * kMs);
  EXPECT_EQ(g->engine(0).scheduler(0).port_counters().departure_error_ns.max(), 0);
  EXPECT_TRUE(g->engine(0).peer_status(0).up);
  EXPECT_TRUE(g->engine(1).peer_status(0).up);
}

// The WAN delays by 10 ms plus up to 2 ms of jitter; the bound is 13 ms, and site b's clock is
// 3.7 ms ahead (configured at both ends). Every packet leaves site b's playout at exactly
// tx timestamp + offset + bound in its clock, i.e. tx + bound in true time.
TEST(EngineSim, OnTimeReleaseAbsorbsJitter) {
  constexpr int64_t kOffset = 3'700 * kUs;
  SiteOptions a;
  a.bound7_ns = 13 * kMs;
  a.peer_clock_offset_ns = -kOffset;  // a's clock - b's clock
  SiteOptions b = a;
  b.peer_clock_offset_ns = kOffset;
  auto g = two_sites(a, b, 0, kOffset);
  ASSERT_NE(g, nullptr);
  g->set_default_faults({.delay_ns = 10 * kMs, .jitter_ns = 2 * kMs});
  SlotChecker slots(*g);
  g->set_tx_observer([&](const TxRecord& r) { slots.check(r); });
  uint64_t delivered = 0, off = 0;
  int64_t last_tx = 0;
  uint64_t out_of_order = 0;
  g->set_delivery_observer([&](const Delivery& d) {
    if (d.engine != 1 || d.tunnel_id != 7) return;
    ++delivered;
    if (d.late || d.release_ns != d.tx_timestamp_ns + kOffset + 13 * kMs ||
        d.true_release_ns != d.tx_timestamp_ns + 13 * kMs) {
      ++off;
    }
    if (d.tx_timestamp_ns < last_tx) ++out_of_order;
    last_tx = d.tx_timestamp_ns;
  });
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 200e6));
  flows.push_back(flow(1, 1, 80, 2, 50e6));
  drive(*g, flows, kStartNs + kCycles * kMs);
  g->run_until(kStartNs + (kCycles + 30) * kMs);
  slots.expect_clean();
  EXPECT_EQ(delivered, flows[0].accepted);
  EXPECT_GT(delivered, 10'000u);
  EXPECT_EQ(off, 0u);
  EXPECT_EQ(out_of_order, 0u);
  const sched::PlayoutCounters& c = g->engine(1).playout(0).counters();
  EXPECT_EQ(c.late_packets, 0u);
  EXPECT_EQ(c.playout_error_ns.max(), 0);
  EXPECT_EQ(c.playout_error_ns.min(), 0);
  // The delay before playout (offset removed), from tunnel entry at a to arrival at b: the wait
  // for tunnel 7's slot (under one 1 ms cycle) + 10 ms + up to 2 ms of jitter. After playout
  // it is the bound for every packet.
  EXPECT_GE(c.wan_delay_ns.min(), 10 * kMs);
  EXPECT_LE(c.wan_delay_ns.max(), 13 * kMs);
  EXPECT_GT(c.wan_delay_ns.max() - c.wan_delay_ns.min(), 1 * kMs);
  EXPECT_EQ(c.one_way_delay_ns.min(), 13 * kMs);
  EXPECT_EQ(c.one_way_delay_ns.max(), 13 * kMs);
}

class EngineSimLate : public ::testing::TestWithParam<sched::LateAction> {};

// A bound of 11 ms under 10 ms + [0, 2] ms of delay, with packets sparse enough that the FIFO
// link rarely holds one behind another: about half of them are late.
TEST_P(EngineSimLate, LatePacketsAreCountedAndDeliveredOrDroppedPerPolicy) {
  SiteOptions o;
  o.bound7_ns = 11 * kMs;
  o.late7 = GetParam();
  o.peer_clock_offset_ns = 0;
  auto g = two_sites(o, o);
  ASSERT_NE(g, nullptr);
  g->set_default_faults({.delay_ns = 10 * kMs, .jitter_ns = 2 * kMs});
  uint64_t on_time = 0, late = 0, wrong = 0;
  g->set_delivery_observer([&](const Delivery& d) {
    if (d.engine != 1 || d.tunnel_id != 7) return;
    if (d.late) {
      ++late;
      // Released on arrival, which was after the target.
      if (!(d.release_ns > d.target_ns)) ++wrong;
    } else {
      ++on_time;
      if (d.release_ns != d.tx_timestamp_ns + 11 * kMs) ++wrong;
    }
  });
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 4e6));
  drive(*g, flows, kStartNs + 2000 * kMs);
  g->run_until(kStartNs + 2030 * kMs);
  const sched::PlayoutCounters& c = g->engine(1).playout(0).counters();
  const uint64_t accepted = flows[0].accepted;
  EXPECT_EQ(wrong, 0u);
  EXPECT_GT(c.late_packets, accepted / 4);
  EXPECT_LT(c.late_packets, accepted * 3 / 4);
  EXPECT_EQ(c.received_packets, accepted);
  EXPECT_EQ(c.lateness_ns.count(), c.late_packets);
  // At most the jitter above the bound plus the wait for the slot at the ingress (< 1 cycle).
  EXPECT_LE(c.lateness_ns.max(), 2 * kMs);
  if (GetParam() == sched::LateAction::kDeliver) {
    EXPECT_EQ(late, c.late_packets);
    EXPECT_EQ(c.late_delivered, c.late_packets);
    EXPECT_EQ(on_time + late, accepted);
  } else {
    EXPECT_EQ(late, 0u);
    EXPECT_EQ(c.dropped[static_cast<int>(sched::PlayoutDrop::kLate)], c.late_packets);
    EXPECT_EQ(on_time + c.late_packets, accepted);
  }
  EXPECT_GT(accepted, 1000u);
  EXPECT_EQ(g->buffers_in_use(), g->in_flight());
}

INSTANTIATE_TEST_SUITE_P(Policies, EngineSimLate,
                         ::testing::Values(sched::LateAction::kDeliver, sched::LateAction::kDrop));

class EngineSimPolicing : public ::testing::TestWithParam<sched::OverRateAction> {};

// Tunnel 7 offered twice its 350 Mbit/s: the policer admits exactly burst + rate x time; the
// excess is dropped, or sent as best effort (flag B, free slots) and delivered on receipt.
TEST_P(EngineSimPolicing, ExcessIsDroppedOrDowngradedExactly) {
  SiteOptions o;
  o.over_rate7 = GetParam();
  o.peer_clock_offset_ns = 0;
  auto g = two_sites(o, o);
  ASSERT_NE(g, nullptr);
  g->set_default_faults({.delay_ns = 1 * kMs});
  SlotChecker slots(*g);
  g->set_tx_observer([&](const TxRecord& r) { slots.check(r); });
  uint64_t on_time = 0, best_effort = 0;
  g->set_delivery_observer([&](const Delivery& d) {
    if (d.engine != 1 || d.tunnel_id != 7) return;
    ++(d.best_effort ? best_effort : on_time);
  });
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 600e6, 1000, 1000));  // 1000-byte packets: 1086 on the wire
  const int64_t end = kStartNs + 1000 * kMs;
  drive(*g, flows, end);
  g->run_until(end + 10 * kMs);
  slots.expect_clean();
  const sched::TxScheduler& s = g->engine(0).scheduler(0);
  const sched::TxCounters& c = *s.tunnel_counters(7);
  // Admitted by the policer: at most burst + rate x T, and at least that minus one frame. The
  // tunnel's queue also carries the engine's control packets, which bypass the policer.
  EXPECT_EQ(c.dropped[static_cast<int>(sched::TxDrop::kQueueFull)], 0u);
  const uint64_t control_frames = slots.control_frames(0, 7);
  EXPECT_GT(control_frames, 0u);
  const uint64_t burst = kRate7Bps / 8 / 1000;  // default: one 1 ms cycle at the rate
  // T = from the engine's start (a full bucket) to the last packet offered; exact in integers.
  const auto t_ns = static_cast<uint64_t>(flows[0].last_ns - kStartNs);
  const uint64_t limit = burst + kRate7Bps * t_ns / 8'000'000'000u;  // < 2^64 for T <= 1 s
  const uint64_t admitted = c.queued_bytes - slots.control_bytes(0, 7);
  EXPECT_LE(admitted, limit);
  EXPECT_GT(admitted, limit - 1086);
  const uint64_t excess = c.offered_packets - c.queued_packets;
  EXPECT_GT(excess, flows[0].accepted / 3);
  if (GetParam() == sched::OverRateAction::kDrop) {
    EXPECT_EQ(c.dropped[static_cast<int>(sched::TxDrop::kPoliced)], excess);
    EXPECT_EQ(c.downgraded_packets, 0u);
    EXPECT_EQ(best_effort, 0u);
    // Refused at submit: the backend frees them.
    EXPECT_EQ(flows[0].refused, excess);
  } else {
    EXPECT_EQ(c.downgraded_packets, excess);
    EXPECT_EQ(c.dropped[static_cast<int>(sched::TxDrop::kPoliced)], 0u);
    EXPECT_EQ(slots.sent_frames(0, 7, true), excess);
    EXPECT_EQ(best_effort, excess);
    EXPECT_EQ(flows[0].refused, 0u);
  }
  EXPECT_EQ(c.queued_packets, c.sent_packets + s.held_frames(s.gcl().find_owner(7)));
  EXPECT_EQ(on_time, c.sent_packets - control_frames);
  EXPECT_EQ(on_time + best_effort, flows[0].accepted);
}

INSTANTIATE_TEST_SUITE_P(Actions, EngineSimPolicing,
                         ::testing::Values(sched::OverRateAction::kDrop,
                                           sched::OverRateAction::kBestEffort));

}  // namespace
}  // namespace detwan::dataplane::gw

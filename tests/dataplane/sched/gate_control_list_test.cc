#include "dataplane/sched/gate_control_list.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/dataplane/sched/sched_test_util.h"

namespace detwan::dataplane::sched {
namespace {

using ::testing::HasSubstr;
using testing::Random;
using testing::slot_range;
using testing::SlotOracle;

// The worked example of docs/dataplane.md: 1 ms cycle, 100 slots of 10 us at 10 Gbit/s,
// tunnel 7 owns slots 0-39 (nominal 4 Gbit/s), guard 1.2 us (one 1500-byte frame).
GclConfig example() {
  GclConfig config;
  config.cycle_ns = 1'000'000;
  config.slot_count = 100;
  config.guard_ns = 1'200;
  config.line_rate_bps = 10'000'000'000;
  config.max_frame_bytes = 1518;
  config.tunnels = {GclTunnel{7, 3'900'000'000, slot_range(0, 39)}};
  return config;
}

GateControlList build(const GclConfig& config) {
  auto gcl = GateControlList::create(config);
  EXPECT_TRUE(gcl.has_value()) << (gcl ? "" : gcl.error().describe());
  return std::move(gcl).value();
}

TEST(GateControlListTest, ExampleBuildsWithOwnersAndRates) {
  const GateControlList gcl = build(example());
  EXPECT_EQ(gcl.slot_ns(), 10'000);
  EXPECT_EQ(gcl.tunnel_count(), 1u);
  EXPECT_EQ(gcl.find_owner(7), 0u);
  EXPECT_EQ(gcl.find_owner(8), kNoOwner);
  EXPECT_EQ(gcl.best_effort_owner(), 1u);
  EXPECT_EQ(gcl.owner_of_slot(0), 0u);
  EXPECT_EQ(gcl.owner_of_slot(39), 0u);
  EXPECT_EQ(gcl.owner_of_slot(40), gcl.best_effort_owner());
  EXPECT_EQ(gcl.owned_slot_count(0), 40u);
  EXPECT_EQ(gcl.owned_slot_count(1), 60u);
  EXPECT_EQ(gcl.reserved_rate_bps(0), 3'900'000'000u);
  // Window 400 us - guard 1.2 us - one max frame (1518 B = 1214.4 ns -> 1215 ns) = 397.585 us
  // of every 1 ms at 10 Gbit/s.
  EXPECT_EQ(gcl.guaranteed_rate_bps(0), 3'975'850'000u);
  const std::string text = gcl.describe();
  EXPECT_THAT(text, HasSubstr("cycle 1ms = 100 slots of 10us"));
  EXPECT_THAT(text,
              HasSubstr("tunnel 7: slots 0-39 (40/100), reserved 3.9gbit, guaranteed 3975.85mbit"));
  EXPECT_THAT(text, HasSubstr("best effort: slots 40-99 (60/100)"));
}

struct BadConfig {
  std::string name;
  std::function<void(GclConfig&)> change;
  std::string message;
};

class GateControlListErrorTest : public ::testing::TestWithParam<BadConfig> {};

TEST_P(GateControlListErrorTest, NamesTheProblem) {
  GclConfig config = example();
  GetParam().change(config);
  const auto gcl = GateControlList::create(config);
  ASSERT_FALSE(gcl.has_value());
  EXPECT_EQ(gcl.error().code, common::ErrorCode::kConfig);
  EXPECT_THAT(gcl.error().message, HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    All, GateControlListErrorTest,
    ::testing::Values(
        BadConfig{"ZeroCycle", [](GclConfig& c) { c.cycle_ns = 0; }, "cycle_ns must be > 0"},
        BadConfig{"ZeroSlots", [](GclConfig& c) { c.slot_count = 0; }, "slot_count must be > 0"},
        BadConfig{"UnevenSlots", [](GclConfig& c) { c.slot_count = 3; },
                  "cycle_ns 1000000 is not a multiple of slot_count 3"},
        BadConfig{"ZeroLineRate", [](GclConfig& c) { c.line_rate_bps = 0; },
                  "line_rate_bps must be > 0"},
        BadConfig{"ZeroMaxFrame", [](GclConfig& c) { c.max_frame_bytes = 0; },
                  "max_frame_bytes must be > 0"},
        BadConfig{"NegativeGuard", [](GclConfig& c) { c.guard_ns = -1; },
                  "guard_ns must be >= 0 (got -1)"},
        BadConfig{"GuardAsLongAsSlot", [](GclConfig& c) { c.guard_ns = 10'000; },
                  "guard 10us (10000 ns) must be shorter than the slot length 10us (10000 ns = "
                  "cycle 1ms / 100 slots)"},
        BadConfig{"SlotOutOfRange", [](GclConfig& c) { c.tunnels[0].slots.push_back(100); },
                  "tunnel 7: slot 100 out of range [0, 100)"},
        BadConfig{"SlotClaimedTwice",
                  [](GclConfig& c) {
                    c.tunnels.push_back(GclTunnel{9, 1'000'000, {39, 40}});
                  },
                  "slot 39 is claimed twice: by tunnel 7 and tunnel 9"},
        BadConfig{"SlotListedTwiceByOneTunnel",
                  [](GclConfig& c) { c.tunnels[0].slots.push_back(5); },
                  "tunnel 7: slot 5 is listed twice"},
        BadConfig{"TunnelListedTwice",
                  [](GclConfig& c) {
                    c.tunnels.push_back(GclTunnel{7, 1'000'000, {50}});
                  },
                  "tunnel 7 is listed twice"},
        BadConfig{"ZeroReservation", [](GclConfig& c) { c.tunnels[0].reserved_rate_bps = 0; },
                  "tunnel 7: reserved rate must be > 0"},
        BadConfig{"TotalAboveLineRate",
                  [](GclConfig& c) {
                    c.tunnels.push_back(GclTunnel{9, 6'500'000'000, slot_range(40, 99)});
                  },
                  "total reserved rate 10.4gbit (tunnels 7, 9) exceeds the line rate 10gbit"},
        BadConfig{"SlotsCannotCarryReservation",
                  [](GclConfig& c) { c.tunnels[0].reserved_rate_bps = 4'500'000'000; },
                  "tunnel 7: its 40 of 100 slots carry 4gbit at line rate 10gbit, less than its "
                  "reserved rate 4.5gbit"},
        BadConfig{"NoSlotsAtAll",
                  [](GclConfig& c) {
                    c.tunnels.push_back(GclTunnel{9, 1, {}});
                  },
                  "tunnel 9: its 0 of 100 slots carry 0bit"},
        BadConfig{"GuardAndPackingCannotCarryReservation",
                  [](GclConfig& c) { c.tunnels[0].reserved_rate_bps = 4'000'000'000; },
                  "tunnel 7: reserved rate 4gbit exceeds the 3975.85mbit its slots guarantee "
                  "after guard bands (1.2us per window) and packing of 1518-byte frames "
                  "(nominal 40 of 100 slots = 4gbit)"}),
    [](const ::testing::TestParamInfo<BadConfig>& info) { return info.param.name; });

TEST(GateControlListTest, PositionAtCountsCyclesFromBase) {
  GclConfig config = example();
  const GateControlList gcl = build(config);
  EXPECT_EQ(gcl.position_at(0).cycle_id, 0);
  EXPECT_EQ(gcl.position_at(0).slot, 0u);
  EXPECT_EQ(gcl.position_at(399'999).slot, 39u);
  EXPECT_EQ(gcl.position_at(399'999).offset_in_slot_ns, 9'999);
  EXPECT_EQ(gcl.position_at(1'000'000).cycle_id, 1);
  EXPECT_EQ(gcl.position_at(1'000'000).slot, 0u);
  EXPECT_EQ(gcl.position_at(-1).cycle_id, -1);
  EXPECT_EQ(gcl.position_at(-1).slot, 99u);
  EXPECT_EQ(gcl.position_at(-1).offset_in_slot_ns, 9'999);

  config.base_time_ns = 1'700'000'000'000'000'500;  // a TAI-like epoch, not cycle aligned
  const GateControlList based = build(config);
  EXPECT_EQ(based.cycle_at(config.base_time_ns), 0);
  EXPECT_EQ(based.slot_at(config.base_time_ns), 0u);
  EXPECT_EQ(based.cycle_at(config.base_time_ns - 1), -1);
  EXPECT_EQ(based.slot_at(config.base_time_ns - 1), 99u);
  EXPECT_EQ(based.cycle_at(config.base_time_ns + 123 * 1'000'000 + 45'678), 123);
  EXPECT_EQ(based.slot_at(config.base_time_ns + 123 * 1'000'000 + 45'678), 4u);
}

TEST(GateControlListTest, DepartureEndsBeforeWindowEndMinusGuard) {
  const GateControlList gcl = build(example());
  const OwnerIndex tunnel = gcl.find_owner(7);
  const OwnerIndex best_effort = gcl.best_effort_owner();
  // 1500 bytes at 10 Gbit/s = 1200 ns. Tunnel 7's window is [0, 400 us); usable end 398.8 us.
  EXPECT_EQ(gcl.earliest_departure_ns(tunnel, 1500, 0), 0);
  EXPECT_EQ(gcl.earliest_departure_ns(tunnel, 1500, 123'456), 123'456);
  EXPECT_EQ(gcl.earliest_departure_ns(tunnel, 1500, 397'600), 397'600);    // ends at 398.8 us
  EXPECT_EQ(gcl.earliest_departure_ns(tunnel, 1500, 397'601), 1'000'000);  // next owned slot
  EXPECT_EQ(gcl.earliest_departure_ns(tunnel, 64, 397'601), 397'601);      // a small one fits
  EXPECT_EQ(gcl.earliest_departure_ns(tunnel, 1500, 399'999), 1'000'000);
  EXPECT_EQ(gcl.earliest_departure_ns(tunnel, 1500, 400'000), 1'000'000);
  // Best effort: only the unreserved slots 40-99.
  EXPECT_EQ(gcl.earliest_departure_ns(best_effort, 1500, 0), 400'000);
  EXPECT_EQ(gcl.earliest_departure_ns(best_effort, 1500, 997'600), 997'600);
  EXPECT_EQ(gcl.earliest_departure_ns(best_effort, 1500, 997'601), 1'400'000);
  // Sizes the port cannot send, and owners it does not have.
  EXPECT_EQ(gcl.earliest_departure_ns(tunnel, 0, 0), kNever);
  EXPECT_EQ(gcl.earliest_departure_ns(tunnel, 1519, 0), kNever);
  EXPECT_EQ(gcl.earliest_departure_ns(tunnel, 1518, 0), 0);
  EXPECT_EQ(gcl.earliest_departure_ns(kNoOwner, 64, 0), kNever);
  EXPECT_EQ(gcl.earliest_departure_ns(5, 64, 0), kNever);

  Departure d;
  ASSERT_TRUE(gcl.find_departure(tunnel, 1500, LinkTime::at(397'600), &d));
  EXPECT_EQ(d.end, LinkTime::at(398'800));
  EXPECT_EQ(d.usable_end_ns, 398'800);
}

TEST(GateControlListTest, FramesStraddleSlotsOfOneOwnerAndTheCycleBoundary) {
  GclConfig config = example();
  config.tunnels = {GclTunnel{7, 300'000'000, {98, 99, 0, 1}}};
  const GateControlList gcl = build(config);
  const OwnerIndex tunnel = gcl.find_owner(7);
  // Slots 98, 99 | 0, 1 form one window across the cycle boundary: [980 us, 1020 us).
  Window w;
  ASSERT_TRUE(gcl.window_at(tunnel, 999'500, &w));
  EXPECT_EQ(w.start_ns, 980'000);
  EXPECT_EQ(w.end_ns, 1'020'000);
  EXPECT_EQ(w.usable_end_ns, 1'018'800);
  ASSERT_TRUE(gcl.window_at(tunnel, 1'010'000, &w));
  EXPECT_EQ(w.start_ns, 980'000);
  ASSERT_TRUE(gcl.window_at(tunnel, 5'000, &w));  // the previous cycle's window
  EXPECT_EQ(w.start_ns, -20'000);
  EXPECT_FALSE(gcl.window_at(tunnel, 500'000, &w));
  // A frame leaving in slot 99 of cycle 0 and ending in slot 0 of cycle 1: no guard needed.
  EXPECT_EQ(gcl.earliest_departure_ns(tunnel, 1500, 999'500), 999'500);
  EXPECT_EQ(gcl.earliest_departure_ns(tunnel, 1500, 1'017'600), 1'017'600);
  EXPECT_EQ(gcl.earliest_departure_ns(tunnel, 1500, 1'017'601), 1'980'000);
  EXPECT_EQ(gcl.earliest_departure_ns(tunnel, 1500, 500'000), 980'000);
  EXPECT_EQ(gcl.position_at(999'500).slot, 99u);
  EXPECT_EQ(gcl.position_at(999'500).cycle_id, 0);
  // Guaranteed: one 40 us window per cycle, minus guard and one max frame.
  EXPECT_EQ(gcl.guaranteed_rate_bps(tunnel), (40'000u - 1'200u - 1'215u) * 10'000u);
}

TEST(GateControlListTest, SoleOwnerIsAlwaysOpenAndOthersNever) {
  GclConfig config = example();
  config.tunnels.clear();
  const GateControlList open = build(config);
  EXPECT_EQ(open.earliest_departure_ns(open.best_effort_owner(), 1500, 397'601), 397'601);
  EXPECT_EQ(open.guaranteed_rate_bps(open.best_effort_owner()), 10'000'000'000u);
  Window w;
  ASSERT_TRUE(open.window_at(open.best_effort_owner(), 42, &w));
  EXPECT_EQ(w.usable_end_ns, INT64_MAX);

  config.tunnels = {GclTunnel{1, 10'000'000'000, slot_range(0, 99)}};
  const GateControlList all = build(config);  // a reservation of the whole line is allowed
  EXPECT_EQ(all.earliest_departure_ns(0, 1500, 999'999), 999'999);
  EXPECT_EQ(all.earliest_departure_ns(all.best_effort_owner(), 64, 0), kNever);
  EXPECT_FALSE(all.window_at(all.best_effort_owner(), 0, &w));
}

TEST(GateControlListTest, BackToBackFramesKeepFractionsOfANanosecond) {
  GclConfig config = example();
  config.line_rate_bps = 3'000'000'000;  // 1514 bytes = 4037.33 ns
  config.tunnels.clear();
  const GateControlList gcl = build(config);
  LinkTime t = LinkTime::at(0);
  std::vector<int64_t> starts;
  for (int i = 0; i < 3; ++i) {
    Departure d;
    ASSERT_TRUE(gcl.find_departure(gcl.best_effort_owner(), 1514, t, &d));
    starts.push_back(d.start.ceil_ns());
    t = d.end;
  }
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 4'038, 8'075}));
  EXPECT_EQ(t, LinkTime::at(12'112));  // 3 * 1514 * 8 / 3 = 12112 exactly, no drift
}

// Random schedules against the slot-by-slot oracle.
TEST(GateControlListTest, MatchesBruteForceOracleOnRandomSchedules) {
  Random rng(20240917);
  const uint64_t rates[] = {1'000'000'000, 2'500'000'000, 3'000'000'000, 10'000'000'000};
  int checked = 0;
  int inside_checked = 0;
  for (int round = 0; round < 60; ++round) {
    GclConfig config;
    config.slot_count = static_cast<uint32_t>(rng.between(1, 24));
    const auto slot_ns = static_cast<int64_t>(rng.between(20'000, 60'000));
    config.cycle_ns = slot_ns * config.slot_count;
    config.line_rate_bps = rates[rng.between(0, 3)];
    config.max_frame_bytes = 1518;
    config.guard_ns = static_cast<int64_t>(rng.between(0, static_cast<uint64_t>(slot_ns - 13'000)));
    config.base_time_ns = static_cast<int64_t>(rng.between(0, 5'000'000)) - 2'500'000;
    const auto tunnels = static_cast<uint32_t>(rng.between(0, 4));
    std::vector<std::vector<uint32_t>> slots(tunnels);
    for (uint32_t s = 0; s < config.slot_count; ++s) {
      const uint64_t pick = rng.between(0, tunnels);  // == tunnels: unreserved
      if (pick < tunnels) slots[pick].push_back(s);
    }
    for (uint32_t i = 0; i < tunnels; ++i) {
      if (!slots[i].empty()) config.tunnels.push_back(GclTunnel{100 + i, 1, slots[i]});
    }
    const GateControlList gcl = build(config);
    const SlotOracle oracle(config);
    for (int probe = 0; probe < 200; ++probe) {
      const int64_t t =
          config.base_time_ns +
          static_cast<int64_t>(rng.between(0, 3 * static_cast<uint64_t>(config.cycle_ns))) -
          config.cycle_ns;
      const auto bytes = static_cast<uint32_t>(rng.between(1, 1518));
      ASSERT_EQ(
          gcl.position_at(t).slot,
          static_cast<uint32_t>(((oracle.slot_number(t) % config.slot_count) + config.slot_count) %
                                config.slot_count));
      for (OwnerIndex owner = 0; owner <= gcl.tunnel_count(); ++owner) {
        const uint32_t id =
            owner == gcl.best_effort_owner() ? testing::kUnreserved : gcl.tunnel_id_of(owner);
        const int64_t got = gcl.earliest_departure_ns(owner, bytes, t);
        ASSERT_EQ(got, oracle.earliest_start(id, bytes, t))
            << "round " << round << " owner " << id << " bytes " << bytes << " t " << t;
        if (got != kNever) {
          Departure d;
          Window w;
          ASSERT_TRUE(gcl.find_departure(owner, bytes, LinkTime::at(t), &d, &w));
          ASSERT_EQ(oracle.check(id, got, d.end.ceil_ns()), "");
          // The window it names holds the departure, and what the scheduler's open-window
          // fast path assumes holds: from any time inside that window, a frame that ends by
          // its usable end leaves at once (tx_scheduler.h, departure()).
          ASSERT_LE(w.start_ns, d.start.ns);
          ASSERT_LE(d.end, LinkTime::at(w.usable_end_ns));
          ASSERT_EQ(d.usable_end_ns, w.usable_end_ns);
          if (w.start_ns != std::numeric_limits<int64_t>::min()) {  // not an owner of every slot
            const int64_t inside =
                w.start_ns + static_cast<int64_t>(
                                 rng.between(0, static_cast<uint64_t>(w.end_ns - w.start_ns - 1)));
            const auto bytes2 = static_cast<uint32_t>(rng.between(1, 1518));
            const LinkTime end2 =
                add_bits(LinkTime::at(inside), uint64_t{bytes2} * 8, config.line_rate_bps);
            Departure d2;
            ASSERT_TRUE(gcl.find_departure(owner, bytes2, LinkTime::at(inside), &d2));
            if (end2 <= LinkTime::at(w.usable_end_ns)) {
              EXPECT_EQ(d2.start, LinkTime::at(inside));
              EXPECT_EQ(d2.end, end2);
              EXPECT_EQ(d2.usable_end_ns, w.usable_end_ns);
              ++inside_checked;
            } else {
              EXPECT_GT(d2.start.ns, w.usable_end_ns - 1);  // a later window
            }
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 10'000);
  EXPECT_GT(inside_checked, 1'000);
}

TEST(SlotListTest, ParsesAndFormatsRanges) {
  const auto slots = parse_slot_list(" 0-39, 50,60-61 ", 100);
  ASSERT_TRUE(slots.has_value()) << slots.error().message;
  EXPECT_EQ(slots->size(), 43u);
  EXPECT_EQ(slots->front(), 0u);
  EXPECT_EQ(slots->back(), 61u);
  EXPECT_EQ(format_slot_list(*slots), "0-39,50,60-61");
  EXPECT_EQ(format_slot_list({7, 3, 4, 5, 9}), "3-5,7,9");
  EXPECT_EQ(format_slot_list({}), "");
  EXPECT_TRUE(parse_slot_list("", 100)->empty());

  EXPECT_THAT(parse_slot_list("0-39,3-1", 100).error().message,
              HasSubstr("'3-1': range ends before it starts"));
  EXPECT_THAT(parse_slot_list("120", 100).error().message,
              HasSubstr("'120': slot 120 out of range [0, 100)"));
  EXPECT_THAT(parse_slot_list("1,x", 100).error().message,
              HasSubstr("'x': expected a slot number or a range like '0-39'"));
  EXPECT_THAT(parse_slot_list("1-", 100).error().message, HasSubstr("'1-'"));
}

}  // namespace
}  // namespace detwan::dataplane::sched

// The agent's slot arithmetic (control/calendar/slot_calendar.h) must be the gateway's
// (dataplane/sched/gate_control_list.h): a slot set the agent allocates for a rate must be one
// the gateway accepts for that rate. Compared on random geometries and slot sets.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "control/calendar/slot_calendar.h"
#include "dataplane/sched/gate_control_list.h"

namespace detwan::control::calendar {
namespace {

namespace sched = dataplane::sched;

SlotGeometry random_geometry(std::mt19937_64& rng) {
  SlotGeometry g;
  static constexpr uint32_t kSlotCounts[] = {1, 2, 3, 7, 10, 64, 100, 250, 1000};
  g.slot_count = kSlotCounts[rng() % std::size(kSlotCounts)];
  const int64_t slot_ns = 1'000 + static_cast<int64_t>(rng() % 200'000);
  g.cycle_ns = slot_ns * g.slot_count;
  g.guard_ns = static_cast<int64_t>(rng() % static_cast<uint64_t>(slot_ns));  // < slot
  static constexpr uint64_t kRates[] = {1'000'000,     10'000'000,    123'456'789,
                                        1'000'000'000, 9'999'999'999, 100'000'000'000};
  g.line_rate_bps = kRates[rng() % std::size(kRates)];
  g.max_frame_bytes = 64 + static_cast<uint32_t>(rng() % 9200);
  g.reservable_slots = g.slot_count;
  return g;
}

sched::GclConfig gcl_config(const SlotGeometry& g) {
  sched::GclConfig config;
  config.cycle_ns = g.cycle_ns;
  config.slot_count = g.slot_count;
  config.guard_ns = g.guard_ns;
  config.line_rate_bps = g.line_rate_bps;
  config.max_frame_bytes = g.max_frame_bytes;
  return config;
}

TEST(SlotArithmetic, GuaranteedAndNominalRatesEqualTheGateways) {
  std::mt19937_64 rng(912);
  int compared = 0;
  int refused_alike = 0;
  for (int round = 0; round < 3000; ++round) {
    const SlotGeometry g = random_geometry(rng);
    // Up to three tunnels own random slot sets (random density: runs of all lengths, wrapping
    // around the cycle end, every slot, none); the rest is best effort.
    const uint32_t tunnels = 1 + static_cast<uint32_t>(rng() % 3);
    const uint32_t density = static_cast<uint32_t>(rng() % 101);
    std::vector<std::vector<uint32_t>> owned(tunnels);
    for (uint32_t s = 0; s < g.slot_count; ++s) {
      if (rng() % 100 < density) owned[rng() % tunnels].push_back(s);
    }
    sched::GclConfig config = gcl_config(g);
    std::vector<uint64_t> agent_guaranteed(tunnels);
    bool gateway_can_build = true;
    for (uint32_t k = 0; k < tunnels; ++k) {
      agent_guaranteed[k] = guaranteed_rate_bps(g, owned[k]);
      const uint64_t nominal = nominal_rate_bps(g, owned[k].size());
      ASSERT_LE(agent_guaranteed[k], nominal);
      // Reserve exactly what the agent says the slots guarantee (the gateway refuses a rate
      // of 0, so a slot set that guarantees nothing cannot be compared this way).
      config.tunnels.push_back(sched::GclTunnel{100 + k, agent_guaranteed[k], owned[k]});
      gateway_can_build = gateway_can_build && agent_guaranteed[k] > 0;
    }
    auto gcl = sched::GateControlList::create(config);
    if (!gateway_can_build) {
      ASSERT_FALSE(gcl.has_value());
      ++refused_alike;
      continue;
    }
    ASSERT_TRUE(gcl.has_value()) << "the gateway refuses the agent's rates: "
                                 << gcl.error().message;
    for (uint32_t k = 0; k < tunnels; ++k) {
      const sched::OwnerIndex owner = gcl->find_owner(100 + k);
      ASSERT_EQ(gcl->guaranteed_rate_bps(owner), agent_guaranteed[k])
          << "cycle " << g.cycle_ns << " slots " << g.slot_count << " guard " << g.guard_ns
          << " rate " << g.line_rate_bps << " frame " << g.max_frame_bytes << " owned "
          << sched::format_slot_list(owned[k]);
      ASSERT_EQ(gcl->owned_slot_count(owner), owned[k].size());
    }
    ++compared;
  }
  EXPECT_GT(compared, 1000);
  EXPECT_GT(refused_alike, 10);
}

// The gateway refuses a tunnel whose nominal share (owned / S * line rate) is below its rate:
// one bit/s above the agent's nominal rate must be refused for that reason, the nominal rate
// itself never for that reason.
TEST(SlotArithmetic, NominalRateIsTheGatewaysLimitToTheBit) {
  std::mt19937_64 rng(31);
  int checked = 0;
  for (int round = 0; round < 2000; ++round) {
    const SlotGeometry g = random_geometry(rng);
    std::vector<uint32_t> slots;
    for (uint32_t s = 0; s < g.slot_count; ++s) {
      if (rng() % 2 == 0) slots.push_back(s);
    }
    // (Every slot: nominal = line rate, and one bit more is refused as above the line rate.)
    if (slots.empty() || slots.size() == g.slot_count) continue;
    const uint64_t nominal = nominal_rate_bps(g, slots.size());
    if (nominal == 0) continue;
    const std::string nominal_refusal = "less than its reserved rate";
    sched::GclConfig above = gcl_config(g);
    above.tunnels.push_back(sched::GclTunnel{1, nominal + 1, slots});
    const auto refused = sched::GateControlList::create(above);
    ASSERT_FALSE(refused.has_value());
    ASSERT_NE(refused.error().message.find(nominal_refusal), std::string::npos)
        << refused.error().message;
    sched::GclConfig at = gcl_config(g);
    at.tunnels.push_back(sched::GclTunnel{1, nominal, slots});
    const auto accepted = sched::GateControlList::create(at);
    if (!accepted) {
      ASSERT_EQ(accepted.error().message.find(nominal_refusal), std::string::npos)
          << accepted.error().message;
    }
    ++checked;
  }
  EXPECT_GT(checked, 1000);
}

TEST(SlotArithmetic, ServiceLatency) {
  SlotGeometry g;
  g.cycle_ns = 1'000'000;
  g.slot_count = 100;  // 10 us slots
  g.guard_ns = 2'000;
  g.line_rate_bps = 1'000'000'000;
  g.max_frame_bytes = 1518;  // 12144 ns at 1 Gbit/s
  ASSERT_EQ(g.max_frame_ns(), 12'144);

  std::vector<uint32_t> all(100);
  for (uint32_t s = 0; s < 100; ++s) all[s] = s;
  EXPECT_EQ(service_latency_ns(g, all), 0);
  EXPECT_EQ(guaranteed_rate_bps(g, all), g.line_rate_bps);

  // One window of W slots: cycle - (W * slot - guard - frame).
  for (const uint32_t w : {2u, 5u, 30u, 99u}) {
    std::vector<uint32_t> window;
    for (uint32_t s = 0; s < w; ++s) window.push_back(40 + s < 100 ? 40 + s : 40 + s - 100);
    std::sort(window.begin(), window.end());
    EXPECT_EQ(service_latency_ns(g, window), 1'000'000 - (w * 10'000 - 2'000 - 12'144)) << w;
  }
  // A window that wraps around the cycle end is one window: 95..99 and 0..4.
  EXPECT_EQ(service_latency_ns(g, {0, 1, 2, 3, 4, 95, 96, 97, 98, 99}),
            1'000'000 - (10 * 10'000 - 2'000 - 12'144));
  // Two windows: the shorter usable one sets the latency.
  EXPECT_EQ(service_latency_ns(g, {10, 11, 50, 51, 52, 53}), 1'000'000 - (2 * 10'000 - 14'144));
  // No window long enough for a frame: the whole cycle.
  EXPECT_EQ(service_latency_ns(g, {10}), 1'000'000);
  EXPECT_EQ(guaranteed_rate_bps(g, {10}), 0u);
  EXPECT_EQ(service_latency_ns(g, {}), 1'000'000);
  // A window too short beside a usable one does not count.
  EXPECT_EQ(service_latency_ns(g, {10, 50, 51, 52}), 1'000'000 - (30'000 - 14'144));
}

}  // namespace
}  // namespace detwan::control::calendar

// Run-time tunnel changes (Engine::apply_st) on two gateways over the loopback WAN in virtual
// time: a tunnel carrying steady traffic is not disturbed while another is added, modified and
// removed; a refused change changes nothing; a gateway may start without tunnels; indices stay
// stable, drained ones are reused, the peers' control tunnel is chosen again.
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "tests/dataplane/gw/engine_sim_util.h"

namespace detwan::dataplane::gw {
namespace {

using loopback::Delivery;
using loopback::TxRecord;
using ::testing::HasSubstr;
using namespace testing;  // NOLINT(google-build-using-namespace): test helpers

constexpr uint32_t kB = 1001;

TunnelConfig tunnel_b(int site, uint64_t rate_bps, std::vector<uint32_t> slots, int64_t bound_ns) {
  TunnelConfig t;
  t.id = kB;
  t.peer = site == 0 ? "site-b" : "site-a";
  t.owner = "agent:test";
  t.rate_bps = rate_bps;
  t.slots = std::move(slots);
  t.bound_ns = bound_ns;
  if (site == 0) t.dst_prefixes = {v4_prefix(10, 3, 0, 0, 16)};  // only site a sends on it
  return t;
}

std::vector<uint32_t> range(uint32_t first, uint32_t last) {
  std::vector<uint32_t> out;
  for (uint32_t s = first; s <= last; ++s) out.push_back(s);
  return out;
}

uint64_t dropped(const sched::TxCounters& c, sched::TxDrop reason) {
  return c.dropped[static_cast<int>(reason)];
}

// (sequence, departure, tx timestamp) of every data frame of tunnel 7 that site a sent.
using Departures = std::vector<std::tuple<uint64_t, int64_t, int64_t>>;

// The same two sites and flows with no run-time change: what tunnel 7 does undisturbed.
Departures undisturbed_departures_of_7(int64_t end_ns) {
  SiteOptions o;
  o.peer_clock_offset_ns = 0;
  auto g = two_sites(o, o);
  g->set_default_faults({.delay_ns = 2 * kMs});
  Departures out;
  g->set_tx_observer([&](const TxRecord& r) {
    const TxEmit& e = r.emit;
    if (r.engine == 0 && e.send && !e.control && !e.best_effort && e.header.tunnel_id == 7) {
      out.emplace_back(e.header.sequence, e.departure_ns, e.header.tx_time_ns);
    }
  });
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 200e6));
  flows.push_back(flow(0, 3, 80, 2, 60e6));
  drive(*g, flows, end_ns);
  g->run_until(end_ns + 20 * kMs);
  return out;
}

// Applies `changes` to engine i at its current time; the generation it reached.
uint64_t apply(loopback::Gateway& g, uint32_t i, const TunnelChanges& changes) {
  auto result = g.engine(i).apply_st(changes, g.engine_now_ns(i));
  EXPECT_TRUE(result) << result.error().message;
  return result ? result->generation : 0;
}

TEST(EngineRuntime, TunnelAddedModifiedRemovedWhileAnotherCarriesTraffic) {
  SiteOptions o;
  o.peer_clock_offset_ns = 0;
  auto g = two_sites(o, o);
  ASSERT_NE(g, nullptr);
  g->set_default_faults({.delay_ns = 2 * kMs});
  const int64_t t_add = kStartNs + 100 * kMs, t_modify = kStartNs + 300 * kMs;
  const int64_t t_refused = kStartNs + 400 * kMs, t_remove = kStartNs + 500 * kMs;
  const int64_t t_remove_b = t_remove + 1 * kMs, t_end = kStartNs + 700 * kMs;

  // Every frame site a sends is checked against the slots in force when it leaves.
  sched::testing::SlotOracle oracle(wan1_gcl(g->engine(0).config()));
  uint64_t violations = 0, not_sent_7 = 0, sent_7 = 0, sequence_gaps_7 = 0, sent_b = 0;
  std::string first_violation;
  Departures departures_7;
  g->set_tx_observer([&](const TxRecord& r) {
    if (r.engine != 0) return;
    const TxEmit& e = r.emit;
    if (e.send && !e.control && !e.best_effort && e.header.tunnel_id == 7) {
      departures_7.emplace_back(e.header.sequence, e.departure_ns, e.header.tx_time_ns);
    }
    if (!e.send) {
      if (e.header.tunnel_id == 7) ++not_sent_7;
      return;
    }
    const uint32_t owner = e.best_effort ? sched::testing::kUnreserved : e.header.tunnel_id;
    const std::string v = oracle.check(owner, e.departure_ns, e.tx_end_ns);
    if (!v.empty() && violations++ == 0) first_violation = v;
    if (e.control || e.best_effort) return;
    if (e.header.tunnel_id == 7) {
      if (e.header.sequence != sent_7) ++sequence_gaps_7;
      ++sent_7;
    }
    if (e.header.tunnel_id == kB) ++sent_b;
  });
  uint64_t delivered_7 = 0, off_time_7 = 0, delivered_b = 0, b_outside_life = 0;
  uint64_t b_bound_5 = 0, b_bound_3 = 0, b_wrong_bound = 0, b_after_removal = 0;
  g->set_delivery_observer([&](const Delivery& d) {
    if (d.engine != 1 || d.best_effort) return;
    if (d.tunnel_id == 7) {
      ++delivered_7;
      if (d.late || d.release_ns != d.tx_timestamp_ns + 5 * kMs) ++off_time_7;
    }
    if (d.tunnel_id != kB) return;
    ++delivered_b;
    if (d.tx_timestamp_ns < t_add || d.tx_timestamp_ns > t_remove) ++b_outside_life;
    if (d.true_release_ns > t_remove_b) ++b_after_removal;  // held when b removed it
    if (d.late) ++b_wrong_bound;
    if (d.tx_timestamp_ns < t_modify - 3 * kMs) {
      ++b_bound_5;
      if (d.release_ns != d.tx_timestamp_ns + 5 * kMs) ++b_wrong_bound;
    } else if (d.tx_timestamp_ns >= t_modify) {
      ++b_bound_3;
      if (d.release_ns != d.tx_timestamp_ns + 3 * kMs) ++b_wrong_bound;
    }
  });

  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 200e6));  // tunnel 7 (A)
  flows.push_back(flow(0, 3, 80, 2, 60e6));   // 10.3/16: tunnel B while it exists
  drive(*g, flows, t_add);
  EXPECT_EQ(flows[1].accepted, 0u);
  const uint64_t no_route_before = g->engine(0).drops(EngineDrop::kNoRoute);
  EXPECT_EQ(no_route_before, flows[1].refused);
  EXPECT_GT(no_route_before, 100u);
  EXPECT_EQ(g->engine(0).generation(), 0u);

  TunnelChanges add;
  add.add = {tunnel_b(0, 100'000'000, range(14, 16), 5 * kMs)};
  EXPECT_EQ(apply(*g, 0, add), 1u);
  add.add = {tunnel_b(1, 100'000'000, range(14, 16), 5 * kMs)};
  EXPECT_EQ(apply(*g, 1, add), 1u);
  oracle = sched::testing::SlotOracle(wan1_gcl(g->engine(0).config()));
  EXPECT_EQ(g->engine(0).config().tunnels.back().owner, "agent:test");
  drive(*g, flows, t_modify);
  EXPECT_GT(sent_b, 1000u);

  TunnelChanges modify;
  modify.modify = {tunnel_b(0, 150'000'000, range(15, 18), 3 * kMs)};
  EXPECT_EQ(apply(*g, 0, modify), 2u);
  modify.modify = {tunnel_b(1, 150'000'000, range(15, 18), 3 * kMs)};
  EXPECT_EQ(apply(*g, 1, modify), 2u);
  oracle = sched::testing::SlotOracle(wan1_gcl(g->engine(0).config()));
  drive(*g, flows, t_refused);

  // A refused change: slots of tunnel 7. Nothing changes, to the byte.
  const std::string stats_before = g->engine(0).stats_json(g->engine_now_ns(0));
  const std::string tunnels_before = g->engine(0).tunnels_json();
  const GatewayConfig config_before = g->engine(0).config();
  TunnelChanges bad;
  bad.add = {tunnel_b(0, 10'000'000, {3}, 0)};
  bad.add[0].id = 1002;
  bad.add[0].dst_prefixes = {v4_prefix(10, 4, 0, 0, 16)};
  bad.remove = {kB};
  auto refused = g->engine(0).apply_st(bad, g->engine_now_ns(0));
  ASSERT_FALSE(refused);
  EXPECT_THAT(refused.error().message,
              HasSubstr("add[0] (tunnel 1002): field 'slots': slot 3 of WAN port 'wan1' is "
                        "claimed by two tunnels: tunnel 7 (tunnels[0]) and tunnel 1002 (add[0])"));
  EXPECT_EQ(g->engine(0).stats_json(g->engine_now_ns(0)), stats_before);
  EXPECT_EQ(g->engine(0).tunnels_json(), tunnels_before);
  EXPECT_EQ(g->engine(0).config(), config_before);
  EXPECT_EQ(g->engine(0).generation(), 2u);
  drive(*g, flows, t_remove);

  TunnelChanges remove;
  remove.remove = {kB};
  const uint32_t b_index = g->engine(1).tunnel_index(kB);
  EXPECT_EQ(apply(*g, 0, remove), 3u);
  const uint64_t no_route_at_remove = g->engine(0).drops(EngineDrop::kNoRoute);
  drive(*g, flows, t_remove_b);
  const sched::Playout& held = g->engine(1).playout(b_index);
  EXPECT_GT(held.held_frames(), 0u);  // B's playout at b holds packets when b removes B
  EXPECT_EQ(apply(*g, 1, remove), 3u);
  EXPECT_FALSE(g->engine(1).tunnel_active(b_index));
  EXPECT_EQ(g->engine(1).tunnel_id(b_index), kB);
  drive(*g, flows, t_end);
  g->run_until(t_end + 20 * kMs);
  ASSERT_FALSE(g->stalled());

  // Tunnel A (7): every frame in its slots, none dropped or unsent, sequence numbers without a
  // gap, every packet released exactly at tx + bound.
  EXPECT_EQ(violations, 0u) << first_violation;
  EXPECT_EQ(not_sent_7, 0u);
  EXPECT_EQ(sequence_gaps_7, 0u);
  const sched::TxCounters* c7 = g->engine(0).scheduler(0).tunnel_counters(7);
  ASSERT_NE(c7, nullptr);
  for (int r = 0; r < sched::kTxDropCount; ++r) EXPECT_EQ(c7->dropped[r], 0u) << r;
  EXPECT_GT(flows[0].accepted, 10'000u);
  EXPECT_EQ(flows[0].refused, 0u);
  EXPECT_EQ(sent_7, flows[0].accepted);
  EXPECT_EQ(delivered_7, flows[0].accepted);
  EXPECT_EQ(off_time_7, 0u);
  // And exactly as if nothing had changed: every frame left at the instant it would have.
  const Departures undisturbed = undisturbed_departures_of_7(t_end);
  EXPECT_EQ(departures_7.size(), undisturbed.size());
  EXPECT_TRUE(departures_7 == undisturbed);

  // Tunnel B carried traffic only while it existed, at the bound in force when it arrived;
  // what b held when it removed B was still released on time.
  EXPECT_EQ(b_outside_life, 0u);
  EXPECT_EQ(b_wrong_bound, 0u);
  EXPECT_GT(b_bound_5, 1000u);
  EXPECT_GT(b_bound_3, 1000u);
  EXPECT_GT(b_after_removal, 0u);
  EXPECT_EQ(held.held_frames(), 0u);
  EXPECT_GT(g->engine(0).drops(EngineDrop::kNoRoute), no_route_at_remove);
  EXPECT_EQ(g->engine(0).drops(EngineDrop::kNoRoute), flows[1].refused);
  // Every B packet accepted at a was delivered at b, handed back at a (modify, remove), or was
  // on the WAN when b removed B (unknown_tunnel there).
  const sched::TxCounters& port_a = g->engine(0).scheduler(0).port_counters();
  const uint64_t handed_back = dropped(port_a, sched::TxDrop::kTunnelRemoved) +
                               dropped(port_a, sched::TxDrop::kReconfigured);
  EXPECT_EQ(delivered_b + handed_back + g->engine(1).drops(EngineDrop::kUnknownTunnel),
            flows[1].accepted);
  EXPECT_EQ(g->engine(0).scheduler(0).tunnel_counters(kB), nullptr);
  // Gone from stats and tunnels; the port's counters keep what it sent.
  const auto stats = boost::json::parse(g->engine(0).stats_json(g->engine_now_ns(0)));
  EXPECT_EQ(stats.at("tunnels").as_array().size(), 2u);
  EXPECT_EQ(stats.at("generation").to_number<uint64_t>(), 3u);
  const auto tunnels = boost::json::parse(g->engine(0).tunnels_json());
  EXPECT_EQ(tunnels.at("tunnels").as_array().size(), 2u);
  EXPECT_EQ(port_a.sent_packets, c7->sent_packets + sent_b +
                                     g->engine(0).scheduler(0).tunnel_counters(9)->sent_packets +
                                     g->engine(0).scheduler(0).best_effort_counters().sent_packets);
  EXPECT_EQ(g->buffers_in_use(), g->in_flight());
  EXPECT_EQ(g->bad_frees(), 0u);
  EXPECT_TRUE(g->engine(0).peer_status(0).up);
}

// Site a's and site b's configurations of two_sites() without their tunnel: gateways that
// start with none and take theirs at run time.
GatewayConfig site_without_tunnels(int site, const SiteOptions& o) {
  GatewayConfig config = site_config(site, o);
  config.tunnels.clear();
  return config;
}

std::unique_ptr<loopback::Gateway> two_sites_without_tunnels(const SiteOptions& o,
                                                             bool capture_deliveries) {
  loopback::Options options;
  options.start_ns = kStartNs;
  options.capture_deliveries = capture_deliveries;
  auto created = loopback::Gateway::create(
      {{site_without_tunnels(0, o), 0}, {site_without_tunnels(1, o), 0}}, options);
  EXPECT_TRUE(created) << created.error().message;
  return created ? std::move(*created) : nullptr;
}

TEST(EngineRuntime, AGatewayWithoutTunnelsRunsAndTakesATunnelLater) {
  SiteOptions o;
  o.peer_clock_offset_ns = 0;
  // Valid as a file too.
  ASSERT_TRUE(load_gateway_config_string(describe(site_without_tunnels(0, o))).has_value());
  auto created = two_sites_without_tunnels(o, true);
  ASSERT_NE(created, nullptr);
  auto& g = *created;
  g.set_default_faults({.delay_ns = 2 * kMs});
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 50e6));
  drive(g, flows, kStartNs + 100 * kMs);
  EXPECT_EQ(flows[0].accepted, 0u);
  EXPECT_EQ(g.engine(0).drops(EngineDrop::kNoRoute), flows[0].refused);
  EXPECT_EQ(g.wan_counters().sent, 0u);  // no tunnel: no control exchange either
  EXPECT_FALSE(g.engine(0).peer_status(0).has_control_tunnel);
  EXPECT_EQ(g.engine(0).tunnel_count(), 0u);

  TunnelChanges add;
  add.add = {site_config(0, o).tunnels[0]};
  EXPECT_EQ(apply(g, 0, add), 1u);
  add.add = {site_config(1, o).tunnels[0]};
  EXPECT_EQ(apply(g, 1, add), 1u);
  drive(g, flows, kStartNs + 300 * kMs);
  g.run_until(kStartNs + 320 * kMs);
  EXPECT_GT(flows[0].accepted, 1000u);
  EXPECT_EQ(g.deliveries(1).size(), flows[0].accepted);
  for (const Delivery& d : g.deliveries(1)) {
    EXPECT_EQ(d.tunnel_id, 7u);
    EXPECT_EQ(d.release_ns, d.tx_timestamp_ns + 5 * kMs);
  }
  EXPECT_TRUE(g.engine(0).peer_status(0).up);  // the control exchange started with the tunnel
  EXPECT_TRUE(g.engine(0).peer_status(0).has_control_tunnel);
}

// What a batching backend asks before it coalesces arrivals (the io_uring loop's rx_coalesce):
// only active tunnels with a bound count, through add, modify and remove.
TEST(EngineRuntime, CarriesOnTimeWhileAnActiveTunnelHasABound) {
  SiteOptions o;
  o.peer_clock_offset_ns = 0;
  auto created = two_sites_without_tunnels(o, false);
  ASSERT_NE(created, nullptr);
  auto& g = *created;
  EXPECT_FALSE(g.engine(0).carries_on_time());

  TunnelChanges add;
  add.add = {tunnel_b(0, 100'000'000, range(14, 16), 0)};  // delivered on receipt
  EXPECT_EQ(apply(g, 0, add), 1u);
  EXPECT_FALSE(g.engine(0).carries_on_time());
  TunnelChanges modify;
  modify.modify = {tunnel_b(0, 100'000'000, range(14, 16), 3 * kMs)};
  EXPECT_EQ(apply(g, 0, modify), 2u);
  EXPECT_TRUE(g.engine(0).carries_on_time());
  EXPECT_FALSE(g.engine(1).carries_on_time());  // the other gateway has no tunnel yet
  TunnelChanges remove;
  remove.remove = {kB};
  EXPECT_EQ(apply(g, 0, remove), 3u);
  EXPECT_FALSE(g.engine(0).carries_on_time());  // draining, no longer active
}

TEST(EngineRuntime, IndicesStayDrainedOnesAreReusedControlTunnelIsChosenAgain) {
  SiteOptions o;
  o.peer_clock_offset_ns = 0;
  auto g = two_sites(o, o);
  ASSERT_NE(g, nullptr);
  g->set_default_faults({.delay_ns = 2 * kMs});
  Engine& a = g->engine(0);
  std::vector<Flow> flows;
  flows.push_back(flow(1, 1, 80, 1, 50e6));  // site b -> site a on tunnel 7, until 50 ms
  drive(*g, flows, kStartNs + 50 * kMs);
  EXPECT_GT(a.playout(0).counters().received_packets, 100u);  // 7's playout at a was used
  auto control_tunnel = [&] {
    const auto stats = boost::json::parse(a.stats_json(g->engine_now_ns(0)));
    return boost::json::serialize(stats.at("peers").at(0).at("control_tunnel"));
  };
  EXPECT_EQ(control_tunnel(), "7");
  EXPECT_EQ(a.tunnel_index(7), 0u);
  EXPECT_EQ(a.tunnel_index(9), 1u);

  // Adding B: a new index. Removing 7 (at both ends): 9 keeps index 1 and becomes the control
  // tunnel, and the peers stay up on it.
  TunnelChanges change;
  change.add = {tunnel_b(0, 100'000'000, range(14, 16), 0)};
  apply(*g, 0, change);
  EXPECT_EQ(a.tunnel_index(kB), 2u);
  change = {};
  change.remove = {7};
  apply(*g, 0, change);
  apply(*g, 1, change);
  EXPECT_EQ(a.tunnel_index(7), Engine::kNoTunnel);
  EXPECT_EQ(a.tunnel_index(9), 1u);
  EXPECT_EQ(a.tunnel_index(kB), 2u);
  EXPECT_EQ(control_tunnel(), "9");
  g->run_until(kStartNs + 100 * kMs);
  EXPECT_TRUE(a.peer_status(0).up);
  EXPECT_GT(a.peer_status(0).last_rx_ns, g->engine_now_ns(0) - 10 * kMs);  // heard on 9

  // 7's index is drained and never had a service port: the next new tunnel takes it.
  change = {};
  change.add = {tunnel_b(0, 100'000'000, range(0, 3), 0)};
  change.add[0].id = 1002;
  change.add[0].dst_prefixes = {v4_prefix(10, 5, 0, 0, 16)};
  apply(*g, 0, change);
  EXPECT_EQ(a.tunnel_index(1002), 0u);
  EXPECT_EQ(control_tunnel(), "9");
  // Its playouts were 7's, restarted: nothing of 7's is left in them, they are 1002's.
  for (const bool best_effort : {false, true}) {
    const sched::Playout& reused = a.playout(0, best_effort);
    EXPECT_EQ(reused.counters_json(), sched::Playout::create(reused.config())->counters_json());
  }
  EXPECT_EQ(a.playout(0).config().bound_ns, 0);  // 1002's bound (7's was 5 ms)
  // 9 had a service port (service_deliver): once removed, its index is never given again.
  change = {};
  change.remove = {9};
  apply(*g, 0, change);
  EXPECT_EQ(control_tunnel(), "1001");  // the first of the peer's tunnels, in config order
  change = {};
  change.add = {tunnel_b(0, 10'000'000, range(17, 17), 0)};
  change.add[0].id = 1003;
  change.add[0].dst_prefixes = {v4_prefix(10, 6, 0, 0, 16)};
  apply(*g, 0, change);
  EXPECT_EQ(a.tunnel_index(1003), 3u);
  EXPECT_FALSE(a.tunnel_active(1));
  EXPECT_EQ(a.tunnel_count(), 4u);

  // A removed tunnel's service port still receives: dropped as no_route.
  const uint8_t payload[10] = {};
  EXPECT_EQ(g->inject_service(0, 1, std::as_bytes(std::span(payload))), common::Status::kDropped);
  EXPECT_EQ(a.drops(EngineDrop::kNoRoute), 1u);

  // No tunnel left while the peer is up: no control exchange, and the peer goes down after
  // dead_after (30 ms) all the same.
  EXPECT_TRUE(a.peer_status(0).up);
  change = {};
  change.remove = {kB, 1002, 1003};
  apply(*g, 0, change);
  EXPECT_EQ(control_tunnel(), "null");
  EXPECT_FALSE(a.peer_status(0).has_control_tunnel);
  g->run_until(kStartNs + 200 * kMs);
  EXPECT_FALSE(a.peer_status(0).up);
  EXPECT_EQ(a.generation(), 6u);
  EXPECT_EQ(boost::json::parse(a.tunnels_json()).at("tunnels").as_array().size(), 0u);
}

}  // namespace
}  // namespace detwan::dataplane::gw

// A gateway spread over cores (gw/shard.h), in virtual time over the loopback backend: each site
// is three engine shards (tunnel 9 -> shard 0, tunnel 7 -> shard 1, shard 2 owns nothing). The
// schedule of the shared WAN port must stay exact (every frame in its owner's slots, reserved
// rates met, each shard's best effort in its own part of the unreserved slots), the peer's clock
// must reach the follower shards (tunnel 9's on-time playout runs in a follower), and only the
// lead shard exchanges control packets.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "dataplane/gw/shard.h"
#include "dataplane/gw/shard_control.h"
#include "tests/dataplane/gw/engine_sim_util.h"

namespace detwan::dataplane::gw {
namespace {

using loopback::Delivery;
using loopback::TxRecord;
using namespace testing;  // NOLINT(google-build-using-namespace): test helpers

constexpr uint32_t kShards = 3;
constexpr int64_t kCycles = 1000;        // of 1 ms
constexpr int64_t kOffsetBNs = 3 * kMs;  // site b's clock runs 3 ms ahead of site a's

std::unique_ptr<loopback::Gateway> sharded_sites(const SiteOptions& o) {
  std::vector<loopback::EngineSpec> specs;
  loopback::Options options;
  for (int site = 0; site < 2; ++site) {
    for (uint32_t k = 0; k < kShards; ++k) {
      specs.push_back({site_config(site, o), site == 0 ? 0 : kOffsetBNs});
      options.shards.push_back(ShardSpec{k, kShards, site == 0 ? 0xa0a0u : 0xb0b0u});
    }
  }
  options.start_ns = kStartNs;
  options.capture_deliveries = false;
  auto g = loopback::Gateway::create(std::move(specs), options);
  EXPECT_TRUE(g.has_value()) << g.error().describe();
  return g ? std::move(*g) : nullptr;
}

uint32_t slot_of(int64_t t_ns) { return static_cast<uint32_t>((t_ns % kMs) / (50 * kUs)); }

TEST(ShardSpec, TunnelsGoToTheirIdModuloTheCount) {
  EXPECT_EQ(shard_of_tunnel(7, 1), 0u);
  EXPECT_EQ(shard_of_tunnel(7, 3), 1u);
  EXPECT_EQ(shard_of_tunnel(9, 3), 0u);
  EXPECT_EQ(shard_of_tunnel(4'000'000'001u, 4), 1u);
}

TEST(ShardSpec, UnreservedSlotsAreSplitIntoDisjointRunsThatCoverThemAll) {
  sched::GclConfig gcl;
  gcl.slot_count = 20;
  gcl.tunnels.push_back({7, 1, {0, 1, 2, 3, 4, 5, 6, 7}});
  gcl.tunnels.push_back({9, 1, {10, 11, 12, 13}});
  // Free: 8, 9, 14..19 (8 slots) -> runs of 2, 3, 3 for three shards.
  std::set<uint32_t> seen;
  std::vector<std::vector<uint32_t>> runs;
  for (uint32_t k = 0; k < 3; ++k) {
    sched::GclConfig mine = gcl;
    restrict_best_effort(mine, ShardSpec{k, 3});
    ASSERT_EQ(mine.tunnels.size(), 3u);
    EXPECT_EQ(mine.tunnels.back().tunnel_id, kClosedSlotOwner);
    std::set<uint32_t> closed(mine.tunnels.back().slots.begin(), mine.tunnels.back().slots.end());
    std::vector<uint32_t> open;
    for (const uint32_t s : {8u, 9u, 14u, 15u, 16u, 17u, 18u, 19u}) {
      if (closed.count(s) == 0) open.push_back(s);
    }
    for (const uint32_t s : open) EXPECT_TRUE(seen.insert(s).second) << "slot " << s << " twice";
    runs.push_back(open);
    EXPECT_TRUE(sched::GateControlList::create(mine).has_value());
  }
  EXPECT_EQ(seen.size(), 8u);
  EXPECT_EQ(runs[0], (std::vector<uint32_t>{8, 9}));
  EXPECT_EQ(runs[1], (std::vector<uint32_t>{14, 15, 16}));
  EXPECT_EQ(runs[2], (std::vector<uint32_t>{17, 18, 19}));
  // One shard: nothing changes.
  sched::GclConfig whole = gcl;
  restrict_best_effort(whole, ShardSpec{0, 1});
  EXPECT_EQ(whole.tunnels.size(), 2u);
  // More shards than free slots: some shards get none (their best effort finds no window).
  sched::GclConfig tight = gcl;
  tight.tunnels[0].slots = {0, 1, 2, 3, 4, 5, 6, 7, 8, 14, 15, 16, 17, 18, 19};
  restrict_best_effort(tight, ShardSpec{0, 4});
  EXPECT_EQ(tight.tunnels.back().slots, (std::vector<uint32_t>{9}));
}

TEST(ShardSpec, CreateRefusesAnIndexOutsideTheCount) {
  for (const ShardSpec bad : {ShardSpec{0, 0}, ShardSpec{3, 3}}) {
    auto engine = Engine::create(site_config(0), kStartNs, bad);
    ASSERT_FALSE(engine.has_value());
    EXPECT_NE(engine.error().message.find("shard"), std::string::npos) << engine.error().message;
  }
}

TEST(ShardSpec, PeekReadsTheTunnelIdOfAHeader) {
  std::vector<std::byte> datagram(wire::kHeaderSize + 10);
  wire::TunnelHeader header;
  header.tunnel_id = 0x01020304;
  header.flags = wire::kFlagData;
  header.payload_length = 10;
  ASSERT_GT(wire::encode(header, datagram).size, 0u);
  EXPECT_EQ(Engine::peek_tunnel_id(datagram), 0x01020304u);
  EXPECT_EQ(Engine::peek_tunnel_id(std::span<const std::byte>(datagram).first(7)), 0u);
}

TEST(EngineShards, ScheduleStaysExactAndFollowersTakeTheLeadsClock) {
  SiteOptions o;  // clock offset estimated by the two-way exchange
  o.bound9_ns = 5 * kMs;
  o.over_rate7 = sched::OverRateAction::kBestEffort;  // shard 1 sends best effort too
  auto g = sharded_sites(o);
  ASSERT_NE(g, nullptr);
  g->set_default_faults({.delay_ns = 2 * kMs});
  SlotChecker slots(*g);
  std::set<uint32_t> best_effort_slots[kShards];
  g->set_tx_observer([&](const TxRecord& r) {
    slots.check(r);
    if (r.engine < kShards && r.emit.best_effort && r.emit.send) {
      best_effort_slots[r.engine].insert(slot_of(r.emit.departure_ns));
    }
  });
  DeliveryLog log;
  uint64_t on_time_9 = 0, off_target_9 = 0, released_by[2 * kShards] = {};
  g->set_delivery_observer([&](const Delivery& d) {
    log.add(d);
    ++released_by[d.engine];
    if (d.engine >= kShards && d.tunnel_id == 9 && !d.best_effort) {
      ++on_time_9;
      // Sent on a's clock (true time), released on b's at tx + 3 ms offset + 5 ms bound.
      if (d.late || d.true_release_ns != d.tx_timestamp_ns + 5 * kMs) ++off_target_9;
    }
  });
  // Traffic starts once the clocks have been exchanged (every 10 ms).
  const int64_t start = kStartNs + 50 * kMs;
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 450e6, 200, 1400, start));         // tunnel 7, over its rate
  flows.push_back(flow(0, 102, 5001, 2, 200e6, 200, 1400, start));     // tunnel 9, over its rate
  flows.push_back(flow(0, 102, 80, 3, 150e6, 200, 1400, start));       // best effort for tunnel 9
  flows.push_back(flow(kShards, 1, 443, 4, 100e6, 200, 1400, start));  // b -> a, tunnel 7
  const int64_t end = start + kCycles * kMs;
  drive(*g, flows, end);
  const uint64_t sent7 = slots.sent_bytes(1, 7, false);
  const uint64_t sent9 = slots.sent_bytes(0, 9, false);
  g->run_until(end + 20 * kMs);
  ASSERT_FALSE(g->stalled());

  // Every frame of every shard in its owner's slots at its instant; the reserved rates met by
  // the owning shard alone (within 0.2 %: one cycle's burst in a 1 s run).
  slots.expect_clean();
  const double seconds = static_cast<double>(kCycles) * 1e-3;
  EXPECT_NEAR(static_cast<double>(sent7) * 8 / seconds / kRate7Bps, 1.0, 0.002);
  EXPECT_NEAR(static_cast<double>(sent9) * 8 / seconds / kRate9Bps, 1.0, 0.002);
  EXPECT_EQ(slots.sent_bytes(0, 7, false) + slots.sent_bytes(2, 7, false), 0u);
  EXPECT_EQ(slots.sent_bytes(1, 9, false) + slots.sent_bytes(2, 9, false), 0u);
  // Best effort from shards 0 (tunnel 9's) and 1 (tunnel 7's downgraded excess), each in its
  // own run of the free slots 8-9, 14-19: never the same slot.
  ASSERT_FALSE(best_effort_slots[0].empty());
  ASSERT_FALSE(best_effort_slots[1].empty());
  for (const uint32_t s : best_effort_slots[0]) {
    EXPECT_EQ(best_effort_slots[1].count(s), 0u) << "slot " << s << " used by shards 0 and 1";
  }
  EXPECT_TRUE(best_effort_slots[2].empty());

  // Nothing accepted lost or repeated; tunnel 9's on-time packets, held by a follower shard,
  // released exactly at their target: the follower took the lead's clock estimate.
  EXPECT_EQ(log.repeated(), 0u);
  for (const Flow& f : flows) {
    EXPECT_EQ(log.count(f.source.id()), f.accepted) << "flow " << f.source.id();
    EXPECT_GT(f.accepted, 1000u);
  }
  EXPECT_GT(on_time_9, 10'000u);
  EXPECT_EQ(off_target_9, 0u);
  EXPECT_EQ(released_by[kShards + 2], 0u);  // shard 2 of b owns no tunnel

  // Control: the lead (shard 1, owner of control tunnel 7) exchanges; followers send nothing
  // and still see the peer up with the lead's offset.
  for (const uint32_t site_base : {0u, kShards}) {
    const uint32_t lead = site_base + 1;
    EXPECT_TRUE(g->engine(lead).leads_peer(0));
    EXPECT_GT(slots.control_frames(lead, 7), 10u);
    for (const uint32_t follower : {site_base, site_base + 2}) {
      EXPECT_FALSE(g->engine(follower).leads_peer(0));
      EXPECT_EQ(slots.control_frames(follower, 7) + slots.control_frames(follower, 9), 0u);
      const PeerStatus peer = g->engine(follower).peer_status(0);
      EXPECT_TRUE(peer.up) << "engine " << follower;
      EXPECT_EQ(peer.playout_offset_ns, g->engine(lead).peer_status(0).playout_offset_ns);
    }
  }
  EXPECT_EQ(g->engine(kShards).peer_status(0).playout_offset_ns, kOffsetBNs);
  EXPECT_EQ(g->engine(0).boot_id(), g->engine(2).boot_id());  // one epoch per gateway
}

// ---- the control channel of a sharded gateway (shard_control.h) ----

TEST(ShardControl, TunnelDifferenceAddsModifiesAndRemoves) {
  GatewayConfig a = site_config(0), b = site_config(0);
  b.tunnels[0].rate_bps /= 2;              // tunnel 7 modified
  b.tunnels.erase(b.tunnels.begin() + 1);  // tunnel 9 removed
  TunnelConfig added = a.tunnels[1];
  added.id = 12;
  b.tunnels.push_back(added);
  const TunnelChanges changes = tunnel_difference(a.tunnels, b.tunnels);
  ASSERT_EQ(changes.add.size(), 1u);
  EXPECT_EQ(changes.add[0].id, 12u);
  ASSERT_EQ(changes.modify.size(), 1u);
  EXPECT_EQ(changes.modify[0].id, 7u);
  EXPECT_EQ(changes.remove, std::vector<uint32_t>{9});
  EXPECT_TRUE(tunnel_difference(a.tunnels, a.tunnels).add.empty());
}

class ShardControlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SiteOptions o;
    o.peer_clock_offset_ns = 0;
    g_ = sharded_sites(o);
    ASSERT_NE(g_, nullptr);
    g_->set_default_faults({.delay_ns = 2 * kMs});
    std::vector<Flow> flows;
    flows.push_back(flow(0, 2, 80, 1, 100e6, 200, 1400, kStartNs + 20 * kMs));     // tunnel 7
    flows.push_back(flow(0, 102, 5001, 2, 50e6, 200, 1400, kStartNs + 20 * kMs));  // tunnel 9
    drive(*g_, flows, kStartNs + 200 * kMs);
    g_->run_until(kStartNs + 220 * kMs);
    for (uint32_t k = 0; k < kShards; ++k) site_a_.push_back(&g_->engine(k));
  }
  int64_t now() const { return g_->engine_now_ns(0); }

  std::unique_ptr<loopback::Gateway> g_;
  std::vector<Engine*> site_a_;
  const ControlChannel admin_{true, "/run/admin.sock", "/run/admin.sock"};
};

TEST_F(ShardControlTest, MergedStatsTakeEachTunnelFromItsOwnerAndSumThePorts) {
  namespace json = boost::json;
  const json::value merged =
      json::parse(answer_sharded_request(site_a_, R"({"cmd":"stats"})", now(), ControlChannel{}));
  ASSERT_TRUE(merged.is_object()) << json::serialize(merged);
  EXPECT_EQ(merged.at("shards").to_number<uint32_t>(), kShards);
  uint64_t sent_total = 0, tx_packets = 0;
  for (uint32_t k = 0; k < kShards; ++k) {
    sent_total += site_a_[k]->scheduler(0).port_counters().sent_packets;
    tx_packets += site_a_[k]->port_io(0).tx_packets;
  }
  const json::object& port = merged.at("ports").at(0).as_object();
  EXPECT_GT(sent_total, 1000u);
  EXPECT_EQ(port.at("tx").at("port").at("sent_packets").to_number<uint64_t>(), sent_total);
  EXPECT_EQ(port.at("io").at("tx_packets").to_number<uint64_t>(), tx_packets);
  EXPECT_EQ(port.at("line_rate_bps").to_number<uint64_t>(), kLineRateBps);  // not summed
  EXPECT_FALSE(port.at("tx").at("tunnels").as_object().contains("0"));      // closed runs hidden
  for (const json::value& tunnel : merged.at("tunnels").as_array()) {
    const auto id = tunnel.at("id").to_number<uint32_t>();
    const uint32_t owner = shard_of_tunnel(id, kShards);
    const sched::TxCounters* c = site_a_[owner]->scheduler(0).tunnel_counters(id);
    ASSERT_NE(c, nullptr);
    EXPECT_GT(c->sent_packets, 100u) << id;
    EXPECT_EQ(tunnel.at("tx").at("scheduler").at("sent_packets").to_number<uint64_t>(),
              c->sent_packets)
        << id;
    EXPECT_EQ(
        port.at("tx").at("tunnels").at(std::to_string(id)).at("sent_packets").to_number<uint64_t>(),
        c->sent_packets)
        << id;
  }
  // The peer as its lead (shard 1, owner of control tunnel 7) sees it: it exchanged keepalives.
  EXPECT_GT(merged.at("peers").at(0).at("keepalive").at("sent").to_number<uint64_t>(), 0u);
}

// The value of the sample `series` (name and labels exactly as exposed) in `text`, or -1.
double sample(const std::string& text, const std::string& series) {
  const std::string line_start = "\n" + series + " ";
  const size_t at = text.find(line_start);
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + line_start.size()));
}

TEST_F(ShardControlTest, MergedPrometheusTakesEachTunnelFromItsOwnerAndSumsThePorts) {
  const std::string text =
      answer_sharded_request(site_a_, R"({"cmd":"prometheus"})", now(), ControlChannel{});
  ASSERT_EQ(text.find("\"error\""), std::string::npos) << text;
  EXPECT_EQ(sample(text, "detwan_gw_shards"), kShards);
  // Each family once (one # TYPE line per name), however many shards fed it.
  std::set<std::string> families;
  for (size_t at = text.find("# TYPE "); at != std::string::npos;
       at = text.find("# TYPE ", at + 1)) {
    const std::string name = text.substr(at + 7, text.find(' ', at + 7) - at - 7);
    EXPECT_TRUE(families.insert(name).second) << "family " << name << " written twice";
  }
  const std::string port = site_a_[0]->config().wan_ports[0].name;
  uint64_t sent_total = 0, tx_packets = 0, departures = 0;
  for (uint32_t k = 0; k < kShards; ++k) {
    sent_total += site_a_[k]->scheduler(0).port_counters().sent_packets;
    tx_packets += site_a_[k]->port_io(0).tx_packets;
    departures += site_a_[k]->scheduler(0).port_counters().departure_error_ns.count();
  }
  EXPECT_GT(sent_total, 1000u);
  const std::string port_labels = "{port=\"" + port + "\"}";
  EXPECT_EQ(sample(text, "detwan_gw_port_tx_sent_packets_total" + port_labels),
            static_cast<double>(sent_total));
  EXPECT_EQ(sample(text, "detwan_gw_port_tx_packets_total" + port_labels),
            static_cast<double>(tx_packets));
  // Histograms merged bucket by bucket: every shard's departures counted.
  EXPECT_EQ(sample(text, "detwan_gw_port_tx_departure_error_seconds_count" + port_labels),
            static_cast<double>(departures));
  for (const uint32_t id : {7u, 9u}) {
    const uint32_t owner = shard_of_tunnel(id, kShards);
    const sched::TxCounters* c = site_a_[owner]->scheduler(0).tunnel_counters(id);
    ASSERT_NE(c, nullptr);
    EXPECT_GT(c->sent_packets, 100u);
    EXPECT_EQ(sample(text, "detwan_gw_tunnel_tx_sent_packets_total{tunnel=\"" + std::to_string(id) +
                               "\",port=\"" + port + "\"}"),
              static_cast<double>(c->sent_packets))
        << "tunnel " << id << " (owner shard " << owner << ")";
  }
  // One shard alone is the unsharded exposition.
  EXPECT_EQ(Engine::prometheus_text({site_a_[0]}, now()), site_a_[0]->prometheus_text(now()));
}

TEST_F(ShardControlTest, ARunTimeChangeReachesEveryShard) {
  namespace json = boost::json;
  const std::string request =
      R"({"cmd":"apply","add":[{"id":12,"peer":"site-b","auth":"none","rate":"50mbit","slots":"16-17"}]})";
  const json::value answer = json::parse(answer_sharded_request(site_a_, request, now(), admin_));
  ASSERT_FALSE(answer.as_object().contains("error")) << json::serialize(answer);
  for (uint32_t k = 0; k < kShards; ++k) {
    EXPECT_NE(site_a_[k]->tunnel_index(12), Engine::kNoTunnel) << "shard " << k;
    EXPECT_EQ(site_a_[k]->generation(), site_a_[0]->generation());
    EXPECT_EQ(site_a_[k]->config().tunnels, site_a_[0]->config().tunnels);
  }
  // A refused write changes no shard.
  const json::value refused = json::parse(
      answer_sharded_request(site_a_, R"({"cmd":"apply","remove":[4242]})", now(), admin_));
  EXPECT_TRUE(refused.as_object().contains("error"));
  for (uint32_t k = 0; k < kShards; ++k) {
    EXPECT_EQ(site_a_[k]->generation(), site_a_[0]->generation());
  }
  // Writes still need the admin socket.
  EXPECT_THAT(answer_sharded_request(site_a_, request, now(), ControlChannel{}),
              ::testing::HasSubstr("admin socket"));
}

}  // namespace
}  // namespace detwan::dataplane::gw

// Two gateways over a faulty loopback WAN in virtual time: duplicates and replays, reordering,
// malformed and foreign datagrams among good traffic, corruption and truncation, clock offset
// estimation, configured offsets, peer death, service datagrams and IPv6.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "dataplane/wire/control.h"
#include "tests/dataplane/gw/engine_sim_util.h"

namespace detwan::dataplane::gw {
namespace {

using common::Status;
using loopback::Delivery;
using loopback::LinkFaults;
using loopback::TxRecord;
using namespace testing;  // NOLINT(google-build-using-namespace): test helpers

SiteOptions configured_zero() {
  SiteOptions o;
  o.peer_clock_offset_ns = 0;
  return o;
}

// Control packets a peer's stats say were sent (or received) to (from) its first peer.
uint64_t control_count(const Engine& e, int64_t now_ns, bool sent) {
  const auto stats = boost::json::parse(e.stats_json(now_ns));
  const auto& peer = stats.at("peers").at(0);
  const auto n = [&](const char* group, const char* key) {
    return peer.at(group).at(key).to_number<uint64_t>();
  };
  return sent ? n("time_exchange", "requests_sent") + n("time_exchange", "responses_sent") +
                    n("keepalive", "sent")
              : n("time_exchange", "requests_received") + n("time_exchange", "responses_received") +
                    n("keepalive", "received");
}

TEST(EngineFaults, DuplicatesAndReplaysAreDroppedAndCountedReorderingIsNot) {
  auto g = two_sites(configured_zero(), configured_zero());
  ASSERT_NE(g, nullptr);
  g->set_faults(
      0, 1,
      {.delay_ns = 1 * kMs, .duplicate = 0.05, .reorder = 0.05, .reorder_delay_ns = 300 * kUs});
  g->set_faults(1, 0, {.delay_ns = 1 * kMs});
  DeliveryLog log;
  uint64_t off = 0;
  g->set_delivery_observer([&](const Delivery& d) {
    log.add(d);
    if (d.engine == 1 && (d.late || d.true_release_ns != d.tx_timestamp_ns + 5 * kMs)) ++off;
  });
  wire::TunnelHeader first;
  bool have_first = false;
  g->set_tx_observer([&](const TxRecord& r) {
    if (r.engine == 0 && !r.emit.control && !have_first) {
      first = r.emit.header;
      first.type = static_cast<uint8_t>(r.type);
      have_first = true;
    }
  });
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 100e6));
  drive(*g, flows, kStartNs + 1000 * kMs);
  g->run_until(kStartNs + 1010 * kMs);  // every data packet delivered
  g->set_alive(0, false);  // a stops sending: what it sent arrives during the next 2 ms
  g->run_until(kStartNs + 1012 * kMs);
  const auto& b = g->engine(1);
  const uint64_t duplicates = b.rx_drops(0)[wire::DropReason::kDuplicate];
  EXPECT_EQ(log.repeated(), 0u);
  EXPECT_EQ(log.count(1), flows[0].accepted);  // reordered within the window: all accepted
  EXPECT_EQ(off, 0u);                          // reordered by 300 us, still inside the 5 ms bound
  EXPECT_GT(g->wan_counters().reordered, 100u);
  // Every duplicated data packet was refused once by the tunnel's window, every duplicated
  // control packet by the peer path's control window.
  const uint64_t control_copies = b.drops(EngineDrop::kControlReplayed);
  EXPECT_GT(duplicates, 100u);
  EXPECT_EQ(duplicates + control_copies, g->wan_counters().duplicated);
  EXPECT_EQ(control_count(b, g->engine_now_ns(1), false),
            control_count(g->engine(0), g->engine_now_ns(0), true));
  EXPECT_EQ(b.rx_drops(0)[wire::DropReason::kTooOld], 0u);

  // A replay of the first packet, long after: below the window.
  ASSERT_TRUE(have_first);
  first.payload_length = 0;
  Bytes replay(wire::kHeaderSize);
  ASSERT_EQ(wire::encode(first, replay).status, wire::EncodeStatus::kOk);
  g->inject_wan(1, 0, g->engine(0).config().wan_ports[0].local, replay);
  g->run_until(g->now_ns() + 1 * kMs);
  EXPECT_EQ(b.rx_drops(0)[wire::DropReason::kTooOld], 1u);
  EXPECT_EQ(log.count(1), flows[0].accepted);
}

// One datagram per wire drop reason and per gateway drop reason, three times each, injected at
// site b among a steady flow: each is counted under exactly its reason and the flow loses
// nothing.
TEST(EngineFaults, MalformedAndForeignDatagramsAreCountedWhileGoodTrafficFlows) {
  SiteOptions o = configured_zero();
  o.second_port = true;
  auto g = two_sites(o, o);
  ASSERT_NE(g, nullptr);
  g->set_default_faults({.delay_ns = 2 * kMs});
  DeliveryLog log;
  g->set_delivery_observer([&](const Delivery& d) { log.add(d); });
  const Endpoint a = g->engine(0).config().wan_ports[0].local;
  Endpoint stranger = a;
  stranger.address[3] = 99;

  wire::TunnelHeader good;
  good.flags = wire::kFlagData;
  good.type = static_cast<uint8_t>(wire::DataType::kIpv4);
  good.tunnel_id = 7;
  good.sequence = 1ull << 40;  // far ahead of the flow: would slide the window if accepted
  good.tx_time_ns = kStartNs;
  const auto packet = [](wire::TunnelHeader h, std::size_t payload) {
    h.payload_length = static_cast<uint16_t>(payload);
    Bytes b(wire::kHeaderSize + payload, std::byte{0x42});
    (void)wire::encode(h, b);
    return b;
  };
  const auto with_byte = [](Bytes b, std::size_t at, uint8_t v) {
    b[at] = std::byte{v};
    return b;
  };
  const Bytes base = packet(good, 20);
  struct Bad {
    Bytes bytes;
    Endpoint from;
    uint32_t port;
  };
  std::vector<Bad> bad = {
      {Bytes(12), a, 0},                                                            // too_short
      {ipv4_packet(std::array<uint8_t, 4>{10, 2, 0, 1}.data(), 53, 60, {}), a, 0},  // bad_magic
      {with_byte(base, wire::kVersionOffset, 2), a, 0},                             // bad_version
      {with_byte(base, wire::kFlagsOffset, 0x81), a, 0},                            // reserved_set
      {with_byte(base, wire::kFlagsOffset, 0xC0), a, 0},                            // bad_flags
      {with_byte(base, wire::kTypeOffset, 9), a, 0},                                // bad_type
      {with_byte(with_byte(base, 4, 0), 7, 0), a, 0},                               // bad_tunnel_id
      {with_byte(base, wire::kTxTimeOffset, 0x80), a, 0},                           // bad_timestamp
      {packet(good, 1433), a, 0},                       // oversize (1500 - 68 = 1432)
      {Bytes(base.begin(), base.end() - 1), a, 0},      // length_mismatch
      {with_byte(packet(good, 20), 4 + 3, 8), a, 0},    // unknown tunnel 8
      {base, stranger, 0},                              // wrong peer
      {base, a, 1},                                     // wrong port
      {with_byte(base, wire::kPathIdOffset, 3), a, 0},  // unknown path
  };
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 50e6));
  const int64_t end = kStartNs + 300 * kMs;
  for (int round = 0; round < 3; ++round) {
    drive(*g, flows, kStartNs + (round + 1) * 80 * kMs);
    for (const Bad& x : bad) g->inject_wan(1, x.port, x.from, x.bytes, 100 * kUs);
  }
  drive(*g, flows, end);
  g->run_until(end + 10 * kMs);

  const Engine& b = g->engine(1);
  for (std::size_t r = 0; r <= static_cast<std::size_t>(wire::DropReason::kLengthMismatch); ++r) {
    EXPECT_EQ(b.rx_drops(0).by_reason[r], 3u) << to_string(static_cast<wire::DropReason>(r));
  }
  EXPECT_EQ(b.drops(EngineDrop::kUnknownTunnel), 3u);
  EXPECT_EQ(b.drops(EngineDrop::kWrongPeer), 3u);
  EXPECT_EQ(b.drops(EngineDrop::kWrongPort), 3u);
  EXPECT_EQ(b.drops(EngineDrop::kUnknownPath), 3u);
  EXPECT_EQ(b.rx_drops(0)[wire::DropReason::kDuplicate], 0u);
  EXPECT_EQ(b.rx_drops(1).total(), 0u);  // the wrong-port datagram passed the wire checks
  EXPECT_EQ(g->counters(1).rx_malformed, 30u);
  EXPECT_EQ(g->counters(1).rx_dropped, 12u);
  EXPECT_EQ(log.repeated(), 0u);
  EXPECT_EQ(log.count(1), flows[0].accepted);
  EXPECT_GT(flows[0].accepted, 1000u);
  EXPECT_TRUE(g->engine(0).peer_status(0).up);
  EXPECT_EQ(g->buffers_in_use(), g->in_flight());
}

// Loss, corruption and truncation on the link: every datagram b received is accounted for
// under exactly one outcome, no buffer leaks, and b keeps working.
TEST(EngineFaults, CorruptionTruncationAndLossAreAccountedFor) {
  auto g = two_sites(configured_zero(), configured_zero(), 0, 0, false, 99);
  ASSERT_NE(g, nullptr);
  g->set_faults(0, 1, {.delay_ns = 1 * kMs, .loss = 0.01, .corrupt = 0.02, .truncate = 0.02});
  g->set_faults(1, 0, {.delay_ns = 1 * kMs});
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 50e6));
  drive(*g, flows, kStartNs + 500 * kMs);
  g->run_until(kStartNs + 510 * kMs);
  const loopback::EngineCounters& c = g->counters(1);
  const uint64_t delivered_to_b =
      c.rx_ok + c.rx_consumed + c.rx_dropped + c.rx_malformed + c.rx_invalid;
  EXPECT_EQ(c.rx_invalid, 0u);
  EXPECT_GT(c.rx_malformed, 50u);
  EXPECT_GT(g->wan_counters().lost, 10u);
  EXPECT_EQ(g->engine(1).port_io(0).rx_packets, delivered_to_b);
  EXPECT_EQ(g->engine(1).rx_drops(0).total() + g->engine(1).drops(EngineDrop::kUnknownTunnel) +
                g->engine(1).drops(EngineDrop::kWrongPeer) +
                g->engine(1).drops(EngineDrop::kUnknownPath) +
                g->engine(1).playout(0).counters().dropped[static_cast<int>(
                    sched::PlayoutDrop::kTooEarly)],
            c.rx_dropped + c.rx_malformed);
  EXPECT_EQ(c.released, c.rx_ok);
  EXPECT_EQ(g->buffers_in_use(), g->in_flight());
  EXPECT_EQ(g->bad_frees(), 0u);
  EXPECT_TRUE(g->engine(1).peer_status(0).up);
}

struct OffsetCase {
  int64_t offset_ns;  // site b's clock - site a's clock (true offset)
  int64_t jitter_ns;
  int64_t tolerance_ns;
};

class EngineClock : public ::testing::TestWithParam<OffsetCase> {};

// Site b's clock is off by the case's offset; both estimate it by the two-way exchange over a
// symmetric 5 ms path, and the playout at b then releases a's packets at tx + bound in true
// time, to within the estimate's error.
TEST_P(EngineClock, OffsetEstimateConvergesAndThePlayoutUsesIt) {
  const OffsetCase& p = GetParam();
  SiteOptions o;
  o.bound7_ns = 10 * kMs;  // above the 5 ms (+ jitter) path
  auto g = two_sites(o, o, 0, p.offset_ns);
  ASSERT_NE(g, nullptr);
  g->set_default_faults({.delay_ns = 5 * kMs, .jitter_ns = p.jitter_ns});
  g->run_until(kStartNs + 200 * kMs);
  const PeerStatus at_a = g->engine(0).peer_status(0);
  const PeerStatus at_b = g->engine(1).peer_status(0);
  EXPECT_FALSE(at_a.offset_configured);
  EXPECT_GE(at_a.clock_samples, 15u);
  EXPECT_NEAR(static_cast<double>(at_a.playout_offset_ns), static_cast<double>(-p.offset_ns),
              static_cast<double>(p.tolerance_ns));
  EXPECT_NEAR(static_cast<double>(at_b.playout_offset_ns), static_cast<double>(p.offset_ns),
              static_cast<double>(p.tolerance_ns));
  EXPECT_NEAR(static_cast<double>(at_a.best_sample.rtt_ns), 10.0 * kMs, 2.0 * p.jitter_ns + 1);
  EXPECT_EQ(at_a.best_sample.offset_ns, -at_a.playout_offset_ns);

  int64_t worst = 0;
  uint64_t delivered = 0;
  g->set_delivery_observer([&](const Delivery& d) {
    if (d.engine != 1 || d.tunnel_id != 7) return;
    ++delivered;
    EXPECT_FALSE(d.late);
    EXPECT_EQ(d.release_ns, d.target_ns);
    const int64_t tx_true = d.tx_timestamp_ns;  // a's clock is true time
    worst = std::max(worst, std::abs(d.true_release_ns - (tx_true + 10 * kMs)));
  });
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 20e6, 200, 1400, kStartNs + 200 * kMs));
  drive(*g, flows, kStartNs + 400 * kMs);
  g->run_until(kStartNs + 420 * kMs);
  EXPECT_EQ(delivered, flows[0].accepted);
  EXPECT_GT(delivered, 300u);
  EXPECT_LE(worst, p.tolerance_ns);
  const std::string stats = g->engine(1).stats_json(g->engine_now_ns(1));
  EXPECT_NE(stats.find("\"source\":\"auto\""), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    Offsets, EngineClock,
    // Without jitter the estimate is exact (to the rounding of the halved sum); with up to
    // 20 us of jitter per direction a sample's error is at most half the asymmetry, 10 us.
    ::testing::Values(OffsetCase{3'700 * kUs, 0, 1}, OffsetCase{-1'200 * kUs, 0, 1},
                      OffsetCase{3'700 * kUs, 20 * kUs, 10 * kUs},
                      OffsetCase{-1'200 * kUs, 20 * kUs, 10 * kUs}));

// A configured offset wins over the estimate (which is still made and reported).
TEST(EngineClockConfigured, ConfiguredOffsetOverridesTheEstimate) {
  constexpr int64_t kTrue = 3'700 * kUs;
  constexpr int64_t kConfigured = 1 * kMs;
  SiteOptions b;
  b.peer_clock_offset_ns = kConfigured;
  auto g = two_sites(SiteOptions{}, b, 0, kTrue);
  ASSERT_NE(g, nullptr);
  g->set_default_faults({.delay_ns = 1 * kMs});
  g->run_until(kStartNs + 100 * kMs);
  const PeerStatus s = g->engine(1).peer_status(0);
  EXPECT_TRUE(s.offset_configured);
  EXPECT_EQ(s.playout_offset_ns, kConfigured);
  EXPECT_GT(s.clock_samples, 5u);
  EXPECT_NEAR(static_cast<double>(-s.best_sample.offset_ns), static_cast<double>(kTrue), 1.0);
  uint64_t delivered = 0, off = 0;
  g->set_delivery_observer([&](const Delivery& d) {
    if (d.engine != 1 || d.tunnel_id != 7) return;
    ++delivered;
    // The playout trusts the configured 1 ms, so it releases 2.7 ms before tx + bound (still
    // after the 1 ms path).
    if (d.true_release_ns != d.tx_timestamp_ns + 5 * kMs - (kTrue - kConfigured)) ++off;
  });
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 20e6, 200, 1400, kStartNs + 100 * kMs));
  drive(*g, flows, kStartNs + 200 * kMs);
  g->run_until(kStartNs + 220 * kMs);
  EXPECT_GT(delivered, 100u);
  EXPECT_EQ(off, 0u);
  const std::string stats = g->engine(1).stats_json(g->engine_now_ns(1));
  EXPECT_NE(stats.find("\"source\":\"configured\""), std::string::npos) << stats;
  EXPECT_NE(stats.find("\"offset_ns\":1000000"), std::string::npos) << stats;
}

TEST(EnginePeers, DeathAndRecoveryChangeThePeerState) {
  auto g = two_sites(configured_zero(), configured_zero());  // dead after 30 ms
  ASSERT_NE(g, nullptr);
  g->set_default_faults({.delay_ns = 2 * kMs});
  g->run_until(kStartNs + 100 * kMs);
  EXPECT_TRUE(g->engine(0).peer_status(0).up);
  EXPECT_TRUE(g->engine(1).peer_status(0).up);
  g->set_alive(1, false);
  g->run_until(kStartNs + 125 * kMs);
  EXPECT_TRUE(g->engine(0).peer_status(0).up);  // heard from b at most 25 ms ago
  g->run_until(kStartNs + 140 * kMs);
  EXPECT_FALSE(g->engine(0).peer_status(0).up);
  EXPECT_NE(g->engine(0).stats_json(g->engine_now_ns(0)).find("\"state\":\"down\""),
            std::string::npos);
  g->set_alive(1, true);
  g->run_until(kStartNs + 160 * kMs);
  EXPECT_TRUE(g->engine(0).peer_status(0).up);
  EXPECT_TRUE(g->engine(1).peer_status(0).up);
  const std::string stats = g->engine(0).stats_json(g->engine_now_ns(0));
  EXPECT_NE(stats.find("\"up_transitions\":2"), std::string::npos) << stats;
  EXPECT_NE(stats.find("\"down_transitions\":1"), std::string::npos) << stats;
  // A one-way cut: a stops hearing b, b still hears a.
  g->set_faults(1, 0, {.down = true});
  g->run_until(kStartNs + 200 * kMs);
  EXPECT_FALSE(g->engine(0).peer_status(0).up);
  EXPECT_TRUE(g->engine(1).peer_status(0).up);
}

TEST(EngineTraffic, ServiceDatagramsAndIpv6OverAnIpv6Wan) {
  SiteOptions o = configured_zero();
  o.ipv6_wan = true;
  auto g = two_sites(o, o, 0, 0, /*capture=*/true);
  ASSERT_NE(g, nullptr);
  g->set_default_faults({.delay_ns = 1 * kMs});
  uint32_t max_wire = 0;
  g->set_tx_observer([&](const TxRecord& r) {
    if (!r.emit.control) max_wire = std::max(max_wire, r.emit.wire_bytes);
  });
  Engine& a = g->engine(0);
  EXPECT_EQ(a.max_payload_bytes(0), 1500u - 88u);
  Bytes service(700);
  for (std::size_t i = 0; i < service.size(); ++i) service[i] = std::byte(static_cast<uint8_t>(i));
  EXPECT_EQ(g->inject_service(0, 1, service), Status::kOk);
  EXPECT_EQ(g->inject_service(0, 1, Bytes(1413)), Status::kDropped);
  const Bytes v6 = ipv6_packet(2, 7, 443, 1412, {5, 1});
  EXPECT_EQ(g->inject_tun(0, v6), Status::kOk);
  g->run_until(kStartNs + 20 * kMs);
  auto& got = g->deliveries(1);
  ASSERT_EQ(got.size(), 2u);
  const Delivery& d0 = got[0].tunnel_id == 9 ? got[0] : got[1];
  const Delivery& d1 = got[0].tunnel_id == 9 ? got[1] : got[0];
  EXPECT_EQ(d0.type, wire::DataType::kDatagram);
  EXPECT_TRUE(d0.to_service);
  EXPECT_EQ(d0.payload, service);
  EXPECT_EQ(d1.type, wire::DataType::kIpv6);
  EXPECT_FALSE(d1.to_service);
  EXPECT_EQ(d1.payload, v6);
  EXPECT_EQ(max_wire, 1412u + 88u + 18u);
  EXPECT_EQ(a.drops(EngineDrop::kTooBig), 1u);
}

}  // namespace
}  // namespace detwan::dataplane::gw

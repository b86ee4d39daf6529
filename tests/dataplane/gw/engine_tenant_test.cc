// A tunnel carries only its tenant (match.src, foreign_source; docs/gateway.md "match"): at the
// ingress a co-tenant's packet to the tunnel's destination never enters its slots (dropped, or
// best effort by policy) and is counted; at the egress a decapsulated packet whose addresses are
// not the tenants' is dropped before it moves the replay window, and counted.
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "dataplane/gw/engine.h"
#include "tests/dataplane/gw/engine_test_util.h"

namespace detwan::dataplane::gw {
namespace {

using common::Status;
using testing::Bytes;
using testing::ipv4_packet;
using testing::kMs;
using testing::site_config;
using testing::SiteOptions;
using testing::v4_prefix;

constexpr int64_t kStart = 1'000'000'000'000;     // a cycle boundary (cycles are 1 ms from 0)
constexpr uint8_t kTenantA[4] = {10, 1, 0, 5};    // the job's host at site a
constexpr uint8_t kCoTenantA[4] = {10, 1, 0, 6};  // another job's host at site a
constexpr uint8_t kTenantB[4] = {10, 2, 0, 9};    // the job's host at site b
constexpr uint8_t kOtherB[4] = {10, 2, 0, 10};

// Tunnel 7 bound to the job's two hosts at both ends (as the agent writes it); tunnel 9 as is.
GatewayConfig tenant_config(int site, ForeignSource policy) {
  SiteOptions o;
  o.peer_clock_offset_ns = 0;
  o.bound7_ns = 0;  // deliver on receipt: the test reads the playout at once
  GatewayConfig c = site_config(site, o);
  TunnelConfig& t7 = c.tunnels.at(0);
  const Prefix a = v4_prefix(10, 1, 0, 5, 32);
  const Prefix b = v4_prefix(10, 2, 0, 9, 32);
  t7.dst_prefixes = {site == 0 ? b : a};
  t7.src_prefixes = {site == 0 ? a : b};
  t7.foreign_source = policy;
  return c;
}

std::unique_ptr<Engine> make(const GatewayConfig& c) {
  auto e = Engine::create(c, kStart);
  EXPECT_TRUE(e.has_value()) << e.error().describe();
  return e ? std::move(*e) : nullptr;
}

Bytes packet(const uint8_t src[4], const uint8_t dst[4], uint64_t mark, std::size_t bytes = 200) {
  Bytes p = ipv4_packet(dst, 5001, bytes, {1, mark});
  for (int i = 0; i < 4; ++i) p[12 + i] = std::byte{src[i]};
  return p;
}

// The WAN datagrams site a's engine sends by `until_ns` for what was submitted, by handle.
std::vector<std::pair<TxEmit, Bytes>> transmit(Engine& e, const std::map<uint64_t, Bytes>& payloads,
                                               int64_t until_ns) {
  std::vector<std::pair<TxEmit, Bytes>> out;
  for (int64_t t = e.scheduler(0).next_event_ns(); t <= until_ns;
       t = e.scheduler(0).next_event_ns()) {
    const uint32_t n = e.poll_tx_st(t, [&](const TxEmit& emit) {
      if (emit.control || !emit.send) return;
      const Bytes& payload = payloads.at(emit.handle);
      Bytes datagram(wire::kHeaderSize + payload.size());
      std::copy(payload.begin(), payload.end(), datagram.begin() + wire::kHeaderSize);
      EXPECT_EQ(e.encode_frame_st(emit, wire::DataType::kIpv4, datagram, payload.size()),
                datagram.size());
      TxEmit copy = emit;
      copy.bytes = {};
      out.emplace_back(copy, std::move(datagram));
    });
    if (n == 0) break;
  }
  return out;
}

boost::json::object tunnel7_stats(const Engine& e) {
  const auto stats = boost::json::parse(e.stats_json(kStart)).as_object();
  for (const auto& t : stats.at("tunnels").as_array()) {
    if (t.at("id").to_number<uint32_t>() == 7) return t.as_object();
  }
  ADD_FAILURE() << "no tunnel 7";
  return {};
}

uint64_t u64(const boost::json::value& v) { return v.to_number<uint64_t>(); }

TEST(EngineTenant, ACoTenantsPacketNeverEntersTheTunnelAndIsCounted) {
  auto a = make(tenant_config(0, ForeignSource::kDrop));
  std::map<uint64_t, Bytes> payloads;
  uint64_t handle = 1;
  const auto submit = [&](const Bytes& p) {
    payloads[handle] = p;
    return a->submit_tun_st(handle++, p, kStart);
  };
  EXPECT_EQ(submit(packet(kTenantA, kTenantB, 1)), Status::kOk);
  for (uint64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(submit(packet(kCoTenantA, kTenantB, 100 + i)), Status::kDropped);
  }
  EXPECT_EQ(submit(packet(kTenantA, kTenantB, 2)), Status::kOk);
  EXPECT_EQ(a->drops(EngineDrop::kForeignSource), 5u);
  EXPECT_EQ(std::string(to_string(EngineDrop::kForeignSource)), "foreign_source");
  // The tunnel's slots saw only its tenant's two packets.
  const auto* sched = a->scheduler(0).tunnel_counters(7);
  ASSERT_NE(sched, nullptr);
  EXPECT_EQ(sched->offered_packets, 2u);
  EXPECT_EQ(a->scheduler(0).best_effort_counters().offered_packets, 0u);
  const auto out = transmit(*a, payloads, kStart + 2 * kMs);
  ASSERT_EQ(out.size(), 2u);
  for (const auto& [emit, datagram] : out) EXPECT_FALSE(emit.best_effort);
  const auto t7 = tunnel7_stats(*a);
  EXPECT_EQ(u64(t7.at("tx").at("foreign_source_dropped_packets")), 5u);
  EXPECT_EQ(u64(t7.at("tx").at("foreign_source_best_effort_packets")), 0u);
  // The tunnel as `detwan-gw tunnels` shows it: its tenant and policy.
  const auto listed = boost::json::parse(a->tunnels_json()).at("tunnels").at(0);
  EXPECT_EQ(listed.at("id").to_number<uint32_t>(), 7u);
  EXPECT_EQ(boost::json::serialize(listed.at("match").at("src")), R"(["10.1.0.5/32"])");
  EXPECT_EQ(listed.at("foreign_source").as_string(), "drop");
  const std::string prometheus = a->prometheus_text(kStart);
  EXPECT_NE(prometheus.find("detwan_gw_tunnel_tx_foreign_source_packets_total{tunnel=\"7\","
                            "port=\"wan1\",action=\"dropped\"} 5"),
            std::string::npos)
      << prometheus;
  EXPECT_NE(prometheus.find("detwan_gw_engine_drops_total{reason=\"foreign_source\"} 5"),
            std::string::npos);
}

TEST(EngineTenant, BestEffortPolicySendsTheCoTenantOutsideTheSlotsAndTheFarEndDeliversIt) {
  auto a = make(tenant_config(0, ForeignSource::kBestEffort));
  auto b = make(tenant_config(1, ForeignSource::kBestEffort));
  std::map<uint64_t, Bytes> payloads{{1, packet(kTenantA, kTenantB, 1)},
                                     {2, packet(kCoTenantA, kTenantB, 2)}};
  for (const auto& [h, p] : payloads) EXPECT_EQ(a->submit_tun_st(h, p, kStart), Status::kOk);
  EXPECT_EQ(a->drops(EngineDrop::kForeignSource), 0u);
  EXPECT_EQ(a->scheduler(0).tunnel_counters(7)->offered_packets, 1u);  // the tenant's only
  EXPECT_EQ(u64(tunnel7_stats(*a).at("tx").at("foreign_source_best_effort_packets")), 1u);
  EXPECT_EQ(u64(tunnel7_stats(*a).at("tx").at("best_effort_offered_packets")), 0u);
  const auto out = transmit(*a, payloads, kStart + 2 * kMs);
  ASSERT_EQ(out.size(), 2u);
  const Endpoint from_a = b->config().peers[0].endpoint;
  std::map<uint64_t, Status> delivered;
  for (auto [emit, datagram] : out) {
    RxInfo info;
    const uint64_t mark =
        testing::mark_of(Bytes(datagram.begin() + wire::kHeaderSize, datagram.end())).sequence;
    EXPECT_EQ(emit.best_effort, mark != 1) << mark;
    delivered[mark] = b->on_wan_datagram_st(0, from_a, mark, datagram, kStart + 3 * kMs, &info);
  }
  EXPECT_EQ(delivered[1], Status::kOk);  // the tenant's, in the slots
  EXPECT_EQ(delivered[2], Status::kOk);  // the co-tenant's, best effort by both ends' policy
  EXPECT_EQ(b->drops(EngineDrop::kForeignInner), 0u);
  EXPECT_EQ(u64(tunnel7_stats(*b).at("rx").at("accepted_best_effort_packets")), 1u);
  // With a drop policy at b, the same best-effort packet is refused there.
  auto strict = make(tenant_config(1, ForeignSource::kDrop));
  RxInfo info;
  for (auto [emit, datagram] : out) {
    const Status s = strict->on_wan_datagram_st(0, from_a, 1, datagram, kStart + 3 * kMs, &info);
    EXPECT_EQ(s, emit.best_effort ? Status::kDropped : Status::kOk);
  }
  EXPECT_EQ(strict->drops(EngineDrop::kForeignInner), 1u);
}

// What a compromised or misconfigured peer gateway sends in the tunnel (authentic, in order):
// inner sources or destinations that are not the tenants' are dropped, and the replay window
// does not move, so the genuine packet with that sequence number is still delivered.
TEST(EngineTenant, TheEgressDeliversOnlyTheTenantsAddresses) {
  auto b = make(tenant_config(1, ForeignSource::kDrop));
  const Endpoint from_a = b->config().peers[0].endpoint;
  const auto datagram = [](uint64_t sequence, const Bytes& inner, bool best_effort = false,
                           uint32_t tunnel = 7) {
    wire::TunnelHeader h;
    h.flags = best_effort ? wire::kFlagData | wire::kFlagBestEffort : wire::kFlagData;
    h.type = static_cast<uint8_t>(wire::DataType::kIpv4);
    h.tunnel_id = tunnel;
    h.sequence = sequence;
    h.tx_time_ns = kStart;
    h.payload_length = static_cast<uint16_t>(inner.size());
    Bytes d(wire::kHeaderSize + inner.size());
    EXPECT_EQ(wire::encode(h, d).status, wire::EncodeStatus::kOk);
    std::copy(inner.begin(), inner.end(), d.begin() + wire::kHeaderSize);
    return d;
  };
  RxInfo info;
  const auto rx = [&](Bytes d) {
    return b->on_wan_datagram_st(0, from_a, 1, d, kStart + 1 * kMs, &info);
  };
  EXPECT_EQ(rx(datagram(5, packet(kCoTenantA, kTenantB, 1))), Status::kDropped);  // source
  EXPECT_EQ(rx(datagram(6, packet(kTenantA, kOtherB, 2))), Status::kDropped);     // destination
  EXPECT_EQ(rx(datagram(7, Bytes(100, std::byte{0x45}))), Status::kDropped);      // no IP packet
  // flag B does not help with a drop policy.
  EXPECT_EQ(rx(datagram(8, packet(kCoTenantA, kTenantB, 3), true)), Status::kDropped);
  EXPECT_EQ(b->drops(EngineDrop::kForeignInner), 4u);
  EXPECT_EQ(std::string(to_string(EngineDrop::kForeignInner)), "foreign_inner");
  for (const uint64_t sequence : {5, 6, 7, 8}) {
    EXPECT_EQ(rx(datagram(sequence, packet(kTenantA, kTenantB, sequence))), Status::kOk)
        << sequence;
  }
  const auto t7 = tunnel7_stats(*b);
  EXPECT_EQ(u64(t7.at("rx").at("foreign_inner_packets")), 4u);
  EXPECT_EQ(u64(t7.at("rx").at("replay_drops").at("duplicate")), 0u);
  EXPECT_EQ(u64(t7.at("rx").at("accepted_on_time_packets")), 4u);
  const std::string prometheus = b->prometheus_text(kStart);
  EXPECT_NE(prometheus.find("detwan_gw_tunnel_rx_foreign_inner_packets_total{tunnel=\"7\","
                            "port=\"wan1\"} 4"),
            std::string::npos)
      << prometheus;
  // Tunnel 9 (no match.src) is not tenant-bound: any inner packet passes, as before.
  EXPECT_EQ(rx(datagram(1, packet(kCoTenantA, kOtherB, 9), false, 9)), Status::kOk);
  EXPECT_EQ(b->drops(EngineDrop::kForeignInner), 4u);
}

}  // namespace
}  // namespace detwan::dataplane::gw

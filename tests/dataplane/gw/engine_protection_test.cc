// 1+1 protection (PREOF) in virtual time: every packet of a protected tunnel leaves on two
// disjoint WAN paths with one sequence number, the far gateway delivers the first copy once and
// eliminates the other; a path cut mid-stream loses nothing where the unprotected tunnel loses
// what was on the cut path. Plus the configuration rules of `protection`.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <fmt/format.h>

#include "tests/dataplane/gw/engine_sim_util.h"

namespace detwan::dataplane::gw {
namespace {

using loopback::Delivery;
using loopback::LinkFaults;
using loopback::TxRecord;
using namespace testing;  // NOLINT(google-build-using-namespace): test helpers

SiteOptions protected_site(bool protect) {
  SiteOptions o;
  o.peer_clock_offset_ns = 0;
  o.protect7 = protect;
  o.second_port = true;  // the same ports with and without protection
  return o;
}

// Path 1 (wan1) 1 ms one way, path 2 (wan2) 2 ms; the tunnel's bound is 5 ms.
void two_paths(loopback::Gateway& g) {
  for (uint32_t from = 0; from < 2; ++from) {
    g.set_port_faults(from, 0, {.delay_ns = 1 * kMs});
    g.set_port_faults(from, 1, {.delay_ns = 2 * kMs});
  }
}

boost::json::object tunnel7_stats(loopback::Gateway& g, uint32_t engine) {
  const auto stats = boost::json::parse(g.engine(engine).stats_json(g.engine_now_ns(engine)));
  for (const auto& t : stats.at("tunnels").as_array()) {
    if (t.at("id").to_number<uint32_t>() == 7) return t.as_object();
  }
  ADD_FAILURE() << "no tunnel 7 in stats";
  return {};
}

uint64_t path_count(const boost::json::object& tunnel, uint32_t path, const char* key) {
  return tunnel.at("paths").at(path).at(key).to_number<uint64_t>();
}

struct CutResult {
  uint64_t accepted = 0, delivered = 0, repeated = 0, off_time = 0;
  boost::json::object sender, receiver;
  std::string receiver_metrics;  // Prometheus text
};

// 200 ms of tunnel-7 traffic a -> b at 100 Mbit/s; wan1 a -> b is cut at 100 ms.
CutResult run_with_cut(bool protect) {
  CutResult r;
  auto g = two_sites(protected_site(protect), protected_site(protect), 0, 0, false);
  if (g == nullptr) return r;
  two_paths(*g);
  DeliveryLog log;
  g->set_delivery_observer([&](const Delivery& d) {
    if (d.engine != 1) return;
    log.add(d);
    if (d.late || d.true_release_ns != d.tx_timestamp_ns + 5 * kMs) ++r.off_time;
  });
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 100e6));
  drive(*g, flows, kStartNs + 100 * kMs);
  g->set_port_faults(0, 0, {.delay_ns = 1 * kMs, .down = true});
  drive(*g, flows, kStartNs + 200 * kMs);
  g->run_until(kStartNs + 220 * kMs);  // everything sent has arrived and been released
  r.accepted = flows[0].accepted;
  r.delivered = log.count(1);
  r.repeated = log.repeated();
  r.sender = tunnel7_stats(*g, 0);
  r.receiver = tunnel7_stats(*g, 1);
  r.receiver_metrics = g->engine(1).prometheus_text(g->engine_now_ns(1));
  EXPECT_EQ(g->bad_frees(), 0u);
  return r;
}

TEST(EngineProtection, APathCutMidStreamLosesNothingWhereTheUnprotectedTunnelLoses) {
  const CutResult unprotected = run_with_cut(false);
  const CutResult prot = run_with_cut(true);
  ASSERT_GT(prot.accepted, 1000u);
  // Baseline, same traffic and cut: everything after the cut is lost.
  EXPECT_LT(unprotected.delivered, unprotected.accepted * 6 / 10);
  // Protected: every packet delivered once, on time (bound 5 ms covers the 2 ms path).
  EXPECT_EQ(prot.delivered, prot.accepted);
  EXPECT_EQ(prot.repeated, 0u);
  EXPECT_EQ(prot.off_time, 0u);
  // Before the cut path 1 (1 ms) won and path 2's copies were eliminated; after it, path 2
  // delivered. Every copy that arrived is either first or eliminated.
  const auto& rx = prot.receiver;
  EXPECT_GT(path_count(rx, 0, "first_packets"), prot.accepted / 3);
  EXPECT_GT(path_count(rx, 1, "first_packets"), prot.accepted / 3);
  EXPECT_GT(path_count(rx, 1, "eliminated_packets"), prot.accepted / 3);
  EXPECT_EQ(path_count(rx, 0, "first_packets") + path_count(rx, 1, "first_packets"),
            prot.delivered);
  EXPECT_EQ(path_count(rx, 1, "rx_packets"),
            path_count(rx, 1, "first_packets") + path_count(rx, 1, "eliminated_packets"));
  // Eliminated copies are not replay drops.
  EXPECT_EQ(rx.at("rx").at("replay_drops").at("duplicate").to_number<uint64_t>(), 0u);
  EXPECT_EQ(prot.sender.at("tx").at("replicas_sent").to_number<uint64_t>(), prot.accepted);
  EXPECT_EQ(prot.sender.at("tx").at("replicas_not_made").to_number<uint64_t>(), 0u);
  EXPECT_TRUE(prot.receiver.at("protected").as_bool());
  // The same per-path counters for Prometheus.
  const std::string eliminated = fmt::format(
      "detwan_gw_tunnel_rx_path_eliminated_packets_total{{tunnel=\"7\",port=\"wan2\",path=\"1\"}} "
      "{}\n",
      path_count(rx, 1, "eliminated_packets"));
  EXPECT_NE(prot.receiver_metrics.find(eliminated), std::string::npos) << prot.receiver_metrics;
}

TEST(EngineProtection, BothCopiesCarryOneSequenceNumberAndFlagRTheCopyPathOne) {
  auto g = two_sites(protected_site(true), protected_site(true), 0, 0, false);
  ASSERT_NE(g, nullptr);
  two_paths(*g);
  std::map<uint32_t, std::vector<uint64_t>> sequences;  // by port
  uint64_t bad_labels = 0;
  g->set_tx_observer([&](const TxRecord& r) {
    if (r.engine != 0 || r.emit.control || r.emit.header.tunnel_id != 7) return;
    const wire::TunnelHeader& h = r.emit.header;
    const bool copy = r.emit.port_index == 1;
    if (h.path_id != (copy ? 1 : 0) || !h.is_replica()) ++bad_labels;
    sequences[r.emit.port_index].push_back(h.sequence);
  });
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 50e6));
  drive(*g, flows, kStartNs + 50 * kMs);
  g->run_until(kStartNs + 60 * kMs);
  EXPECT_EQ(bad_labels, 0u);
  ASSERT_EQ(sequences[0].size(), flows[0].accepted);
  EXPECT_EQ(sequences[0], sequences[1]);  // same numbers, same order (the slots are the same)
}

TEST(EngineProtection, EachPathHasItsOwnLivenessAndTheReceiverStillDeliversOnTheOther) {
  auto g = two_sites(protected_site(true), protected_site(true), 0, 0, false);
  ASSERT_NE(g, nullptr);
  two_paths(*g);
  g->run_until(kStartNs + 50 * kMs);
  EXPECT_TRUE(g->engine(1).peer_status(0).up);  // site-a over wan1
  EXPECT_TRUE(g->engine(1).peer_status(1).up);  // site-a-2 over wan2: keepalives on path 1
  g->set_port_faults(0, 0, {.delay_ns = 1 * kMs, .down = true});
  g->run_until(kStartNs + 150 * kMs);  // > dead_after (30 ms)
  EXPECT_FALSE(g->engine(1).peer_status(0).up);
  EXPECT_TRUE(g->engine(1).peer_status(1).up);
  const auto rx = tunnel7_stats(*g, 1);
  EXPECT_FALSE(rx.at("paths").at(0).at("peer_up").as_bool());
  EXPECT_TRUE(rx.at("paths").at(1).at("peer_up").as_bool());
  EXPECT_EQ(rx.at("paths").at(1).at("peer").as_string(), "site-a-2");
}

TEST(EngineProtection, ACopyFromTheWrongPeerOrPathIsDropped) {
  auto g = two_sites(protected_site(false), protected_site(false), 0, 0, false);
  ASSERT_NE(g, nullptr);
  two_paths(*g);
  // An unprotected tunnel has no path 1: a packet claiming it is unknown_path.
  wire::TunnelHeader h;
  h.tunnel_id = 7;
  h.path_id = 1;
  h.tx_time_ns = g->engine_now_ns(0);
  Bytes datagram(wire::kHeaderSize + 100);
  h.payload_length = 100;
  ASSERT_EQ(wire::encode(h, datagram).status, wire::EncodeStatus::kOk);
  g->inject_wan(1, 0, g->engine(0).config().wan_ports[0].local, datagram);
  g->run_until(kStartNs + 1 * kMs);
  EXPECT_EQ(g->engine(1).drops(EngineDrop::kUnknownPath), 1u);
}

// ---- configuration ----

constexpr std::string_view kTwoPaths =
    "gateway: {name: a}\n"
    "wan_ports:\n"
    "  - {name: ab1, local: 10.101.12.1:4789, line_rate: 1gbit, cycle: 1ms, slots: 100}\n"
    "  - {name: ab2, local: 10.102.12.1:4789, line_rate: 1gbit, cycle: 1ms, slots: 100}\n"
    "peers:\n"
    "  - {name: b, wan_port: ab1, endpoint: 10.101.12.2:4789, min_path_delay: 2ms}\n"
    "  - {name: b-2, wan_port: ab2, endpoint: 10.102.12.2:4789, min_path_delay: 8ms}\n"
    "  - {name: b-also, wan_port: ab1, endpoint: 10.101.12.3:4789}\n"
    "tunnels:\n"
    "  - id: 7\n"
    "    peer: b\n"
    "    rate: 100mbit\n"
    "    slots: 0-11\n"
    "    match: {dst: [10.20.2.0/24]}\n"
    "    auth: none\n";

std::string with_protection(std::string_view text) {
  return std::string(kTwoPaths) + "    protection: " + std::string(text) + "\n";
}

TEST(EngineProtection, ConfigurationAcceptsADisjointPathAndDescribesIt) {
  auto c = load_gateway_config_string(with_protection("{peer: b-2, slots: 50-61}"));
  ASSERT_TRUE(c.has_value()) << c.error().describe();
  ASSERT_TRUE(c->tunnels[0].protection.has_value());
  EXPECT_EQ(c->tunnels[0].protection->peer, "b-2");
  EXPECT_EQ(c->tunnels[0].protection->slots.size(), 12u);
  // describe() round-trips.
  auto again = load_gateway_config_string(describe(*c));
  ASSERT_TRUE(again.has_value()) << again.error().describe();
  again->source = c->source;
  EXPECT_EQ(*again, *c);
  // The copy's slots are on ab2's list, not ab1's.
  EXPECT_EQ(port_gcl_config(*c, c->wan_ports[1]).tunnels.at(0).slots.front(), 50u);
  EXPECT_EQ(port_gcl_config(*c, c->wan_ports[0]).tunnels.at(0).slots.front(), 0u);
}

TEST(EngineProtection, ConfigurationRefusesPathsThatAreNotDisjointOrDoNotFit) {
  const auto error_of = [](const std::string& yaml) {
    auto c = load_gateway_config_string(yaml);
    return c ? std::string("accepted") : c.error().message;
  };
  EXPECT_NE(error_of(with_protection("{peer: b-also, slots: 50-61}")).find("disjoint path"),
            std::string::npos);
  EXPECT_NE(error_of(with_protection("{peer: b, slots: 50-61}")).find("own peer"),
            std::string::npos);
  EXPECT_NE(error_of(with_protection("{peer: nobody, slots: 50-61}")).find("unknown peer"),
            std::string::npos);
  EXPECT_NE(error_of(with_protection("{peer: b-2, slots: 50-52}")).find("protection.slots"),
            std::string::npos);  // 3 slots cannot carry 100mbit
  EXPECT_NE(error_of(with_protection("{peer: b-2, slots: 50-61}") + "    bound: 5ms\n")
                .find("protection path"),
            std::string::npos);  // b-2 is 8 ms away
}

}  // namespace
}  // namespace detwan::dataplane::gw

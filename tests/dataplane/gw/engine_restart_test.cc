// A gateway that restarts (crash or upgrade) starts a new session: a random epoch in its
// keepalives tells the peer, which starts the replay windows of that gateway's tunnels again,
// so the restarted gateway's new sequence numbers (from 0) are accepted within one keepalive
// interval instead of being dropped as too old until they catch up with the old ones.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "dataplane/wire/control.h"
#include "tests/dataplane/gw/engine_sim_util.h"

namespace detwan::dataplane::gw {
namespace {

using loopback::Delivery;
using namespace testing;  // NOLINT(google-build-using-namespace): test helpers

SiteOptions site(bool protect = false) {
  SiteOptions o;
  o.peer_clock_offset_ns = 0;
  o.protect7 = protect;
  return o;
}

boost::json::value stats(loopback::Gateway& g, uint32_t engine) {
  return boost::json::parse(g.engine(engine).stats_json(g.engine_now_ns(engine)));
}

uint64_t tunnel7(const boost::json::value& st, const char* group, const char* key) {
  for (const auto& t : st.at("tunnels").as_array()) {
    if (t.at("id").to_number<uint32_t>() == 7) return t.at(group).at(key).to_number<uint64_t>();
  }
  return UINT64_MAX;
}

struct RestartRun {
  uint64_t before_accepted = 0, before_delivered = 0;
  uint64_t after_accepted = 0, after_delivered = 0;
  uint64_t repeated = 0, lost_buffers = 0;
  boost::json::value receiver;
};

// Flow 1 a -> b for 100 ms; a restarts; flow 2 starts one keepalive interval (5 ms) + the path
// delay (1 ms) later and runs 100 ms.
RestartRun run(bool protect) {
  RestartRun r;
  auto g = two_sites(site(protect), site(protect));
  if (g == nullptr) return r;
  for (uint32_t from = 0; from < 2; ++from) {
    g->set_faults(from, 1 - from, {.delay_ns = 1 * kMs});
    if (protect) g->set_port_faults(from, 1, {.delay_ns = 2 * kMs});
  }
  DeliveryLog log;
  g->set_delivery_observer([&](const Delivery& d) {
    if (d.engine == 1) log.add(d);
  });
  std::vector<Flow> before;
  before.push_back(flow(0, 2, 80, 1, 50e6));
  drive(*g, before, kStartNs + 100 * kMs);
  g->run_until(kStartNs + 110 * kMs);  // everything sent before has been released
  const auto restarted = g->restart(0);
  EXPECT_TRUE(restarted.has_value());
  const int64_t resume = kStartNs + 110 * kMs + 6 * kMs;
  std::vector<Flow> after;
  after.push_back(flow(0, 2, 80, 2, 50e6, 200, 1400, resume));
  drive(*g, after, resume + 100 * kMs);
  g->run_until(resume + 120 * kMs);
  r.before_accepted = before[0].accepted;
  r.before_delivered = log.count(1);
  r.after_accepted = after[0].accepted;
  r.after_delivered = log.count(2);
  r.repeated = log.repeated();
  r.lost_buffers = g->restart_lost_buffers();
  r.receiver = stats(*g, 1);
  EXPECT_EQ(g->bad_frees(), 0u);
  return r;
}

TEST(EngineRestart, TheRestartedGatewaysTrafficIsAcceptedWithinOneKeepaliveInterval) {
  const RestartRun r = run(false);
  ASSERT_GT(r.before_accepted, 500u);
  EXPECT_EQ(r.before_delivered, r.before_accepted);
  ASSERT_GT(r.after_accepted, 500u);
  // The new session's packets (sequence numbers from 0, far below the window's top) are all
  // delivered: without the epoch every one of them would be too_old.
  EXPECT_EQ(r.after_delivered, r.after_accepted);
  EXPECT_EQ(r.repeated, 0u);
  const auto& peer = r.receiver.at("peers").at(0);
  EXPECT_EQ(peer.at("restarts").to_number<uint64_t>(), 1u);
  EXPECT_FALSE(peer.at("session_epoch").is_null());
  EXPECT_EQ(tunnel7(r.receiver, "rx", "peer_restarts"), 1u);
}

TEST(EngineRestart, AProtectedTunnelStartsItsWindowAgainOnceAndDeliversEachPacketOnce) {
  const RestartRun r = run(true);
  ASSERT_GT(r.after_accepted, 500u);
  EXPECT_EQ(r.before_delivered, r.before_accepted);
  EXPECT_EQ(r.after_delivered, r.after_accepted);
  EXPECT_EQ(r.repeated, 0u);  // a second reset (the other path's keepalive) would repeat some
  EXPECT_EQ(tunnel7(r.receiver, "rx", "peer_restarts"), 1u);
  // Both peer entries (one per path) saw the restart.
  EXPECT_EQ(r.receiver.at("peers").at(0).at("restarts").to_number<uint64_t>(), 1u);
  EXPECT_EQ(r.receiver.at("peers").at(1).at("restarts").to_number<uint64_t>(), 1u);
}

TEST(EngineRestart, AForgedKeepaliveWithEpochZeroIsRefused) {
  auto g = two_sites(site(), site());
  ASSERT_NE(g, nullptr);
  g->set_default_faults({.delay_ns = 1 * kMs});
  g->run_until(kStartNs + 20 * kMs);
  wire::TunnelHeader h;
  h.tunnel_id = 7;
  h.cycle_id = 1;  // a control packet's cycle_id is its sender's epoch
  h.tx_time_ns = g->engine_now_ns(0);
  Bytes datagram(wire::kHeaderSize + wire::kKeepaliveBodySize);
  ASSERT_EQ(wire::encode_control(h, wire::Keepalive{99, 5 * kMs, 0, 0}, datagram).status,
            wire::EncodeStatus::kInvalidHeader);  // the encoder refuses it too
  ASSERT_EQ(wire::encode_control(h, wire::Keepalive{99, 5 * kMs, 0, 1}, datagram).status,
            wire::EncodeStatus::kOk);
  datagram[wire::kHeaderSize + 31] = std::byte{0};  // epoch 1 -> 0 on the wire
  g->inject_wan(1, 0, g->engine(0).config().wan_ports[0].local, datagram);
  g->run_until(kStartNs + 21 * kMs);
  EXPECT_EQ(g->engine(1).rx_drops(0)[wire::DropReason::kBadControl], 1u);
  EXPECT_EQ(stats(*g, 1).at("peers").at(0).at("restarts").to_number<uint64_t>(), 0u);
}

}  // namespace
}  // namespace detwan::dataplane::gw

// The attacks of issue 31 on an authenticated tunnel, in virtual time (docs/wire-format.md, "Key
// schedule", "Keepalive"): a gateway's own packets sent back to it (reflection), keepalives and
// data from before a peer's restart replayed after it, replayed time exchanges, and a first
// contact before the peer's epoch is known. Each asserts that nothing moved (replay window,
// restarts, clock, deliveries) and that genuine traffic lost nothing.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "dataplane/aead/aead.h"
#include "dataplane/wire/control.h"
#include "dataplane/wire/header.h"
#include "tests/dataplane/gw/engine_sim_util.h"

namespace detwan::dataplane::gw {
namespace {

using loopback::Delivery;
using namespace testing;  // NOLINT(google-build-using-namespace): test helpers

TunnelAuth keys() {
  TunnelAuth auth;
  auth.keys.push_back(TunnelKey{1, *aead::key_from_hex(std::string(64, '5'))});
  auth.tx_key = 1;
  return auth;
}

SiteOptions site(bool keyed = true) {
  SiteOptions o;
  o.peer_clock_offset_ns = 0;
  if (keyed) o.auth = keys();
  return o;
}

boost::json::value stats(loopback::Gateway& g, uint32_t engine) {
  return boost::json::parse(g.engine(engine).stats_json(g.engine_now_ns(engine)));
}
boost::json::value tunnel(const boost::json::value& st, uint32_t id) {
  for (const auto& t : st.at("tunnels").as_array()) {
    if (t.at("id").to_number<uint32_t>() == id) return t;
  }
  ADD_FAILURE() << "no tunnel " << id;
  return nullptr;
}
uint64_t num(const boost::json::value& v) { return v.to_number<uint64_t>(); }
uint64_t peer_restarts(loopback::Gateway& g, uint32_t engine) {
  return num(stats(g, engine).at("peers").at(0).at("restarts"));
}
uint64_t refused(loopback::Gateway& g, uint32_t engine, const char* why) {
  return num(stats(g, engine).at("peers").at(0).at("control_refused").at(why));
}

struct Captured {
  std::vector<std::byte> bytes;
  bool control = false;
  wire::ControlType type{};
  uint32_t tunnel_id = 0;
};

// Records what engine `from` sends on the wire (at most `limit` packets of each kind).
struct Capture {
  std::vector<Captured> data, keepalives, time_responses;
  void attach(loopback::Gateway& g, uint32_t from, std::size_t limit = 400) {
    g.set_wire_observer([this, from, limit](const loopback::Gateway::WireRecord& w) {
      if (w.from != from) return;
      const auto h = wire::decode(w.bytes);
      if (!h.ok()) return;
      Captured c{{w.bytes.begin(), w.bytes.end()}, h->header.is_control(), {},
                 h->header.tunnel_id};
      if (!c.control) {
        if (data.size() < limit) data.push_back(std::move(c));
        return;
      }
      c.type = h->header.control_type();
      auto& into = c.type == wire::ControlType::kKeepalive       ? keepalives
                   : c.type == wire::ControlType::kTimeResponse ? time_responses
                                                                : data;
      if (&into != &data && into.size() < limit) into.push_back(std::move(c));
    });
  }
};

// Counts deliveries per engine and flow, and checks them byte for byte.
struct Deliveries {
  DeliveryLog at[2];
  uint64_t damaged = 0;
  void attach(loopback::Gateway& g) {
    g.set_delivery_observer([this](const Delivery& d) {
      at[d.engine].add(d);
      const uint8_t dst[4] = {10, static_cast<uint8_t>(d.engine + 1), 0, 9};
      if (d.payload != ipv4_packet(dst, 80, d.payload.size(), mark_of(d.payload))) ++damaged;
    });
  }
};

const Endpoint& wan_of(loopback::Gateway& g, uint32_t engine) {
  return g.engine(engine).config().wan_ports[0].local;
}

TEST(EngineAttack, ReflectedDataAndKeepalivesNeverOpenAndCostGenuineTrafficNothing) {
  auto g = two_sites(site(), site());
  ASSERT_NE(g, nullptr);
  for (uint32_t from = 0; from < 2; ++from) g->set_faults(from, 1 - from, {.delay_ns = 1 * kMs});
  Deliveries rx;
  rx.attach(*g);
  Capture a_sent;
  a_sent.attach(*g, 0);
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 50e6));  // a -> b
  flows.push_back(flow(1, 1, 80, 2, 20e6));  // b -> a
  drive(*g, flows, kStartNs + 100 * kMs);
  g->run_until(kStartNs + 110 * kMs);
  g->set_wire_observer(nullptr);  // what A sent up to here
  ASSERT_GT(a_sent.data.size(), 300u);
  ASSERT_GT(a_sent.keepalives.size(), 5u);
  const auto before = tunnel(stats(*g, 0), 7);
  const uint64_t a_top = num(before.at("rx").at("replay_top"));
  const uint64_t a_restarts = peer_restarts(*g, 0);

  // A's own datagrams, sent back to A from B's address: not one opens (the data keys are bound
  // to the direction), none reaches A's site, none uses a sequence number of A's window.
  for (const Captured& c : a_sent.data) g->inject_wan(0, 0, wan_of(*g, 1), c.bytes);
  // A's own keepalives sent back: refused by epoch before any key work.
  for (const Captured& c : a_sent.keepalives) g->inject_wan(0, 0, wan_of(*g, 1), c.bytes);
  g->run_until(kStartNs + 115 * kMs);
  const auto mid = stats(*g, 0);
  EXPECT_EQ(rx.at[0].count(1), 0u) << "A delivered its own packets into its site";
  EXPECT_GE(g->engine(0).drops(EngineDrop::kAuthFailed), a_sent.data.size());
  EXPECT_EQ(g->engine(0).drops(EngineDrop::kReflected), a_sent.keepalives.size());
  EXPECT_EQ(num(mid.at("peers").at(0).at("control_refused").at("reflected")),
            a_sent.keepalives.size());
  EXPECT_EQ(peer_restarts(*g, 0), a_restarts);
  EXPECT_EQ(num(tunnel(mid, 7).at("rx").at("peer_restarts")), 0u);
  EXPECT_LE(num(tunnel(mid, 7).at("rx").at("replay_top")), a_top + 1000);

  // B's genuine packets go on: every one delivered once, none refused as a duplicate.
  drive(*g, flows, kStartNs + 200 * kMs);
  g->run_until(kStartNs + 210 * kMs);
  EXPECT_EQ(rx.at[0].count(2), flows[1].accepted);
  EXPECT_EQ(rx.at[1].count(1), flows[0].accepted);
  EXPECT_EQ(rx.at[0].repeated() + rx.at[1].repeated(), 0u);
  EXPECT_EQ(rx.damaged, 0u);
  const auto after = tunnel(stats(*g, 0), 7);
  EXPECT_EQ(num(after.at("rx").at("replay_drops").at("duplicate")), 0u);
  EXPECT_EQ(g->bad_frees(), 0u);
}

TEST(EngineAttack, AKeepaliveFromBeforeThePeersRestartIsRefusedLongAfter) {
  auto g = two_sites(site(), site());
  ASSERT_NE(g, nullptr);
  for (uint32_t from = 0; from < 2; ++from) g->set_faults(from, 1 - from, {.delay_ns = 1 * kMs});
  Deliveries rx;
  rx.attach(*g);
  Capture b_sent;
  b_sent.attach(*g, 1);
  std::vector<Flow> before;
  before.push_back(flow(1, 1, 80, 1, 20e6));  // b -> a
  drive(*g, before, kStartNs + 100 * kMs);
  g->run_until(kStartNs + 110 * kMs);
  ASSERT_FALSE(b_sent.keepalives.empty());
  ASSERT_GT(b_sent.data.size(), 10u);
  const Captured old_keepalive = b_sent.keepalives.back();
  const std::vector<Captured> old_data(b_sent.data.end() - 10, b_sent.data.end());

  // B restarts: A accepts its new epoch once (a keepalive that answers A's latest).
  ASSERT_TRUE(g->restart(1).has_value());
  const int64_t resume = kStartNs + 120 * kMs;
  std::vector<Flow> after;
  after.push_back(flow(1, 1, 80, 2, 20e6, 200, 1400, resume + 20 * kMs));
  drive(*g, after, resume + 100 * kMs);
  g->run_until(resume + 110 * kMs);
  EXPECT_EQ(peer_restarts(*g, 0), 1u);
  EXPECT_EQ(rx.at[0].count(2), after[0].accepted);
  const auto settled = tunnel(stats(*g, 0), 7);
  const uint64_t resets = num(settled.at("rx").at("peer_restarts"));
  EXPECT_EQ(resets, 1u);

  // 10 s later: B's keepalive from before its restart, and its data, replayed to A.
  g->run_until(kStartNs + 10'200 * kMs);
  const uint64_t stale_before = refused(*g, 0, "stale");
  g->inject_wan(0, 0, wan_of(*g, 1), old_keepalive.bytes);
  for (const Captured& c : old_data) g->inject_wan(0, 0, wan_of(*g, 1), c.bytes);
  g->run_until(kStartNs + 10'210 * kMs);
  EXPECT_EQ(refused(*g, 0, "stale"), stale_before + 1);  // the keepalive: an earlier boot's
  EXPECT_EQ(peer_restarts(*g, 0), 1u);                     // no second restart
  const auto later = tunnel(stats(*g, 0), 7);
  EXPECT_EQ(num(later.at("rx").at("peer_restarts")), resets);  // no window reset
  EXPECT_EQ(rx.at[0].count(1), before[0].accepted);  // nothing of B's old data delivered again
  EXPECT_EQ(rx.at[0].repeated(), 0u);
  // The data could not even open: its keys were B's old epoch's.
  EXPECT_GE(num(later.at("auth").at("drops").at("auth_failed")), old_data.size());

  // The genuine tunnel is intact afterwards.
  std::vector<Flow> last;
  last.push_back(flow(1, 1, 80, 3, 20e6, 200, 1400, kStartNs + 10'220 * kMs));
  drive(*g, last, kStartNs + 10'300 * kMs);
  g->run_until(kStartNs + 10'310 * kMs);
  EXPECT_EQ(rx.at[0].count(3), last[0].accepted);
  EXPECT_GT(last[0].accepted, 100u);
  EXPECT_EQ(rx.damaged, 0u);
}

TEST(EngineAttack, ReplayedControlPacketsMoveNeitherTheClockNorLiveness) {
  auto g = two_sites(site(), site());
  ASSERT_NE(g, nullptr);
  for (uint32_t from = 0; from < 2; ++from) g->set_faults(from, 1 - from, {.delay_ns = 1 * kMs});
  Capture b_sent;
  b_sent.attach(*g, 1);
  g->run_until(kStartNs + 100 * kMs);
  ASSERT_FALSE(b_sent.time_responses.empty());
  ASSERT_FALSE(b_sent.keepalives.empty());
  const auto status = g->engine(0).peer_status(0);
  ASSERT_TRUE(status.up);
  const uint64_t samples = status.clock_samples;
  const uint64_t replayed = refused(*g, 0, "replayed");
  // Every time response and keepalive B sent, replayed to A: each one's control sequence number
  // was accepted already, so none is a new clock sample or a sign of life.
  std::size_t injected = 0;
  for (const auto* list : {&b_sent.time_responses, &b_sent.keepalives}) {
    for (const Captured& c : *list) {
      g->inject_wan(0, 0, wan_of(*g, 1), c.bytes);
      ++injected;
    }
  }
  g->run_until(kStartNs + 101 * kMs);
  EXPECT_EQ(refused(*g, 0, "replayed"), replayed + injected);
  EXPECT_EQ(g->engine(0).peer_status(0).clock_samples, samples);
  EXPECT_EQ(peer_restarts(*g, 0), 0u);
  // B falls silent: the replays do not keep it up.
  g->set_faults(1, 0, {.down = true});
  g->run_until(kStartNs + 200 * kMs);
  for (const Captured& c : b_sent.keepalives) g->inject_wan(0, 0, wan_of(*g, 1), c.bytes);
  g->run_until(kStartNs + 201 * kMs);
  EXPECT_FALSE(g->engine(0).peer_status(0).up);
}

TEST(EngineAttack, DataWaitsForThePeersEpochThenFlowsInBothDirections) {
  auto g = two_sites(site(), site());
  ASSERT_NE(g, nullptr);
  for (uint32_t from = 0; from < 2; ++from) g->set_faults(from, 1 - from, {.delay_ns = 2 * kMs});
  Deliveries rx;
  rx.attach(*g);
  // Before any keepalive has come back, A has no data key: its packets are refused at submit,
  // counted, and none leaves unsealed or under a wrong key.
  EXPECT_FALSE(g->engine(0).tunnel_ready(g->engine(0).tunnel_index(7)));
  std::vector<Flow> early;
  early.push_back(flow(0, 2, 80, 1, 20e6));
  drive(*g, early, kStartNs + 1 * kMs);
  EXPECT_GT(early[0].refused, 0u);
  EXPECT_GT(g->engine(0).drops(EngineDrop::kAuthAwaitingPeer), 0u);
  // The handshake: both epochs known within a few round trips (keepalives answered early).
  g->run_until(kStartNs + 30 * kMs);
  const auto a = stats(*g, 0);
  const auto b = stats(*g, 1);
  EXPECT_FALSE(tunnel(a, 7).at("auth").at("peer_epoch").is_null());
  EXPECT_FALSE(tunnel(b, 7).at("auth").at("peer_epoch").is_null());
  EXPECT_EQ(tunnel(a, 7).at("auth").at("peer_epoch").as_string(), g->engine(1).boot_id());
  for (uint32_t e = 0; e < 2; ++e) EXPECT_TRUE(g->engine(e).tunnel_ready(g->engine(e).tunnel_index(7)));
  EXPECT_GT(num(a.at("peers").at(0).at("keepalive").at("early")) +
                num(b.at("peers").at(0).at("keepalive").at("early")),
            0u);
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 2, 20e6, 200, 1400, kStartNs + 30 * kMs));
  flows.push_back(flow(1, 1, 80, 3, 20e6, 200, 1400, kStartNs + 30 * kMs));
  drive(*g, flows, kStartNs + 130 * kMs);
  g->run_until(kStartNs + 140 * kMs);
  EXPECT_EQ(flows[0].refused + flows[1].refused, 0u);
  EXPECT_EQ(rx.at[1].count(2), flows[0].accepted);
  EXPECT_EQ(rx.at[0].count(3), flows[1].accepted);
  EXPECT_EQ(rx.damaged, 0u);
  EXPECT_EQ(num(tunnel(stats(*g, 1), 7).at("auth").at("drops").at("auth_failed")), 0u);
}

TEST(EngineAttack, AnInTimeTunnelRefusesAPacketOlderThanItsMaxHold) {
  // Unauthenticated, so the packet opens: the sender restarts (its window toward it starts
  // again, so the replay window calls an old sequence number new) and the packet is replayed
  // 2 s later. Tunnel 9 is in time (bound 0): its max_hold (1 s) refuses it as stale.
  auto g = two_sites(site(false), site(false));
  ASSERT_NE(g, nullptr);
  for (uint32_t from = 0; from < 2; ++from) g->set_faults(from, 1 - from, {.delay_ns = 1 * kMs});
  Deliveries rx;
  rx.attach(*g);
  Capture a_sent;
  a_sent.attach(*g, 0, 100'000);
  std::vector<Flow> flows;
  flows.push_back(flow(0, 102, 5000, 1, 20e6));  // 10.102/16, UDP 5000-5999: tunnel 9
  drive(*g, flows, kStartNs + 100 * kMs);
  g->run_until(kStartNs + 110 * kMs);
  std::vector<Captured> nines;
  for (const Captured& c : a_sent.data) {
    if (c.tunnel_id == 9) nines.push_back(c);
  }
  ASSERT_GT(nines.size(), 50u);
  const Captured old = nines.back();
  ASSERT_TRUE(g->restart(0).has_value());
  g->run_until(kStartNs + 2'200 * kMs);
  const auto st = [&] { return tunnel(stats(*g, 1), 9).at("rx").at("on_time"); };
  const uint64_t stale = num(st().at("dropped").at("stale"));
  g->inject_wan(1, 0, wan_of(*g, 0), old.bytes);
  g->run_until(kStartNs + 2'210 * kMs);
  EXPECT_EQ(num(st().at("dropped").at("stale")), stale + 1);
  EXPECT_EQ(rx.at[1].repeated(), 0u);
}

}  // namespace
}  // namespace detwan::dataplane::gw

// The DPDK gateway spread over two shards (Gateway::open_shards), A and B back to back over
// net_ring devices with one queue pair per shard, stepped in one thread in virtual time. Every
// host packet enters A on queue 0 and every WAN frame reaches B on queue 0 (a device that steers
// nothing), so shard 0 of each gateway must dispatch the packets of shard 1's tunnels: each
// tunnel is scheduled and sent only by its owner, everything arrives intact, nothing leaks.
#include <algorithm>
#include <atomic>
#include <map>
#include <set>

#include <rte_mempool.h>

#include "dataplane/dpdk/gateway.h"
#include "dataplane/gw/engine.h"
#include "tests/dataplane/dpdk/dpdk_test_util.h"

namespace detwan::dataplane::dpdk::testing {
namespace {

constexpr int64_t kStart = 1'000'000'000'000;
constexpr uint32_t kShards = 2;
constexpr uint32_t kTunnels = 6;  // ids 1..6: odd ones on shard 1, even ones on shard 0

struct Side {
  std::vector<std::unique_ptr<gw::Engine>> engines;
  std::vector<std::unique_ptr<Gateway>> shards;
};

TEST(GatewayShards, ShardZeroDispatchesAndEachTunnelLeavesFromItsOwner) {
  if (!test_eal()) GTEST_SKIP() << "the DPDK EAL cannot start here: DPDK backend tests skipped";
  static std::atomic<int> next{0};
  const std::string p = fmt::format("s{}", next.fetch_add(1));
  // Host A -> A (queue 0 only) ; A's two TX queues -> one ring -> B's RX queue 0; B -> host B.
  RingPtr host_in = make_ring(p + "hi"), host_unused = make_ring(p + "hu");
  RingPtr host_out = make_ring(p + "ho"), host_out1 = make_ring(p + "ho1");
  RingPtr ab = make_ring(p + "ab", 4096), ba = make_ring(p + "ba");
  RingPtr empty0 = make_ring(p + "e0"), empty1 = make_ring(p + "e1"), empty2 = make_ring(p + "e2");
  RingPtr sink0 = make_ring(p + "k0"), sink1 = make_ring(p + "k1"), sink2 = make_ring(p + "k2");
  ASSERT_GE(
      ring_port_queues(p + "hostA", {host_in.get(), host_unused.get()}, {sink0.get(), sink0.get()}),
      0);
  ASSERT_GE(ring_port_queues(p + "wanA", {ba.get(), empty0.get()}, {ab.get(), ab.get()}), 0);
  ASSERT_GE(ring_port_queues(p + "wanB", {ab.get(), empty1.get()}, {ba.get(), ba.get()}), 0);
  ASSERT_GE(
      ring_port_queues(p + "hostB", {empty2.get(), sink1.get()}, {host_out.get(), host_out1.get()}),
      0);
  const gw::GatewayConfig config_a =
      many_tunnels_config(true, "net_ring_" + p + "wanA", kTunnels, 10'000'000'000, 1'000'000);
  const gw::GatewayConfig config_b =
      many_tunnels_config(false, "net_ring_" + p + "wanB", kTunnels, 10'000'000'000, 1'000'000);
  Side a, b;
  for (auto [side, config] : {std::pair{&a, &config_a}, std::pair{&b, &config_b}}) {
    std::vector<gw::Engine*> raw;
    for (uint32_t k = 0; k < kShards; ++k) {
      auto engine = gw::Engine::create(*config, kStart, gw::ShardSpec{k, kShards, 0x5eed});
      ASSERT_TRUE(engine) << engine.error().describe();
      raw.push_back(engine->get());
      side->engines.push_back(std::move(*engine));
    }
    GatewayOptions options;
    options.local_port = LocalPortOptions{"net_ring_" + p + (side == &a ? "hostA" : "hostB"),
                                          side == &a ? kHostMacA : kHostMacB, 256, 256};
    auto shards = Gateway::open_shards(raw, *config, options);
    ASSERT_TRUE(shards) << shards.error().describe();
    side->shards = std::move(*shards);
  }
  // An engine of the wrong shard count is refused, naming the mismatch.
  auto lone = gw::Engine::create(config_a, kStart, gw::ShardSpec{0, 3});
  ASSERT_TRUE(lone);
  auto refused = Gateway::open_shards({lone->get()}, config_a);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("shard 0 of 3"), std::string::npos);

  rte_mempool* pool = a.shards[0]->pool();
  std::map<uint32_t, std::vector<std::byte>> sent;  // tag -> IP packet
  constexpr uint32_t kPerTunnel = 20;
  for (uint32_t t = 1; t <= kTunnels; ++t) {
    for (uint32_t i = 0; i < kPerTunnel; ++i) {
      const uint32_t tag = t * 1000 + i;
      const std::string to = fmt::format("10.20.2.{}:6000", t);
      auto frame = host_frame("10.20.1.5:5000", to.c_str(), kHostMacA, 100 + i, tag);
      sent[tag] = std::vector<std::byte>(frame.begin() + kEtherHeaderBytes, frame.end());
      rte_mbuf* m = mbuf_from(pool, frame);
      ASSERT_NE(m, nullptr);
      ASSERT_EQ(rte_ring_enqueue(host_in.get(), m), 0);
    }
  }
  int64_t now = kStart;
  for (int i = 0; i < 1200; ++i) {  // 2.4 ms: each tunnel's 10 us slot of the 1 ms cycle, twice
    now += 2'000;
    for (Side* side : {&a, &b}) {
      for (auto& shard : side->shards) (void)shard->poll_once_st(now);
    }
  }
  // Everything arrived intact and once, on the queue of the shard that released it.
  std::set<uint32_t> seen;
  uint64_t wrong_queue = 0;
  for (auto [ring, queue] : {std::pair{host_out.get(), 0u}, std::pair{host_out1.get(), 1u}}) {
    void* object = nullptr;
    while (rte_ring_dequeue(ring, &object) == 0) {
      auto* m = static_cast<rte_mbuf*>(object);
      const auto frame = bytes_of(m);
      rte_pktmbuf_free(m);
      const std::vector<std::byte> ip(frame.begin() + kEtherHeaderBytes, frame.end());
      const uint32_t tunnel = std::to_integer<uint32_t>(ip[19]);  // 10.20.2.<tunnel>
      if (gw::shard_of_tunnel(tunnel, kShards) != queue) ++wrong_queue;
      bool found = false;
      for (const auto& [tag, packet] : sent) {
        if (packet == ip) {
          EXPECT_TRUE(seen.insert(tag).second) << "packet " << tag << " twice";
          found = true;
          break;
        }
      }
      EXPECT_TRUE(found) << "a packet that was not sent, or changed on the way";
    }
  }
  EXPECT_EQ(seen.size(), sent.size());
  EXPECT_EQ(wrong_queue, 0u);
  // Each tunnel was scheduled and sent by its owner only.
  for (Side* side : {&a}) {
    for (uint32_t k = 0; k < kShards; ++k) {
      for (uint32_t t = 1; t <= kTunnels; ++t) {
        const sched::TxCounters* c = side->engines[k]->scheduler(0).tunnel_counters(t);
        ASSERT_NE(c, nullptr);
        // Tunnel 1 also carries the control packets of its lead shard.
        const uint64_t expected = gw::shard_of_tunnel(t, kShards) != k ? 0u : kPerTunnel;
        if (t == 1 && k == 1) {
          EXPECT_GT(c->sent_packets, expected);
        } else {
          EXPECT_EQ(c->sent_packets, expected) << "tunnel " << t << " shard " << k;
        }
      }
    }
  }
  // Shard 0 of A passed shard 1's host packets on, shard 0 of B its WAN frames; nothing lost.
  const BackendCounters a0 = a.shards[0]->counters(), b0 = b.shards[0]->counters();
  EXPECT_GE(a0.dispatched, kPerTunnel * kTunnels / 2);  // + B's control packets for tunnel 1
  EXPECT_GE(b0.dispatched, kPerTunnel * kTunnels / 2);
  EXPECT_EQ(a0.dispatch_dropped + b0.dispatch_dropped, 0u);
  EXPECT_EQ(a.shards[1]->counters().dispatched, 0u);
  // The peer's lead (the owner of control tunnel 1) is shard 1; shard 0 sees it up through it.
  for (Side* side : {&a, &b}) {
    EXPECT_TRUE(side->engines[1]->leads_peer(0));
    EXPECT_FALSE(side->engines[0]->leads_peer(0));
    EXPECT_TRUE(side->engines[1]->peer_status(0).up);
    EXPECT_TRUE(side->engines[0]->peer_status(0).up);               // adopted from the lead
    EXPECT_EQ(side->engines[0]->peer_status(0).clock_samples, 0u);  // it exchanged nothing
  }
  b.shards.clear();
  a.shards.clear();
}

}  // namespace
}  // namespace detwan::dataplane::dpdk::testing

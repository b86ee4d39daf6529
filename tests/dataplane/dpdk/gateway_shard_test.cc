// The DPDK gateway spread over two shards (Gateway::open_shards), A and B back to back over
// net_ring devices with one queue pair per shard, stepped in one thread in virtual time. Every
// host packet enters A on queue 0 and every WAN frame reaches B on queue 0 (a device that steers
// nothing), so shard 0 of each gateway must dispatch the packets of shard 1's tunnels: each
// tunnel is scheduled and sent only by its owner, everything arrives intact, nothing leaks.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <netinet/in.h>
#include <rte_mempool.h>
#include <sys/socket.h>

#include <boost/json.hpp>

#include "common/clock.h"
#include "common/unique_fd.h"
#include "dataplane/dpdk/gateway.h"
#include "dataplane/gw/control_server.h"
#include "dataplane/gw/engine.h"
#include "dataplane/gw/run_context.h"
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
      // One epoch per gateway, the same in its shards; the two gateways' differ (a control
      // packet carrying the receiver's own epoch is refused as a reflection).
      auto engine = gw::Engine::create(*config, kStart,
                                       gw::ShardSpec{k, kShards, side == &a ? 0x5eedu : 0x5eefu});
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
  // net_ring has no flow API: the gateway tried the flow rules (flow_steering.h), says why they
  // are not there, and its WAN frames are steered by the dispatch rings instead.
  for (Side* side : {&a, &b}) {
    const auto& notes = side->shards[0]->wan_steering_notes();
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_THAT(notes[0], ::testing::HasSubstr("the device refuses the flow rule of shard 0"));
    EXPECT_THAT(side->shards[1]->counters_json(),
                ::testing::HasSubstr(R"("rx_steering":"dispatch")"));
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

// A UDP port on 127.0.0.1 free a moment ago (the gateway binds it: run() does not say which
// port 0 became).
uint16_t free_port() {
  common::UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  (void)::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  (void)::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length);
  return ntohs(address.sin_port);
}

common::UniqueFd bound_socket(uint16_t port) {
  common::UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  return fd;
}

// The entry point detwan-gw calls, with dpdk.lcores [0, 1]: gateway A runs as two shards on the
// test EAL's lcores 0 (this thread) and 1, gateway B as one on a thread. Datagrams of a tunnel of
// each shard cross to B's service sockets; the control socket answers for the whole gateway
// (merged stats) and the admin socket's change reaches both shards, with the loops running.
TEST(GatewayShards, RunWithTwoLcoresServesDataAndControl) {
  if (!test_eal()) GTEST_SKIP() << "the DPDK EAL cannot start here: DPDK backend tests skipped";
  static std::atomic<int> next{0};
  const std::string p = fmt::format("r{}", next.fetch_add(1));
  RingPtr ab = make_ring(p + "ab", 4096), ba = make_ring(p + "ba"), idle = make_ring(p + "i");
  ASSERT_GE(ring_port_queues(p + "wanA", {ba.get(), idle.get()}, {ab.get(), ab.get()}), 0);
  ASSERT_GE(ring_port(p + "wanB", ab.get(), ba.get()), 0);
  gw::GatewayConfig a =
      many_tunnels_config(true, "net_ring_" + p + "wanA", 2, 10'000'000'000, 1'000'000);
  gw::GatewayConfig b =
      many_tunnels_config(false, "net_ring_" + p + "wanB", 2, 10'000'000'000, 1'000'000);
  for (gw::GatewayConfig* config : {&a, &b}) {
    config->timing = gw::TimingMode::kLowCpu;
    for (gw::TunnelConfig& tunnel : config->tunnels) {  // long windows: 40 slots each
      tunnel.dst_prefixes.clear();                      // service datagrams only: no TUN here
      tunnel.slots.clear();
      for (uint32_t slot = 0; slot < 40; ++slot)
        tunnel.slots.push_back((tunnel.id - 1) * 40 + slot);
    }
  }
  a.dpdk.lcores = {0, 1};
  a.dpdk.eal_args = {"--no-huge"};  // the file's rules need them (the test EAL is already up)
  const std::string dir = ::testing::TempDir();
  a.control_socket = "@" + p + "-detwan-control";
  a.admin_socket = dir + "/" + p + "-admin.sock";
  std::vector<uint16_t> listen_ports, deliver_ports;
  std::vector<common::UniqueFd> sinks;
  for (uint32_t i = 0; i < 2; ++i) {
    listen_ports.push_back(free_port());
    deliver_ports.push_back(free_port());
    sinks.push_back(bound_socket(deliver_ports.back()));
    a.tunnels[i].service_listen = endpoint(fmt::format("127.0.0.1:{}", listen_ports[i]).c_str());
    b.tunnels[i].service_deliver = endpoint(fmt::format("127.0.0.1:{}", deliver_ports[i]).c_str());
  }
  const int64_t start = common::TaiClock().now_ns();
  auto engine_a = gw::Engine::create(a, start, gw::ShardSpec{0, 2, 0xabc});
  auto engine_b = gw::Engine::create(b, start);
  ASSERT_TRUE(engine_a && engine_b);
  auto gateway_b = Gateway::open(**engine_b, b);
  ASSERT_TRUE(gateway_b) << gateway_b.error().describe();
  gw::ControlServerOptions read_only;
  auto control = gw::ControlServer::start(a.control_socket, read_only);
  gw::ControlServerOptions admin_options;
  admin_options.admin = true;
  auto admin = gw::ControlServer::start(a.admin_socket, admin_options);
  ASSERT_TRUE(control && admin);

  std::atomic<bool> stop{false};
  std::thread thread_b([&] { (*gateway_b)->run_st(stop, nullptr); });
  std::string stats_answer, prometheus_answer, apply_answer, stats_after;
  std::vector<std::vector<std::string>> received(2);
  std::thread client([&] {
    const common::UniqueFd sender(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    // Until both tunnels deliver (the gateway binds its service ports once it runs).
    while (std::chrono::steady_clock::now() < deadline &&
           (received[0].size() < 10 || received[1].size() < 10)) {
      for (uint32_t i = 0; i < 2; ++i) {
        sockaddr_in to{};
        to.sin_family = AF_INET;
        to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        to.sin_port = htons(listen_ports[i]);
        const std::string text = fmt::format("tunnel {} says hello", i + 1);
        (void)::sendto(sender.get(), text.data(), text.size(), 0, reinterpret_cast<sockaddr*>(&to),
                       sizeof(to));
        char buffer[256];
        for (;;) {
          const ssize_t n = ::recv(sinks[i].get(), buffer, sizeof(buffer), MSG_DONTWAIT);
          if (n < 0) break;
          received[i].emplace_back(buffer, static_cast<std::size_t>(n));
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    auto stats = gw::control_request(a.control_socket, R"({"cmd":"stats"})", 5000);
    stats_answer = stats ? *stats : stats.error().message;
    auto metrics = gw::control_request(a.control_socket, R"({"cmd":"prometheus"})", 5000);
    prometheus_answer = metrics ? *metrics : metrics.error().message;
    auto applied = gw::control_request(
        a.admin_socket,
        R"({"cmd":"apply","add":[{"id":3,"peer":"b","auth":"none","rate":"100mbit","slots":"80-89"}]})", 5000);
    apply_answer = applied ? *applied : applied.error().message;
    auto after = gw::control_request(a.control_socket, R"({"cmd":"stats"})", 5000);
    stats_after = after ? *after : after.error().message;
    stop = true;
  });
  std::atomic<bool> unused{false};
  gw::RunContext context{**engine_a, a, control->get(), stop, admin->get()};
  const auto outcome = run(context);
  client.join();
  thread_b.join();
  ASSERT_TRUE(outcome) << outcome.error().describe();
  for (uint32_t i = 0; i < 2; ++i) {
    ASSERT_GE(received[i].size(), 10u) << "tunnel " << i + 1;
    EXPECT_EQ(received[i][0], fmt::format("tunnel {} says hello", i + 1));
  }
  const boost::json::value stats = boost::json::parse(stats_answer);
  ASSERT_TRUE(stats.is_object()) << stats_answer;
  EXPECT_EQ(stats.at("shards").to_number<uint32_t>(), 2u) << stats_answer;
  EXPECT_GE(stats.at("local").at("service_rx_packets").to_number<uint64_t>(), 20u);
  EXPECT_EQ(stats.at("peers").at(0).at("state").as_string(), "up");
  // Prometheus merged over the running shards: both tunnels' series, the shard count.
  EXPECT_THAT(prometheus_answer, ::testing::HasSubstr("\ndetwan_gw_shards 2\n"));
  EXPECT_THAT(prometheus_answer,
              ::testing::HasSubstr("detwan_gw_tunnel_tx_sent_packets_total{tunnel=\"1\""));
  EXPECT_THAT(prometheus_answer,
              ::testing::HasSubstr("detwan_gw_tunnel_tx_sent_packets_total{tunnel=\"2\""));
  EXPECT_THAT(apply_answer, ::testing::HasSubstr("\"added\":[3]"));
  const boost::json::value after = boost::json::parse(stats_after);
  ASSERT_TRUE(after.is_object()) << stats_after;
  EXPECT_EQ(after.at("tunnels").as_array().size(), 3u);
  EXPECT_EQ(after.at("generation").to_number<uint64_t>(), 1u);
  (void)unused;
}

}  // namespace
}  // namespace detwan::dataplane::dpdk::testing

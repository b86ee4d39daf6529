// The io_uring backend with several shards (gateway.shards, dataplane/uring/shards.h): the WAN
// steering program, two 2-shard gateways carrying two tunnels owned by different shards, the
// TUN side's dispatch ring, the merged control answers. Loopback and port 0; the TUN test in a
// private network namespace (skips without CAP_NET_ADMIN). Assertions are about counts and
// bytes, never about speed.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <boost/json.hpp>

#include "common/reuseport_steering.h"
#include "dataplane/gw/control_server.h"
#include "dataplane/gw/engine.h"
#include "dataplane/uring/gateway.h"
#include "dataplane/wire/header.h"
#include "tests/dataplane/uring/uring_site.h"
#include "tests/dataplane/uring/uring_test_util.h"

namespace detwan::dataplane::uring {
namespace {

namespace json = boost::json;
using testing::counter;
using testing::loopback;
using testing::Site;
using testing::tai_now_ns;
using testing::TestSocket;
using Bytes = std::vector<std::byte>;

Bytes tunnel_datagram(uint32_t tunnel_id, std::string_view payload) {
  Bytes bytes;
  for (const char c : payload) bytes.push_back(static_cast<std::byte>(c));
  return testing::tunnel_frame(tunnel_id, wire::DataType::kDatagram, bytes);
}

// The program's choice, computed as the kernel runs it, on encoded datagrams: tunnel id mod N,
// the same shard gw::shard_of_tunnel names; too short for a tunnel id: 0.
TEST(UringShardSteering, ProgramPicksTheShardOwningTheTunnel) {
  const common::ReuseportKey key{static_cast<uint32_t>(wire::kTunnelIdOffset)};
  for (const uint32_t shards : {1u, 2u, 3u, 7u, 64u}) {
    for (const uint32_t id : {1u, 2u, 3u, 17u, 1000u, 0xFFFFFFFEu}) {
      const Bytes datagram = tunnel_datagram(id, "x");
      EXPECT_EQ(common::steered_socket(key, reinterpret_cast<const uint8_t*>(datagram.data()),
                                       static_cast<uint32_t>(datagram.size()), shards),
                gw::shard_of_tunnel(id, shards))
          << "id " << id << " shards " << shards;
      EXPECT_EQ(gw::Engine::peek_tunnel_id(datagram), id);
    }
  }
  const Bytes datagram = tunnel_datagram(5, "");
  EXPECT_EQ(common::steered_socket(key, reinterpret_cast<const uint8_t*>(datagram.data()),
                                   static_cast<uint32_t>(wire::kTunnelIdOffset + 3), 4),
            0u);
}

// The same against the kernel: three sockets in one reuseport group with the program attached;
// each datagram lands in socket (tunnel id mod 3), a 5-byte one in socket 0.
TEST(UringShardSteering, KernelDeliversToTheSocketTheProgramNames) {
  constexpr uint32_t kSockets = 3;
  std::vector<common::UniqueFd> sockets;
  uint16_t port = 0;
  for (uint32_t k = 0; k < kSockets; ++k) {
    common::UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    const int on = 1;
    ASSERT_EQ(::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEPORT, &on, sizeof on), 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(port);
    ASSERT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    socklen_t length = sizeof address;
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length);
    port = ntohs(address.sin_port);
    sockets.push_back(std::move(fd));
  }
  ASSERT_TRUE(common::attach_reuseport_steering(
      sockets[0].get(), common::ReuseportKey{static_cast<uint32_t>(wire::kTunnelIdOffset)},
      kSockets, "test group"));
  TestSocket sender = TestSocket::open();
  auto expect_in = [&](const Bytes& datagram, uint32_t socket) {
    ASSERT_TRUE(sender.send_to(loopback(port), datagram.data(), datagram.size()));
    for (uint32_t k = 0; k < kSockets; ++k) {
      pollfd readable{sockets[k].get(), POLLIN, 0};
      const int ready = ::poll(&readable, 1, k == socket ? 5'000 : 0);
      EXPECT_EQ(ready, k == socket ? 1 : 0) << "socket " << k << ", expected " << socket;
      if (ready == 1) {
        char drain[2048];
        (void)::recv(sockets[k].get(), drain, sizeof drain, 0);
      }
    }
  };
  for (const uint32_t id : {1u, 2u, 3u, 4u, 5u, 6u, 100u})
    expect_in(tunnel_datagram(id, "hi"), id % 3);
  expect_in(Bytes(5, std::byte{0xFF}), 0);
}

// Two tunnels on one WAN port: id 1 (owned by shard 1 of 2) in slots 0..49, id 2 (shard 0) in
// 50..99 of a 20 ms cycle: windows of 10 ms, so a loaded machine's late loop turn does not
// make a frame miss its slot.
gw::GatewayConfig two_tunnel_config(const std::string& name, const std::string& peer,
                                    const gw::Endpoint& peer_endpoint, uint32_t shards) {
  gw::GatewayConfig config = testing::site_config(name, peer, loopback(0), peer_endpoint);
  config.shards = shards;
  config.wan_ports[0].cycle_ns = 20 * testing::kMs;
  gw::TunnelConfig second = config.tunnels[0];
  config.tunnels[0].id = 1;
  config.tunnels[0].slots.resize(50);
  second.id = 2;
  second.slots.erase(second.slots.begin(), second.slots.begin() + 50);
  config.tunnels.push_back(second);
  for (gw::TunnelConfig& tunnel : config.tunnels) tunnel.burst_bytes = 4 << 20;
  return config;
}

struct ShardPairCase {
  bool offloads;  // UDP GSO and GRO on the WAN sockets
  bool steer;     // the reuseport program on B's WAN port
};

class UringShardPair : public ::testing::TestWithParam<ShardPairCase> {};

// Service datagrams of tunnels 1 and 2 from A's service ports to B's deliver endpoints, both
// gateways with 2 shards. Every datagram arrives byte for byte; each tunnel's counters move in
// its owner shard only, on both sides. Steered and without GSO/GRO, no WAN datagram reaches a
// shard that does not own its tunnel (wan_misdirected 0). Without the program every datagram
// from A comes from one 4-tuple, so the kernel's hash puts all of them in one shard's socket
// and one tunnel's datagrams are misdirected (then dispatched: still delivered, still counted in
// the owner); with GSO/GRO one skb carries datagrams of both tunnels, same outcome.
TEST_P(UringShardPair, EachTunnelIsCarriedByItsOwnerShard) {
  const ShardPairCase param = GetParam();
  TestSocket app1 = TestSocket::open();
  TestSocket app2 = TestSocket::open();
  for (const TestSocket* app : {&app1, &app2}) {  // room for a burst the playout releases at once
    const int bytes = 8 << 20;
    if (::setsockopt(app->fd.get(), SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes) != 0) {
      (void)::setsockopt(app->fd.get(), SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
    }
  }
  TestSocket placeholder = TestSocket::open();
  auto config_a = two_tunnel_config("site-a", "site-b", placeholder.local, 2);
  auto config_b = two_tunnel_config("site-b", "site-a", placeholder.local, 2);
  for (auto* config : {&config_a, &config_b}) config->wan_gso = config->wan_gro = param.offloads;
  for (auto& tunnel : config_a.tunnels) tunnel.service_listen = loopback(0);
  config_b.tunnels[0].service_deliver = app1.local;
  config_b.tunnels[1].service_deliver = app2.local;
  Site a(config_a);
  Site b(config_b, Gateway::OpenOptions{param.steer});
  ASSERT_TRUE(a.opened() && b.opened());
  a.config().peers[0].endpoint = b.wan();
  b.config().peers[0].endpoint = a.wan();
  a.start();
  b.start();
  // Datagrams go in once both gateways run: every shard's loop has turned and the peer is up.
  // Sent earlier they wait in the sockets while shards 1.. start, which on a slow machine (a
  // sanitizer build) takes longer than the playout accepts a timestamp for (max_hold).
  for (const Site* site : {&a, &b}) {
    const json::value running = site->stats_when([](const json::value& stats) {
      for (const json::value& shard : stats.at("backend_shards").as_array()) {
        if (counter(shard, {"loop_iterations"}) == 0) return false;
      }
      return stats.at("peers").at(0).at("state") == "up";
    });
    ASSERT_EQ(running.at("peers").at(0).at("state"), "up") << json::serialize(running);
  }

  constexpr uint32_t kPerTunnel = 200;
  TestSocket sender = TestSocket::open();
  std::vector<std::string> sent[2], received[2];
  for (uint32_t i = 0; i < kPerTunnel; ++i) {
    for (uint32_t t = 0; t < 2; ++t) {
      std::string payload = "tunnel " + std::to_string(t + 1) + " datagram " + std::to_string(i);
      payload.resize(100 + (i * 7) % 900, static_cast<char>('a' + i % 26));
      ASSERT_TRUE(sender.send_to(*a.service(t), payload.data(), payload.size()));
      sent[t].push_back(payload);
    }
    if (i % 16 == 15) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // pacing only
  }
  // Both applications read together: one socket's buffer alone would not hold a whole tunnel.
  while (received[0].size() < kPerTunnel || received[1].size() < kPerTunnel) {
    pollfd readable[2] = {{app1.fd.get(), POLLIN, 0}, {app2.fd.get(), POLLIN, 0}};
    if (::poll(readable, 2, 10'000) <= 0) break;  // a bound for a broken gateway
    for (uint32_t t = 0; t < 2; ++t) {
      if ((readable[t].revents & POLLIN) == 0) continue;
      const auto datagram = (t == 0 ? app1 : app2).receive(0);
      if (datagram) {
        received[t].emplace_back(reinterpret_cast<const char*>(datagram->data()), datagram->size());
      }
    }
  }
  for (uint32_t t = 0; t < 2; ++t) {
    std::sort(sent[t].begin(), sent[t].end());
    std::sort(received[t].begin(), received[t].end());
    EXPECT_EQ(received[t].size(), sent[t].size()) << "tunnel " << t + 1;
    EXPECT_TRUE(received[t] == sent[t]) << "tunnel " << t + 1 << ": other bytes than were sent";
  }

  // Merged answers over shard 0's control socket.
  const json::value merged = b.stats();
  EXPECT_EQ(counter(merged, {"shards"}), 2);
  ASSERT_EQ(merged.at("backend_shards").as_array().size(), 2u);
  EXPECT_EQ(counter(merged, {"tunnels", "0", "rx", "accepted_on_time_packets"}), kPerTunnel);
  EXPECT_EQ(counter(merged, {"tunnels", "1", "rx", "accepted_on_time_packets"}), kPerTunnel);
  EXPECT_NE(b.request(R"({"cmd":"prometheus"})").find("detwan_gw_shards 2"), std::string::npos);

  a.stop();
  b.stop();
  for (Site* site : {&a, &b}) {
    uint64_t misdirected = 0, dispatched = 0, received_here = 0;
    for (uint32_t k = 0; k < 2; ++k) {
      const ShardStats backend = site->gateway().shard_stats(k);
      misdirected += backend.wan_misdirected;
      dispatched += backend.dispatched;
      received_here += backend.dispatch_received;
      EXPECT_EQ(backend.dispatch_dropped, 0u);
      const json::value stats = site->shard_stats(k);
      if (::testing::Test::HasFailure()) {
        std::cerr << (site == &a ? "A" : "B") << " shard " << k << ": "
                  << json::serialize(stats.at("drops"))
                  << "\n tunnel 2: " << json::serialize(stats.at("tunnels").at(1).at("tx")) << "\n"
                  << json::serialize(stats.at("tunnels").at(1).at("rx").at("on_time")) << "\n";
      }
      for (uint32_t t = 0; t < 2; ++t) {  // tunnel id t + 1 is owned by shard (t + 1) % 2
        const bool owner = (t + 1) % 2 == k;
        const int64_t sent_here =
            counter(stats, {"tunnels", std::to_string(t), "tx", "sent_on_time_packets"});
        const int64_t accepted =
            counter(stats, {"tunnels", std::to_string(t), "rx", "accepted_on_time_packets"});
        if (site == &a) {
          EXPECT_EQ(sent_here, owner ? kPerTunnel : 0) << "A shard " << k << " tunnel " << t + 1;
          EXPECT_EQ(accepted, 0);
        } else {
          EXPECT_EQ(accepted, owner ? kPerTunnel : 0) << "B shard " << k << " tunnel " << t + 1;
        }
      }
      EXPECT_EQ(counter(stats, {"drops", "unknown_tunnel"}), 0);
    }
    EXPECT_EQ(dispatched, received_here);
    if (site == &b && !param.steer) {
      EXPECT_GT(misdirected, 0u)
          << "without the program a tunnel's datagrams reach the wrong shard";
    } else if (!param.offloads) {
      EXPECT_EQ(misdirected, 0u) << (site == &a ? "A" : "B");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, UringShardPair,
                         ::testing::Values(ShardPairCase{false, true}, ShardPairCase{true, true},
                                           ShardPairCase{false, false}),
                         [](const auto& info) {
                           return std::string(info.param.offloads ? "GsoGro" : "NoOffloads") +
                                  (info.param.steer ? "Steered" : "HashOnly");
                         });

// The TUN side of a 2-shard gateway, in a private network namespace, with the virtio-net
// header (tun.offload) on its two queues. The host sends to tunnel 1 (10.20.1.0/24, shard 1)
// and tunnel 2 (10.20.2.0/24, shard 0) from 16 source ports each: the kernel spreads the flows
// over the queues by hash, so some packets are read by the shard that does not own their tunnel
// and go through the dispatch ring (the chance that all 32 flows hash to their owner is 2^-32).
// Every packet leaves as a frame of its own tunnel, sent by the owner only; frames from the peer
// for both tunnels come out of the device. A plain socket stands in for the peer.
TEST(UringShardTun, PacketsReadByAnotherShardAreDispatchedToTheOwner) {
  DETWAN_RUN_IN_NETNS([] {
    TestSocket peer = TestSocket::open();
    gw::GatewayConfig config = two_tunnel_config("site-a", "site-b", peer.local, 2);
    config.tun.enabled = true;
    config.tun.name = "dtws0";
    for (uint32_t t = 0; t < 2; ++t) {
      auto route = gw::parse_prefix(t == 0 ? "10.20.1.0/24" : "10.20.2.0/24");
      ASSERT_TRUE(route);
      config.tun.routes.push_back(*route);
      config.tunnels[t].dst_prefixes = {*route};
    }
    Site a(config);
    ASSERT_TRUE(a.opened());
    testing::set_ipv4_address("dtws0", "10.77.0.1");
    a.start();

    constexpr uint32_t kFlows = 16;
    std::vector<common::UniqueFd> hosts;
    for (uint32_t f = 0; f < kFlows; ++f) {
      hosts.emplace_back(::socket(AF_INET, SOCK_DGRAM, 0));  // a source port of its own each
    }
    for (uint32_t f = 0; f < kFlows; ++f) {
      for (uint32_t t = 0; t < 2; ++t) {
        sockaddr_in remote{};
        remote.sin_family = AF_INET;
        remote.sin_port = htons(9000);
        ::inet_pton(AF_INET, t == 0 ? "10.20.1.5" : "10.20.2.5", &remote.sin_addr);
        const std::string text = "flow " + std::to_string(f) + " tunnel " + std::to_string(t + 1);
        ASSERT_EQ(::sendto(hosts[f].get(), text.data(), text.size(), 0,
                           reinterpret_cast<sockaddr*>(&remote), sizeof remote),
                  static_cast<ssize_t>(text.size()));
      }
    }
    uint32_t frames[2] = {0, 0};
    const int64_t deadline_ns = tai_now_ns() + 10'000 * testing::kMs;  // for a broken gateway
    while (frames[0] + frames[1] < 2 * kFlows) {
      const auto datagram = peer.receive();
      ASSERT_TRUE(datagram && tai_now_ns() < deadline_ns)
          << "frames so far: " << frames[0] << " + " << frames[1] << "\n"
          << [&] {
               const json::value stats = a.stats();
               return json::serialize(stats.at("local")) + "\n" +
                      json::serialize(stats.at("backend_shards")) + "\n" +
                      json::serialize(stats.at("drops"));
             }();
      const auto decoded = wire::decode(*datagram);
      ASSERT_TRUE(decoded);
      if (!decoded->header.is_data()) continue;  // keepalives, time requests
      const uint32_t id = decoded->header.tunnel_id;
      ASSERT_TRUE(id == 1 || id == 2) << id;
      const auto* ip = reinterpret_cast<const uint8_t*>(decoded->payload.data());
      EXPECT_EQ(ip[18], id == 1 ? 1 : 2) << "10.20." << int{ip[18]} << ".x in tunnel " << id;
      ++frames[id - 1];
    }
    EXPECT_EQ(frames[0], kFlows);
    EXPECT_EQ(frames[1], kFlows);

    // The peer -> tunnels 1 and 2 -> the device (written by each owner on its own queue).
    common::UniqueFd listener;
    ASSERT_NO_FATAL_FAILURE(testing::bind_udp_v4("10.77.0.1", 7777, &listener));
    for (uint32_t t = 0; t < 2; ++t) {
      const std::string text = "pong " + std::to_string(t + 1);
      const Bytes outer = testing::tunnel_frame(
          t + 1, wire::DataType::kIpv4,
          testing::ipv4_udp(t == 0 ? "10.20.1.5" : "10.20.2.5", "10.77.0.1", 9000, 7777, text));
      ASSERT_TRUE(peer.send_to(a.wan(), outer.data(), outer.size()));
    }
    std::vector<std::string> pongs;
    for (uint32_t t = 0; t < 2; ++t) {
      pollfd readable{listener.get(), POLLIN, 0};
      ASSERT_EQ(::poll(&readable, 1, 10'000), 1);
      char received[16] = {};
      const ssize_t got = ::recv(listener.get(), received, sizeof received, 0);
      ASSERT_GT(got, 0);
      pongs.emplace_back(received, static_cast<size_t>(got));
    }
    std::sort(pongs.begin(), pongs.end());
    EXPECT_EQ(pongs, (std::vector<std::string>{"pong 1", "pong 2"}));
    // A TUN write is counted when its completion is reaped, which may come after the host
    // already has the packet: wait (bounded) until both are, then stop.
    (void)a.stats_when([](const json::value& stats) {
      return counter(stats, {"local", "tun_tx_packets"}) == 2;
    });

    a.stop();
    uint64_t tun_dispatched = 0, dispatched = 0, received_here = 0;
    for (uint32_t k = 0; k < 2; ++k) {
      const ShardStats backend = a.gateway().shard_stats(k);
      tun_dispatched += backend.tun_dispatched;
      dispatched += backend.dispatched;
      received_here += backend.dispatch_received;
      EXPECT_EQ(backend.dispatch_dropped, 0u);
      EXPECT_EQ(backend.wan_misdirected, 0u);
      const json::value stats = a.shard_stats(k);
      for (uint32_t t = 0; t < 2; ++t) {
        const bool owner = (t + 1) % 2 == k;
        EXPECT_EQ(counter(stats, {"tunnels", std::to_string(t), "tx", "sent_on_time_packets"}),
                  owner ? kFlows : 0)
            << "shard " << k << " tunnel " << t + 1;
      }
      EXPECT_EQ(counter(stats, {"local", "tun_tx_packets"}), 1) << "shard " << k;
    }
    EXPECT_GT(tun_dispatched, 0u);
    EXPECT_EQ(dispatched, tun_dispatched);
    EXPECT_EQ(received_here, dispatched);
  });
}

}  // namespace
}  // namespace detwan::dataplane::uring

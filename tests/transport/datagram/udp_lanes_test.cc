// The udp backend with several progress threads (backend_config "threads=N", transport/udp/
// lanes.h): the steering program's choice, channels spread over the lanes' threads, every
// datagram of a multipath channel reaching the server lane that owns it, the configuration's
// refusals.
#include <cstdint>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/transport/security_util.h"
#include "tests/transport/datagram/channel_test_util.h"
#include "transport/proto/wire.h"
#include "transport/udp/endpoint.h"
#include "transport/udp/lane_steering.h"
#include "transport/udp/lanes.h"

namespace detwan::transport {
namespace {

using testing::expect_transfer;
using testing::get;
using testing::random_bytes;

constexpr int64_t kConnectNs = 10'000'000'000;

ChannelOptions fast_options() {
  ChannelOptions options;
  options.initial_rtt_ns = 5'000'000;
  options.min_rto_ns = 5'000'000;
  return options;
}

EndpointOptions laned(uint32_t threads) {
  EndpointOptions options;
  options.security = testing::test_security();
  options.accept_options = fast_options();
  options.backend_config = "threads=" + std::to_string(threads);
  return options;
}

class UdpLanes : public ::testing::Test {
 protected:
  void SetUp() override {
    const BackendInfo info = udp::backend_info();
    if (!info.usable) GTEST_SKIP() << "udp backend unusable: " << info.reason;
  }

  // A server of `threads` lanes listening on 127.0.0.1 (call under ASSERT_NO_FATAL_FAILURE).
  struct Server {
    std::unique_ptr<Endpoint> endpoint;
    udp::LanedEndpoint* lanes = nullptr;
    std::string address;
  };
  static void listen_laned(uint32_t threads, Server* server) {
    auto endpoint = udp::make_endpoint(laned(threads));
    ASSERT_TRUE(endpoint) << endpoint.error().message;
    server->endpoint = std::move(*endpoint);
    server->lanes = dynamic_cast<udp::LanedEndpoint*>(server->endpoint.get());
    ASSERT_NE(server->lanes, nullptr);
    auto address = server->endpoint->listen("127.0.0.1:0");
    ASSERT_TRUE(address) << address.error().message;
    server->address = *address;
  }
};

// The program's choice, computed the way the kernel runs it, on encoded datagrams.
TEST(UdpLaneSteering, PicksTheLaneFromTheConnectionIdOfEveryDatagramForm) {
  namespace wire = proto::wire;
  const uint64_t id = 0x0123'4567'89ab'cdefULL;
  std::byte buffer[256];
  wire::Header header;
  header.connection_id = id;
  header.tx_time_ns = 1'000;
  const std::byte payload[100] = {};
  wire::DataBody data;
  data.payload = payload;
  const size_t data_bytes = wire::encode_data(header, data, buffer);
  ASSERT_GT(data_bytes, 0u);
  const auto* bytes = reinterpret_cast<const uint8_t*>(buffer);
  for (uint32_t lanes : {1u, 2u, 3u, 4u, 7u, 64u}) {
    EXPECT_EQ(udp::steered_lane(bytes, static_cast<uint32_t>(data_bytes), lanes),
              static_cast<uint32_t>(id) % lanes);
  }
  header.type = wire::Type::kHello;
  const size_t hello_bytes = wire::encode_hello(header, wire::HelloBody{}, buffer);
  ASSERT_GT(hello_bytes, 0u);
  EXPECT_EQ(udp::steered_lane(bytes, static_cast<uint32_t>(hello_bytes), 7),
            static_cast<uint32_t>(id) % 7);
  wire::AckBody ack;
  header.type = wire::Type::kAck;
  const size_t ack_bytes = wire::encode_ack(header, ack, buffer);
  ASSERT_GT(ack_bytes, 0u);
  EXPECT_EQ(udp::steered_lane(bytes, static_cast<uint32_t>(ack_bytes), 5),
            static_cast<uint32_t>(id) % 5);
  // Too short for the load: lane 0 (which drops it as malformed).
  EXPECT_EQ(udp::steered_lane(bytes, 3, 5), 0u);
  EXPECT_EQ(udp::steered_lane(bytes, 0, 5), 0u);
}

TEST_F(UdpLanes, RefusesBadThreadCountsAndInlineProgressWithSeveralThreads) {
  for (const char* config : {"threads=0", "threads=65", "threads=two", "threads="}) {
    EndpointOptions options;
    options.security = testing::test_security();
    options.backend_config = config;
    auto endpoint = udp::make_endpoint(options);
    ASSERT_FALSE(endpoint) << config;
    EXPECT_EQ(endpoint.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(endpoint.error().message.find("threads"), std::string::npos)
        << endpoint.error().message;
  }
  EndpointOptions options = laned(2);
  options.inline_progress = true;
  auto endpoint = udp::make_endpoint(options);
  ASSERT_FALSE(endpoint);
  EXPECT_NE(endpoint.error().message.find("inline_progress"), std::string::npos);
  // One thread is the plain endpoint.
  auto single = udp::make_endpoint(laned(1));
  ASSERT_TRUE(single) << single.error().message;
  EXPECT_EQ(dynamic_cast<udp::LanedEndpoint*>(single->get()), nullptr);
}

// A client endpoint with two threads: consecutive channels run on different threads (their
// completion callbacks say where), and each carries its messages intact.
TEST_F(UdpLanes, ChannelsOfOneEndpointRunOnDifferentProgressThreads) {
  auto server = udp::make_endpoint(laned(2));
  ASSERT_TRUE(server) << server.error().message;
  auto address = (*server)->listen("127.0.0.1:0");
  ASSERT_TRUE(address) << address.error().message;
  auto client = udp::make_endpoint(laned(2));
  ASSERT_TRUE(client) << client.error().message;
  std::vector<std::unique_ptr<Channel>> clients, servers;
  for (int i = 0; i < 4; ++i) {
    auto channel = (*client)->connect(*address, fast_options(), kConnectNs);
    ASSERT_TRUE(channel) << channel.error().message;
    clients.push_back(std::move(*channel));
    auto accepted = (*server)->accept(kConnectNs);
    ASSERT_TRUE(accepted) << accepted.error().message;
    servers.push_back(std::move(*accepted));
  }
  std::set<std::thread::id> threads;
  for (int i = 0; i < 4; ++i) {
    // The accept order is the connect order: each connect waited for its HELLO_ACK.
    const auto message = random_bytes(50'000 + i, i);
    auto received = testing::recv(*servers[i]);
    auto promise = std::make_shared<std::promise<std::thread::id>>();
    auto ran_on = promise->get_future();
    clients[i]->send_async(message, [promise](Result<void> result) {
      EXPECT_TRUE(result) << result.error().message;
      promise->set_value(std::this_thread::get_id());
    });
    threads.insert(get(ran_on));
    auto got = get(received);
    ASSERT_TRUE(got) << got.error().message;
    EXPECT_TRUE(*got == message) << "channel " << i;
  }
  EXPECT_EQ(threads.size(), 2u) << "4 channels on a 2-thread endpoint ran on " << threads.size()
                                << " thread(s)";
  EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u);
}

// Connections are spread over every lane of a server: the ids' low bits are random (an id
// forced odd left lanes 0 and 2 of 4 without a single connection). 48 connections leave a lane
// empty with odds 4 x (3/4)^48, about 4e-6.
TEST_F(UdpLanes, ConnectionsReachEveryLaneOfTheServer) {
  constexpr int kChannels = 48;
  Server server;
  ASSERT_NO_FATAL_FAILURE(listen_laned(4, &server));
  auto* server_endpoint = &server.endpoint;
  auto* server_lanes = server.lanes;
  const std::string* address = &server.address;
  auto client_endpoint = udp::make_endpoint(laned(2));
  ASSERT_TRUE(client_endpoint) << client_endpoint.error().message;
  std::vector<std::unique_ptr<Channel>> clients, servers;
  for (int i = 0; i < kChannels; ++i) {
    auto channel = (*client_endpoint)->connect(*address, fast_options(), kConnectNs);
    ASSERT_TRUE(channel) << channel.error().message;
    clients.push_back(std::move(*channel));
    auto accepted = (*server_endpoint)->accept(kConnectNs);
    ASSERT_TRUE(accepted) << accepted.error().message;
    servers.push_back(std::move(*accepted));
  }
  for (size_t lane = 0; lane < server_lanes->lane_count(); ++lane) {
    EXPECT_GT(server_lanes->lane_counters(lane).connections_accepted, 0u) << "lane " << lane;
  }
  EXPECT_EQ(server_lanes->counters().connections_accepted, static_cast<uint64_t>(kChannels));
}

// Two-path channels into a 4-thread server: each path is its own client socket (its own
// 4-tuple), so the kernel's default reuseport hash would hand the paths of one channel to
// different lanes, which do not know the connection and drop its datagrams. Steered by
// connection id, every datagram reaches the owning lane: nothing is dropped as unknown, and
// the channels are spread over several lanes.
TEST_F(UdpLanes, EveryPathOfAMultipathChannelReachesTheLaneThatOwnsIt) {
  constexpr int kChannels = 8;
  Server server;
  ASSERT_NO_FATAL_FAILURE(listen_laned(4, &server));
  auto* server_endpoint = &server.endpoint;
  auto* server_lanes = server.lanes;
  const std::string* address = &server.address;
  auto client_endpoint = udp::make_endpoint(laned(3));
  ASSERT_TRUE(client_endpoint) << client_endpoint.error().message;
  ChannelOptions options = fast_options();
  options.paths.resize(2);
  for (auto& path : options.paths) path.remote = *address;
  options.paths[1].local = "127.0.0.1:0";
  std::vector<std::unique_ptr<Channel>> clients, servers;
  for (int i = 0; i < kChannels; ++i) {
    auto channel = (*client_endpoint)->connect(*address, options, kConnectNs);
    ASSERT_TRUE(channel) << channel.error().message;
    clients.push_back(std::move(*channel));
    auto accepted = (*server_endpoint)->accept(kConnectNs);
    ASSERT_TRUE(accepted) << accepted.error().message;
    servers.push_back(std::move(*accepted));
  }
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < kChannels; ++i) {
      // 300 KB: about 200 segments, striped over both paths.
      ASSERT_NO_FATAL_FAILURE(
          expect_transfer(*clients[i], *servers[i], random_bytes(300'000, round * 100 + i)));
      ASSERT_NO_FATAL_FAILURE(
          expect_transfer(*servers[i], *clients[i], random_bytes(1'000 + i, round * 100 + i)));
    }
  }
  size_t lanes_used = 0;
  for (size_t lane = 0; lane < server_lanes->lane_count(); ++lane) {
    const auto counters = server_lanes->lane_counters(lane);
    EXPECT_EQ(counters.dropped_unknown_connection, 0u) << "lane " << lane;
    if (counters.connections_accepted > 0) ++lanes_used;
  }
  const auto total = server_lanes->counters();
  EXPECT_EQ(total.connections_accepted, static_cast<uint64_t>(kChannels));
  EXPECT_EQ(total.dropped_unknown_connection, 0u);
  // Random ids: all 8 on one lane of 4 has odds 4^-7.
  EXPECT_GE(lanes_used, 2u);
  // Not asserted: the channels' paths_failed. A path's datagrams sent to the wrong lane are
  // counted above (dropped_unknown_connection); a path declared failed without that is the
  // liveness timer (3 RTT + 10 ms of silence while the other path answers) seeing a scheduling
  // stall, which a loaded 2-CPU machine under ThreadSanitizer gives (CI, 2026-12-04: 1 of 8
  // channels, nothing dropped, every byte delivered). That is the transport working as
  // designed, and not what this test is about.
}

}  // namespace
}  // namespace detwan::transport

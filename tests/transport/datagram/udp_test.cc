// Channels over the udp backend on 127.0.0.1 (port 0) end to end: every message size, a two-path
// channel, garbage sprayed at the listen socket, and (printed, never asserted) the latency of a
// ping-pong through a channel next to a plain UDP ping-pong.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "tests/transport/security_util.h"
#include "tests/transport/datagram/channel_test_util.h"
#include "transport/datagram/driver.h"
#include "transport/udp/endpoint.h"
#include "transport/udp/socket.h"

namespace detwan::transport {
namespace {

using testing::connect_pair;
using testing::expect_transfer;
using testing::get;
using testing::random_bytes;

ChannelOptions fast_options() {
  ChannelOptions options;
  options.initial_rtt_ns = 5'000'000;
  options.min_rto_ns = 5'000'000;
  return options;
}

EndpointOptions server_options() {
  EndpointOptions options;
  options.security = testing::test_security();
  options.accept_options = fast_options();
  return options;
}

class UdpChannel : public ::testing::Test {
 protected:
  void SetUp() override {
    const BackendInfo info = udp::backend_info();
    if (!info.usable) GTEST_SKIP() << "udp backend unusable: " << info.reason;
  }
};

TEST_F(UdpChannel, EchoesEmptyOneByteOddAndEightMebibyteMessages) {
  auto pair = connect_pair(udp::make_endpoint, "127.0.0.1:0", server_options(),
                           testing::keyed_options(), fast_options());
  ASSERT_TRUE(pair.client && pair.server);
  EXPECT_EQ(pair.address.rfind("127.0.0.1:", 0), 0u);
  EXPECT_NE(pair.address, "127.0.0.1:0");
  for (size_t size : {size_t{0}, size_t{1}, size_t{12'345}, size_t{8} << 20}) {
    const auto message = random_bytes(size, size + 1);
    expect_transfer(*pair.client, *pair.server, message);
    expect_transfer(*pair.server, *pair.client, message);
  }
}

TEST_F(UdpChannel, TwoPathChannelOverTwoClientSocketsDeliversByteExact) {
  ChannelOptions options = fast_options();
  auto pair_server = udp::make_endpoint(server_options());
  ASSERT_TRUE(pair_server);
  auto address = (*pair_server)->listen("127.0.0.1:0");
  ASSERT_TRUE(address);
  options.paths.resize(2);
  options.paths[0].remote = *address;
  options.paths[1].remote = *address;
  options.paths[1].local = "127.0.0.1:0";
  auto client_endpoint = udp::make_endpoint(testing::keyed_options());
  ASSERT_TRUE(client_endpoint);
  auto client = (*client_endpoint)->connect(*address, options, 10'000'000'000);
  ASSERT_TRUE(client) << client.error().message;
  auto server = (*pair_server)->accept(10'000'000'000);
  ASSERT_TRUE(server) << server.error().message;
  EXPECT_NE((*client)->describe().find("2 paths"), std::string::npos);
  for (int i = 0; i < 20; ++i) expect_transfer(**client, **server, random_bytes(100 * i, i));
  expect_transfer(**client, **server, random_bytes(2 << 20, 99));
  expect_transfer(**server, **client, random_bytes(1 << 20, 98));
}

TEST_F(UdpChannel, GarbageAtTheListenSocketIsCountedAndHarmless) {
  constexpr int kGarbage = 500;
  auto server_endpoint = udp::make_endpoint(server_options());
  ASSERT_TRUE(server_endpoint);
  auto address = (*server_endpoint)->listen("127.0.0.1:0");
  ASSERT_TRUE(address);
  auto target = udp::parse_address(*address);
  ASSERT_TRUE(target);
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  std::mt19937_64 random(7);
  for (int i = 0; i < kGarbage; ++i) {
    std::vector<std::byte> bytes =
        random_bytes(std::uniform_int_distribution<size_t>(0, 1400)(random), random());
    ASSERT_GE(::sendto(fd, bytes.data(), bytes.size(), 0,
                       reinterpret_cast<const sockaddr*>(&target->storage), target->length),
              0);
  }
  ::close(fd);
  // The socket is FIFO: by the time a channel opened after the spray has carried a round trip,
  // the garbage has been read and counted.
  auto client_endpoint = udp::make_endpoint(testing::keyed_options());
  ASSERT_TRUE(client_endpoint);
  auto client = (*client_endpoint)->connect(*address, fast_options(), 10'000'000'000);
  ASSERT_TRUE(client) << client.error().message;
  auto server = (*server_endpoint)->accept(10'000'000'000);
  ASSERT_TRUE(server);
  expect_transfer(**client, **server, random_bytes(5000, 1));
  expect_transfer(**server, **client, random_bytes(5000, 2));
  auto* base = dynamic_cast<datagram::DatagramEndpointBase*>(server_endpoint->get());
  ASSERT_NE(base, nullptr);
  const datagram::DriverCounters counters = base->counters();
  EXPECT_EQ(counters.dropped_not_transport + counters.dropped_unknown_connection, kGarbage);
  EXPECT_EQ(counters.connections_accepted, 1u);
}

TEST_F(UdpChannel, StrictConfigAndMtuLimit) {
  EndpointOptions options;
  options.security = testing::test_security();
  options.backend_config = "loss=0.1";
  auto endpoint = udp::make_endpoint(options);
  ASSERT_FALSE(endpoint);
  EXPECT_EQ(endpoint.error().code, ErrorCode::kInvalidArgument);
  for (const char* bad :
       {"busy_poll_us=", "busy_poll_us=-1", "busy_poll_us=10us", "busy_poll_us=2000000",
        "busy_poll_us=5,loss=0.1", "gso=2", "gro=on", "gso", "gso=1,,gro=1", "busy_poll_us=Auto"}) {
    options.backend_config = bad;
    auto rejected = udp::make_endpoint(options);
    ASSERT_FALSE(rejected) << bad;
    EXPECT_EQ(rejected.error().code, ErrorCode::kInvalidArgument) << bad;
    EXPECT_NE(rejected.error().message.find(bad), std::string::npos) << bad;
  }
  options.backend_config = "busy_poll_us=0";
  EXPECT_TRUE(udp::make_endpoint(options));
  options.backend_config = "gso=0,gro=0,busy_poll_us=10";
  EXPECT_TRUE(udp::make_endpoint(options));
  auto plain = udp::make_endpoint(testing::keyed_options());
  ASSERT_TRUE(plain);
  ChannelOptions jumbo;
  jumbo.mtu_bytes = 20'000;
  auto channel = (*plain)->connect("127.0.0.1:9", jumbo, 1'000'000'000);
  ASSERT_FALSE(channel);
  EXPECT_EQ(channel.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(channel.error().message.find("mtu_bytes"), std::string::npos);
}

// Busy polling (backend_config "busy_poll_us=N") changes only how the progress thread waits:
// messages of every size still arrive byte-exact both ways, and the spin does find completions.
// The same with adaptive busy polling ("busy_poll_us=auto") and without GSO and GRO.
TEST_F(UdpChannel, BusyPollingEndpointsDeliverByteExact) {
  for (const char* config : {"busy_poll_us=200", "busy_poll_us=auto,gso=0,gro=0"}) {
    SCOPED_TRACE(config);
    EndpointOptions server = server_options();
    server.backend_config = config;
    EndpointOptions client;
    client.security = testing::test_security();
    client.backend_config = config;
    auto pair = connect_pair(udp::make_endpoint, "127.0.0.1:0", server, client, fast_options());
    ASSERT_TRUE(pair.client && pair.server);
    for (size_t size : {size_t{0}, size_t{64}, size_t{9000}, size_t{1} << 20}) {
      const auto message = random_bytes(size, size + 11);
      expect_transfer(*pair.client, *pair.server, message);
      expect_transfer(*pair.server, *pair.client, message);
    }
    EXPECT_GE(pair.client->stats().messages_received, 4u);
  }
}

// Prints (never asserts: shared noisy machine) the median round trip of 64-byte messages through
// a channel and through two plain blocking UDP sockets.
TEST_F(UdpChannel, PingPongLatencyIsReported) {
  constexpr int kRounds = 300;
  auto pair = connect_pair(udp::make_endpoint, "127.0.0.1:0", server_options(),
                           testing::keyed_options(), fast_options());
  ASSERT_TRUE(pair.client && pair.server);
  const common::MonotonicClock clock;
  const auto message = random_bytes(64, 5);
  // The server echoes from its completion callbacks (on its progress thread); the client times
  // message-to-message, as a plain UDP ping-pong does (send completions are collected after).
  std::function<void(Result<std::vector<std::byte>>)> echo_one;
  Channel* server = pair.server.get();
  echo_one = [&, server](Result<std::vector<std::byte>> got) {
    if (!got) return;
    auto owned = std::make_shared<std::vector<std::byte>>(std::move(*got));
    server->send_async(*owned, [owned](Result<void>) {});
    server->recv_async(echo_one);
  };
  pair.server->recv_async(echo_one);
  std::vector<int64_t> channel_ns;
  std::vector<std::future<Result<void>>> sends;
  for (int i = 0; i < kRounds; ++i) {
    const int64_t start = clock.now_ns();
    auto pong = testing::recv(*pair.client);
    sends.push_back(testing::send(*pair.client, message));
    Result<std::vector<std::byte>> got = get(pong);
    channel_ns.push_back(clock.now_ns() - start);
    ASSERT_TRUE(got) << got.error().message;
    ASSERT_TRUE(*got == message);
  }
  for (auto& sent : sends) ASSERT_TRUE(get(sent));
  pair.client.reset();  // closes; the server's pending recv fails and the echo chain ends
  // Plain UDP: an echo thread on a blocking socket.
  const int server_fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  const int client_fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(server_fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  socklen_t length = sizeof address;
  ASSERT_EQ(::getsockname(server_fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  std::thread echo([&] {
    char buffer[64];
    sockaddr_storage from{};
    for (int i = 0; i < kRounds; ++i) {
      socklen_t from_length = sizeof from;
      const ssize_t n = ::recvfrom(server_fd, buffer, sizeof buffer, 0,
                                   reinterpret_cast<sockaddr*>(&from), &from_length);
      if (n < 0) return;
      (void)::sendto(server_fd, buffer, static_cast<size_t>(n), 0,
                     reinterpret_cast<sockaddr*>(&from), from_length);
    }
  });
  std::vector<int64_t> udp_ns;
  char buffer[64] = {};
  for (int i = 0; i < kRounds; ++i) {
    const int64_t start = clock.now_ns();
    ASSERT_EQ(::sendto(client_fd, buffer, sizeof buffer, 0, reinterpret_cast<sockaddr*>(&address),
                       sizeof address),
              64);
    ASSERT_EQ(::recv(client_fd, buffer, sizeof buffer, 0), 64);
    udp_ns.push_back(clock.now_ns() - start);
  }
  echo.join();
  ::close(server_fd);
  ::close(client_fd);
  std::sort(channel_ns.begin(), channel_ns.end());
  std::sort(udp_ns.begin(), udp_ns.end());
  const int64_t channel_median = channel_ns[kRounds / 2];
  const int64_t udp_median = udp_ns[kRounds / 2];
  RecordProperty("channel_round_trip_median_ns", std::to_string(channel_median));
  RecordProperty("udp_round_trip_median_ns", std::to_string(udp_median));
  std::printf("ping-pong median: channel %lld ns, plain UDP %lld ns\n",
              static_cast<long long>(channel_median), static_cast<long long>(udp_median));
  EXPECT_GT(channel_median, 0);
}

}  // namespace
}  // namespace detwan::transport

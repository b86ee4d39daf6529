// tcp-specific behaviour beyond the common suite (tests/transport/backends): hostile or broken
// peers (raw sockets speaking garbage), limits, socket options, back-pressure, graceful close.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <future>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "common/byte_order.h"
#include "transport/tcp/endpoint.h"
#include "transport/tcp/socket_options.h"
#include "transport/tcp/tcp_endpoint.h"
#include "transport/tcp/wire.h"

namespace detwan::transport::tcp {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

constexpr auto kHangGuard = std::chrono::seconds(30);
constexpr int64_t kTimeoutNs = 10'000'000'000;

template <typename T>
T await(std::future<T> future) {
  if (future.wait_for(kHangGuard) != std::future_status::ready) {
    ADD_FAILURE() << "no completion within the 30 s hang guard";
    std::abort();  // the pending callback still references this test's state
  }
  return future.get();
}

tcp::endpoint parse(const std::string& address) {
  const size_t colon = address.rfind(':');
  return {asio::ip::make_address(address.substr(0, colon)),
          static_cast<unsigned short>(std::stoi(address.substr(colon + 1)))};
}

// A raw client of a TcpEndpoint, speaking the wire format by hand.
struct RawPeer {
  asio::io_context io;
  tcp::socket socket{io};

  void connect(const std::string& address) { socket.connect(parse(address)); }
  void send_hello(uint64_t max_message_bytes = 1 << 20) {
    std::array<std::byte, kHelloBytes> hello{};
    encode_hello(Hello{kProtocolVersion, max_message_bytes}, hello);
    asio::write(socket, asio::buffer(hello));
  }
  void read_hello() {
    std::array<std::byte, kHelloBytes> hello{};
    asio::read(socket, asio::buffer(hello));
  }
  // Reads until the other side closes; true if it did (EOF or reset).
  bool wait_closed() {
    std::array<char, 256> sink{};
    boost::system::error_code ec;
    while (!ec) socket.read_some(asio::buffer(sink), ec);
    return ec == asio::error::eof || ec == asio::error::connection_reset;
  }
};

// These tests speak the plain protocol's framing with raw peers: Security::none(), by name
// (sealed_test.cc tests authenticated channels).
EndpointOptions plain_options() {
  EndpointOptions options;
  options.security = Security::none();
  return options;
}

std::unique_ptr<TcpEndpoint> make_tcp(const EndpointOptions& options = plain_options()) {
  return std::make_unique<TcpEndpoint>(options);
}

// A server endpoint listening on 127.0.0.1:0, a client endpoint, and the channel each holds.
struct ConnectedPair {
  std::unique_ptr<Endpoint> server;
  std::unique_ptr<Endpoint> client;
  Result<std::unique_ptr<Channel>> to_server;
  Result<std::unique_ptr<Channel>> at_server;
};

ConnectedPair connected_pair() {
  ConnectedPair pair{make_tcp(), make_tcp(), common::make_error(ErrorCode::kInternal, "unset"),
                     common::make_error(ErrorCode::kInternal, "unset")};
  auto address = pair.server->listen("127.0.0.1:0");
  if (!address) {
    pair.to_server = std::unexpected(address.error());
    return pair;
  }
  pair.to_server = pair.client->connect(*address, ChannelOptions{}, kTimeoutNs);
  pair.at_server = pair.server->accept(kTimeoutNs);
  return pair;
}

TEST(TcpEndpointTest, BackendIsUsableAndRejectsConfig) {
  EXPECT_TRUE(backend_info().usable);
  EndpointOptions options = plain_options();
  options.backend_config = "loss=0.1";
  auto endpoint = make_endpoint(options);
  ASSERT_FALSE(endpoint);
  EXPECT_NE(endpoint.error().message.find("loss=0.1"), std::string::npos);
}

TEST(TcpEndpointTest, ListenValidatesAddressAndRefusesASecondListen) {
  auto endpoint = make_tcp();
  auto bad = endpoint->listen("127.0.0.1:http");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.error().message.find("'http'"), std::string::npos) << bad.error().message;
  EXPECT_FALSE(endpoint->listen("no-port"));
  auto accepted = endpoint->accept(1'000'000);
  ASSERT_FALSE(accepted);  // accept before listen
  auto address = endpoint->listen("127.0.0.1:0");
  ASSERT_TRUE(address) << address.error().describe();
  EXPECT_EQ(address->rfind("127.0.0.1:", 0), 0u);
  EXPECT_NE(*address, "127.0.0.1:0");
  auto again = endpoint->listen("127.0.0.1:0");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kAlreadyExists);
}

TEST(TcpEndpointTest, AcceptTimesOutWithoutPeers) {
  auto endpoint = make_tcp();
  ASSERT_TRUE(endpoint->listen("127.0.0.1:0"));
  auto accepted = endpoint->accept(1'000'000);
  ASSERT_FALSE(accepted);
  EXPECT_EQ(accepted.error().code, ErrorCode::kTimeout);
}

TEST(TcpEndpointTest, ServerDropsAndCountsPeerWithBadMagic) {
  auto endpoint = make_tcp();
  auto address = endpoint->listen("127.0.0.1:0");
  ASSERT_TRUE(address);
  RawPeer raw;
  raw.connect(*address);
  asio::write(raw.socket, asio::buffer("GET / HTTP/1.1\r\n", kHelloBytes));
  ASSERT_TRUE(raw.wait_closed());
  EXPECT_EQ(endpoint->handshakes_rejected(), 1u);
  EXPECT_NE(endpoint->last_handshake_error().find("bad hello magic 'GET '"), std::string::npos)
      << endpoint->last_handshake_error();
  // The bad peer never reaches accept(); a good one still does.
  auto client = make_tcp();
  auto channel = client->connect(*address, ChannelOptions{}, kTimeoutNs);
  ASSERT_TRUE(channel) << channel.error().describe();
  auto accepted = endpoint->accept(kTimeoutNs);
  ASSERT_TRUE(accepted) << accepted.error().describe();
}

TEST(TcpEndpointTest, ClientRejectsServerWithBadMagic) {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const std::string address = "127.0.0.1:" + std::to_string(acceptor.local_endpoint().port());
  auto server = std::async(std::launch::async, [&] {
    tcp::socket socket = acceptor.accept();
    asio::write(socket, asio::buffer("SSH-2.0-OpenSSH_", kHelloBytes));
    std::array<char, 64> sink{};
    boost::system::error_code ec;
    while (!ec) socket.read_some(asio::buffer(sink), ec);
  });
  auto endpoint = make_tcp();
  auto channel = endpoint->connect(address, ChannelOptions{}, kTimeoutNs);
  ASSERT_FALSE(channel);
  EXPECT_EQ(channel.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(channel.error().message.find("bad hello magic 'SSH-'"), std::string::npos)
      << channel.error().message;
  EXPECT_EQ(endpoint->handshakes_rejected(), 1u);
  server.get();  // returns once the endpoint dropped the connection
}

TEST(TcpEndpointTest, ConnectRefusedIsUnavailable) {
  std::string vacant;
  {
    auto gone = make_tcp();
    auto address = gone->listen("127.0.0.1:0");
    ASSERT_TRUE(address);
    vacant = *address;
  }
  auto endpoint = make_tcp();
  auto channel = endpoint->connect(vacant, ChannelOptions{}, kTimeoutNs);
  ASSERT_FALSE(channel);
  EXPECT_EQ(channel.error().code, ErrorCode::kUnavailable) << channel.error().describe();
  EXPECT_NE(channel.error().message.find(vacant), std::string::npos);
}

TEST(TcpEndpointTest, OversizeFrameFailsChannelNamingTheSize) {
  EndpointOptions options = plain_options();
  options.accept_options.max_message_bytes = 1 << 20;
  auto endpoint = make_tcp(options);
  auto address = endpoint->listen("127.0.0.1:0");
  ASSERT_TRUE(address);
  RawPeer raw;
  raw.connect(*address);
  raw.send_hello();
  raw.read_hello();
  auto channel = endpoint->accept(kTimeoutNs);
  ASSERT_TRUE(channel) << channel.error().describe();
  auto pending = (*channel)->recv();
  std::array<std::byte, kFrameHeaderBytes> header{};
  common::store_be64(header.data(), uint64_t{1} << 40);
  asio::write(raw.socket, asio::buffer(header));
  auto result = await(std::move(pending));
  ASSERT_FALSE(result);
  EXPECT_NE(result.error().message.find("1099511627776 bytes"), std::string::npos)
      << result.error().message;
  EXPECT_NE(result.error().message.find("1048576"), std::string::npos);
  EXPECT_EQ((*channel)->stats().dropped_malformed, 1u);
  EXPECT_TRUE(raw.wait_closed());
}

TEST(TcpEndpointTest, PeerResetIsUnavailable) {
  auto endpoint = make_tcp();
  auto address = endpoint->listen("127.0.0.1:0");
  ASSERT_TRUE(address);
  RawPeer raw;
  raw.connect(*address);
  raw.send_hello();
  raw.read_hello();
  auto channel = endpoint->accept(kTimeoutNs);
  ASSERT_TRUE(channel);
  auto pending = (*channel)->recv();
  raw.socket.set_option(asio::socket_base::linger(true, 0));  // close() sends RST
  raw.socket.close();
  auto result = await(std::move(pending));
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kUnavailable) << result.error().describe();
}

TEST(TcpEndpointTest, SendAbovePeerLimitIsRejectedAndChannelSurvives) {
  EndpointOptions options = plain_options();
  options.accept_options.max_message_bytes = 1000;
  auto server = make_tcp(options);
  auto address = server->listen("127.0.0.1:0");
  ASSERT_TRUE(address);
  auto client = make_tcp();
  auto to_server = client->connect(*address, ChannelOptions{}, kTimeoutNs);
  ASSERT_TRUE(to_server);
  auto at_server = server->accept(kTimeoutNs);
  ASSERT_TRUE(at_server);
  std::vector<std::byte> big(1001), fits(1000, std::byte{7});
  auto rejected = await((*to_server)->send(big));
  ASSERT_FALSE(rejected);
  EXPECT_EQ(rejected.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(rejected.error().message.find("1001 bytes"), std::string::npos);
  auto sent = (*to_server)->send(fits);
  auto received = await((*at_server)->recv());
  ASSERT_TRUE(received) << received.error().describe();
  EXPECT_EQ(*received, fits);
  EXPECT_TRUE(await(std::move(sent)));
}

TEST(TcpEndpointTest, SlowReaderBackPressureLosesNothing) {
  EndpointOptions options = plain_options();
  options.accept_options.recv_window_bytes = 1000;  // reading pauses after ~2 messages
  auto server = make_tcp(options);
  auto address = server->listen("127.0.0.1:0");
  ASSERT_TRUE(address);
  auto client = make_tcp();
  auto to_server = client->connect(*address, ChannelOptions{}, kTimeoutNs);
  ASSERT_TRUE(to_server);
  auto at_server = server->accept(kTimeoutNs);
  ASSERT_TRUE(at_server);
  std::vector<std::vector<std::byte>> messages;
  for (int i = 0; i < 50; ++i) messages.emplace_back(600 + i, static_cast<std::byte>(i));
  std::vector<std::future<Result<void>>> sends;
  for (const auto& message : messages) sends.push_back((*to_server)->send(message));
  for (auto& sent : sends) ASSERT_TRUE(await(std::move(sent)));  // all written, none asked for
  for (const auto& message : messages) {
    auto received = await((*at_server)->recv());
    ASSERT_TRUE(received) << received.error().describe();
    ASSERT_EQ(*received, message);
  }
}

TEST(TcpEndpointTest, MessagesSentBeforeGracefulCloseAreDelivered) {
  auto [server, client, to_server, at_server] = connected_pair();
  ASSERT_TRUE(to_server) << to_server.error().describe();
  ASSERT_TRUE(at_server) << at_server.error().describe();
  const std::vector<std::byte> a(10, std::byte{1}), b(20, std::byte{2});
  ASSERT_TRUE(await((*to_server)->send(a)));
  ASSERT_TRUE(await((*to_server)->send(b)));
  (*to_server)->close();
  auto got_a = await((*at_server)->recv());
  auto got_b = await((*at_server)->recv());
  ASSERT_TRUE(got_a && got_b);
  EXPECT_EQ(*got_a, a);
  EXPECT_EQ(*got_b, b);
  auto after = await((*at_server)->recv());
  ASSERT_FALSE(after);
  EXPECT_EQ(after.error().code, ErrorCode::kUnavailable);
}

TEST(TcpEndpointTest, ChannelOutlivesItsEndpoint) {
  auto [server, client, to_server, at_server] = connected_pair();
  ASSERT_TRUE(to_server) << to_server.error().describe();
  ASSERT_TRUE(at_server) << at_server.error().describe();
  client.reset();
  server.reset();
  const std::vector<std::byte> message(100, std::byte{9});
  auto sent = (*to_server)->send(message);
  auto received = await((*at_server)->recv());
  ASSERT_TRUE(received);
  EXPECT_EQ(*received, message);
  EXPECT_TRUE(await(std::move(sent)));
}

int get_int(int fd, int level, int name) {
  int value = -1;
  socklen_t size = sizeof(value);
  EXPECT_EQ(::getsockopt(fd, level, name, &value, &size), 0);
  return value;
}

TEST(TcpSocketOptionsTest, AppliesTimeoutKeepaliveAndNodelay) {
  asio::io_context io;
  tcp::socket socket(io);
  socket.open(tcp::v4());
  ChannelOptions options;
  options.peer_timeout_ns = 3'000'000'000;
  options.keepalive_interval_ns = 1'500'000'000;
  auto applied = apply_socket_options(socket, options);
  ASSERT_TRUE(applied) << applied.error().describe();
  const int fd = socket.native_handle();
  EXPECT_EQ(get_int(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), 3000);
  EXPECT_EQ(get_int(fd, IPPROTO_TCP, TCP_KEEPIDLE), 2);  // rounded up to whole seconds
  EXPECT_EQ(get_int(fd, IPPROTO_TCP, TCP_KEEPINTVL), 2);
  EXPECT_GE(get_int(fd, IPPROTO_TCP, TCP_KEEPCNT), 1);
  EXPECT_EQ(get_int(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
  EXPECT_EQ(get_int(fd, IPPROTO_TCP, TCP_NODELAY), 1);
}

TEST(TcpSocketOptionsTest, RejectsNonPositiveTimeouts) {
  asio::io_context io;
  tcp::socket socket(io);
  socket.open(tcp::v4());
  ChannelOptions options;
  options.peer_timeout_ns = 0;
  auto applied = apply_socket_options(socket, options);
  ASSERT_FALSE(applied);
  EXPECT_EQ(applied.error().code, ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace detwan::transport::tcp

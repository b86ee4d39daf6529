// A hostile or broken peer: a raw client that performs the handshake (session.h) and then
// writes the shared memory itself, or a socket that sends a bad hello.
#include <algorithm>
#include <atomic>
#include <cstring>

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "tests/transport/shm/test_util.h"
#include "transport/shm/endpoint.h"
#include "transport/shm/ring.h"
#include "transport/shm/session.h"

namespace detwan::transport::shm {
namespace {

using testing::await;
using testing::kSetupTimeoutNs;
using testing::random_bytes;
using testing::recv_future;
using testing::send_future;


struct RawPeer {
  std::unique_ptr<Endpoint> server_endpoint;
  std::unique_ptr<Channel> server;
  Session raw;
  RingProducer to_server;
};

RawPeer make_raw_peer(uint64_t ring_bytes, ChannelOptions server_options = {}) {
  RawPeer peer;
  EndpointOptions options;
  options.accept_options = server_options;
  auto endpoint = make_endpoint(options);
  EXPECT_TRUE(endpoint);
  peer.server_endpoint = std::move(*endpoint);
  auto name = peer.server_endpoint->listen("");
  EXPECT_TRUE(name);
  auto raw = client_handshake(*name, ring_bytes, 1 << 20, kSetupTimeoutNs);
  EXPECT_TRUE(raw) << raw.error().describe();
  peer.raw = std::move(*raw);
  auto server = peer.server_endpoint->accept(kSetupTimeoutNs);
  EXPECT_TRUE(server) << server.error().describe();
  peer.server = std::move(*server);
  peer.to_server = RingProducer(&peer.raw.control()->rings[tx_ring(kClientSide)],
                                peer.raw.ring_data(tx_ring(kClientSide)), ring_bytes);
  return peer;
}

TEST(ShmHostilePeer, OversizeLengthFailsTheChannelNamingIt) {
  ChannelOptions server_options;
  server_options.max_message_bytes = 1 << 20;
  RawPeer peer = make_raw_peer(4096, server_options);
  auto pending = recv_future(*peer.server);
  const uint64_t length = (uint64_t{1} << 20) + 1;
  std::byte header[8];
  std::memcpy(header, &length, sizeof(length));
  uint64_t free_bytes = 0;
  ASSERT_EQ(peer.to_server.refresh(free_bytes), Status::kOk);
  ASSERT_EQ(peer.to_server.write(header), 8u);
  peer.to_server.publish();
  // The server may be asleep: ring its doorbell like a well-behaved peer would.
  const uint64_t one = 1;
  ASSERT_EQ(::write(peer.raw.peer_doorbell.get(), &one, sizeof(one)), 8);
  auto result = await(pending);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kIo);
  EXPECT_NE(result.error().message.find("1048577 bytes"), std::string::npos)
      << result.error().message;
  EXPECT_NE(result.error().message.find("max_message_bytes"), std::string::npos);
  EXPECT_EQ(peer.server->stats().dropped_malformed, 1u);
  // The channel stays failed with the same error.
  auto later = recv_future(*peer.server);
  auto later_result = await(later);
  ASSERT_FALSE(later_result);
  EXPECT_EQ(later_result.error().message, result.error().message);
}

TEST(ShmHostilePeer, CorruptRingIndexFailsTheChannel) {
  RawPeer peer = make_raw_peer(4096);
  auto pending = recv_future(*peer.server);
  std::atomic_ref(peer.raw.control()->rings[tx_ring(kClientSide)].head).store(4097);
  const uint64_t one = 1;
  ASSERT_EQ(::write(peer.raw.peer_doorbell.get(), &one, sizeof(one)), 8);
  auto result = await(pending);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kIo);
  EXPECT_NE(result.error().message.find("corrupted the receive ring"), std::string::npos)
      << result.error().message;
}

TEST(ShmHostilePeer, ValidFrameFromRawPeerIsDelivered) {
  RawPeer peer = make_raw_peer(64);  // the smallest ring: the frame wraps many times
  const auto message = random_bytes(1000, 5);
  auto pending = recv_future(*peer.server);
  std::vector<std::byte> frame(8 + message.size());
  const uint64_t length = message.size();
  std::memcpy(frame.data(), &length, 8);
  // std::copy, not memcpy: GCC 12 at -O1 cannot prove message.size() small and warns
  // (-Wstringop-overflow) about a bound it invents.
  std::copy(message.begin(), message.end(), frame.begin() + 8);
  size_t written = 0;
  const uint64_t one = 1;
  while (written < frame.size()) {  // a spinning writer: fine for a test peer
    uint64_t free_bytes = 0;
    ASSERT_EQ(peer.to_server.refresh(free_bytes), Status::kOk);
    written += peer.to_server.write(std::span(frame).subspan(written));
    peer.to_server.publish();
    ASSERT_EQ(::write(peer.raw.peer_doorbell.get(), &one, sizeof(one)), 8);
    std::this_thread::yield();
  }
  auto result = await(pending);
  ASSERT_TRUE(result) << result.error().describe();
  EXPECT_TRUE(*result == message);
}

// The raw peer neither reads nor beats its heartbeat: a send that does not fit in the ring
// fails with kTimeout after peer_timeout_ns (a short one, so the test stays quick).
TEST(ShmHostilePeer, SilentPeerTimesOut) {
  ChannelOptions server_options;
  server_options.peer_timeout_ns = 200'000'000;
  server_options.keepalive_interval_ns = 50'000'000;
  RawPeer peer = make_raw_peer(4096, server_options);
  const auto message = random_bytes(10'000, 6);
  auto sent = send_future(*peer.server, message);
  auto result = await(sent);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kTimeout);
  EXPECT_NE(result.error().message.find("no progress"), std::string::npos);
}

std::string abstract_name(const std::string& name) { return std::string("detwan-shm-") + name; }

TEST(ShmHostilePeer, BadHelloIsRejectedByAccept) {
  auto endpoint = make_endpoint({});
  ASSERT_TRUE(endpoint);
  auto name = (*endpoint)->listen("");
  ASSERT_TRUE(name);
  common::UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string path = abstract_name(*name);
  std::memcpy(address.sun_path + 1, path.data(), path.size());
  ASSERT_EQ(::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address),
                      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + path.size())),
            0);
  Hello hello{0x1234, kVersion, kHelloFdCount, 4096, 1000};
  ASSERT_EQ(::send(fd.get(), &hello, sizeof(hello), 0), static_cast<ssize_t>(sizeof(hello)));
  auto rejected = (*endpoint)->accept(kSetupTimeoutNs);
  ASSERT_FALSE(rejected);
  EXPECT_EQ(rejected.error().code, ErrorCode::kIo);
  EXPECT_NE(rejected.error().message.find("bad magic"), std::string::npos);

  // A correct magic without the fds.
  common::UniqueFd second(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  ASSERT_EQ(::connect(second.get(), reinterpret_cast<const sockaddr*>(&address),
                      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + path.size())),
            0);
  hello.magic = kMagic;
  ASSERT_EQ(::send(second.get(), &hello, sizeof(hello), 0), static_cast<ssize_t>(sizeof(hello)));
  auto no_fds = (*endpoint)->accept(kSetupTimeoutNs);
  ASSERT_FALSE(no_fds);
  EXPECT_NE(no_fds.error().message.find("expected 3 fds, got 0"), std::string::npos)
      << no_fds.error().message;
}

}  // namespace
}  // namespace detwan::transport::shm

// The udp backend's socket layer without the protocol: address parsing, the io_uring link's
// batched sends, receive ring, oversize datagrams, wakeups and socket teardown.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <map>
#include <vector>

#include "common/clock.h"
#include "transport/udp/link.h"
#include "transport/udp/socket.h"

namespace detwan::transport::udp {
namespace {

struct Datagram {
  SocketId socket = 0;
  UdpAddress source;
  std::vector<std::byte> bytes;
};

// Receives until `count` datagrams arrived or nothing came for `quiet_ns`.
std::vector<Datagram> receive(UdpLink& link, size_t count, int64_t quiet_ns = 2'000'000'000) {
  const common::MonotonicClock clock;
  std::vector<Datagram> out;
  while (out.size() < count) {
    const size_t before = out.size();
    const int64_t deadline_ns = clock.now_ns() + quiet_ns;
    while (out.size() == before && clock.now_ns() < deadline_ns) {
      link.receive(deadline_ns, [&](SocketId socket, const UdpAddress& source,
                                    std::span<const std::byte> bytes) {
        out.push_back(Datagram{socket, source, {bytes.begin(), bytes.end()}});
      });
    }
    if (out.size() == before) break;
  }
  return out;
}

common::Status send_bytes(UdpLink& link, SocketId socket, const UdpAddress& to,
                          const std::vector<std::byte>& bytes) {
  std::span<std::byte> buffer = link.tx_buffer();
  if (buffer.size() < bytes.size()) return common::Status::kBusy;
  if (!bytes.empty()) std::memcpy(buffer.data(), bytes.data(), bytes.size());
  return link.send(socket, to, bytes.size());
}

std::vector<std::byte> pattern(size_t size, uint8_t seed) {
  std::vector<std::byte> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>(seed + i * 13);
  return bytes;
}

TEST(UdpAddressTest, ParsesAndFormats) {
  auto v4 = parse_address("127.0.0.1:4000");
  ASSERT_TRUE(v4);
  EXPECT_EQ(format_address(*v4), "127.0.0.1:4000");
  auto v6 = parse_address("[::1]:5");
  ASSERT_TRUE(v6);
  EXPECT_TRUE(v6->ipv6());
  EXPECT_EQ(format_address(*v6), "[::1]:5");
  auto named = parse_address("localhost:80");
  ASSERT_TRUE(named) << named.error().message;
  EXPECT_TRUE(same_address(*parse_address("127.0.0.1:4000"), *v4));
  EXPECT_FALSE(same_address(*parse_address("127.0.0.1:4001"), *v4));
  for (const char* bad : {"127.0.0.1", "127.0.0.1:99999", ":5", "1.2.3.4:x", "[::1]5",
                          "no-such-host.invalid:5"}) {
    auto parsed = parse_address(bad);
    ASSERT_FALSE(parsed) << bad;
    EXPECT_EQ(parsed.error().code, common::ErrorCode::kInvalidArgument);
    EXPECT_NE(parsed.error().message.find(bad), std::string::npos) << parsed.error().message;
  }
}

class UdpLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = UdpLink::create();
    auto client = UdpLink::create();
    if (!server || !client) GTEST_SKIP() << "io_uring unavailable: " << server.error().message;
    server_ = std::move(*server);
    client_ = std::move(*client);
    auto listened = server_->open_listen("127.0.0.1:0");
    ASSERT_TRUE(listened) << listened.error().message;
    listen_socket_ = listened->first;
    listen_name_ = listened->second;
    PathSpec path;
    auto opened = client_->open_path(path, listen_name_);
    ASSERT_TRUE(opened) << opened.error().message;
    client_socket_ = opened->first;
    server_address_ = opened->second;
  }

  std::unique_ptr<UdpLink> server_;
  std::unique_ptr<UdpLink> client_;
  SocketId listen_socket_ = 0;
  SocketId client_socket_ = 0;
  std::string listen_name_;
  UdpAddress server_address_;
};

TEST_F(UdpLinkTest, RoundTripOfEverySizeAnsweredToTheSource) {
  EXPECT_NE(listen_name_, "127.0.0.1:0");  // the port actually bound
  for (size_t size : {size_t{0}, size_t{1}, size_t{1471}, UdpLink::kMaxDatagramBytes}) {
    const std::vector<std::byte> bytes = pattern(size, 3);
    ASSERT_EQ(send_bytes(*client_, client_socket_, server_address_, bytes), common::Status::kOk);
    client_->flush();
    std::vector<Datagram> got = receive(*server_, 1);
    ASSERT_EQ(got.size(), 1u) << size;
    EXPECT_EQ(got[0].socket, listen_socket_);
    EXPECT_EQ(got[0].bytes, bytes);
    EXPECT_EQ(format_address(got[0].source), client_->local_name(client_socket_).replace(0, 7, "127.0.0.1"));
    // Answer to where it came from.
    ASSERT_EQ(send_bytes(*server_, listen_socket_, got[0].source, bytes), common::Status::kOk);
    server_->flush();
    std::vector<Datagram> back = receive(*client_, 1);
    ASSERT_EQ(back.size(), 1u);
    EXPECT_EQ(back[0].bytes, bytes);
    EXPECT_TRUE(same_address(back[0].source, server_address_));
  }
}

TEST_F(UdpLinkTest, BatchOfManyDatagramsArrivesComplete) {
  constexpr uint32_t kCount = 400;  // more than one receive ring and more than one SQ batch
  uint32_t sent = 0;
  std::map<uint32_t, int> seen;
  while (sent < kCount) {
    std::vector<std::byte> bytes = pattern(100, 0);
    std::memcpy(bytes.data(), &sent, sizeof sent);
    if (send_bytes(*client_, client_socket_, server_address_, bytes) != common::Status::kOk) {
      client_->flush();  // busy: let completions return buffers
      client_->receive(0, [](SocketId, const UdpAddress&, std::span<const std::byte>) {});
      continue;
    }
    ++sent;
    if (sent % 50 == 0) {
      client_->flush();
      // Drain as we go so the kernel's socket buffer never overflows.
      for (const Datagram& datagram : receive(*server_, 50, 200'000'000)) {
        uint32_t index = 0;
        std::memcpy(&index, datagram.bytes.data(), sizeof index);
        ++seen[index];
      }
    }
  }
  EXPECT_EQ(seen.size(), kCount);  // UDP on 127.0.0.1 with drained buffers loses nothing
  EXPECT_EQ(client_->counters().sent, kCount);
  EXPECT_EQ(client_->counters().send_errors, 0u);
}

TEST_F(UdpLinkTest, OversizeDatagramIsCountedNotDelivered) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  std::vector<char> big(UdpLink::kMaxDatagramBytes + 1000, 'x');
  ASSERT_EQ(::sendto(fd, big.data(), big.size(), 0,
                     reinterpret_cast<const sockaddr*>(&server_address_.storage),
                     server_address_.length),
            static_cast<ssize_t>(big.size()));
  const char small = 's';
  ASSERT_EQ(::sendto(fd, &small, 1, 0, reinterpret_cast<const sockaddr*>(&server_address_.storage),
                     server_address_.length),
            1);
  ::close(fd);
  std::vector<Datagram> got = receive(*server_, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].bytes.size(), 1u);
  EXPECT_EQ(server_->counters().dropped_truncated, 1u);
}

TEST_F(UdpLinkTest, WakeEndsAnEndlessWait) {
  server_->wake();
  bool called = false;
  server_->receive(INT64_MAX, [&](SocketId, const UdpAddress&, std::span<const std::byte>) {
    called = true;
  });
  EXPECT_FALSE(called);
}

TEST_F(UdpLinkTest, ClosedSocketRefusesSendsAndTearsDownCleanly) {
  client_->close_socket(client_socket_);
  const std::vector<std::byte> bytes = pattern(10, 1);
  EXPECT_EQ(send_bytes(*client_, client_socket_, server_address_, bytes), common::Status::kDropped);
  EXPECT_EQ(client_->counters().dropped_closed, 1u);
  // The cancelled receives complete; the link frees the socket when they have.
  const common::MonotonicClock clock;
  const int64_t give_up_ns = clock.now_ns() + 2'000'000'000;
  while (client_->local_name(client_socket_) != "?" && clock.now_ns() < give_up_ns) {
    client_->receive(clock.now_ns() + 100'000'000,
                     [](SocketId, const UdpAddress&, std::span<const std::byte>) {});
  }
  EXPECT_EQ(client_->local_name(client_socket_), "?");
}

}  // namespace
}  // namespace detwan::transport::udp

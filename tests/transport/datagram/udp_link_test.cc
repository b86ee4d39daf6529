// The udp backend's socket layer without the protocol: address parsing, the io_uring link's
// batched sends, UDP GSO and GRO (and the fallback when a route cannot segment), receive ring,
// oversize datagrams, wakeups and socket teardown.
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/unique_fd.h"
#include "tests/common/private_netns.h"
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

// A run of equal-size datagrams and a shorter last one, sent without a flush in between, leaves
// as one sendmsg (UDP GSO); on loopback the kernel hands the receiver's GRO socket one buffer,
// which the link splits again: every datagram arrives intact, in order, as its own datagram.
TEST_F(UdpLinkTest, GsoRunLeavesInOneSendAndArrivesAsSeparateDatagrams) {
  constexpr uint32_t kFull = 40;
  std::vector<std::vector<std::byte>> sent;
  for (uint32_t i = 0; i <= kFull; ++i) {
    sent.push_back(pattern(i < kFull ? 1400 : 300, static_cast<uint8_t>(i)));
    ASSERT_EQ(send_bytes(*client_, client_socket_, server_address_, sent.back()),
              common::Status::kOk);
  }
  client_->flush();
  std::vector<Datagram> got = receive(*server_, sent.size());
  ASSERT_EQ(got.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) EXPECT_EQ(got[i].bytes, sent[i]) << "datagram " << i;
  EXPECT_EQ(client_->counters().sent, sent.size());
  EXPECT_EQ(client_->counters().send_errors, 0u);
  if (!client_->socket_gso(client_socket_)) GTEST_SKIP() << "the kernel has no UDP_SEGMENT";
  EXPECT_EQ(client_->counters().gso_sends, 1u);  // 40 x 1,400 + 300 bytes fit one batch
  EXPECT_EQ(client_->counters().gso_datagrams, sent.size());
  if (server_->socket_gro(listen_socket_)) {
    EXPECT_EQ(server_->counters().gro_datagrams, sent.size());
    EXPECT_EQ(server_->counters().received, sent.size());
  }
}

// A batch ends where the destination or the size changes, and at kMaxGsoBytes: each datagram
// still reaches its own destination, in the order sent.
TEST_F(UdpLinkTest, GsoBatchesEndAtEveryChangeOfDestinationOrSize) {
  auto second = server_->open_listen("127.0.0.1:0");
  ASSERT_TRUE(second) << second.error().message;
  auto second_address = parse_address(second->second);
  ASSERT_TRUE(second_address);
  // destination (0: first, 1: second), size
  const std::vector<std::pair<int, size_t>> plan = {{0, 1000}, {0, 1000}, {1, 1000}, {0, 500},
                                                    {0, 1000}, {0, 1000}, {0, 1200}};
  std::map<SocketId, std::vector<std::vector<std::byte>>> expected;
  for (size_t i = 0; i < plan.size(); ++i) {
    const auto [to, size] = plan[i];
    const std::vector<std::byte> bytes = pattern(size, static_cast<uint8_t>(i));
    ASSERT_EQ(
        send_bytes(*client_, client_socket_, to == 0 ? server_address_ : *second_address, bytes),
        common::Status::kOk);
    expected[to == 0 ? listen_socket_ : second->first].push_back(bytes);
  }
  // Then more than one batch's worth of 9,000-byte datagrams: 7 per batch (63,000 bytes).
  for (int i = 0; i < 10; ++i) {
    const std::vector<std::byte> bytes = pattern(9000, static_cast<uint8_t>(100 + i));
    ASSERT_EQ(send_bytes(*client_, client_socket_, server_address_, bytes), common::Status::kOk);
    expected[listen_socket_].push_back(bytes);
  }
  client_->flush();
  std::map<SocketId, std::vector<std::vector<std::byte>>> got;
  for (const Datagram& datagram : receive(*server_, plan.size() + 10)) {
    got[datagram.socket].push_back(datagram.bytes);
  }
  EXPECT_EQ(got, expected);
  if (!client_->socket_gso(client_socket_)) GTEST_SKIP() << "the kernel has no UDP_SEGMENT";
  // Sends: [1000 1000] [1000 to the second] [500] [1000 1000] [1200] [9000 x7] [9000 x3]; a
  // larger size or another destination ends a batch. Four carry more than one datagram.
  EXPECT_EQ(client_->counters().gso_sends, 4u);
  EXPECT_EQ(client_->counters().gso_datagrams, 2u + 2u + 7u + 3u);
}

// A segment larger than the route's MTU cannot be sent with GSO (the kernel refuses the batch:
// EMSGSIZE, EINVAL before 6.x), while the same datagram alone is fragmented and delivered: a
// transport configured for jumbo frames on a 1,500-byte path. The link turns GSO off for that
// socket and sends the refused batch again datagram by datagram. Every datagram arrives, in order,
// and later sends are single. On a private loopback whose MTU is lowered to 1,500.
TEST(UdpLinkGsoFallback, RouteThatCannotSegmentGetsEveryDatagramOneByOne) {
  DETWAN_RUN_IN_NETNS([] {
    common::UniqueFd control(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    ifreq request{};
    std::strcpy(request.ifr_name, "lo");
    request.ifr_mtu = 1500;
    ASSERT_EQ(::ioctl(control.get(), SIOCSIFMTU, &request), 0) << std::strerror(errno);
    ASSERT_EQ(::ioctl(control.get(), SIOCGIFFLAGS, &request), 0);
    request.ifr_flags = static_cast<short>(request.ifr_flags | IFF_UP);
    ASSERT_EQ(::ioctl(control.get(), SIOCSIFFLAGS, &request), 0) << std::strerror(errno);

    auto server = UdpLink::create();
    auto client = UdpLink::create();
    ASSERT_TRUE(server && client);
    auto listened = (*server)->open_listen("127.0.0.1:0");
    ASSERT_TRUE(listened) << listened.error().message;
    auto opened = (*client)->open_path(PathSpec{}, listened->second);
    ASSERT_TRUE(opened) << opened.error().message;
    const auto [socket, remote] = *opened;
    if (!(*client)->socket_gso(socket)) GTEST_SKIP() << "the kernel has no UDP_SEGMENT";
    std::vector<std::vector<std::byte>> sent;
    std::vector<std::vector<std::byte>> got;
    for (int round = 0; round < 2; ++round) {  // the refused batch, then one after it
      for (int i = 0; i < 6; ++i) {
        sent.push_back(pattern(2000, static_cast<uint8_t>(round * 10 + i)));
        ASSERT_EQ(send_bytes(**client, socket, remote, sent.back()), common::Status::kOk);
      }
      (*client)->flush();
      // The refusal (and the resend) is handled when the client's link is next polled.
      const common::MonotonicClock clock;
      const int64_t give_up_ns = clock.now_ns() + 5'000'000'000;
      while (got.size() < sent.size() && clock.now_ns() < give_up_ns) {
        (*client)->receive(clock.now_ns() + 1'000'000,
                           [](SocketId, const UdpAddress&, std::span<const std::byte>) {});
        for (const Datagram& datagram : receive(**server, 1, 10'000'000)) {
          got.push_back(datagram.bytes);
        }
      }
    }
    ASSERT_EQ(got.size(), sent.size());
    EXPECT_TRUE(got == sent) << "a datagram arrived changed or out of order";
    const LinkCounters& counters = (*client)->counters();
    EXPECT_EQ(counters.gso_refused, 1u);
    EXPECT_EQ(counters.gso_sends, 1u);  // only the refused one: GSO is off after it
    EXPECT_EQ(counters.send_errors, 0u);
    EXPECT_FALSE((*client)->socket_gso(socket));
  });
}

}  // namespace
}  // namespace detwan::transport::udp

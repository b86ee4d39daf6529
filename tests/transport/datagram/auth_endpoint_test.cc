// Authenticated channels through whole endpoints (docs/transport.md "Authenticated channels"),
// over the loopback and udp backends: secure by default, keys and modes that do not match,
// and (udp) forged datagrams from a raw socket at the listen address.
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/byte_order.h"
#include "common/clock.h"
#include "tests/transport/datagram/channel_test_util.h"
#include "tests/transport/security_util.h"
#include "transport/datagram/driver.h"
#include "transport/loopback/endpoint.h"
#include "transport/loopback/link.h"
#include "transport/proto/wire.h"
#include "transport/udp/endpoint.h"

namespace detwan::transport {
namespace {

using testing::get;
using testing::MakeEndpoint;
using testing::random_bytes;
using testing::test_key;

constexpr int64_t kShortNs = 1'000'000'000;
constexpr int64_t kSetupNs = 10'000'000'000;

struct BackendCase {
  std::string name;
  MakeEndpoint make;
  std::string listen;
};

void PrintTo(const BackendCase& c, std::ostream* out) { *out << c.name; }

ChannelOptions short_options() {
  ChannelOptions o;
  o.peer_timeout_ns = kShortNs;
  o.initial_rtt_ns = 20'000'000;
  return o;
}

EndpointOptions with(Security security) {
  EndpointOptions o;
  o.security = std::move(security);
  o.accept_options = short_options();
  return o;
}

datagram::DriverCounters counters(Endpoint& endpoint) {
  auto* base = dynamic_cast<datagram::DatagramEndpointBase*>(&endpoint);
  EXPECT_NE(base, nullptr);
  return base != nullptr ? base->counters() : datagram::DriverCounters{};
}

class AuthEndpoint : public ::testing::TestWithParam<BackendCase> {
 protected:
  void SetUp() override {
    if (GetParam().name == "udp" && !udp::backend_info().usable) {
      GTEST_SKIP() << "udp: " << udp::backend_info().reason;
    }
  }
  std::unique_ptr<Endpoint> make(const Security& security) {
    auto endpoint = GetParam().make(with(security));
    EXPECT_TRUE(endpoint) << endpoint.error().message;
    return endpoint ? std::move(*endpoint) : nullptr;
  }
};

// Without a key, the default mode refuses to listen or connect, and says how to fix it.
TEST_P(AuthEndpoint, RefusesToRunWithoutAKeyUnlessAskedForNone) {
  auto endpoint = make(Security{});
  ASSERT_TRUE(endpoint);
  auto listened = endpoint->listen(GetParam().listen);
  ASSERT_FALSE(listened);
  EXPECT_EQ(listened.error().code, ErrorCode::kConfig);
  EXPECT_NE(listened.error().message.find("Security::none()"), std::string::npos);
  EXPECT_NE(listened.error().message.find("--key-file"), std::string::npos);
  auto connected = endpoint->connect("127.0.0.1:9", short_options(), kShortNs);
  ASSERT_FALSE(connected);
  EXPECT_EQ(connected.error().code, ErrorCode::kConfig);
  auto plain = make(Security::none());
  EXPECT_TRUE(plain->listen(GetParam().listen));
}

// A client with another key gets no answer; the server counts the HELLOs it refused and holds
// nothing: no channel, no half-open handshake. The other way round the same.
TEST_P(AuthEndpoint, WrongKeyCannotConnectEitherWay) {
  for (const uint8_t client_key : {uint8_t{0x40}, uint8_t{0}}) {
    const uint8_t server_key = client_key == 0 ? 0x40 : 0;
    SCOPED_TRACE("client key " + std::to_string(client_key));
    auto server = make(Security::keyed(test_key(server_key), SecurityMode::kAuthenticate, "t"));
    auto client = make(Security::keyed(test_key(client_key), SecurityMode::kAuthenticate, "t"));
    auto address = server->listen(GetParam().listen);
    ASSERT_TRUE(address) << address.error().message;
    auto connected = client->connect(*address, short_options(), 2 * kShortNs);
    ASSERT_FALSE(connected);
    EXPECT_NE(connected.error().message.find("no authenticated HELLO_ACK"), std::string::npos)
        << connected.error().message;
    const datagram::DriverCounters c = counters(*server);
    EXPECT_GE(c.dropped_auth, 1u);
    EXPECT_EQ(c.connections_accepted, 0u);
    EXPECT_EQ(c.half_open, 0u);
    EXPECT_EQ(c.handshakes_answered, 0u);
    EXPECT_FALSE(server->accept(0));
  }
}

// Another context is another key: two uses of one secret cannot talk to each other.
TEST_P(AuthEndpoint, AnotherContextCannotConnect) {
  auto server = make(Security::keyed(test_key(), SecurityMode::kAuthenticate, "job-1"));
  auto client = make(Security::keyed(test_key(), SecurityMode::kAuthenticate, "job-2"));
  auto address = server->listen(GetParam().listen);
  ASSERT_TRUE(address);
  EXPECT_FALSE(client->connect(*address, short_options(), 2 * kShortNs));
  EXPECT_GE(counters(*server).dropped_auth, 1u);
}

// Plain against sealed: the plain client fails at once with a clear error (the sealed server
// answers its HELLO with a "security mismatch" CLOSE); the sealed client against a plain
// server names the mismatch when its connect gives up. Nothing is accepted either way.
TEST_P(AuthEndpoint, ModeMismatchIsAClearError) {
  {
    auto server = make(testing::test_security());
    auto client = make(Security::none());
    auto address = server->listen(GetParam().listen);
    ASSERT_TRUE(address);
    auto connected = client->connect(*address, short_options(), kSetupNs);
    ASSERT_FALSE(connected);
    EXPECT_EQ(connected.error().code, ErrorCode::kConfig) << connected.error().message;
    EXPECT_NE(connected.error().message.find("security mode mismatch"), std::string::npos);
    EXPECT_GE(counters(*server).dropped_mode_mismatch, 1u);
    EXPECT_EQ(counters(*server).connections_accepted, 0u);
  }
  {
    auto server = make(Security::none());
    auto client = make(testing::test_security());
    auto address = server->listen(GetParam().listen);
    ASSERT_TRUE(address);
    auto connected = client->connect(*address, short_options(), 2 * kShortNs);
    ASSERT_FALSE(connected);
    EXPECT_NE(connected.error().message.find("security mode mismatch"), std::string::npos)
        << connected.error().message;
    EXPECT_GE(counters(*server).dropped_mode_mismatch, 1u);
    EXPECT_EQ(counters(*server).connections_accepted, 0u);
  }
  {
    auto server = make(testing::test_security(SecurityMode::kEncrypt));
    auto client = make(testing::test_security(SecurityMode::kAuthenticate));
    auto address = server->listen(GetParam().listen);
    ASSERT_TRUE(address);
    auto connected = client->connect(*address, short_options(), kSetupNs);
    ASSERT_FALSE(connected);
    EXPECT_EQ(connected.error().code, ErrorCode::kConfig);
    EXPECT_NE(connected.error().message.find("security mode mismatch"), std::string::npos);
    EXPECT_EQ(counters(*server).half_open, 0u);
  }
}

// Genuine channels in both modes carry messages byte-exact both ways; the accepted channel is
// counted once, after its handshake, and no half-open entry remains.
TEST_P(AuthEndpoint, KeyedChannelsCarryMessagesByteExact) {
  for (const SecurityMode mode : {SecurityMode::kAuthenticate, SecurityMode::kEncrypt}) {
    SCOPED_TRACE(std::string(to_string(mode)));
    auto pair = testing::connect_pair(GetParam().make, GetParam().listen,
                                      with(testing::test_security(mode)),
                                      with(testing::test_security(mode)), short_options());
    ASSERT_TRUE(pair.client && pair.server);
    for (size_t size : {size_t{0}, size_t{1}, size_t{70'000}, size_t{3} << 20}) {
      const auto message = random_bytes(size, size + 3);
      testing::expect_transfer(*pair.client, *pair.server, message);
      testing::expect_transfer(*pair.server, *pair.client, message);
    }
    const datagram::DriverCounters c = counters(*pair.server_endpoint);
    EXPECT_EQ(c.connections_accepted, 1u);
    EXPECT_EQ(c.half_open, 0u);
    EXPECT_EQ(pair.server->stats().dropped_auth, 0u);
  }
}

// ---- forged datagrams from a raw peer (a UDP socket, or a bare loopback link) ----

// Sends hand-made datagrams to a listen address and tells whether anything came back.
class RawPeer {
 public:
  virtual ~RawPeer() = default;
  virtual void send(const std::vector<std::byte>& d) = 0;
  virtual bool answered(int ms) = 0;
};

class RawSocket final : public RawPeer {
 public:
  explicit RawSocket(const std::string& address) {
    fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    const size_t colon = address.rfind(':');
    to_.sin_family = AF_INET;
    to_.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
    ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &to_.sin_addr);
  }
  ~RawSocket() override { ::close(fd_); }
  void send(const std::vector<std::byte>& d) override {
    ASSERT_EQ(
        ::sendto(fd_, d.data(), d.size(), 0, reinterpret_cast<const sockaddr*>(&to_), sizeof to_),
        static_cast<ssize_t>(d.size()));
  }
  bool answered(int ms) override {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, ms) > 0;
  }

 private:
  int fd_ = -1;
  sockaddr_in to_{};
};

// The same through the loopback fabric: a bare link (no protocol) with one client socket.
class RawLoopback final : public RawPeer {
 public:
  explicit RawLoopback(const std::string& address) : link_(loopback::FaultConfig{}) {
    PathSpec path;
    path.remote = address;
    auto opened = link_.open_path(path, address);
    EXPECT_TRUE(opened) << opened.error().message;
    if (opened) {
      socket_ = opened->first;
      to_ = opened->second;
    }
  }
  void send(const std::vector<std::byte>& d) override {
    std::span<std::byte> buffer = link_.tx_buffer();
    ASSERT_GE(buffer.size(), d.size());
    std::memcpy(buffer.data(), d.data(), d.size());
    ASSERT_EQ(link_.send(socket_, to_, d.size()), common::Status::kOk);
    link_.flush();
  }
  bool answered(int ms) override {
    bool any = false;
    const int64_t deadline_ns = common::MonotonicClock().now_ns() + int64_t{ms} * 1'000'000;
    link_.receive(deadline_ns, [&](datagram::SocketId, const loopback::Port&,
                                   std::span<const std::byte>) { any = true; });
    return any;
  }

 private:
  loopback::LoopbackLink link_;
  datagram::SocketId socket_ = 0;
  loopback::Port to_{};
};

// Waits (bounded) until the server's published counters show `n` datagrams: the progress
// thread has taken the forged ones.
datagram::DriverCounters await_datagrams(Endpoint& endpoint, uint64_t n) {
  datagram::DriverCounters c;
  for (int i = 0; i < 2000; ++i) {
    c = counters(endpoint);
    if (c.datagrams_received >= n) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return c;
}

// A forged HELLO (right format, wrong MAC) and a forged DATA naming an 8 GiB message, over udp
// from a raw socket and over loopback from a bare link: the server answers neither, creates nothing
// (no channel, no half-open entry, no reassembly memory) and counts both; a genuine client then
// connects and transfers intact.
TEST_P(AuthEndpoint, ForgedHelloAndDataCreateNothing) {
  auto server = GetParam().make(with(testing::test_security()));
  ASSERT_TRUE(server);
  auto address = (*server)->listen(GetParam().listen);
  ASSERT_TRUE(address);
  namespace wire = proto::wire;
  std::unique_ptr<RawPeer> peer;
  if (GetParam().name == "udp") {
    peer = std::make_unique<RawSocket>(*address);
  } else {
    peer = std::make_unique<RawLoopback>(*address);
  }
  RawPeer& raw = *peer;

  std::vector<std::byte> hello(wire::kHeaderBytes + wire::kSealedHelloBodyBytes);
  wire::Header h;
  h.type = wire::Type::kHello;
  h.version = wire::kVersionSealed;
  h.connection_id = 0x1111'2222'3333'4444ull;
  wire::SealedHelloBody body;
  body.hello.recv_window_bytes = 1 << 20;
  body.hello.segment_bytes = 1400;
  body.mode = static_cast<uint8_t>(SecurityMode::kAuthenticate);
  body.mac.fill(std::byte{0x5A});
  ASSERT_EQ(wire::encode_sealed_hello(h, body, hello), hello.size());
  raw.send(hello);

  std::vector<std::byte> data(1472);
  wire::Header dh;
  dh.connection_id = h.connection_id;
  dh.version = wire::kVersionSealed;
  wire::DataBody db;
  db.index = 0;
  db.last_index = (uint32_t{8} << 30) / 1400;  // 8 GiB in 1400-byte segments
  std::vector<std::byte> payload(1400, std::byte{7});
  db.payload = payload;
  data.resize(wire::encode_data(dh, db, data));
  ASSERT_GT(data.size(), 0u);
  raw.send(data);

  const datagram::DriverCounters c = await_datagrams(**server, 2);
  EXPECT_EQ(c.dropped_auth, 1u);
  EXPECT_EQ(c.dropped_unknown_connection, 1u);
  EXPECT_EQ(c.half_open, 0u);
  EXPECT_EQ(c.connections_accepted, 0u);
  EXPECT_EQ(c.handshakes_answered, 0u);
  EXPECT_EQ(c.reassembly_bytes, 0u);
  EXPECT_FALSE(raw.answered(100)) << "a forged HELLO was answered";

  auto client = GetParam().make(with(testing::test_security()));
  ASSERT_TRUE(client);
  auto connecting = std::async(
      std::launch::async, [&] { return (*client)->connect(*address, short_options(), kSetupNs); });
  auto accepted = (*server)->accept(kSetupNs);
  auto connected = connecting.get();
  ASSERT_TRUE(connected && accepted);
  const auto message = random_bytes(1 << 20, 77);
  testing::expect_transfer(**connected, **accepted, message);
}

INSTANTIATE_TEST_SUITE_P(Backends, AuthEndpoint,
                         ::testing::Values(BackendCase{"loopback", loopback::make_endpoint, ""},
                                           BackendCase{"udp", udp::make_endpoint, "127.0.0.1:0"}),
                         [](const ::testing::TestParamInfo<BackendCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace detwan::transport

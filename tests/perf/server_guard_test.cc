// detwan-perf server is no reflector (issue 31, item 7): its test stream goes only to the
// control connection's peer, at the port a hello carrying the session's token came from; a
// hello of another address, without the token, of another session or late moves nothing and
// is counted by reason; the server's limits on duration and sending rate refuse a test by name.
// In-process Server on loopback: 127.0.0.1 is the client, 127.0.0.2 (also loopback) another
// host. No timing assertions: absence of packets is checked after a later packet that was
// sent to the same socket has arrived, or after the server counted the refusal.
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <boost/json.hpp>

#include "common/unique_fd.h"
#include "tools/perf/control.h"
#include "tools/perf/perf_wire.h"
#include "tools/perf/session.h"
#include "tools/perf/spec_json.h"

namespace detwan::perf {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr uint32_t kLoopback2 = 0x7f000002;  // 127.0.0.2

bool eventually(const std::function<bool()>& condition) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < until) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return condition();
}

sockaddr_in ipv4(uint32_t host, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(host);
  return a;
}

// A UDP socket bound to host:0 (a namespace that owns that address, as the lab's attacker).
common::UniqueFd udp_socket(uint32_t host) {
  common::UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  const sockaddr_in local = ipv4(host, 0);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&local), sizeof(local)) != 0) fd.reset();
  return fd;
}

void send_hello(int fd, uint16_t port, uint32_t session, const HelloToken& token) {
  uint8_t buf[kHeaderBytes];
  ASSERT_EQ(encode(make_hello(session, 1, 1, token), buf, sizeof(buf), kHeaderBytes),
            kHeaderBytes);
  const sockaddr_in to = ipv4(INADDR_LOOPBACK, port);
  ASSERT_EQ(::sendto(fd, buf, sizeof(buf), 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to)),
            static_cast<ssize_t>(sizeof(buf)));
}

// The next datagram's kind within 2 s, or nullopt.
std::optional<Packet> receive(int fd, int timeout_ms = 2000) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) != 1) return std::nullopt;
  uint8_t buf[2048];
  const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
  Packet packet;
  if (n <= 0 || decode(buf, static_cast<size_t>(n), &packet) != DecodeResult::kOk) {
    return std::nullopt;
  }
  return packet;
}

size_t pending_datagrams(int fd) {
  size_t n = 0;
  uint8_t buf[2048];
  while (::recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) ++n;
  return n;
}

class ServerGuardTest : public ::testing::Test {
 protected:
  void start_server(ServerLimits limits = {}) {
    ServerOptions o;
    o.bind = "127.0.0.1";
    o.port = 0;
    o.peer_timeout_ns = 3000 * kMs;
    o.limits = limits;
    server_ = std::make_unique<Server>(o);
    auto started = server_->start();
    ASSERT_TRUE(started) << started.error().message;
  }
  void TearDown() override {
    if (server_) server_->stop();
  }
  // A control connection from 127.0.0.1 that asks for `spec` and returns the accept (or the
  // error) message.
  boost::json::object negotiate(const TestSpec& spec) {
    auto fd = connect_tcp("127.0.0.1", server_->port(), 5000 * kMs);
    EXPECT_TRUE(fd) << fd.error().message;
    if (!fd) return {};
    control_ = std::make_unique<ControlChannel>(std::move(*fd));
    EXPECT_TRUE(control_->send(boost::json::object{
        {"type", "hello"}, {"version", kProtocolVersion}, {"spec", spec_to_json(spec)}}));
    auto reply = control_->receive(5000 * kMs);
    EXPECT_TRUE(reply) << reply.error().message;
    return reply ? *reply : boost::json::object{};
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<ControlChannel> control_;
};

TEST_F(ServerGuardTest, OnlyTheControlPeerWithTheTokenGetsTheStream) {
  start_server();
  TestSpec spec;
  spec.direction = Direction::kReverse;
  spec.pps = 200;
  spec.duration_ns = 300 * kMs;
  spec.interval_ns = 0;
  const boost::json::object accept = negotiate(spec);
  ASSERT_EQ(get_string(accept, "type").value_or(""), "accept") << boost::json::serialize(accept);
  const auto session = static_cast<uint32_t>(get_int(accept, "session").value());
  const auto udp_port = static_cast<uint16_t>(get_int(accept, "udp_port").value());
  const std::optional<HelloToken> token = parse_token(get_string(accept, "token").value_or(""));
  ASSERT_TRUE(token.has_value());

  // A victim elsewhere (127.0.0.2), named as the source of a hello that carries the right
  // session and token (say, the client itself trying to reflect the stream at it).
  common::UniqueFd victim = udp_socket(kLoopback2);
  ASSERT_TRUE(victim.valid());
  send_hello(victim.get(), udp_port, session, *token);
  // From the client's own address but without the token, and of another session.
  common::UniqueFd stranger = udp_socket(INADDR_LOOPBACK);
  send_hello(stranger.get(), udp_port, session, HelloToken{});
  send_hello(stranger.get(), udp_port, session + 1, *token);
  ASSERT_TRUE(eventually([&] { return server_->counters().refused_hellos.total() == 3; }));
  RefusedHellos refused = server_->counters().refused_hellos;
  EXPECT_EQ(refused.source, 1u);
  EXPECT_EQ(refused.token, 1u);
  EXPECT_EQ(refused.session, 1u);

  // The genuine client: acknowledged, then the stream comes to it.
  common::UniqueFd client = udp_socket(INADDR_LOOPBACK);
  send_hello(client.get(), udp_port, session, *token);
  auto ack = receive(client.get());
  ASSERT_TRUE(ack.has_value());
  EXPECT_EQ(ack->kind, Kind::kHelloAck);
  ASSERT_TRUE(control_->send(boost::json::object{{"type", "start"}, {"start_ns", 0}}));
  auto first = receive(client.get());
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->kind, Kind::kData);
  // Once started, the token's own hello from another port is late: still nothing moves.
  send_hello(stranger.get(), udp_port, session, *token);
  ASSERT_TRUE(eventually([&] { return server_->counters().refused_hellos.late == 1; }));
  // The stream ends with its fins, all at the client.
  bool fin = false;
  while (auto p = receive(client.get())) {
    if (p->kind == Kind::kFin) {
      fin = true;
      break;
    }
  }
  EXPECT_TRUE(fin);
  // Nothing reached the victim or the stranger: no ack, no data, no fin (every packet the
  // server sent has arrived by now: the fins were its last).
  EXPECT_EQ(pending_datagrams(victim.get()), 0u);
  EXPECT_EQ(pending_datagrams(stranger.get()), 0u);
  refused = server_->counters().refused_hellos;
  EXPECT_EQ(refused.total(), 4u);
  EXPECT_EQ(server_->counters().malformed_packets, 0u);
}

TEST_F(ServerGuardTest, LimitsRefuseByNameAndCount) {
  ServerLimits limits;
  limits.max_duration_ns = 2000 * kMs;
  limits.max_send_bps = 8'000'000;  // 1 MB/s
  limits.max_send_pps = 5'000;
  limits.max_burst_bytes = 10'000;
  start_server(limits);
  struct Case {
    const char* name;
    std::function<void(TestSpec&)> change;
    const char* field;
    const char* option;
  };
  const Case cases[] = {
      {"too long", [](TestSpec& s) { s.duration_ns = 3000 * kMs; }, "duration_ns", "--max-time"},
      {"unpaced reverse",
       [](TestSpec& s) {
         s.direction = Direction::kReverse;
         s.mode = Mode::kThroughput;
         s.bitrate_bps = 0;
       },
       "bitrate_bps", "--max-rate"},
      {"too fast",
       [](TestSpec& s) {
         s.direction = Direction::kBidir;
         s.pps = 1000;
         s.size_bytes = 1200;  // 9.6 Mbit/s
       },
       "9600000 bit/s", "--max-rate"},
      {"too many packets",
       [](TestSpec& s) {
         s.direction = Direction::kReverse;
         s.pps = 6000;
       },
       "spec.pps", "--max-pps"},
      {"big bursts",
       [](TestSpec& s) {
         s.direction = Direction::kReverse;
         s.schedule = ScheduleKind::kBurst;
         s.burst_packets = 100;
         s.size_bytes = 200;
       },
       "burst_packets", "back to back"},
  };
  uint64_t refused = 0;
  for (const Case& c : cases) {
    TestSpec spec;
    spec.duration_ns = 1000 * kMs;
    spec.interval_ns = 0;
    c.change(spec);
    const boost::json::object reply = negotiate(spec);
    EXPECT_EQ(get_string(reply, "type").value_or(""), "error") << c.name;
    const std::string message = get_string(reply, "message").value_or("");
    EXPECT_NE(message.find(c.field), std::string::npos) << c.name << ": " << message;
    EXPECT_NE(message.find(c.option), std::string::npos) << c.name << ": " << message;
    ++refused;
    ASSERT_TRUE(eventually([&] { return server_->counters().over_limits == refused; }));
  }
  // What the server only receives is the client's business: a fast forward stream is fine.
  TestSpec forward;
  forward.pps = 6000;
  forward.size_bytes = 1200;
  forward.duration_ns = 1000 * kMs;
  EXPECT_EQ(get_string(negotiate(forward), "type").value_or(""), "accept");
  EXPECT_EQ(server_->counters().rejected_requests, refused);
}

TEST(ServerGuard, TokenTextRoundTripsAndRefusesOtherForms) {
  const HelloToken token{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  EXPECT_EQ(format_token(token), "0123456789abcdeffedcba9876543210");
  EXPECT_EQ(parse_token(format_token(token)), token);
  EXPECT_FALSE(parse_token("0123456789ABCDEFfedcba9876543210").has_value());  // upper case
  EXPECT_FALSE(parse_token("0123456789abcdeffedcba987654321").has_value());   // 31 digits
  EXPECT_FALSE(parse_token("0123456789abcdeffedcba98765432100").has_value());
  EXPECT_FALSE(parse_token("0123456789abcdefgedcba9876543210").has_value());
  auto a = new_hello_token();
  auto b = new_hello_token();
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(tokens_equal(*a, *b));  // 2^-128
  EXPECT_TRUE(tokens_equal(*a, *a));
  const Packet hello = make_hello(7, 1, 2, *a);
  uint8_t buf[kHeaderBytes];
  ASSERT_EQ(encode(hello, buf, sizeof(buf), sizeof(buf)), kHeaderBytes);
  Packet decoded;
  ASSERT_EQ(decode(buf, sizeof(buf), &decoded), DecodeResult::kOk);
  EXPECT_EQ(hello_token_of(decoded), *a);
}

}  // namespace
}  // namespace detwan::perf

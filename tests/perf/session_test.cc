// detwan-perf client/server end to end over loopback: an in-process Server on port 0 and
// run_test(). Streams are short (0.3-1 s, a few hundred pps) so the binary stays fast on a
// loaded 2-vCPU machine; assertions are on counts and presence, never on timing quality.
#include "tools/perf/session.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/unique_fd.h"
#include "tools/perf/perf_wire.h"

namespace detwan::perf {
namespace {

constexpr int64_t kMs = 1'000'000;

// Polls `condition` until it holds or `limit` passes (state owned by other threads).
bool eventually(const std::function<bool()>& condition,
                std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return condition();
}

bool have_ipv6_loopback() {
  common::UniqueFd fd(::socket(AF_INET6, SOCK_DGRAM, 0));
  if (!fd.valid()) return false;
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  return ::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
}

// A raw control connection to the server; reads give up after 5 s so a bug cannot hang.
common::UniqueFd connect_control(uint16_t port) {
  common::UniqueFd fd(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const timeval timeout{5, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) fd.reset();
  return fd;
}

class SessionTest : public ::testing::Test {
 protected:
  void start_server(const std::string& bind = "127.0.0.1", int64_t peer_timeout_ns = 2000 * kMs) {
    ServerOptions o;
    o.bind = bind;
    o.port = 0;
    o.peer_timeout_ns = peer_timeout_ns;
    server_ = std::make_unique<Server>(o);
    auto started = server_->start();
    ASSERT_TRUE(started) << started.error().message;
    ASSERT_NE(server_->port(), 0);
  }

  [[nodiscard]] ClientOptions client(Direction direction = Direction::kForward) const {
    ClientOptions o;
    o.host = "127.0.0.1";
    o.port = server_->port();
    o.spec.direction = direction;
    o.spec.pps = 1000;
    o.spec.duration_ns = 500 * kMs;
    o.spec.interval_ns = 0;
    o.peer_timeout_ns = 2000 * kMs;
    o.linger_ns = 100 * kMs;
    return o;
  }

  void TearDown() override {
    if (server_) server_->stop();
  }

  std::unique_ptr<Server> server_;
};

// Expected from the schedule alone: periodic deadlines start + i * 1e9 / pps below the end.
uint64_t periodic_count(uint64_t pps, int64_t duration_ns) {
  // Small test values: the product fits in 64 bits.
  return (static_cast<uint64_t>(duration_ns) * pps + 999'999'999) / 1'000'000'000;
}

void expect_complete_stream(const DirectionResult& d, uint64_t sent) {
  EXPECT_EQ(d.sent, sent);
  EXPECT_EQ(d.received, sent);
  EXPECT_EQ(d.lost, 0u);
  EXPECT_EQ(d.owd_ns.count, sent);
  EXPECT_GT(d.owd_ns.p50, 0);  // same host: the clocks agree, so no correction is applied
  EXPECT_LT(d.owd_ns.p50, 10 * kMs);
  EXPECT_GE(d.clock_error_ns, 0);
  EXPECT_LT(d.clock_error_ns, 10 * kMs);
  EXPECT_GT(d.rtt_ns.count, 0u);
  EXPECT_EQ(d.schedule_error_ns.count, sent);
}

TEST_F(SessionTest, ForwardStreamArrivesComplete) {
  start_server();
  auto report = run_test(client());
  ASSERT_TRUE(report) << report.error().message;
  ASSERT_EQ(report->paths.size(), 1u);
  const PathReport& path = report->paths[0];
  EXPECT_EQ(path.error, "");
  EXPECT_EQ(path.target, "127.0.0.1:" + std::to_string(server_->port()));
  ASSERT_TRUE(path.forward.has_value());
  EXPECT_FALSE(path.reverse.has_value());
  expect_complete_stream(*path.forward, periodic_count(1000, 500 * kMs));
  EXPECT_TRUE(eventually([&] { return server_->counters().sessions_served == 1; }));
}

TEST_F(SessionTest, ReverseStreamIsMeasuredAtTheClient) {
  start_server();
  auto report = run_test(client(Direction::kReverse));
  ASSERT_TRUE(report) << report.error().message;
  const PathReport& path = report->paths[0];
  EXPECT_EQ(path.error, "");
  EXPECT_FALSE(path.forward.has_value());
  ASSERT_TRUE(path.reverse.has_value());
  expect_complete_stream(*path.reverse, periodic_count(1000, 500 * kMs));
}

TEST_F(SessionTest, BidirMeasuresBothDirections) {
  start_server();
  auto report = run_test(client(Direction::kBidir));
  ASSERT_TRUE(report) << report.error().message;
  const PathReport& path = report->paths[0];
  EXPECT_EQ(path.error, "");
  ASSERT_TRUE(path.forward.has_value());
  ASSERT_TRUE(path.reverse.has_value());
  expect_complete_stream(*path.forward, periodic_count(1000, 500 * kMs));
  expect_complete_stream(*path.reverse, periodic_count(1000, 500 * kMs));
  // Receiver minus sender clock, seen from each end: opposite signs of one estimate.
  EXPECT_EQ(path.forward->clock_offset_ns, -path.reverse->clock_offset_ns);
}

TEST_F(SessionTest, PingPongGivesRttAndBothOneWayDelays) {
  start_server();
  ClientOptions o = client();
  o.spec.mode = Mode::kPingPong;
  // Long enough that a client whose path thread starts late on a loaded machine (the
  // ThreadSanitizer build next to a compile: 300 ms once ended before the first ping, as the
  // schedule says it must) still pings.
  o.spec.duration_ns = 1000 * kMs;
  auto report = run_test(o);
  ASSERT_TRUE(report) << report.error().message;
  const PathReport& path = report->paths[0];
  EXPECT_EQ(path.error, "");
  ASSERT_TRUE(path.forward.has_value());
  ASSERT_TRUE(path.reverse.has_value());
  EXPECT_GT(path.forward->sent, 0u);
  EXPECT_EQ(path.forward->sent, path.reverse->sent);
  EXPECT_GT(path.forward->received, 0u);
  EXPECT_EQ(path.forward->received + path.forward->lost, path.forward->sent);
  EXPECT_GT(path.forward->rtt_ns.count, path.forward->received - 1);  // every reply + 8 syncs
  EXPECT_GT(path.forward->owd_ns.count, 0u);
  EXPECT_GT(path.reverse->owd_ns.count, 0u);
  EXPECT_GT(path.forward->rtt_ns.p50, 0);
}

TEST_F(SessionTest, ThroughputReportsAReceivedRate) {
  start_server();
  ClientOptions o = client();
  o.spec.mode = Mode::kThroughput;
  o.spec.bitrate_bps = 0;  // as fast as possible
  o.spec.size_bytes = 1000;
  o.spec.duration_ns = 300 * kMs;
  auto report = run_test(o);
  ASSERT_TRUE(report) << report.error().message;
  const PathReport& path = report->paths[0];
  EXPECT_EQ(path.error, "");
  ASSERT_TRUE(path.forward.has_value());
  EXPECT_GT(path.forward->sent, 0u);
  EXPECT_GT(path.forward->received, 0u);
  EXPECT_LE(path.forward->received, path.forward->sent);
  EXPECT_GT(path.forward->throughput_bps, 0.0);
  EXPECT_EQ(path.forward->received_bytes, path.forward->received * 1000);
}

TEST_F(SessionTest, CompareRunsTheSameScheduleOverTwoAddresses) {
  const bool v6 = have_ipv6_loopback();
  start_server(v6 ? "" : "0.0.0.0");
  ClientOptions o = client();
  o.compare_host = v6 ? "::1" : "127.0.0.2";
  o.spec.pps = 400;
  auto report = run_test(o);
  ASSERT_TRUE(report) << report.error().message;
  ASSERT_EQ(report->paths.size(), 2u);
  const uint64_t expected = periodic_count(400, 500 * kMs);
  for (const PathReport& path : report->paths) {
    EXPECT_EQ(path.error, "") << path.target;
    ASSERT_TRUE(path.forward.has_value()) << path.target;
    EXPECT_EQ(path.forward->sent, expected) << path.target;
    EXPECT_EQ(path.forward->received, expected) << path.target;
  }
  EXPECT_NE(report->paths[0].target, report->paths[1].target);
  EXPECT_EQ(report->paths[1].target.find(v6 ? "[::1]:" : "127.0.0.2:"), 0u);
}

TEST_F(SessionTest, IntervalRecordsArriveWhileRunning) {
  start_server();
  ClientOptions o = client(Direction::kBidir);
  o.spec.interval_ns = 100 * kMs;
  std::mutex mutex;
  int forward_lines = 0, reverse_lines = 0;
  auto sink = [&](const std::string& target, const char* direction, const DirectionResult&) {
    std::lock_guard lock(mutex);
    EXPECT_EQ(target, "127.0.0.1:" + std::to_string(server_->port()));
    (std::strcmp(direction, "forward") == 0 ? forward_lines : reverse_lines)++;
  };
  auto report = run_test(o, sink);
  ASSERT_TRUE(report) << report.error().message;
  const PathReport& path = report->paths[0];
  EXPECT_EQ(path.error, "");
  // 0.5 s in 100 ms intervals: 4 or 5 full ones, depending on where the last falls.
  EXPECT_GE(path.forward_intervals.size(), 3u);
  EXPECT_GE(path.reverse_intervals.size(), 3u);
  EXPECT_EQ(forward_lines, static_cast<int>(path.forward_intervals.size()));
  EXPECT_EQ(reverse_lines, static_cast<int>(path.reverse_intervals.size()));
  uint64_t forward_sum = 0;
  for (const auto& i : path.forward_intervals) forward_sum += i.received;
  EXPECT_GT(forward_sum, 0u);
  EXPECT_LE(forward_sum, path.forward->received);
}

TEST_F(SessionTest, ForeignDatagramsAreCountedAndIgnored) {
  start_server();
  ClientOptions o = client();
  o.spec.duration_ns = 800 * kMs;
  o.spec.pps = 500;
  auto running = std::async(std::launch::async, [&] { return run_test(o); });
  ASSERT_TRUE(eventually([&] { return server_->counters().last_udp_port != 0; }));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(server_->counters().last_udp_port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  common::UniqueFd spray(::socket(AF_INET, SOCK_DGRAM, 0));
  ASSERT_TRUE(spray.valid());
  constexpr int kForeign = 200;
  uint8_t buf[256] = {};
  for (int i = 0; i < kForeign; ++i) {
    size_t n = 0;
    if (i % 4 == 0) {
      n = 10;  // truncated
    } else if (i % 4 == 1) {
      std::memset(buf, 0xAB, sizeof(buf));  // another tool's bytes
      n = sizeof(buf);
    } else {
      // A well-formed packet of a session that does not exist, or from a stranger's address.
      Packet p{i % 4 == 2 ? Kind::kData : Kind::kFin, 0x1234, static_cast<uint64_t>(i), 1, 0, 0};
      n = encode(p, buf, sizeof(buf), kHeaderBytes);
    }
    ASSERT_EQ(::sendto(spray.get(), buf, n, 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
              static_cast<ssize_t>(n));
  }
  auto report = running.get();
  ASSERT_TRUE(report) << report.error().message;
  const PathReport& path = report->paths[0];
  EXPECT_EQ(path.error, "");
  ASSERT_TRUE(path.forward.has_value());
  const uint64_t expected = periodic_count(500, 800 * kMs);
  EXPECT_EQ(path.forward->sent, expected);
  EXPECT_EQ(path.forward->received, expected);
  EXPECT_EQ(path.forward->lost, 0u);
  EXPECT_EQ(path.forward->malformed, static_cast<uint64_t>(kForeign));
  EXPECT_EQ(server_->counters().malformed_packets, static_cast<uint64_t>(kForeign));
}

TEST_F(SessionTest, BadHelloIsRejectedNamingTheField) {
  start_server();
  ClientOptions o = client();
  o.spec.size_bytes = 20;
  auto report = run_test(o);
  ASSERT_FALSE(report);
  EXPECT_EQ(report.error().code, common::ErrorCode::kInvalidArgument);
  EXPECT_NE(report.error().message.find("size_bytes"), std::string::npos) << report.error().message;
  EXPECT_NE(report.error().message.find("20"), std::string::npos) << report.error().message;
  EXPECT_TRUE(eventually([&] { return server_->counters().rejected_requests == 1; }));
  // The server keeps serving.
  auto good = run_test(client());
  ASSERT_TRUE(good) << good.error().message;
  EXPECT_EQ(good->paths[0].error, "");
}

TEST_F(SessionTest, MalformedControlLineGetsAnErrorAndIsCounted) {
  start_server();
  common::UniqueFd fd = connect_control(server_->port());
  ASSERT_TRUE(fd.valid());
  const std::string line = "this is not json\n";
  ASSERT_EQ(::send(fd.get(), line.data(), line.size(), 0), static_cast<ssize_t>(line.size()));
  std::string reply;
  char buf[512];
  for (ssize_t n; (n = ::recv(fd.get(), buf, sizeof(buf), 0)) > 0;) reply.append(buf, n);
  EXPECT_NE(reply.find("\"type\":\"error\""), std::string::npos) << reply;
  EXPECT_TRUE(eventually([&] { return server_->counters().malformed_control == 1; }));
}

TEST_F(SessionTest, HelloOfAnotherVersionIsRejected) {
  start_server();
  common::UniqueFd fd = connect_control(server_->port());
  ASSERT_TRUE(fd.valid());
  // Version 1 (before the hello token): refused by name.
  const std::string hello = R"({"type":"hello","version":1,"spec":{}})"
                            "\n";
  ASSERT_EQ(::send(fd.get(), hello.data(), hello.size(), 0), static_cast<ssize_t>(hello.size()));
  std::string reply;
  char buf[512];
  for (ssize_t n; (n = ::recv(fd.get(), buf, sizeof(buf), 0)) > 0;) reply.append(buf, n);
  EXPECT_NE(reply.find("\"type\":\"error\""), std::string::npos) << reply;
  EXPECT_NE(reply.find("version"), std::string::npos) << reply;
  EXPECT_TRUE(eventually([&] { return server_->counters().rejected_requests == 1; }));
}

TEST_F(SessionTest, ServerEndsTheSessionOfAVanishedClient) {
  start_server("127.0.0.1", 300 * kMs);
  common::UniqueFd fd = connect_control(server_->port());
  ASSERT_TRUE(fd.valid());
  // A valid hello, then silence: no UDP hello, no start.
  const std::string hello =
      R"({"type":"hello","version":2,"spec":{"mode":"stream","direction":"forward",)"
      R"("schedule":"periodic","pps":100,"bitrate_bps":0,"burst_packets":1,"size_bytes":64,)"
      R"("duration_ns":1000000000,"bound_ns":0,"interval_ns":0,"dscp":-1,"seed":1,)"
      R"("want_packets":false}})"
      "\n";
  ASSERT_EQ(::send(fd.get(), hello.data(), hello.size(), 0), static_cast<ssize_t>(hello.size()));
  std::string reply;
  char buf[512];
  for (ssize_t n; (n = ::recv(fd.get(), buf, sizeof(buf), 0)) > 0;) reply.append(buf, n);
  // The accept came, then the server closed the connection when the client stayed silent.
  EXPECT_NE(reply.find("\"type\":\"accept\""), std::string::npos) << reply;
  EXPECT_TRUE(eventually([&] { return server_->counters().sessions_vanished == 1; }));
  EXPECT_EQ(server_->counters().sessions_served, 0u);
  EXPECT_TRUE(eventually([&] { return server_->counters().active_sessions == 0; }));
}

TEST(SessionClientTest, ServerWithoutUdpGivesAClearTimeout) {
  // A fake server: accepts the hello with a UDP port where nothing answers, then stays
  // silent until the client gives up and closes.
  common::UniqueFd listener(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&local), sizeof(local)), 0);
  ASSERT_EQ(::listen(listener.get(), 1), 0);
  socklen_t length = sizeof(local);
  ASSERT_EQ(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&local), &length), 0);
  std::thread fake([&] {
    common::UniqueFd conn(::accept(listener.get(), nullptr, nullptr));
    const timeval timeout{5, 0};
    ::setsockopt(conn.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    char buf[4096];
    if (::recv(conn.get(), buf, sizeof(buf), 0) <= 0) return;
    const std::string accept =
        R"({"type":"accept","session":7,"udp_port":9,"token":"000102030405060708090a0b0c0d0e0f"})"
        "\n";
    (void)::send(conn.get(), accept.data(), accept.size(), MSG_NOSIGNAL);
    while (::recv(conn.get(), buf, sizeof(buf), 0) > 0) {
    }
  });
  ClientOptions o;
  o.host = "127.0.0.1";
  o.port = ntohs(local.sin_port);
  o.spec.duration_ns = 300 * kMs;
  o.peer_timeout_ns = 300 * kMs;
  auto report = run_test(o);
  fake.join();
  ASSERT_FALSE(report);
  EXPECT_EQ(report.error().code, common::ErrorCode::kTimeout);
  EXPECT_NE(report.error().message.find("no UDP reply"), std::string::npos)
      << report.error().message;
}

TEST(SessionClientTest, SilentServerCountsAsVanished) {
  // A fake server that negotiates (hello, UDP hello-ack, clock sync) and then, once the test
  // starts, answers nothing while keeping its connection open: only the timer can notice.
  common::UniqueFd listener(::socket(AF_INET, SOCK_STREAM, 0));
  common::UniqueFd udp(::socket(AF_INET, SOCK_DGRAM, 0));
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&local), sizeof(local)), 0);
  ASSERT_EQ(::bind(udp.get(), reinterpret_cast<sockaddr*>(&local), sizeof(local)), 0);
  ASSERT_EQ(::listen(listener.get(), 1), 0);
  sockaddr_in tcp_addr{}, udp_addr{};
  socklen_t length = sizeof(tcp_addr);
  ASSERT_EQ(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&tcp_addr), &length), 0);
  length = sizeof(udp_addr);
  ASSERT_EQ(::getsockname(udp.get(), reinterpret_cast<sockaddr*>(&udp_addr), &length), 0);
  std::thread fake([&] {
    common::UniqueFd conn(::accept(listener.get(), nullptr, nullptr));
    const timeval timeout{0, 20'000};
    ::setsockopt(conn.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    ::setsockopt(udp.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    std::string control;
    bool accepted = false, started = false;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < give_up) {
      char buf[4096];
      const ssize_t n = ::recv(conn.get(), buf, sizeof(buf), 0);
      if (n == 0) return;  // the client gave up
      if (n > 0) control.append(buf, static_cast<size_t>(n));
      if (!accepted && control.find('\n') != std::string::npos) {
        const std::string accept = R"({"type":"accept","session":7,"udp_port":)" +
                                   std::to_string(ntohs(udp_addr.sin_port)) +
                                   R"(,"token":"000102030405060708090a0b0c0d0e0f"})" + "\n";
        (void)::send(conn.get(), accept.data(), accept.size(), MSG_NOSIGNAL);
        accepted = true;
      }
      started = started || control.find("\"start\"") != std::string::npos;
      sockaddr_storage from{};
      socklen_t from_length = sizeof(from);
      uint8_t packet[2048];
      const ssize_t m = ::recvfrom(udp.get(), packet, sizeof(packet), 0,
                                   reinterpret_cast<sockaddr*>(&from), &from_length);
      Packet p;
      if (started || m <= 0 || decode(packet, static_cast<size_t>(m), &p) != DecodeResult::kOk) {
        continue;
      }
      Packet reply{p.kind == Kind::kHello ? Kind::kHelloAck : Kind::kSyncReply,
                   7,
                   p.seq,
                   p.t_a,
                   p.t_a + 1000,
                   p.t_a + 2000};
      const size_t size = encode(reply, packet, sizeof(packet), kHeaderBytes);
      (void)::sendto(udp.get(), packet, size, 0, reinterpret_cast<sockaddr*>(&from), from_length);
    }
  });
  ClientOptions o;
  o.host = "127.0.0.1";
  o.port = ntohs(tcp_addr.sin_port);
  o.spec.duration_ns = 5000 * kMs;
  o.spec.pps = 200;
  o.peer_timeout_ns = 500 * kMs;
  const auto began = std::chrono::steady_clock::now();
  auto report = run_test(o);
  const auto took = std::chrono::steady_clock::now() - began;
  fake.join();
  ASSERT_TRUE(report) << report.error().message;
  const PathReport& path = report->paths[0];
  EXPECT_NE(
      path.error.find("server 127.0.0.1:" + std::to_string(o.port) + " vanished: no message for"),
      std::string::npos)
      << path.error;
  EXPECT_LT(took, std::chrono::milliseconds(4000));  // not the 5 s asked for
  ASSERT_TRUE(path.forward.has_value());
  EXPECT_GT(path.forward->sent, 0u);  // the client's own count of what left
  EXPECT_EQ(path.forward->received, 0u);
}

TEST_F(SessionTest, ServerStoppedMidTestGivesAPartialReport) {
  start_server();
  ClientOptions o = client();
  o.spec.duration_ns = 5000 * kMs;
  o.spec.interval_ns = 100 * kMs;
  o.peer_timeout_ns = 500 * kMs;
  std::atomic<int> intervals{0};
  auto sink = [&](const std::string&, const char*, const DirectionResult&) { ++intervals; };
  auto running = std::async(std::launch::async, [&] { return run_test(o, sink); });
  ASSERT_TRUE(eventually([&] { return intervals.load() >= 2; }));
  const auto stopped_at = std::chrono::steady_clock::now();
  server_->stop();
  auto report = running.get();
  const auto took = std::chrono::steady_clock::now() - stopped_at;
  ASSERT_TRUE(report) << report.error().message;
  const PathReport& path = report->paths[0];
  EXPECT_TRUE(path.error.find("vanished") != std::string::npos ||
              path.error.find("closed") != std::string::npos)
      << path.error;
  // Ended well before the 5 s the test asked for (a functional bound, not a timing one).
  EXPECT_LT(took, std::chrono::milliseconds(3000));
  ASSERT_TRUE(path.forward.has_value());
  EXPECT_GT(path.forward->sent, 0u);
  EXPECT_GT(path.forward->received, 0u);  // what the interval records saw
  EXPECT_LT(path.forward->sent, periodic_count(1000, 5000 * kMs));
}

TEST_F(SessionTest, PacketRecordsComeBackWhenAsked) {
  start_server();
  ClientOptions o = client(Direction::kBidir);
  o.spec.pps = 200;
  o.spec.duration_ns = 300 * kMs;
  o.spec.want_packets = true;
  auto report = run_test(o);
  ASSERT_TRUE(report) << report.error().message;
  const PathReport& path = report->paths[0];
  EXPECT_EQ(path.error, "");
  ASSERT_TRUE(path.forward && path.reverse);
  const uint64_t expected = periodic_count(200, 300 * kMs);
  ASSERT_EQ(path.forward_packets.size(), expected);
  ASSERT_EQ(path.reverse_packets.size(), expected);
  std::vector<bool> seen(expected, false);
  for (const PacketRecord& r : path.forward_packets) {
    ASSERT_LT(r.seq, expected);
    EXPECT_FALSE(seen[r.seq]);
    seen[r.seq] = true;
    EXPECT_GT(r.rx_ns, r.tx_ns);  // one host, one clock
  }
}

}  // namespace
}  // namespace detwan::perf

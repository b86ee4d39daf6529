// STAMP reflector and sender in-process on loopback: a real StampReflector on port 0, driven by
// run_stamp_session() or by hand-made packets from a plain UDP socket.
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "common/unique_fd.h"
#include "tools/perf/stamp_session.h"
#include "tools/perf/stamp_wire.h"

namespace detwan::perf {
namespace {

// A reflector serving on its own thread for the test's lifetime.
class RunningReflector {
 public:
  explicit RunningReflector(StampReflectOptions options) : reflector_(with_port0(options)) {
    thread_ = std::thread([this] { reflector_.run(); });
  }
  ~RunningReflector() { finish(); }
  StampReflectorCounters finish() {
    if (thread_.joinable()) {
      reflector_.stop();
      thread_.join();
    }
    return reflector_.counters();
  }
  uint16_t port() const { return reflector_.port(); }

 private:
  static StampReflectOptions with_port0(StampReflectOptions o) {
    o.port = 0;
    return o;
  }
  StampReflector reflector_;
  std::thread thread_;
};

// A plain UDP client socket connected to the reflector.
class Client {
 public:
  Client(int family, uint16_t port) : fd_(::socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {
    sockaddr_storage to{};
    socklen_t len = 0;
    if (family == AF_INET) {
      auto* v4 = reinterpret_cast<sockaddr_in*>(&to);
      v4->sin_family = AF_INET;
      v4->sin_port = htons(port);
      v4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      len = sizeof(sockaddr_in);
    } else {
      auto* v6 = reinterpret_cast<sockaddr_in6*>(&to);
      v6->sin6_family = AF_INET6;
      v6->sin6_port = htons(port);
      v6->sin6_addr = in6addr_loopback;
      len = sizeof(sockaddr_in6);
    }
    connected_ = fd_.valid() && ::connect(fd_.get(), reinterpret_cast<sockaddr*>(&to), len) == 0;
  }
  bool ok() const { return connected_; }
  int fd() const { return fd_.get(); }
  void send(const std::vector<uint8_t>& bytes) const {
    ASSERT_EQ(::send(fd_.get(), bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  }
  // The next datagram, or empty after 2 s (a failure in every test that calls it).
  std::vector<uint8_t> receive() const {
    pollfd pfd{fd_.get(), POLLIN, 0};
    if (::poll(&pfd, 1, 2000) != 1) return {};
    std::vector<uint8_t> buf(65536);
    const ssize_t n = ::recv(fd_.get(), buf.data(), buf.size(), 0);
    buf.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return buf;
  }

 private:
  common::UniqueFd fd_;
  bool connected_ = false;
};

std::vector<uint8_t> sender_packet(uint32_t seq, uint16_t ssid, size_t size) {
  std::vector<uint8_t> p(std::max<size_t>(size, stamp::kBaseBytes));
  stamp::SenderPacket s;
  s.seq = seq;
  s.ssid = ssid;
  s.timestamp = stamp::ntp_from_ns(1'000'000'000);
  s.error_estimate = 0x1234;
  (void)stamp::encode_sender(s, p.data(), p.size(), p.size());
  p.resize(size);  // shorter: a TWAMP Light packet
  return p;
}

stamp::ReflectorPacket decode(const std::vector<uint8_t>& bytes) {
  stamp::ReflectorPacket r;
  EXPECT_EQ(stamp::decode_reflector(bytes.data(), bytes.size(), &r), stamp::DecodeStatus::kOk);
  return r;
}

StampSenderOptions sender_options(const std::string& host, uint16_t port, uint64_t count) {
  StampSenderOptions o;
  o.host = host;
  o.port = port;
  o.count = count;
  o.interval_ns = 1'000'000;
  o.timeout_ns = 2'000'000'000;
  o.clock = ClockMode::kSync;  // one host, one clock
  o.ssid = 77;
  return o;
}

void expect_consistent_delays(const StampSenderResult& r) {
  EXPECT_GT(r.rtt_ns.min, 0);
  // Same host, same clock: both one-way delays are positive and add up to the round trip
  // (per packet, hence for the means, which are exact).
  EXPECT_GT(r.owd_forward_ns.min, 0);
  EXPECT_GT(r.owd_reverse_ns.min, 0);
  EXPECT_NEAR(r.owd_forward_ns.mean + r.owd_reverse_ns.mean, r.rtt_ns.mean, 1.0);
  EXPECT_LE(r.owd_forward_ns.max, r.rtt_ns.max);
  EXPECT_TRUE(r.clock_valid);
  EXPECT_FALSE(r.clock_corrected);
}

TEST(StampSession, StatelessReflectorOnLoopback) {
  RunningReflector reflector({});
  auto r = run_stamp_session(sender_options("127.0.0.1", reflector.port(), 20));
  ASSERT_TRUE(r.has_value()) << r.error().describe();
  EXPECT_EQ(r->sent, 20u);
  EXPECT_EQ(r->received, 20u);
  EXPECT_EQ(r->lost, 0u);
  EXPECT_EQ(r->duplicates, 0u);
  EXPECT_FALSE(r->stateful_reflector);
  EXPECT_FALSE(r->forward_lost.has_value());
  EXPECT_EQ(r->rtt_ns.count, 20u);
  EXPECT_EQ(r->ipdv_forward_ns.count, 19u);
  EXPECT_EQ(r->reply_bytes, 44u);
  EXPECT_EQ(r->sender_ttl_at_reflector, 64);  // Linux default TTL on loopback
  EXPECT_TRUE(r->reflector_error_estimate_ns.has_value());
  expect_consistent_delays(*r);
  const StampReflectorCounters c = reflector.finish();
  EXPECT_EQ(c.received, 20u);
  EXPECT_EQ(c.reflected, 20u);
  ASSERT_EQ(c.sessions.size(), 1u);
  EXPECT_EQ(c.sessions[0].ssid, 77);
  EXPECT_EQ(c.sessions[0].packets, 20u);
  EXPECT_EQ(c.sessions[0].peer.rfind("127.0.0.1:", 0), 0u) << c.sessions[0].peer;
}

TEST(StampSession, JsonHasTheDocumentedFields) {
  RunningReflector reflector({});
  StampSenderOptions o = sender_options("127.0.0.1", reflector.port(), 3);
  o.size_bytes = 100;
  auto r = run_stamp_session(o);
  ASSERT_TRUE(r.has_value());
  const boost::json::object j = stamp_result_to_json(*r);
  EXPECT_EQ(j.at("schema").as_string(), "detwan-perf-stamp");
  EXPECT_EQ(j.at("version").as_int64(), 1);
  EXPECT_EQ(j.at("received").as_uint64(), 3u);
  EXPECT_TRUE(j.at("forward_lost").is_null());
  EXPECT_TRUE(j.at("reverse_lost").is_null());
  EXPECT_EQ(j.at("reply_bytes").as_uint64(), 100u);  // symmetric size
  for (const char* key : {"target", "ssid", "timestamp_format", "sent", "lost", "duplicates",
                          "malformed", "clock_offset_ns", "clock_error_ns", "clock_corrected",
                          "reflector_error_estimate_ns", "reflector_synchronized", "dscp_sent",
                          "dscp_received", "rtt_ns", "owd_forward_ns", "owd_reverse_ns"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_TRUE(j.at("rtt_ns").is_object());
}

TEST(StampSession, Ipv6Loopback) {
  Client probe(AF_INET6, 9);
  if (!probe.ok()) GTEST_SKIP() << "no IPv6 loopback";
  RunningReflector reflector({});  // dual stack
  auto r = run_stamp_session(sender_options("::1", reflector.port(), 10));
  ASSERT_TRUE(r.has_value()) << r.error().describe();
  EXPECT_EQ(r->received, 10u);
  EXPECT_EQ(r->target, "[::1]:" + std::to_string(reflector.port()));
  expect_consistent_delays(*r);
}

TEST(StampSession, PtpTimestampsBothEnds) {
  StampReflectOptions ro;
  ro.timestamp = StampTimestamp::kPtp;
  RunningReflector reflector(ro);
  StampSenderOptions o = sender_options("127.0.0.1", reflector.port(), 5);
  o.timestamp = StampTimestamp::kPtp;
  auto r = run_stamp_session(o);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->received, 5u);
  expect_consistent_delays(*r);
}

TEST(StampSession, DscpViaClassOfServiceTlvWhenHonoured) {
  StampReflectOptions honouring;
  honouring.honour_dscp = true;
  RunningReflector reflector(honouring);
  StampSenderOptions o = sender_options("127.0.0.1", reflector.port(), 3);
  o.dscp = 10;  // AF11
  auto r = run_stamp_session(o);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->received, 3u);
  EXPECT_EQ(r->reply_bytes, 52u);       // base + Class of Service TLV
  EXPECT_EQ(r->dscp_at_reflector, 10);  // what the reflector saw on our packets
  EXPECT_EQ(r->dscp_received, 10);      // the reflector applied DSCP1 to its replies
  const StampReflectorCounters c = reflector.finish();
  EXPECT_EQ(c.dscp_received[10], 3u);
  EXPECT_EQ(c.dscp_received[0], 0u);
  EXPECT_EQ(c.dscp_not_honoured, 0u);
}

// By default a request does not choose its reply's DSCP: the reply keeps the reflector's own
// (0 here), the TLV's RP says DSCP1 was not applied, and the refusal is counted.
TEST(StampSession, RequestedDscpIsNotHonouredByDefault) {
  RunningReflector reflector({});
  StampSenderOptions o = sender_options("127.0.0.1", reflector.port(), 3);
  o.dscp = 46;  // EF: what a forged request would like its reflections to ride on
  auto r = run_stamp_session(o);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->received, 3u);
  EXPECT_EQ(r->dscp_at_reflector, 46);  // the reflector still reports what it saw
  EXPECT_EQ(r->dscp_received, 0);       // but its replies leave with its own DSCP
  const StampReflectorCounters c = reflector.finish();
  EXPECT_EQ(c.dscp_received[46], 3u);
  EXPECT_EQ(c.dscp_not_honoured, 3u);
  EXPECT_EQ(c.reflected, 3u);
}

// A scripted stateful reflector: drops the request with sender seq 3 (forward loss), does not
// answer seq 7 (reverse loss), answers seq 5 twice (duplicate) and adds a reply with a foreign
// SSID after seq 6.
void scripted_reflector(int fd, uint64_t requests) {
  uint32_t own_seq = 0;
  for (uint64_t n = 0; n < requests; ++n) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 3000) != 1) return;
    uint8_t buf[2048];
    sockaddr_storage from{};
    socklen_t from_len = sizeof(from);
    const ssize_t size =
        ::recvfrom(fd, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &from_len);
    stamp::SenderPacket req;
    if (size <= 0 ||
        stamp::decode_sender(buf, static_cast<size_t>(size), &req) != stamp::DecodeStatus::kOk) {
      continue;
    }
    if (req.seq == 3) continue;
    const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    stamp::ReflectorPacket r;
    r.seq = own_seq++;
    r.ssid = req.ssid;
    r.sender_seq = req.seq;
    r.sender_timestamp = req.timestamp;
    r.receive_timestamp = stamp::ntp_from_ns(now);
    r.timestamp = stamp::ntp_from_ns(now);
    r.error_estimate = stamp::encode_error_estimate(stamp::make_error_estimate(1000, true, false));
    uint8_t out[44];
    (void)stamp::encode_reflector_base(r, out, sizeof(out));
    auto reply = [&] {
      (void)::sendto(fd, out, sizeof(out), 0, reinterpret_cast<sockaddr*>(&from), from_len);
    };
    if (req.seq == 7) continue;
    reply();
    if (req.seq == 5) reply();
    if (req.seq == 6) {
      r.ssid = 999;
      (void)stamp::encode_reflector_base(r, out, sizeof(out));
      reply();
    }
  }
}

TEST(StampSession, StatefulReflectorSplitsLossByDirection) {
  common::UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len), 0);
  std::thread peer([&fd] { scripted_reflector(fd.get(), 10); });
  StampSenderOptions o = sender_options("127.0.0.1", ntohs(a.sin_port), 10);
  o.timeout_ns = 300'000'000;
  auto r = run_stamp_session(o);
  peer.join();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->sent, 10u);
  EXPECT_EQ(r->received, 8u);
  EXPECT_EQ(r->lost, 2u);
  EXPECT_TRUE(r->stateful_reflector);
  ASSERT_TRUE(r->forward_lost.has_value());
  EXPECT_EQ(*r->forward_lost, 1u);
  EXPECT_EQ(*r->reverse_lost, 1u);
  EXPECT_EQ(r->duplicates, 1u);
  EXPECT_EQ(r->foreign_ssid, 1u);
  EXPECT_EQ(r->reflector_synchronized, true);
  // 1 us: 4295 units of 2^-32 s -> multiplier 135, scale 5 = 1005.8 ns (rounded up).
  EXPECT_EQ(r->reflector_error_estimate_ns, 1005);
  const boost::json::object j = stamp_result_to_json(*r);
  EXPECT_EQ(j.at("forward_lost").as_uint64(), 1u);
  EXPECT_EQ(j.at("reverse_lost").as_uint64(), 1u);
}

TEST(StampSession, NoReflectorMeansNothingReceived) {
  // A free port: bind, read it, close.
  common::UniqueFd fd(::socket(AF_INET, SOCK_DGRAM, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len), 0);
  const uint16_t port = ntohs(a.sin_port);
  fd.reset();
  StampSenderOptions o = sender_options("127.0.0.1", port, 3);
  o.timeout_ns = 200'000'000;
  auto r = run_stamp_session(o);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->received, 0u);
  EXPECT_FALSE(r->clock_valid);
}

TEST(StampSession, BadHostIsAnError) {
  auto r = run_stamp_session(sender_options("no.such.host.invalid", 862, 1));
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("no.such.host.invalid"), std::string::npos);
}

TEST(StampReflector, StatelessEchoesSequenceSsidAndTimestamp) {
  RunningReflector reflector({});
  Client c(AF_INET, reflector.port());
  ASSERT_TRUE(c.ok());
  const int ttl = 17;
  ASSERT_EQ(::setsockopt(c.fd(), IPPROTO_IP, IP_TTL, &ttl, sizeof(ttl)), 0);
  for (uint32_t seq : {100u, 5u, 300u}) {
    c.send(sender_packet(seq, 9, 44));
    const auto reply = c.receive();
    ASSERT_EQ(reply.size(), 44u);
    const stamp::ReflectorPacket r = decode(reply);
    EXPECT_EQ(r.seq, seq);  // stateless: the sender's number
    EXPECT_EQ(r.sender_seq, seq);
    EXPECT_EQ(r.ssid, 9);
    EXPECT_EQ(r.sender_timestamp, stamp::ntp_from_ns(1'000'000'000));
    EXPECT_EQ(r.sender_error_estimate, 0x1234);
    EXPECT_EQ(r.sender_ttl, 17);
    const stamp::ErrorEstimate e = stamp::decode_error_estimate(r.error_estimate);
    EXPECT_FALSE(e.ptp);
    EXPECT_GE(e.multiplier, 1);
    // Reflector timestamps: now-ish, and sent after received.
    const int64_t rx = stamp::ns_from_ntp(r.receive_timestamp);
    const int64_t tx = stamp::ns_from_ntp(r.timestamp);
    const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    EXPECT_LE(rx, tx);
    EXPECT_LE(tx, now + 1);
    EXPECT_GT(rx, now - 10'000'000'000);
  }
}

TEST(StampReflector, StatefulNumbersEachSessionFromZero) {
  StampReflectOptions o;
  o.stateful = true;
  RunningReflector reflector(o);
  Client a(AF_INET, reflector.port());
  Client b(AF_INET, reflector.port());  // another source port: another session
  for (uint32_t i = 0; i < 3; ++i) {
    a.send(sender_packet(100 + 10 * i, 1, 44));
    const stamp::ReflectorPacket r = decode(a.receive());
    EXPECT_EQ(r.seq, i);
    EXPECT_EQ(r.sender_seq, 100 + 10 * i);
  }
  b.send(sender_packet(500, 1, 44));
  EXPECT_EQ(decode(b.receive()).seq, 0u);
  a.send(sender_packet(501, 2, 44));  // same address and port, another SSID
  EXPECT_EQ(decode(a.receive()).seq, 0u);
  a.send(sender_packet(502, 1, 44));  // back to the first session
  EXPECT_EQ(decode(a.receive()).seq, 3u);
  const StampReflectorCounters c = reflector.finish();
  EXPECT_EQ(c.sessions.size(), 3u);
  EXPECT_EQ(c.reflected, 6u);
}

TEST(StampReflector, SymmetricSizeCopiesTheRemainder) {
  RunningReflector reflector({});
  Client c(AF_INET, reflector.port());
  std::vector<uint8_t> p = sender_packet(1, 3, 200);
  for (size_t i = 44; i < p.size(); ++i) p[i] = 0;  // zero padding stays zero
  c.send(p);
  const auto reply = c.receive();
  ASSERT_EQ(reply.size(), 200u);
  for (size_t i = 44; i < reply.size(); ++i) ASSERT_EQ(reply[i], 0) << i;
  // With a TLV (Extra Padding, type 1), the bytes come back too, no flags set.
  p[44] = 0;
  p[45] = stamp::kTlvExtraPadding;
  p[46] = 0;
  p[47] = 152;  // 200 - 48
  for (size_t i = 48; i < p.size(); ++i) p[i] = static_cast<uint8_t>(i);
  c.send(p);
  const auto reply2 = c.receive();
  ASSERT_EQ(reply2.size(), 200u);
  EXPECT_EQ(std::memcmp(reply2.data() + 44, p.data() + 44, 156), 0);
}

// A reply is never larger than its request: TWAMP Light requests of 41..43 bytes get the base
// packet cut to their size; shorter ones would need a larger reply and get none (counted).
TEST(StampReflector, ReplyIsNeverLargerThanTheRequest) {
  RunningReflector reflector({});
  Client c(AF_INET, reflector.port());
  for (size_t size : {size_t{14}, size_t{30}, size_t{40}}) {
    c.send(sender_packet(static_cast<uint32_t>(size), 0, size));
  }
  for (size_t size : {size_t{41}, size_t{43}, size_t{44}, size_t{45}}) {
    c.send(sender_packet(static_cast<uint32_t>(size), 0, size));
    const auto reply = c.receive();  // in order: the refused ones sent no reply before it
    ASSERT_EQ(reply.size(), size);
    EXPECT_EQ(decode(reply).sender_seq, size);
  }
  pollfd pfd{c.fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&pfd, 1, 0), 0);  // nothing else came back
  const StampReflectorCounters counters = reflector.finish();
  EXPECT_EQ(counters.refused_short, 3u);
  EXPECT_EQ(counters.twamp_light, 2u);
  EXPECT_EQ(counters.reflected, 4u);
}

// --answer-short: the RFC 8762 4.6 behaviour, asked for by name.
TEST(StampReflector, AnswerShortGivesShortRequestsTheBasePacket) {
  StampReflectOptions o;
  o.answer_short = true;
  RunningReflector reflector(o);
  Client c(AF_INET, reflector.port());
  for (size_t size : {size_t{14}, size_t{30}, size_t{43}}) {
    c.send(sender_packet(static_cast<uint32_t>(size), 0, size));
    const auto reply = c.receive();
    // 43 bytes hold the whole TWAMP Light reflector packet: that one stays symmetric.
    ASSERT_EQ(reply.size(), size == 43 ? 43u : 44u) << size;
    EXPECT_EQ(decode(reply).sender_seq, size);
  }
  const StampReflectorCounters counters = reflector.finish();
  EXPECT_EQ(counters.twamp_light, 3u);
  EXPECT_EQ(counters.reflected, 3u);
  EXPECT_EQ(counters.refused_short, 0u);
}

// One source gets at most its burst, then the rate: 100 back-to-back 1000-byte requests against
// a 10-reply burst and a rate of one 1028-byte reply per 80 s are answered exactly 10 times
// (the test takes well under 80 s, so no token comes back meanwhile). Another source
// (127.0.0.2) has its own budget: its request, sent last, is answered, and since one socket
// queue serves both, its answer also says every request before it was handled.
TEST(StampReflector, RepliesToOneSourceAreRateLimited) {
  StampReflectOptions o;
  o.rate_per_source_bps = 100;           // 12.5 bytes/s
  o.burst_per_source_bytes = 10 * 1028;  // 10 replies of 1000 bytes + IPv4/UDP headers
  RunningReflector reflector(o);
  Client c(AF_INET, reflector.port());
  constexpr uint32_t kRequests = 100;
  for (uint32_t seq = 0; seq < kRequests; ++seq) c.send(sender_packet(seq, 5, 1000));

  common::UniqueFd other(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl(0x7f000002);  // 127.0.0.2
  ASSERT_EQ(::bind(other.get(), reinterpret_cast<sockaddr*>(&local), sizeof(local)), 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(reflector.port());
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const auto marker = sender_packet(999, 6, 44);
  ASSERT_EQ(::sendto(other.get(), marker.data(), marker.size(), 0,
                     reinterpret_cast<sockaddr*>(&to), sizeof(to)),
            44);
  pollfd marker_reply{other.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&marker_reply, 1, 5000), 1);

  for (uint32_t k = 0; k < 10; ++k) {
    const auto reply = c.receive();
    ASSERT_EQ(reply.size(), 1000u);
    EXPECT_EQ(decode(reply).sender_seq, k);
  }
  pollfd pfd{c.fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&pfd, 1, 0), 0);  // no 11th reply
  const StampReflectorCounters counters = reflector.finish();
  EXPECT_EQ(counters.received, kRequests + 1);
  EXPECT_EQ(counters.reflected, 11u);
  EXPECT_EQ(counters.rate_limited, kRequests - 10);
  EXPECT_EQ(counters.sources_shared, 0u);
}

TEST(StampReflector, GarbageIsCountedAndIgnored) {
  RunningReflector reflector({});
  Client c(AF_INET, reflector.port());
  c.send({1, 2, 3, 4, 5});
  c.send(std::vector<uint8_t>(13, 0xFF));
  c.send({});
  c.send(sender_packet(42, 1, 44));  // in order behind the garbage on one socket
  const auto reply = c.receive();
  ASSERT_EQ(reply.size(), 44u);  // the first reply is the good packet's
  EXPECT_EQ(decode(reply).sender_seq, 42u);
  const StampReflectorCounters counters = reflector.finish();
  EXPECT_EQ(counters.received, 4u);
  EXPECT_EQ(counters.malformed_too_short, 3u);
  EXPECT_EQ(counters.reflected, 1u);
}

TEST(StampReflector, DurationEndsTheRun) {
  StampReflectOptions o;
  o.port = 0;
  o.duration_ns = 50'000'000;
  StampReflector reflector(o);
  const auto start = std::chrono::steady_clock::now();
  reflector.run();  // returns by itself
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));
  const boost::json::object j = reflector.counters_json();
  EXPECT_EQ(j.at("received").as_uint64(), 0u);
  EXPECT_EQ(j.at("schema").as_string(), "detwan-perf-stamp-reflector");
}

}  // namespace
}  // namespace detwan::perf

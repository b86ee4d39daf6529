// detwan-perf wire: the test packet codec (round trip, padding, hostile input, every
// DecodeResult) and the control connection's spec codec, validation and line framing.
#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <boost/json.hpp>

#include "tools/perf/control.h"
#include "tools/perf/perf_wire.h"

namespace detwan::perf {
namespace {

Packet sample_packet(Kind kind) {
  Packet p;
  p.kind = kind;
  p.session = 0xA1B2C3D4;
  p.seq = 0x0102030405060708ULL;
  p.t_a = 1'700'000'000'123'456'789;
  p.t_b = -42;  // fields are signed on the wire too (two's complement)
  p.t_c = 0x7FFFFFFFFFFFFFFFLL;
  return p;
}

TEST(PerfWire, RoundTripsEveryKind) {
  for (Kind kind : {Kind::kHello, Kind::kHelloAck, Kind::kData, Kind::kSyncRequest,
                    Kind::kSyncReply, Kind::kFin}) {
    std::array<uint8_t, 128> buf{};
    const Packet in = sample_packet(kind);
    ASSERT_EQ(encode(in, buf.data(), buf.size(), kHeaderBytes), kHeaderBytes);
    Packet out;
    ASSERT_EQ(decode(buf.data(), kHeaderBytes, &out), DecodeResult::kOk);
    EXPECT_EQ(out.kind, kind);
    EXPECT_EQ(out.session, in.session);
    EXPECT_EQ(out.seq, in.seq);
    EXPECT_EQ(out.t_a, in.t_a);
    EXPECT_EQ(out.t_b, in.t_b);
    EXPECT_EQ(out.t_c, in.t_c);
  }
}

TEST(PerfWire, LayoutIsBigEndianAsDocumented) {
  std::array<uint8_t, kHeaderBytes> buf{};
  Packet p;
  p.kind = Kind::kSyncReply;
  p.session = 0x01020304;
  p.seq = 5;
  p.t_a = 6;
  p.t_b = 7;
  p.t_c = 8;
  ASSERT_EQ(encode(p, buf.data(), buf.size(), buf.size()), kHeaderBytes);
  const std::array<uint8_t, 8> head{'D', 'W', 'P', 'F', 1, 5, 0, 0};
  EXPECT_EQ(std::memcmp(buf.data(), head.data(), head.size()), 0);
  EXPECT_EQ(buf[8], 0x01);
  EXPECT_EQ(buf[11], 0x04);
  for (size_t i = 12; i < 16; ++i) EXPECT_EQ(buf[i], 0) << i;  // reserved
  EXPECT_EQ(buf[23], 5);
  EXPECT_EQ(buf[31], 6);
  EXPECT_EQ(buf[39], 7);
  EXPECT_EQ(buf[47], 8);
}

TEST(PerfWire, PadsWithZerosToTheAskedSize) {
  std::vector<uint8_t> buf(1500, 0xEE);
  ASSERT_EQ(encode(sample_packet(Kind::kData), buf.data(), buf.size(), 1000), 1000u);
  for (size_t i = kHeaderBytes; i < 1000; ++i) ASSERT_EQ(buf[i], 0) << i;
  EXPECT_EQ(buf[1000], 0xEE);  // nothing written past size
  Packet out;
  EXPECT_EQ(decode(buf.data(), 1000, &out), DecodeResult::kOk);
  EXPECT_EQ(out.seq, sample_packet(Kind::kData).seq);
}

TEST(PerfWire, EncodeRefusesWhatDoesNotFit) {
  std::array<uint8_t, 64> buf{};
  const Packet p = sample_packet(Kind::kData);
  EXPECT_EQ(encode(p, buf.data(), buf.size(), kHeaderBytes - 1), 0u);  // below the header
  EXPECT_EQ(encode(p, buf.data(), buf.size(), buf.size() + 1), 0u);    // larger than buf
  EXPECT_EQ(encode(p, nullptr, 0, kHeaderBytes), 0u);
  EXPECT_EQ(encode(p, buf.data(), buf.size(), buf.size()), buf.size());
}

TEST(PerfWire, DecodeNamesEachDefect) {
  std::array<uint8_t, kHeaderBytes> good{};
  ASSERT_EQ(encode(sample_packet(Kind::kData), good.data(), good.size(), good.size()),
            kHeaderBytes);
  Packet out;
  // Every length below the header, including 0 and a null buffer.
  for (size_t n = 0; n < kHeaderBytes; ++n) {
    EXPECT_EQ(decode(good.data(), n, &out), DecodeResult::kTooShort) << n;
  }
  EXPECT_EQ(decode(nullptr, kHeaderBytes, &out), DecodeResult::kTooShort);

  auto bad = good;
  bad[0] = 'X';
  EXPECT_EQ(decode(bad.data(), bad.size(), &out), DecodeResult::kBadMagic);
  bad = good;
  bad[3] = 'B';  // the probe's magic "DWPB": another tool's packet
  EXPECT_EQ(decode(bad.data(), bad.size(), &out), DecodeResult::kBadMagic);
  bad = good;
  bad[4] = 2;
  EXPECT_EQ(decode(bad.data(), bad.size(), &out), DecodeResult::kBadVersion);
  for (uint8_t kind : {uint8_t{0}, uint8_t{7}, uint8_t{255}}) {
    bad = good;
    bad[5] = kind;
    EXPECT_EQ(decode(bad.data(), bad.size(), &out), DecodeResult::kBadKind) << int{kind};
  }
}

TEST(PerfWire, FailedDecodeLeavesOutputUntouched) {
  std::array<uint8_t, kHeaderBytes> buf{};
  Packet out = sample_packet(Kind::kFin);
  EXPECT_EQ(decode(buf.data(), buf.size(), &out), DecodeResult::kBadMagic);  // all zeros
  EXPECT_EQ(out.seq, sample_packet(Kind::kFin).seq);
  EXPECT_EQ(out.kind, Kind::kFin);
}

TEST(PerfWire, HostileBytesNeverCrash) {
  // A deterministic pseudo-random spray of lengths and contents, with valid magic/version
  // planted half of the time so the later checks are reached too.
  std::vector<uint8_t> buf(256);
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  int ok = 0;
  for (int i = 0; i < 20000; ++i) {
    for (auto& b : buf) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      b = static_cast<uint8_t>(x);
    }
    if (i % 2 == 0) {
      buf[0] = 'D';
      buf[1] = 'W';
      buf[2] = 'P';
      buf[3] = 'F';
      buf[4] = kWireVersion;
    }
    const size_t n = static_cast<size_t>(x % buf.size());
    Packet out;
    const DecodeResult r = decode(buf.data(), n, &out);
    if (r == DecodeResult::kOk) {
      ++ok;
      EXPECT_GE(n, kHeaderBytes);
      EXPECT_GE(static_cast<int>(out.kind), 1);
      EXPECT_LE(static_cast<int>(out.kind), 6);
    }
  }
  EXPECT_GT(ok, 0);  // the planted headers with a valid kind do decode
}

TEST(PerfWire, ToStringNamesEveryResult) {
  EXPECT_STREQ(to_string(DecodeResult::kOk), "ok");
  EXPECT_STREQ(to_string(DecodeResult::kTooShort), "too short");
  EXPECT_STREQ(to_string(DecodeResult::kBadMagic), "bad magic");
  EXPECT_STREQ(to_string(DecodeResult::kBadVersion), "bad version");
  EXPECT_STREQ(to_string(DecodeResult::kBadKind), "bad kind");
}

}  // namespace
}  // namespace detwan::perf

// ---- control connection: TestSpec codec, validation and JSON-line framing (control.h) ----

namespace detwan::perf {
namespace {

TEST(PerfControl, SpecRoundTripsThroughJson) {
  TestSpec in;
  in.mode = Mode::kThroughput;
  in.direction = Direction::kBidir;
  in.schedule = ScheduleKind::kBurst;
  in.pps = 12345;
  in.bitrate_bps = 99'000'000;
  in.burst_packets = 7;
  in.size_bytes = 1400;
  in.duration_ns = 3'000'000'000;
  in.bound_ns = 5'000'000;
  in.interval_ns = 250'000'000;
  in.dscp = 46;
  in.seed = 0xFFFFFFFFFFFFFFFFULL;  // full 64-bit range survives
  in.want_packets = true;
  const std::string text = boost::json::serialize(spec_to_json(in));
  auto out = spec_from_json(boost::json::parse(text));
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(out->mode, in.mode);
  EXPECT_EQ(out->direction, in.direction);
  EXPECT_EQ(out->schedule, in.schedule);
  EXPECT_EQ(out->pps, in.pps);
  EXPECT_EQ(out->bitrate_bps, in.bitrate_bps);
  EXPECT_EQ(out->burst_packets, in.burst_packets);
  EXPECT_EQ(out->size_bytes, in.size_bytes);
  EXPECT_EQ(out->duration_ns, in.duration_ns);
  EXPECT_EQ(out->bound_ns, in.bound_ns);
  EXPECT_EQ(out->interval_ns, in.interval_ns);
  EXPECT_EQ(out->dscp, in.dscp);
  EXPECT_EQ(out->seed, in.seed);
  EXPECT_EQ(out->want_packets, in.want_packets);
}

TEST(PerfControl, SpecFromJsonNamesTheBadField) {
  boost::json::object o = spec_to_json(TestSpec{});
  o.erase("pps");
  auto missing = spec_from_json(o);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("spec.pps"), std::string::npos);

  o = spec_to_json(TestSpec{});
  o["mode"] = "warp";
  auto bad_enum = spec_from_json(o);
  ASSERT_FALSE(bad_enum);
  EXPECT_NE(bad_enum.error().message.find("spec.mode"), std::string::npos);

  o = spec_to_json(TestSpec{});
  o["size_bytes"] = -5;
  auto negative = spec_from_json(o);
  ASSERT_FALSE(negative);
  EXPECT_NE(negative.error().message.find("spec.size_bytes"), std::string::npos);

  o = spec_to_json(TestSpec{});
  o["size_bytes"] = uint64_t{1} << 40;  // does not fit the 32-bit field
  EXPECT_FALSE(spec_from_json(o));
  EXPECT_FALSE(spec_from_json(boost::json::value(42)));
}

TEST(PerfControl, ValidationNamesFieldAndLimit) {
  TestSpec s;
  EXPECT_TRUE(validate_spec(s));
  s.size_bytes = 20;
  auto small = validate_spec(s);
  ASSERT_FALSE(small);
  EXPECT_EQ(small.error().message, "spec.size_bytes: 20 is below the 48-byte header");
  s = TestSpec{};
  s.size_bytes = 65508;
  EXPECT_FALSE(validate_spec(s));
  s = TestSpec{};
  s.pps = 0;
  EXPECT_FALSE(validate_spec(s));
  s.pps = 10'000'001;
  EXPECT_FALSE(validate_spec(s));
  s = TestSpec{};
  s.duration_ns = 24 * 3600 * 1'000'000'000LL + 1;
  EXPECT_FALSE(validate_spec(s));
  s = TestSpec{};
  s.dscp = 64;
  EXPECT_FALSE(validate_spec(s));
  // 10 Mpps for 10 s: 100 M sequence numbers, above what a receiver tracks.
  s = TestSpec{};
  s.pps = 10'000'000;
  s.duration_ns = 10'000'000'000;
  auto big = validate_spec(s);
  ASSERT_FALSE(big);
  EXPECT_NE(big.error().message.find("pps x duration"), std::string::npos);
  // Unpaced throughput is capped by the sender instead.
  s.mode = Mode::kThroughput;
  s.bitrate_bps = 0;
  EXPECT_TRUE(validate_spec(s));
  EXPECT_EQ(max_packets_for(s), kMaxPacketsPerDirection);
}

TEST(PerfControl, MaxPacketsHasTenPercentAndThousandSlack) {
  TestSpec s;
  s.pps = 1000;
  s.duration_ns = 2'000'000'000;
  EXPECT_EQ(max_packets_for(s), 2000u * 11 / 10 + 1000);
}

class ControlChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    channel_.emplace(common::UniqueFd(fds[0]));
    peer_.reset(fds[1]);
  }
  void write_peer(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::send(peer_.get(), bytes.data() + done, bytes.size() - done, 0);
      ASSERT_GT(n, 0);
      done += static_cast<size_t>(n);
    }
  }
  std::optional<ControlChannel> channel_;
  common::UniqueFd peer_;
};

TEST_F(ControlChannelTest, SplitsLinesAcrossReads) {
  write_peer(R"({"type":"a"})"
             "\n"
             R"({"type":)");
  auto first = channel_->receive(1'000'000'000);
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(first->at("type").as_string(), "a");
  write_peer(R"("b"})"
             "\n");
  auto second = channel_->receive(1'000'000'000);
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_EQ(second->at("type").as_string(), "b");
}

TEST_F(ControlChannelTest, SendWritesOneLine) {
  ASSERT_TRUE(channel_->send(boost::json::object{{"type", "x"}, {"n", 1}}));
  char buf[64] = {};
  const ssize_t n = ::recv(peer_.get(), buf, sizeof(buf) - 1, 0);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), R"({"type":"x","n":1})"
                                                      "\n");
}

TEST_F(ControlChannelTest, RejectsInvalidJsonAndNonObjects) {
  write_peer("not json\n");
  auto bad = channel_->receive(1'000'000'000);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, common::ErrorCode::kInvalidArgument);
  SetUp();
  write_peer("[1,2,3]\n");
  auto array = channel_->receive(1'000'000'000);
  ASSERT_FALSE(array);
  EXPECT_EQ(array.error().code, common::ErrorCode::kInvalidArgument);
}

TEST_F(ControlChannelTest, RejectsALineOverOneMebibyte) {
  // Written from a thread: the socket buffer is far smaller than the line.
  std::thread writer([this] {
    const std::string chunk(64 * 1024, 'x');
    for (int i = 0; i < 20; ++i) {
      if (::send(peer_.get(), chunk.data(), chunk.size(), MSG_NOSIGNAL) <= 0) return;
    }
  });
  auto r = channel_->receive(5'000'000'000);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("1 MiB"), std::string::npos) << r.error().message;
  channel_->close();  // unblocks the writer
  writer.join();
}

TEST_F(ControlChannelTest, ReportsTheClosedConnectionAfterTheLastLine) {
  write_peer(R"({"type":"error","message":"m"})"
             "\n");
  peer_.reset();
  auto last = channel_->receive(1'000'000'000);
  ASSERT_TRUE(last) << last.error().message;  // the line before the close is delivered
  EXPECT_EQ(last->at("type").as_string(), "error");
  auto closed = channel_->receive(1'000'000'000);
  ASSERT_FALSE(closed);
  EXPECT_NE(closed.error().message.find("closed"), std::string::npos);
}

TEST(PerfControl, FormatsAddressesWithPorts) {
  EXPECT_EQ(format_address(probe::parse_address("10.0.0.2", 5301)), "10.0.0.2:5301");
  EXPECT_EQ(format_address(probe::parse_address("::1", 80)), "[::1]:80");
  const auto a = probe::parse_address("127.0.0.1", 1);
  const auto b = probe::parse_address("127.0.0.1", 2);
  EXPECT_TRUE(same_address(a.storage, a.length, a.storage, a.length));
  EXPECT_FALSE(same_address(a.storage, a.length, b.storage, b.length));
}

}  // namespace
}  // namespace detwan::perf

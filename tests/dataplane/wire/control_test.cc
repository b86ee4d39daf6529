// Control bodies: golden bytes, round trips (table and seeded random), every body drop reason,
// and the clock-offset arithmetic.
#include "dataplane/wire/control.h"

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "tests/dataplane/wire/wire_test_util.h"

namespace detwan::dataplane::wire {
namespace {

using testing::Bytes;
using testing::get_be;
using testing::put_be;
using testing::sample_header;

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

// A control packet's header carries its sender's epoch in cycle_id: a keepalive's own epoch.
TunnelHeader header_for(const ControlBody& body, TunnelHeader h = sample_header()) {
  if (const auto* ka = std::get_if<Keepalive>(&body)) h.cycle_id = ka->epoch;
  return h;
}

Bytes control_packet(const ControlBody& body, TunnelHeader base = sample_header()) {
  const TunnelHeader h = header_for(body, base);
  Bytes out(kHeaderSize + 64);
  const EncodeResult r = encode_control(h, body, out);
  EXPECT_EQ(r.status, EncodeStatus::kOk);
  out.resize(r.size);
  return out;
}

Decoded<ControlBody> decode_both(const Bytes& bytes) {
  const auto packet = decode(bytes);
  if (!packet) return packet.error();
  return decode_control(*packet);
}

DropReason body_reason(const Bytes& bytes) {
  const auto d = decode_both(bytes);
  EXPECT_FALSE(d.ok());
  return d.ok() ? DropReason::kCount : d.error();
}

TEST(ControlLayout, BodySizes) {
  EXPECT_EQ(body_size(ControlType::kTimeRequest), 32u);
  EXPECT_EQ(body_size(ControlType::kTimeResponse), 32u);
  EXPECT_EQ(body_size(ControlType::kKeepalive), 40u);
  EXPECT_EQ(body_size(ControlType{0}), 0u);
  EXPECT_EQ(body_size(ControlType{4}), 0u);
  // No amplification: a response is never larger than its request.
  EXPECT_EQ(kTimeRequestBodySize, kTimeResponseBodySize);
}

TEST(ControlLayout, HeaderIsSetFromTheBody) {
  const Bytes b = control_packet(Keepalive{7, 1'000'000, 6});
  ASSERT_EQ(b.size(), kHeaderSize + kKeepaliveBodySize);
  EXPECT_EQ(get_be(b, kFlagsOffset, 1), kFlagControl);  // sample_header's D|R replaced
  EXPECT_EQ(get_be(b, kTypeOffset, 1), 3u);
  EXPECT_EQ(get_be(b, kPayloadLengthOffset, 2), kKeepaliveBodySize);
  EXPECT_EQ(get_be(b, kTunnelIdOffset, 4), sample_header().tunnel_id);
  EXPECT_EQ(get_be(b, kSequenceOffset, 8), sample_header().sequence);
}

TEST(ControlLayout, GoldenBodies) {
  const Bytes req = control_packet(TimeRequest{0x0102030405060708, 0x1112131415161718});
  ASSERT_EQ(req.size(), kHeaderSize + 32);
  EXPECT_EQ(get_be(req, kTypeOffset, 1), 1u);
  EXPECT_EQ(get_be(req, kHeaderSize + 0, 8), 0x0102030405060708u);
  EXPECT_EQ(get_be(req, kHeaderSize + 8, 8), 0x1112131415161718u);
  EXPECT_EQ(get_be(req, kHeaderSize + 16, 8), 0u);
  EXPECT_EQ(get_be(req, kHeaderSize + 24, 8), 0u);

  const Bytes resp = control_packet(TimeResponse{9, 100, 200, 300});
  ASSERT_EQ(resp.size(), kHeaderSize + 32);
  EXPECT_EQ(get_be(resp, kTypeOffset, 1), 2u);
  EXPECT_EQ(get_be(resp, kHeaderSize + 0, 8), 9u);
  EXPECT_EQ(get_be(resp, kHeaderSize + 8, 8), 100u);
  EXPECT_EQ(get_be(resp, kHeaderSize + 16, 8), 200u);
  EXPECT_EQ(get_be(resp, kHeaderSize + 24, 8), 300u);

  const Bytes ka =
      control_packet(Keepalive{0xAABB, 5'000'000, 0xAABA, 0x0102030405060708, 0x3132333435363738});
  ASSERT_EQ(ka.size(), kHeaderSize + 40);
  EXPECT_EQ(get_be(ka, kHeaderSize + 0, 8), 0xAABBu);
  EXPECT_EQ(get_be(ka, kHeaderSize + 8, 8), 5'000'000u);
  EXPECT_EQ(get_be(ka, kHeaderSize + 16, 8), 0xAABAu);
  EXPECT_EQ(get_be(ka, kHeaderSize + 24, 8), 0x0102030405060708u);
  EXPECT_EQ(get_be(ka, kHeaderSize + 32, 8), 0x3132333435363738u);
  EXPECT_EQ(get_be(ka, kCycleIdOffset, 8), 0x0102030405060708u);  // the epoch, in the clear
}

TEST(ControlRoundTrip, BoundaryValues) {
  const std::vector<ControlBody> bodies = {
      TimeRequest{0, 0},
      TimeRequest{~uint64_t{0}, kI64Max},
      TimeResponse{0, 0, 0, 0},
      TimeResponse{~uint64_t{0}, kI64Max, kI64Max, kI64Max},
      TimeResponse{1, kI64Max, 0, 0},  // t1 vs t2 unconstrained: clocks may differ arbitrarily
      Keepalive{1, kMinKeepaliveIntervalNs, 0},
      Keepalive{~uint64_t{0}, kMaxKeepaliveIntervalNs, ~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}},
  };
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    const Bytes b = control_packet(bodies[i]);
    const auto d = decode_both(b);
    ASSERT_TRUE(d.ok()) << i << ": " << to_string(d.error());
    EXPECT_EQ(*d, bodies[i]) << i;
    EXPECT_EQ(type_of(*d), type_of(bodies[i]));
  }
}

TEST(ControlRoundTrip, SeededRandomBodies) {
  std::mt19937_64 rng(77);
  auto time = [&] { return static_cast<int64_t>(rng() >> 1); };
  for (int i = 0; i < 20000; ++i) {
    ControlBody body;
    switch (rng() % 3) {
      case 0:
        body = TimeRequest{rng(), time()};
        break;
      case 1: {
        const int64_t t2 = time();
        const uint64_t room = static_cast<uint64_t>(kI64Max - t2) + 1;  // t3 in [t2, 2^63)
        const int64_t t3 = t2 + static_cast<int64_t>(rng() % room);
        body = TimeResponse{rng(), time(), t2, t3};
        break;
      }
      default:
        body = Keepalive{rng() | 1,
                         kMinKeepaliveIntervalNs +
                             static_cast<int64_t>(
                                 rng() % (kMaxKeepaliveIntervalNs - kMinKeepaliveIntervalNs + 1)),
                         rng(), rng() | 1, rng()};
    }
    TunnelHeader h = sample_header();
    h.path_id = static_cast<uint8_t>(rng());
    h.sequence = rng();
    const Bytes b = control_packet(body, h);
    const auto packet = decode(b);
    ASSERT_TRUE(packet.ok()) << i;
    EXPECT_EQ(packet->header.path_id, h.path_id);
    EXPECT_EQ(packet->header.sequence, h.sequence);
    const auto d = decode_control(*packet);
    ASSERT_TRUE(d.ok()) << i << ": " << to_string(d.error());
    ASSERT_EQ(*d, body) << i;
  }
}

TEST(ControlDecode, WrongBodyLengthAtEverySize) {
  for (ControlType type :
       {ControlType::kTimeRequest, ControlType::kTimeResponse, ControlType::kKeepalive}) {
    for (std::size_t n = 0; n <= 40; ++n) {
      TunnelHeader h = sample_header();
      h.flags = kFlagControl;
      h.type = static_cast<uint8_t>(type);
      const Bytes b = testing::datagram(h, testing::payload_of(n));
      const auto d = decode_both(b);
      if (n == body_size(type)) {
        EXPECT_NE(d.ok() ? DropReason::kCount : d.error(), DropReason::kControlLength);
      } else {
        EXPECT_EQ(body_reason(b), DropReason::kControlLength)
            << "type " << int(type) << " size " << n;
      }
    }
  }
}

TEST(ControlDecode, DataPacketsAreNotControlBodies) {
  const Bytes b = testing::datagram(sample_header(), testing::payload_of(32));
  const auto packet = decode(b);
  ASSERT_TRUE(packet.ok());
  const auto d = decode_control(*packet);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error(), DropReason::kBadFlags);
  PacketView forged = *packet;  // a caller that skipped decode(): still no crash
  forged.header.flags = kFlagControl;
  forged.header.type = 9;
  EXPECT_EQ(decode_control(forged).error(), DropReason::kBadType);
}

TEST(ControlDecode, ReservedBytesOfTheRequest) {
  for (std::size_t i = 16; i < 32; ++i) {
    Bytes b = control_packet(TimeRequest{1, 2});
    b[kHeaderSize + i] = std::byte{0x01};
    EXPECT_EQ(body_reason(b), DropReason::kReservedSet) << "body byte " << i;
  }
}

TEST(ControlDecode, TimestampsWithTheTopBit) {
  {
    Bytes b = control_packet(TimeRequest{1, 2});
    put_be(b, kHeaderSize + 8, uint64_t{1} << 63, 8);
    EXPECT_EQ(body_reason(b), DropReason::kBadTimestamp);
  }
  for (std::size_t field : {8u, 16u, 24u}) {
    Bytes b = control_packet(TimeResponse{1, 2, 3, 4});
    put_be(b, kHeaderSize + field, ~uint64_t{0}, 8);
    EXPECT_EQ(body_reason(b), DropReason::kBadTimestamp) << "field at " << field;
  }
}

TEST(ControlDecode, OutOfRangeValues) {
  Bytes resp = control_packet(TimeResponse{1, 2, 30, 30});
  EXPECT_TRUE(decode_both(resp).ok());
  put_be(resp, kHeaderSize + 24, 29, 8);  // t3 < t2
  EXPECT_EQ(body_reason(resp), DropReason::kBadControl);

  Bytes ka = control_packet(Keepalive{1, kMinKeepaliveIntervalNs, 0});
  put_be(ka, kHeaderSize + 0, 0, 8);  // counter 0
  EXPECT_EQ(body_reason(ka), DropReason::kBadControl);
  Bytes no_epoch = control_packet(Keepalive{1, kMinKeepaliveIntervalNs, 0});
  put_be(no_epoch, kHeaderSize + 24, 0, 8);  // epoch 0
  EXPECT_EQ(body_reason(no_epoch), DropReason::kBadControl);
  Bytes other_epoch = control_packet(Keepalive{1, kMinKeepaliveIntervalNs, 0, 7});
  put_be(other_epoch, kHeaderSize + 24, 8, 8);  // the body's epoch is not the header's
  EXPECT_EQ(body_reason(other_epoch), DropReason::kBadControl);
  for (const ControlBody& body : {ControlBody{TimeRequest{1, 2}},
                                  ControlBody{TimeResponse{1, 2, 3, 4}},
                                  ControlBody{Keepalive{1, kMinKeepaliveIntervalNs, 0, 7}}}) {
    Bytes no_sender = control_packet(body);
    put_be(no_sender, kCycleIdOffset, 0, 8);  // a control packet's header epoch 0
    EXPECT_EQ(body_reason(no_sender), DropReason::kBadControl);
  }
  for (uint64_t interval : {uint64_t{0}, uint64_t(kMinKeepaliveIntervalNs - 1),
                            uint64_t(kMaxKeepaliveIntervalNs + 1), ~uint64_t{0}}) {
    Bytes k = control_packet(Keepalive{1, kMinKeepaliveIntervalNs, 0});
    put_be(k, kHeaderSize + 8, interval, 8);
    EXPECT_EQ(body_reason(k), DropReason::kBadControl) << interval;
  }
}

TEST(ControlEncode, RefusesBadBodiesAndShortBuffers) {
  Bytes out(kHeaderSize + 32, std::byte{0x5A});
  const Bytes untouched = out;
  EXPECT_EQ(encode_control(sample_header(), TimeRequest{1, -1}, out).status,
            EncodeStatus::kInvalidHeader);
  EXPECT_EQ(encode_control(sample_header(), TimeResponse{1, 1, 5, 4}, out).status,
            EncodeStatus::kInvalidHeader);
  EXPECT_EQ(encode_control(header_for(Keepalive{}), Keepalive{0, 1'000'000, 0}, out).status,
            EncodeStatus::kInvalidHeader);
  EXPECT_EQ(encode_control(header_for(Keepalive{}), Keepalive{1, 0, 0}, out).status,
            EncodeStatus::kInvalidHeader);
  // The sender's epoch: never 0, and a keepalive's header and body agree on it.
  EXPECT_EQ(encode_control(sample_header(), Keepalive{1, 1'000'000, 0, 5}, out).status,
            EncodeStatus::kInvalidHeader);
  TunnelHeader no_epoch = sample_header();
  no_epoch.cycle_id = 0;
  EXPECT_EQ(encode_control(no_epoch, TimeRequest{1, 1}, out).status, EncodeStatus::kInvalidHeader);
  TunnelHeader no_tunnel = sample_header();
  no_tunnel.tunnel_id = 0;
  EXPECT_EQ(encode_control(no_tunnel, TimeRequest{1, 1}, out).status, EncodeStatus::kInvalidHeader);
  EXPECT_EQ(out, untouched);

  Bytes short_out(kHeaderSize + 31, std::byte{0x5A});
  const EncodeResult r = encode_control(sample_header(), TimeRequest{1, 1}, short_out);
  EXPECT_EQ(r.status, EncodeStatus::kNoSpace);
  EXPECT_EQ(r.size, 0u);
  EXPECT_EQ(short_out, Bytes(kHeaderSize + 31, std::byte{0x5A}));
  Bytes ka_out(kHeaderSize + kKeepaliveBodySize);
  EXPECT_EQ(encode_control(header_for(Keepalive{}), Keepalive{1, 1'000'000, 0}, ka_out).size,
            kHeaderSize + kKeepaliveBodySize);
}

// --- clock offset ---------------------------------------------------------------------------

// Simulated exchange: the peer's clock = local + offset; one-way delays d_fwd and d_back.
TimeResponse exchange(int64_t t1, int64_t offset, int64_t d_fwd, int64_t hold, int64_t d_back,
                      int64_t& t4) {
  const int64_t t2 = t1 + d_fwd + offset;
  const int64_t t3 = t2 + hold;
  t4 = t3 - offset + d_back;
  return TimeResponse{42, t1, t2, t3};
}

TEST(ClockSample, SymmetricPathsGiveTheExactOffset) {
  for (int64_t offset : {int64_t{0}, int64_t{1'500'000}, int64_t{-2'000'000'000}}) {
    int64_t t4 = 0;
    const TimeResponse r = exchange(10'000'000'000, offset, 5'000'000, 20'000, 5'000'000, t4);
    const auto s = clock_sample(r, t4);
    ASSERT_TRUE(s.has_value()) << offset;
    EXPECT_EQ(s->offset_ns, offset);
    EXPECT_EQ(s->rtt_ns, 10'000'000);
  }
}

TEST(ClockSample, AsymmetryErrorIsHalfTheDifference) {
  int64_t t4 = 0;
  const TimeResponse r = exchange(1'000'000'000, 777, 6'000'000, 0, 4'000'000, t4);
  const auto s = clock_sample(r, t4);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->offset_ns, 777 + 1'000'000);  // (d_fwd - d_back) / 2
  EXPECT_EQ(s->rtt_ns, 10'000'000);
}

TEST(ClockSample, RoundsTowardZero) {
  // (t2 - t1) + (t3 - t4) = 1 -> 0, -1 -> 0, 3 -> 1, -3 -> -1.
  EXPECT_EQ(clock_sample(TimeResponse{0, 100, 101, 101}, 101)->offset_ns, 0);
  EXPECT_EQ(clock_sample(TimeResponse{0, 100, 100, 100}, 101)->offset_ns, 0);
  EXPECT_EQ(clock_sample(TimeResponse{0, 100, 103, 103}, 103)->offset_ns, 1);
  EXPECT_EQ(clock_sample(TimeResponse{0, 100, 100, 100}, 103)->offset_ns, -1);
}

TEST(ClockSample, RejectsImpossibleExchanges) {
  EXPECT_EQ(clock_sample(TimeResponse{0, 100, 200, 199}, 300), std::nullopt);  // t3 < t2
  EXPECT_EQ(clock_sample(TimeResponse{0, 100, 200, 250}, 120), std::nullopt);  // rtt < 0
  EXPECT_EQ(clock_sample(TimeResponse{0, -1, 200, 250}, 400), std::nullopt);
  EXPECT_EQ(clock_sample(TimeResponse{0, 100, 200, 250}, -5), std::nullopt);
  // Zero round trip is possible in a simulation.
  EXPECT_TRUE(clock_sample(TimeResponse{0, 100, 200, 250}, 150).has_value());
}

TEST(ClockSample, ExtremeValuesDoNotOverflow) {
  // Offset near -2^63 and +2^63.
  auto s = clock_sample(TimeResponse{0, kI64Max, 0, 0}, kI64Max);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->rtt_ns, 0);
  EXPECT_EQ(s->offset_ns, -kI64Max);
  s = clock_sample(TimeResponse{0, 0, kI64Max, kI64Max}, 0);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->offset_ns, kI64Max);
  // Round trip of 2^63 - 1 fits; the responder cannot hold longer than the round trip.
  s = clock_sample(TimeResponse{0, 0, 5, 5}, kI64Max);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->rtt_ns, kI64Max);
  EXPECT_EQ(clock_sample(TimeResponse{0, 0, 0, kI64Max}, 1), std::nullopt);
}

}  // namespace
}  // namespace detwan::dataplane::wire

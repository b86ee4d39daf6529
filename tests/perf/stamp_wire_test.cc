// STAMP wire format: timestamps, error estimate, packets and TLVs. Expected values are written
// out from RFC 8762 / RFC 8972 / RFC 4656, not computed with the code under test.
#include "tools/perf/stamp_wire.h"

#include <array>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>
#include <sys/timex.h>

namespace detwan::perf::stamp {
namespace {

constexpr uint64_t kUnixEpochNtp = uint64_t{2'208'988'800} << 32;

TEST(StampTimestamp, UnixEpochIsNtp2208988800) {
  EXPECT_EQ(ntp_from_ns(0), kUnixEpochNtp);
  EXPECT_EQ(ns_from_ntp(kUnixEpochNtp), 0);
}

TEST(StampTimestamp, HalfSecondIsFraction0x80000000) {
  EXPECT_EQ(ntp_from_ns(500'000'000), kUnixEpochNtp | 0x80000000u);
  EXPECT_EQ(ntp_from_ns(250'000'000), kUnixEpochNtp | 0x40000000u);
  EXPECT_EQ(ns_from_ntp(kUnixEpochNtp | 0x80000000u), 500'000'000);
  // One second later, and one 2^-32 s unit: 0.2328 ns rounds to 0.
  EXPECT_EQ(ntp_from_ns(1'000'000'000), kUnixEpochNtp + (uint64_t{1} << 32));
  EXPECT_EQ(ns_from_ntp(kUnixEpochNtp | 1u), 0);
  // 2^-32 s * 5 = 1.164 ns -> 1 ns.
  EXPECT_EQ(ns_from_ntp(kUnixEpochNtp | 5u), 1);
}

TEST(StampTimestamp, NtpRoundTripIsExactToTheNanosecond) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> when(0, int64_t{2'000'000'000} * 1'000'000'000);
  for (int i = 0; i < 10000; ++i) {
    const int64_t ns = when(rng);
    ASSERT_EQ(ns_from_ntp(ntp_from_ns(ns)), ns) << ns;
  }
  // 2026-12-01T00:00:00Z = 1796083200 s after the Unix epoch.
  EXPECT_EQ(ntp_from_ns(int64_t{1'796'083'200} * 1'000'000'000) >> 32,
            uint64_t{1'796'083'200} + 2'208'988'800);
}

TEST(StampTimestamp, NtpEraOneAfter2036) {
  // NTP seconds wrap to 0 at 2036-02-07T06:28:16Z = Unix 2085978496.
  const int64_t wrap_ns = int64_t{2'085'978'496} * 1'000'000'000;
  EXPECT_EQ(ntp_from_ns(wrap_ns), 0u);
  EXPECT_EQ(ns_from_ntp(0), wrap_ns);
  EXPECT_EQ(ns_from_ntp(uint64_t{10} << 32), wrap_ns + 10'000'000'000);
}

TEST(StampTimestamp, PtpSecondsAndNanoseconds) {
  EXPECT_EQ(ptp_from_ns(1'500'000'000, 0), (uint64_t{1} << 32) | 500'000'000u);
  EXPECT_EQ(ptp_from_ns(1'500'000'000, 37), (uint64_t{38} << 32) | 500'000'000u);
  EXPECT_EQ(ns_from_ptp((uint64_t{38} << 32) | 500'000'000u, 37), 1'500'000'000);
  const int64_t t = int64_t{1'796'083'200} * 1'000'000'000 + 123'456'789;
  EXPECT_EQ(ptp_from_ns(t, 0) & 0xffffffffu, 123'456'789u);
  EXPECT_EQ(ns_from_ptp(ptp_from_ns(t, 37), 37), t);
  EXPECT_EQ(decode_timestamp(true, encode_timestamp(StampTimestamp::kPtp, t, 5), 5), t);
  EXPECT_EQ(decode_timestamp(false, encode_timestamp(StampTimestamp::kNtp, t, 5), 5), t);
}

TEST(StampErrorEstimate, BitLayout) {
  ErrorEstimate e{true, true, 5, 200};
  EXPECT_EQ(encode_error_estimate(e), 0xC5C8);  // S=1 Z=1 scale=000101 multiplier=0xC8
  EXPECT_EQ(encode_error_estimate({false, false, 63, 1}), 0x3F01);
  const ErrorEstimate d = decode_error_estimate(0x8A07);  // S=1 Z=0 scale=10 mult=7
  EXPECT_TRUE(d.synchronized);
  EXPECT_FALSE(d.ptp);
  EXPECT_EQ(d.scale, 10);
  EXPECT_EQ(d.multiplier, 7);
}

TEST(StampErrorEstimate, ValueIsMultiplierTimes2ToScaleMinus32) {
  EXPECT_EQ(error_estimate_ns({false, false, 32, 1}), 1'000'000'000);  // 1 s
  EXPECT_EQ(error_estimate_ns({false, false, 31, 3}), 1'500'000'000);
  EXPECT_EQ(error_estimate_ns({false, false, 0, 1}), 0);             // 0.23 ns, rounded down
  EXPECT_EQ(error_estimate_ns({false, false, 0, 255}), 59);          // 59.37 ns
  EXPECT_EQ(error_estimate_ns({false, false, 63, 255}), INT64_MAX);  // saturates
}

TEST(StampErrorEstimate, EncodingNeverUnderstatesAndIsTight) {
  const ErrorEstimate one_s = make_error_estimate(1'000'000'000, true, false);
  EXPECT_EQ(one_s.scale, 25);  // 128 * 2^25 = 2^32 units = 1 s exactly
  EXPECT_EQ(one_s.multiplier, 128);
  EXPECT_TRUE(one_s.synchronized);
  const ErrorEstimate zero = make_error_estimate(0, false, true);
  EXPECT_EQ(zero.multiplier, 1);  // never 0
  EXPECT_EQ(zero.scale, 0);
  EXPECT_TRUE(zero.ptp);
  for (int64_t err : {int64_t{1}, int64_t{1000}, int64_t{16'000}, int64_t{999'999},
                      int64_t{16'000'000'000}, int64_t{123'456'789'012}}) {
    const ErrorEstimate e = make_error_estimate(err, false, false);
    ASSERT_GE(e.multiplier, 1);
    const int64_t back = error_estimate_ns(e);
    // >= err up to the 1 ns lost by rounding the decoded value down; within 1/128 above.
    EXPECT_GE(back + 1, err) << err;
    EXPECT_LE(back, err + err / 128 + 1) << err;
  }
}

TEST(StampErrorEstimate, LocalClockIsReportedHonestly) {
  timex tx{};
  const int state = ::adjtimex(&tx);
  ASSERT_GE(state, 0);
  const bool synced = state != TIME_ERROR && (tx.status & STA_UNSYNC) == 0;
  const LocalClockState local = read_local_clock(StampTimestamp::kPtp);
  EXPECT_EQ(local.estimate.synchronized, synced);
  EXPECT_TRUE(local.estimate.ptp);
  EXPECT_GE(local.estimate.multiplier, 1);
  // Never below what the kernel claims (esterror when synchronised, maxerror when not; both
  // in microseconds and moving slowly between the two calls).
  const int64_t kernel_ns = (synced ? tx.esterror : tx.maxerror) * 1000;
  EXPECT_GE(error_estimate_ns(local.estimate) + 1, kernel_ns);
  EXPECT_EQ(local.tai_offset_s, tx.tai);
  EXPECT_FALSE(read_local_clock(StampTimestamp::kNtp).estimate.ptp);
}

TEST(StampPacket, SenderLayoutAndRoundTrip) {
  SenderPacket p{0x01020304, 0x1122334455667788ull, 0xC5C8, 0xBEEF};
  std::array<uint8_t, 64> buf;
  buf.fill(0xAA);
  ASSERT_EQ(encode_sender(p, buf.data(), buf.size(), 60), 60u);
  const uint8_t expected[16] = {1,    2,    3,    4,    0x11, 0x22, 0x33, 0x44,
                                0x55, 0x66, 0x77, 0x88, 0xC5, 0xC8, 0xBE, 0xEF};
  EXPECT_EQ(std::memcmp(buf.data(), expected, 16), 0);
  for (size_t i = 16; i < 60; ++i) ASSERT_EQ(buf[i], 0) << i;  // MBZ and padding
  EXPECT_EQ(buf[60], 0xAA);                                    // nothing past the size
  SenderPacket d;
  ASSERT_EQ(decode_sender(buf.data(), 60, &d), DecodeStatus::kOk);
  EXPECT_EQ(d.seq, p.seq);
  EXPECT_EQ(d.timestamp, p.timestamp);
  EXPECT_EQ(d.error_estimate, p.error_estimate);
  EXPECT_EQ(d.ssid, p.ssid);
  EXPECT_EQ(encode_sender(p, buf.data(), buf.size(), 43), 0u);  // below the base
  EXPECT_EQ(encode_sender(p, buf.data(), 50, 60), 0u);          // does not fit
}

TEST(StampPacket, ReflectorLayoutAndRoundTrip) {
  ReflectorPacket p;
  p.seq = 7;
  p.timestamp = 0x0102030405060708ull;
  p.error_estimate = 0x8001;
  p.ssid = 42;
  p.receive_timestamp = 0x1112131415161718ull;
  p.sender_seq = 0xA0B0C0D0;
  p.sender_timestamp = 0x2122232425262728ull;
  p.sender_error_estimate = 0x4002;
  p.sender_ttl = 61;
  std::array<uint8_t, 44> buf;
  buf.fill(0xFF);
  ASSERT_EQ(encode_reflector_base(p, buf.data(), buf.size()), 44u);
  EXPECT_EQ(buf[3], 7);
  EXPECT_EQ(buf[4], 0x01);
  EXPECT_EQ(buf[12], 0x80);
  EXPECT_EQ(buf[15], 42);
  EXPECT_EQ(buf[16], 0x11);
  EXPECT_EQ(buf[24], 0xA0);
  EXPECT_EQ(buf[28], 0x21);
  EXPECT_EQ(buf[36], 0x40);
  EXPECT_EQ(buf[37], 0x02);
  EXPECT_EQ(buf[38], 0);  // MBZ
  EXPECT_EQ(buf[39], 0);
  EXPECT_EQ(buf[40], 61);
  EXPECT_EQ(buf[41] | buf[42] | buf[43], 0);
  ReflectorPacket d;
  ASSERT_EQ(decode_reflector(buf.data(), buf.size(), &d), DecodeStatus::kOk);
  EXPECT_EQ(d.seq, p.seq);
  EXPECT_EQ(d.timestamp, p.timestamp);
  EXPECT_EQ(d.error_estimate, p.error_estimate);
  EXPECT_EQ(d.ssid, p.ssid);
  EXPECT_EQ(d.receive_timestamp, p.receive_timestamp);
  EXPECT_EQ(d.sender_seq, p.sender_seq);
  EXPECT_EQ(d.sender_timestamp, p.sender_timestamp);
  EXPECT_EQ(d.sender_error_estimate, p.sender_error_estimate);
  EXPECT_EQ(d.sender_ttl, p.sender_ttl);
  EXPECT_EQ(encode_reflector_base(p, buf.data(), 43), 0u);
}

TEST(StampPacket, ShortPackets) {
  std::array<uint8_t, 44> buf{};
  buf[3] = 9;
  SenderPacket s;
  EXPECT_EQ(decode_sender(buf.data(), 13, &s), DecodeStatus::kTooShort);
  EXPECT_EQ(decode_sender(buf.data(), 0, &s), DecodeStatus::kTooShort);
  buf[14] = 0x12;  // would be the SSID, but a 14-byte packet has none
  ASSERT_EQ(decode_sender(buf.data(), 14, &s), DecodeStatus::kOk);  // TWAMP Light minimum
  EXPECT_EQ(s.seq, 9u);
  EXPECT_EQ(s.ssid, 0);
  ReflectorPacket r;
  EXPECT_EQ(decode_reflector(buf.data(), 40, &r), DecodeStatus::kTooShort);
  EXPECT_EQ(decode_reflector(buf.data(), 41, &r), DecodeStatus::kOk);  // TWAMP Light reflector
}

TEST(StampTlv, ReadTlvChecksBounds) {
  std::vector<uint8_t> p(56, 0);
  p[44] = 0;
  p[45] = 1;
  p[46] = 0;
  p[47] = 8;  // 8 value bytes: 48..55
  TlvView t;
  ASSERT_EQ(read_tlv(p.data(), p.size(), 44, &t), TlvStatus::kOk);
  EXPECT_EQ(t.type, 1);
  EXPECT_EQ(t.length, 8);
  EXPECT_EQ(t.value_offset, 48u);
  EXPECT_EQ(read_tlv(p.data(), p.size(), 56, &t), TlvStatus::kEnd);
  p[47] = 9;  // one byte past the end
  EXPECT_EQ(read_tlv(p.data(), p.size(), 44, &t), TlvStatus::kMalformed);
  EXPECT_EQ(read_tlv(p.data(), p.size(), 54, &t), TlvStatus::kMalformed);  // 2-byte header
  EXPECT_EQ(read_tlv(p.data(), p.size(), 60, &t), TlvStatus::kMalformed);  // beyond
}

TEST(StampTlv, ClassOfServiceLayout) {
  std::vector<uint8_t> p(52, 0);
  ASSERT_EQ(write_cos_tlv(p.data(), p.size(), 44, 46), 8u);
  // flags 0, type 4, length 4, DSCP1 = 46 = 0b101110 in the top 6 bits: 0xB8.
  const uint8_t expected[8] = {0, 4, 0, 4, 0xB8, 0, 0, 0};
  EXPECT_EQ(std::memcmp(p.data() + 44, expected, 8), 0);
  EXPECT_EQ(write_cos_tlv(p.data(), p.size(), 45, 46), 0u);  // does not fit
  CosValue c;
  ASSERT_TRUE(find_cos_tlv(p.data(), p.size(), &c));
  EXPECT_EQ(c.dscp1, 46);
  EXPECT_EQ(c.dscp2, 0);
}

TEST(StampTlv, ReflectorFillsCosFlagsUnknownAndTruncated) {
  std::vector<uint8_t> p(44 + 8 + 6 + 4, 0);
  ASSERT_EQ(write_cos_tlv(p.data(), p.size(), 44, 10), 8u);
  // Unknown type 200 with 2 value bytes.
  p[52] = 0;
  p[53] = 200;
  p[54] = 0;
  p[55] = 2;
  p[56] = 0xAB;
  p[57] = 0xCD;
  // Truncated TLV: type 1, claims 100 bytes.
  p[58] = 0;
  p[59] = 1;
  p[60] = 0;
  p[61] = 100;
  const int tos = (46 << 2) | 1;  // DSCP 46, ECN ECT(1)
  const TlvReflectResult r = reflect_tlvs(p.data(), p.size(), tos, /*apply_dscp1=*/true);
  EXPECT_EQ(r.requested_dscp, 10);
  EXPECT_TRUE(r.malformed);
  EXPECT_EQ(r.tlvs, 2);
  CosValue c = read_cos_value(p.data() + 48);
  EXPECT_EQ(c.dscp1, 10);
  EXPECT_EQ(c.dscp2, 46);
  EXPECT_EQ(c.ecn, 1);
  EXPECT_EQ(c.rp, 0);
  // DSCP1 | DSCP2 | ECN | RP = 001010 101110 01 00 -> 0x2A 0xE4.
  EXPECT_EQ(p[48], 0x2A);
  EXPECT_EQ(p[49], 0xE4);
  EXPECT_EQ(p[44], 0);                     // CoS known: no flags
  EXPECT_EQ(p[52], kTlvFlagUnrecognized);  // U
  EXPECT_EQ(p[56], 0xAB);                  // value untouched
  EXPECT_EQ(p[58], kTlvFlagMalformed);     // M
}

// A reflector that does not honour DSCP1 says so in RP (1) and keeps DSCP1 as asked.
TEST(StampTlv, ReflectorThatKeepsItsOwnDscpSetsRp) {
  std::vector<uint8_t> p(44 + 8, 0);
  ASSERT_EQ(write_cos_tlv(p.data(), p.size(), 44, 46), 8u);
  const TlvReflectResult r = reflect_tlvs(p.data(), p.size(), 0, /*apply_dscp1=*/false);
  EXPECT_EQ(r.requested_dscp, 46);
  const CosValue c = read_cos_value(p.data() + 48);
  EXPECT_EQ(c.dscp1, 46);
  EXPECT_EQ(c.dscp2, 0);
  EXPECT_EQ(c.rp, kCosRpNotApplied);
}

TEST(StampTlv, ZeroPaddingIsLeftAlone) {
  std::vector<uint8_t> p(100, 0);
  const TlvReflectResult r = reflect_tlvs(p.data(), p.size(), 0xB8, true);
  EXPECT_EQ(r.requested_dscp, -1);
  EXPECT_EQ(r.tlvs, 0);
  for (uint8_t b : p) ASSERT_EQ(b, 0);
  CosValue c;
  EXPECT_FALSE(find_cos_tlv(p.data(), p.size(), &c));
}

TEST(StampTlv, GarbageNeverReadsOutOfBounds) {
  // Run under ASan: every buffer is its exact size on the heap.
  std::mt19937 rng(3);
  for (int i = 0; i < 20000; ++i) {
    const size_t size = rng() % 120;
    std::vector<uint8_t> p(size);
    for (auto& b : p) b = static_cast<uint8_t>(rng());
    if (i % 3 == 0 && size > 47) p[47] = static_cast<uint8_t>(rng() % 8);  // plausible lengths
    SenderPacket s;
    ReflectorPacket r;
    ASSERT_EQ(decode_sender(p.data(), size, &s) == DecodeStatus::kOk,
              size >= kTwampLightSenderMinBytes);
    ASSERT_EQ(decode_reflector(p.data(), size, &r) == DecodeStatus::kOk,
              size >= kTwampLightReflectorMinBytes);
    CosValue c;
    (void)find_cos_tlv(p.data(), size, &c);
    if (size > kBaseBytes) {
      const TlvReflectResult t =
          reflect_tlvs(p.data(), size, static_cast<int>(rng() % 256), (rng() & 1) != 0);
      ASSERT_LE(t.tlvs * kTlvHeaderBytes, size - kBaseBytes);
    }
  }
}

}  // namespace
}  // namespace detwan::perf::stamp

// Tunnel header: golden bytes, every field round-trips (table and seeded random), encode refuses
// what a receiver would drop. Drop reasons are in decode_test.cc.
#include "dataplane/wire/header.h"

#include <cstdint>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/dataplane/wire/wire_test_util.h"

namespace detwan::dataplane::wire {
namespace {

using testing::Bytes;
using testing::datagram;
using testing::get_be;
using testing::payload_of;
using testing::sample_header;

TEST(HeaderLayout, SizesAndAlignment) {
  EXPECT_EQ(kHeaderSize, 40u);
  EXPECT_EQ(kSequenceOffset % 8, 0u);
  EXPECT_EQ(kCycleIdOffset % 8, 0u);
  EXPECT_EQ(kTxTimeOffset % 8, 0u);
  EXPECT_EQ(kTunnelIdOffset % 4, 0u);
  EXPECT_EQ(kSessionOffset % 4, 0u);
  EXPECT_EQ(kTxTimeOffset + 8, kHeaderSize);
  EXPECT_EQ(kMaxPayloadBytes, 65467u);
}

// The bytes are spelled out by hand from docs/wire-format.md, not produced by the encoder.
TEST(HeaderLayout, GoldenBytes) {
  TunnelHeader h = sample_header();
  h.payload_length = 0x0A0B;
  Bytes out(kHeaderSize);
  ASSERT_EQ(encode(h, out).status, EncodeStatus::kOk);
  const uint8_t expected[kHeaderSize] = {
      0xDE, 0x7A, 0x01, 0xA0,                          // magic, version 1, flags D|R
      0x01, 0x02, 0x03, 0x04,                          // tunnel id
      0x05, 0x04, 0x0A, 0x0B,                          // path 5, type ipv4, payload length
      0x00, 0x00, 0x00, 0x00,                          // reserved
      0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,  // sequence
      0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28,  // cycle id
      0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38,  // tx timestamp
  };
  for (std::size_t i = 0; i < kHeaderSize; ++i) {
    EXPECT_EQ(std::to_integer<uint8_t>(out[i]), expected[i]) << "byte " << i;
  }
}

struct FieldCase {
  std::string name;
  std::size_t offset;
  std::size_t size;
  uint64_t raw;  // the value as it appears on the wire
  void (*set)(TunnelHeader&, uint64_t);
};

std::vector<FieldCase> field_cases() {
  std::vector<FieldCase> cases;
  auto add = [&](const std::string& name, std::size_t offset, std::size_t size,
                 const std::vector<uint64_t>& values, void (*set)(TunnelHeader&, uint64_t)) {
    for (uint64_t v : values)
      cases.push_back({name + "=" + std::to_string(v), offset, size, v, set});
  };
  constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();
  constexpr uint64_t kI64Max = std::numeric_limits<int64_t>::max();
  add("tunnel_id", kTunnelIdOffset, 4, {1, 2, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF},
      [](TunnelHeader& h, uint64_t v) { h.tunnel_id = static_cast<uint32_t>(v); });
  add("path_id", kPathIdOffset, 1, {0, 1, 127, 128, 255},
      [](TunnelHeader& h, uint64_t v) { h.path_id = static_cast<uint8_t>(v); });
  add("payload_length", kPayloadLengthOffset, 2, {0, 1, 255, 256, 1432, kMaxPayloadBytes},
      [](TunnelHeader& h, uint64_t v) { h.payload_length = static_cast<uint16_t>(v); });
  add("sequence", kSequenceOffset, 8, {0, 1, 0xFFFFFFFF, 0x100000000, kI64Max + 1, kU64Max},
      [](TunnelHeader& h, uint64_t v) { h.sequence = v; });
  add("cycle_id", kCycleIdOffset, 8, {0, 1, 0xFFFFFFFF, 0x100000000, kI64Max + 1, kU64Max},
      [](TunnelHeader& h, uint64_t v) { h.cycle_id = v; });
  add("tx_time_ns", kTxTimeOffset, 8, {0, 1, 1'700'000'000'000'000'000, kI64Max},
      [](TunnelHeader& h, uint64_t v) { h.tx_time_ns = static_cast<int64_t>(v); });
  // flags and type: every valid (flags, type) pair.
  for (uint8_t flags :
       {uint8_t{kFlagData}, uint8_t{kFlagData | kFlagReplica}, uint8_t{kFlagData | kFlagFec},
        uint8_t{kFlagData | kFlagReplica | kFlagFec}, uint8_t{kFlagData | kFlagBestEffort},
        uint8_t{kFlagData | kFlagReplica | kFlagBestEffort},
        uint8_t{kFlagData | kFlagReplica | kFlagFec | kFlagBestEffort}}) {
    add("flags", kFlagsOffset, 1, {flags}, [](TunnelHeader& h, uint64_t v) {
      h.flags = static_cast<uint8_t>(v);
      h.type = static_cast<uint8_t>(DataType::kIpv6);
    });
  }
  add("data_type", kTypeOffset, 1, {1, 4, 6}, [](TunnelHeader& h, uint64_t v) {
    h.flags = kFlagData;
    h.type = static_cast<uint8_t>(v);
  });
  add("control_type", kTypeOffset, 1, {1, 2, 3}, [](TunnelHeader& h, uint64_t v) {
    h.flags = kFlagControl;
    h.type = static_cast<uint8_t>(v);
  });
  return cases;
}

TEST(HeaderRoundTrip, EveryFieldAtItsBoundaries) {
  for (const FieldCase& c : field_cases()) {
    SCOPED_TRACE(c.name);
    TunnelHeader h = sample_header();
    c.set(h, c.raw);
    const Bytes payload = payload_of(h.payload_length);
    const Bytes bytes = datagram(h, payload);
    ASSERT_EQ(bytes.size(), kHeaderSize + h.payload_length);
    EXPECT_EQ(get_be(bytes, c.offset, c.size), c.raw);
    EXPECT_EQ(get_be(bytes, kMagicOffset, 2), kMagic);
    EXPECT_EQ(get_be(bytes, kVersionOffset, 1), kVersion);
    EXPECT_EQ(get_be(bytes, kSessionOffset, 4), 0u);

    const auto decoded = decode(bytes);
    ASSERT_TRUE(decoded.ok()) << to_string(decoded.error());
    EXPECT_EQ(decoded->header, h);
    ASSERT_EQ(decoded->payload.size(), payload.size());
    EXPECT_EQ(decoded->payload.data(), bytes.data() + kHeaderSize);  // a view, not a copy
    EXPECT_TRUE(std::equal(payload.begin(), payload.end(), decoded->payload.begin()));
  }
}

TEST(HeaderRoundTrip, SeededRandomHeaders) {
  std::mt19937_64 rng(20240603);
  const uint8_t flag_choices[] = {kFlagData,
                                  kFlagData | kFlagReplica,
                                  kFlagData | kFlagFec,
                                  kFlagData | kFlagReplica | kFlagFec,
                                  kFlagData | kFlagBestEffort,
                                  kFlagData | kFlagFec | kFlagBestEffort,
                                  kFlagControl};
  const uint8_t data_types[] = {1, 4, 6};
  const uint8_t control_types[] = {1, 2, 3};
  for (int i = 0; i < 20000; ++i) {
    TunnelHeader h;
    h.flags = flag_choices[rng() % std::size(flag_choices)];
    h.type = h.is_data() ? data_types[rng() % 3] : control_types[rng() % 3];
    h.tunnel_id = static_cast<uint32_t>(rng() % 0xFFFFFFFFu) + 1;
    h.path_id = static_cast<uint8_t>(rng());
    h.sequence = rng();
    h.cycle_id = rng();
    h.tx_time_ns = static_cast<int64_t>(rng() >> 1);
    const Bytes payload = payload_of(rng() % 300, static_cast<uint8_t>(i));
    const Bytes bytes = datagram(h, payload);
    h.payload_length = static_cast<uint16_t>(payload.size());
    ASSERT_FALSE(bytes.empty()) << "iteration " << i;
    const auto decoded = decode(bytes);
    ASSERT_TRUE(decoded.ok()) << "iteration " << i << ": " << to_string(decoded.error());
    ASSERT_EQ(decoded->header, h) << "iteration " << i;
    ASSERT_TRUE(std::equal(payload.begin(), payload.end(), decoded->payload.begin(),
                           decoded->payload.end()))
        << "iteration " << i;
  }
}

TEST(HeaderRoundTrip, DecodesFromUnalignedBuffers) {
  const TunnelHeader h = sample_header();
  const Bytes bytes = datagram(h, payload_of(9));
  for (std::size_t shift = 0; shift < 8; ++shift) {
    Bytes frame(shift, std::byte{0xEE});
    frame.insert(frame.end(), bytes.begin(), bytes.end());
    const auto decoded = decode(std::span<const std::byte>(frame).subspan(shift));
    ASSERT_TRUE(decoded.ok()) << "shift " << shift;
    TunnelHeader expected = h;
    expected.payload_length = 9;
    EXPECT_EQ(decoded->header, expected) << "shift " << shift;
  }
}

TEST(HeaderFlags, BestEffortIsItsOwnBitAndOnlyValidWithData) {
  TunnelHeader h = sample_header();
  h.flags = kFlagData | kFlagBestEffort;
  EXPECT_TRUE(h.is_data());
  EXPECT_TRUE(h.is_best_effort());
  EXPECT_FALSE(h.is_replica());
  EXPECT_FALSE(h.is_fec());
  EXPECT_EQ(validate(h), std::nullopt);
  const Bytes bytes = datagram(h, payload_of(3));
  ASSERT_FALSE(bytes.empty());
  EXPECT_EQ(get_be(bytes, kFlagsOffset, 1), 0x88u);
  const auto decoded = decode(bytes);
  ASSERT_TRUE(decoded.ok());
  EXPECT_TRUE(decoded->header.is_best_effort());
  h.flags = kFlagData;
  EXPECT_FALSE(h.is_best_effort());
  EXPECT_EQ(kFlagBestEffort & kFlagReservedMask, 0);
  EXPECT_EQ(kFlagAuth & kFlagReservedMask, 0);
  EXPECT_EQ(kFlagReservedMask, 0x03);
}

TEST(HeaderEncode, RefusesShortBuffersAndWritesNothing) {
  const TunnelHeader h = sample_header();
  for (std::size_t n = 0; n < kHeaderSize; ++n) {
    Bytes out(n, std::byte{0x5A});
    const EncodeResult r = encode(h, out);
    EXPECT_EQ(r.status, EncodeStatus::kNoSpace) << n;
    EXPECT_EQ(r.size, 0u);
    EXPECT_EQ(out, Bytes(n, std::byte{0x5A})) << n;
  }
  Bytes out(kHeaderSize + 3);
  const EncodeResult r = encode(h, out);
  EXPECT_EQ(r.status, EncodeStatus::kOk);
  EXPECT_EQ(r.size, kHeaderSize);
}

TEST(HeaderEncode, RefusesHeadersAReceiverWouldDrop) {
  struct Bad {
    const char* what;
    void (*mutate)(TunnelHeader&);
    DropReason reason;
  };
  const Bad cases[] = {
      {"reserved flag", [](TunnelHeader& h) { h.flags |= 0x01; }, DropReason::kReservedSet},
      {"no class", [](TunnelHeader& h) { h.flags = kFlagReplica; }, DropReason::kBadFlags},
      {"D and C", [](TunnelHeader& h) { h.flags = kFlagData | kFlagControl; },
       DropReason::kBadFlags},
      {"control replica", [](TunnelHeader& h) { h.flags = kFlagControl | kFlagReplica; },
       DropReason::kBadFlags},
      {"control best effort", [](TunnelHeader& h) { h.flags = kFlagControl | kFlagBestEffort; },
       DropReason::kBadFlags},
      {"best effort alone", [](TunnelHeader& h) { h.flags = kFlagBestEffort; },
       DropReason::kBadFlags},
      {"reserved flag 0x02", [](TunnelHeader& h) { h.flags |= 0x02; }, DropReason::kReservedSet},
      {"flag A without a session", [](TunnelHeader& h) { h.flags |= kFlagAuth; },
       DropReason::kBadFlags},
      {"a session without flag A", [](TunnelHeader& h) { h.session = 7; },
       DropReason::kReservedSet},
      {"data type 0", [](TunnelHeader& h) { h.type = 0; }, DropReason::kBadType},
      {"control type 4",
       [](TunnelHeader& h) {
         h.flags = kFlagControl;
         h.type = 4;
       },
       DropReason::kBadType},
      {"tunnel 0", [](TunnelHeader& h) { h.tunnel_id = 0; }, DropReason::kBadTunnelId},
      {"negative time", [](TunnelHeader& h) { h.tx_time_ns = -1; }, DropReason::kBadTimestamp},
      {"oversize", [](TunnelHeader& h) { h.payload_length = kMaxPayloadBytes + 1; },
       DropReason::kOversize},
  };
  for (const Bad& c : cases) {
    SCOPED_TRACE(c.what);
    TunnelHeader h = sample_header();
    c.mutate(h);
    EXPECT_EQ(validate(h), c.reason);
    Bytes out(kHeaderSize, std::byte{0x5A});
    EXPECT_EQ(encode(h, out).status, EncodeStatus::kInvalidHeader);
    EXPECT_EQ(out, Bytes(kHeaderSize, std::byte{0x5A}));
  }
  EXPECT_EQ(validate(sample_header()), std::nullopt);
}

TEST(HeaderEncode, ValidateHonoursTheReceiverLimit) {
  TunnelHeader h = sample_header();
  h.payload_length = 1400;
  EXPECT_EQ(validate(h, 1400), std::nullopt);
  EXPECT_EQ(validate(h, 1399), DropReason::kOversize);
  h.payload_length = kMaxPayloadBytes;
  EXPECT_EQ(validate(h, 1'000'000), std::nullopt);
  h.payload_length = kMaxPayloadBytes + 1;
  EXPECT_EQ(validate(h, 1'000'000), DropReason::kOversize);  // limit capped at kMaxPayloadBytes
}

}  // namespace
}  // namespace detwan::dataplane::wire

// Tunnel header decode: every drop reason from a crafted packet, the check order, truncation at
// every length, exhaustive flags/type bytes, and IPv4/IPv6 independence.
#include <cstdint>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "dataplane/wire/header.h"
#include "tests/dataplane/wire/wire_test_util.h"

namespace detwan::dataplane::wire {
namespace {

using testing::Bytes;
using testing::datagram;
using testing::payload_of;
using testing::put_be;
using testing::sample_header;

DropReason reason_of(const Bytes& bytes, std::size_t max_payload = kMaxPayloadBytes) {
  const auto d = decode(bytes, max_payload);
  EXPECT_FALSE(d.ok());
  return d.ok() ? DropReason::kCount : d.error();
}

Bytes valid_packet(std::size_t payload = 16) {
  return datagram(sample_header(), payload_of(payload));
}

TEST(Decode, AcceptsTheValidBaseline) {
  EXPECT_TRUE(decode(valid_packet()).ok());
  EXPECT_TRUE(decode(valid_packet(0)).ok());
}

TEST(Decode, TooShortAtEveryLengthBelowTheHeader) {
  const Bytes full = valid_packet();
  for (std::size_t n = 0; n < kHeaderSize; ++n) {
    // A fresh vector of exactly n bytes, so a sanitizer build catches any read past the end.
    const Bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_EQ(reason_of(cut), DropReason::kTooShort) << "length " << n;
  }
}

TEST(Decode, TruncatedOrPaddedPayloadIsALengthMismatch) {
  const Bytes full = valid_packet(16);
  for (std::size_t n = kHeaderSize; n < full.size(); ++n) {
    const Bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_EQ(reason_of(cut), DropReason::kLengthMismatch) << "length " << n;
  }
  EXPECT_TRUE(decode(full).ok());
  Bytes longer = full;
  longer.push_back(std::byte{0});
  EXPECT_EQ(reason_of(longer), DropReason::kLengthMismatch);
}

TEST(Decode, BadMagicInEitherByte) {
  for (std::size_t byte : {0u, 1u}) {
    for (int bit = 0; bit < 8; ++bit) {
      Bytes b = valid_packet();
      b[byte] ^= std::byte(static_cast<uint8_t>(1u << bit));
      EXPECT_EQ(reason_of(b), DropReason::kBadMagic) << byte << ":" << bit;
    }
  }
  // Raw IPv4 and IPv6 packets sent to the tunnel port by mistake.
  Bytes ip4(60, std::byte{0});
  ip4[0] = std::byte{0x45};
  EXPECT_EQ(reason_of(ip4), DropReason::kBadMagic);
  Bytes ip6(60, std::byte{0});
  ip6[0] = std::byte{0x60};
  EXPECT_EQ(reason_of(ip6), DropReason::kBadMagic);
}

TEST(Decode, EveryOtherVersionIsBadVersion) {
  for (int v = 0; v < 256; ++v) {
    Bytes b = valid_packet();
    b[kVersionOffset] = std::byte(static_cast<uint8_t>(v));
    if (v == kVersion) {
      EXPECT_TRUE(decode(b).ok());
    } else {
      EXPECT_EQ(reason_of(b), DropReason::kBadVersion) << v;
    }
  }
}

TEST(Decode, ReservedBitsAreChecked) {
  for (int bit = 0; bit < 2; ++bit) {
    Bytes b = valid_packet();
    b[kFlagsOffset] |= std::byte(static_cast<uint8_t>(1u << bit));
    EXPECT_EQ(reason_of(b), DropReason::kReservedSet) << "flag bit " << bit;
  }
  // Without flag A the session word is reserved: any bit set is refused.
  for (std::size_t i = 0; i < 4; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      Bytes b = valid_packet();
      b[kSessionOffset + i] = std::byte(static_cast<uint8_t>(1u << bit));
      EXPECT_EQ(reason_of(b), DropReason::kReservedSet) << "session byte " << i << " bit " << bit;
    }
  }
}

TEST(Decode, FlagANeedsASession) {
  Bytes b = valid_packet();
  b[kFlagsOffset] |= std::byte{kFlagAuth};
  EXPECT_EQ(reason_of(b), DropReason::kBadFlags);  // A with session 0
  put_be(b, kSessionOffset, 0x01020304, 4);
  const auto d = decode(b);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->header.is_auth());
  EXPECT_EQ(d->header.session, 0x01020304u);
}

// Every value of the flags octet, with a type valid for the class the flags claim.
TEST(Decode, ExhaustiveFlagsOctet) {
  // D with any of R (0x20), F (0x10), B (0x08); C alone. (A, 0x04, needs a session: below.)
  const std::set<int> valid = {0x80, 0xA0, 0x90, 0xB0, 0x88, 0xA8, 0x98, 0xB8, 0x40};
  int accepted = 0;
  for (int f = 0; f < 256; ++f) {
    Bytes b = valid_packet();
    b[kFlagsOffset] = std::byte(static_cast<uint8_t>(f));
    b[kTypeOffset] = std::byte{1};  // datagram / time_request: valid for both classes
    const auto d = decode(b);
    if (valid.contains(f)) {
      EXPECT_TRUE(d.ok()) << std::hex << f;
      accepted += d.ok() ? 1 : 0;
    } else if ((f & 0x03) != 0) {
      EXPECT_EQ(reason_of(b), DropReason::kReservedSet) << std::hex << f;
    } else {
      EXPECT_EQ(reason_of(b), DropReason::kBadFlags) << std::hex << f;
    }
  }
  EXPECT_EQ(accepted, 9);
}

TEST(Decode, ExhaustiveTypeOctet) {
  for (uint8_t flags : {kFlagData, kFlagControl}) {
    const std::set<int> valid =
        flags == kFlagData ? std::set<int>{1, 4, 6} : std::set<int>{1, 2, 3};
    for (int t = 0; t < 256; ++t) {
      Bytes b = valid_packet();
      b[kFlagsOffset] = std::byte{flags};
      b[kTypeOffset] = std::byte(static_cast<uint8_t>(t));
      if (valid.contains(t)) {
        EXPECT_TRUE(decode(b).ok()) << int{flags} << "/" << t;
      } else {
        EXPECT_EQ(reason_of(b), DropReason::kBadType) << int{flags} << "/" << t;
      }
    }
  }
}

TEST(Decode, TunnelZeroIsBadTunnelId) {
  Bytes b = valid_packet();
  put_be(b, kTunnelIdOffset, 0, 4);
  EXPECT_EQ(reason_of(b), DropReason::kBadTunnelId);
  put_be(b, kTunnelIdOffset, 1, 4);
  EXPECT_TRUE(decode(b).ok());
}

TEST(Decode, TimestampWithTheTopBitIsBadTimestamp) {
  for (uint64_t t : {uint64_t{1} << 63, (uint64_t{1} << 63) + 1, ~uint64_t{0}}) {
    Bytes b = valid_packet();
    put_be(b, kTxTimeOffset, t, 8);
    EXPECT_EQ(reason_of(b), DropReason::kBadTimestamp) << t;
  }
  Bytes b = valid_packet();
  put_be(b, kTxTimeOffset, (uint64_t{1} << 63) - 1, 8);
  EXPECT_TRUE(decode(b).ok());
}

TEST(Decode, OversizeByFieldOrByActualLength) {
  const Bytes b = valid_packet(100);
  EXPECT_TRUE(decode(b, 100).ok());
  EXPECT_EQ(reason_of(b, 99), DropReason::kOversize);
  // The length field claims more than the limit although the datagram is short.
  Bytes claims = valid_packet(10);
  put_be(claims, kPayloadLengthOffset, 0xFFFF, 2);
  EXPECT_EQ(reason_of(claims), DropReason::kOversize);
  // The datagram is larger than the limit although the field is small.
  Bytes big = valid_packet(10);
  big.resize(kHeaderSize + 200);
  EXPECT_EQ(reason_of(big, 100), DropReason::kOversize);
  EXPECT_EQ(reason_of(big), DropReason::kLengthMismatch);
}

TEST(Decode, LargestPayloadAndLimitAboveTheMaximum) {
  const Bytes max = valid_packet(kMaxPayloadBytes);
  EXPECT_TRUE(decode(max).ok());
  EXPECT_TRUE(decode(max, 1'000'000).ok());
  Bytes over = valid_packet(10);
  over.resize(kHeaderSize + kMaxPayloadBytes + 1);
  put_be(over, kPayloadLengthOffset, kMaxPayloadBytes + 1, 2);
  EXPECT_EQ(reason_of(over, 1'000'000), DropReason::kOversize);
}

// With several faults, the first in DropReason order is reported (the documented order).
TEST(Decode, ChecksRunInTheDocumentedOrder) {
  Bytes b = valid_packet(16);
  b.pop_back();                                // length_mismatch
  put_be(b, kPayloadLengthOffset, 0xFFFF, 2);  // oversize
  EXPECT_EQ(reason_of(b), DropReason::kOversize);
  put_be(b, kTxTimeOffset, ~uint64_t{0}, 8);
  EXPECT_EQ(reason_of(b), DropReason::kBadTimestamp);
  put_be(b, kTunnelIdOffset, 0, 4);
  EXPECT_EQ(reason_of(b), DropReason::kBadTunnelId);
  b[kTypeOffset] = std::byte{0};
  EXPECT_EQ(reason_of(b), DropReason::kBadType);
  b[kFlagsOffset] = std::byte{0};
  EXPECT_EQ(reason_of(b), DropReason::kBadFlags);
  put_be(b, kSessionOffset, 1, 4);
  EXPECT_EQ(reason_of(b), DropReason::kReservedSet);
  b[kVersionOffset] = std::byte{2};
  EXPECT_EQ(reason_of(b), DropReason::kBadVersion);
  b[kMagicOffset] = std::byte{0};
  EXPECT_EQ(reason_of(b), DropReason::kBadMagic);
  b.resize(kHeaderSize - 1);
  EXPECT_EQ(reason_of(b), DropReason::kTooShort);
}

// --- IPv4 / IPv6 independence -------------------------------------------------------------

// A minimal IPv4 (IHL 5) or IPv6 packet with a UDP header carrying `udp_payload`.
Bytes ip_udp_packet(IpVersion ip, const Bytes& udp_payload) {
  const std::size_t ip_len = ip == IpVersion::kV4 ? 20 : 40;
  Bytes pkt(ip_len + 8, std::byte{0});
  const std::size_t udp_len = 8 + udp_payload.size();
  if (ip == IpVersion::kV4) {
    pkt[0] = std::byte{0x45};
    put_be(pkt, 2, ip_len + udp_len, 2);
    pkt[8] = std::byte{64};
    pkt[9] = std::byte{17};
    put_be(pkt, 12, 0x0A000001, 4);
    put_be(pkt, 16, 0x0A000002, 4);
  } else {
    pkt[0] = std::byte{0x60};
    put_be(pkt, 4, udp_len, 2);
    pkt[6] = std::byte{17};
    pkt[7] = std::byte{64};
    pkt[8] = std::byte{0xFD};
    pkt[39] = std::byte{2};
  }
  put_be(pkt, ip_len + 0, 40000, 2);
  put_be(pkt, ip_len + 2, 4789, 2);
  put_be(pkt, ip_len + 4, udp_len, 2);
  pkt.insert(pkt.end(), udp_payload.begin(), udp_payload.end());
  return pkt;
}

// What a receive path does: find the UDP payload from the IP header, decode it.
std::span<const std::byte> udp_payload_of(const Bytes& pkt) {
  const auto version = std::to_integer<uint8_t>(pkt.at(0)) >> 4;
  const std::size_t ip_len = version == 4
                                 ? std::size_t{4} * (std::to_integer<uint8_t>(pkt.at(0)) & 0x0F)
                                 : std::size_t{40};
  return std::span<const std::byte>(pkt).subspan(ip_len + 8);
}

TEST(IpIndependence, SameHeaderBytesAndSameDecodeOverIpv4AndIpv6) {
  const Bytes tunnel_packet = datagram(sample_header(), payload_of(64));
  const Bytes v4 = ip_udp_packet(IpVersion::kV4, tunnel_packet);
  const Bytes v6 = ip_udp_packet(IpVersion::kV6, tunnel_packet);
  const auto p4 = udp_payload_of(v4);
  const auto p6 = udp_payload_of(v6);
  ASSERT_TRUE(std::equal(p4.begin(), p4.end(), p6.begin(), p6.end()));
  EXPECT_EQ(v4.size(), tunnel_packet.size() + 28);
  EXPECT_EQ(v6.size(), tunnel_packet.size() + 48);

  const auto d4 = decode(p4);
  const auto d6 = decode(p6);
  ASSERT_TRUE(d4.ok());
  ASSERT_TRUE(d6.ok());
  EXPECT_EQ(d4->header, d6->header);
  EXPECT_TRUE(
      std::equal(d4->payload.begin(), d4->payload.end(), d6->payload.begin(), d6->payload.end()));
  // The IP version of the carrier is not in the header: an IPv6 payload type over IPv4 is fine.
  TunnelHeader h = sample_header();
  h.type = static_cast<uint8_t>(DataType::kIpv6);
  EXPECT_TRUE(decode(udp_payload_of(ip_udp_packet(IpVersion::kV4, datagram(h)))).ok());
}

TEST(IpIndependence, OverheadAndMtuArithmetic) {
  EXPECT_EQ(encap_overhead_bytes(IpVersion::kV4), 68u);
  EXPECT_EQ(encap_overhead_bytes(IpVersion::kV6), 88u);
  EXPECT_EQ(max_payload_for_mtu(1500, IpVersion::kV4), 1432u);
  EXPECT_EQ(max_payload_for_mtu(1500, IpVersion::kV6), 1412u);
  EXPECT_EQ(max_payload_for_mtu(9000, IpVersion::kV4), 8932u);
  EXPECT_EQ(max_payload_for_mtu(68, IpVersion::kV4), 0u);
  EXPECT_EQ(max_payload_for_mtu(69, IpVersion::kV4), 1u);
  EXPECT_EQ(max_payload_for_mtu(88, IpVersion::kV6), 0u);
  EXPECT_EQ(max_payload_for_mtu(0, IpVersion::kV6), 0u);
  EXPECT_EQ(max_payload_for_mtu(65535, IpVersion::kV4), kMaxPayloadBytes);
  EXPECT_EQ(max_payload_for_mtu(65535, IpVersion::kV6), 65447u);
  EXPECT_EQ(max_payload_for_mtu(65536, IpVersion::kV4), kMaxPayloadBytes);  // capped (lo: 65536)
  EXPECT_EQ(max_payload_for_mtu(1'000'000, IpVersion::kV6), kMaxPayloadBytes);
  // A packet of exactly that payload fills the MTU.
  const std::size_t p = max_payload_for_mtu(1500, IpVersion::kV4);
  EXPECT_EQ(ip_udp_packet(IpVersion::kV4, datagram(sample_header(), payload_of(p))).size(), 1500u);
  EXPECT_EQ(ip_udp_packet(IpVersion::kV6, datagram(sample_header(), payload_of(max_payload_for_mtu(
                                                                        1500, IpVersion::kV6))))
                .size(),
            1500u);
}

}  // namespace
}  // namespace detwan::dataplane::wire

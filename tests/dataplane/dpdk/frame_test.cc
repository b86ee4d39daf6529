// Outer-header framing of the DPDK backend (dataplane/dpdk/frame.h): build -> parse round trips
// over IPv4 and IPv6, checksums against DPDK's own helpers and a published vector, one test
// per drop reason, and seeded random corruption that must never read out of bounds.
#include <algorithm>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <rte_ip.h>

#include "dataplane/dpdk/frame.h"
#include "dataplane/wire/byte_order.h"

namespace detwan::dataplane::dpdk {
namespace {

gw::Endpoint endpoint(const char* text) {
  auto parsed = gw::parse_endpoint(text);
  EXPECT_TRUE(parsed.has_value()) << text;
  return parsed.value_or(gw::Endpoint{});
}

const MacAddress kOurMac{{0x02, 0, 0, 0, 0, 0x0b}};
const MacAddress kPeerMac{{0x02, 0, 0, 0, 0, 0x0a}};

// A frame from `from` to `to` carrying `payload_bytes` bytes of pattern.
std::vector<std::byte> make_frame(const gw::Endpoint& from, const gw::Endpoint& to,
                                  std::size_t payload_bytes, uint8_t dscp = 46) {
  std::vector<std::byte> frame(outer_header_bytes(to.ipv6) + payload_bytes);
  for (std::size_t i = 0; i < payload_bytes; ++i) {
    frame[outer_header_bytes(to.ipv6) + i] = static_cast<std::byte>(i * 7 + 1);
  }
  const OuterSpec spec{kPeerMac, kOurMac, &from, &to, dscp};
  EXPECT_TRUE(build_outer_headers(frame, spec, false, false));
  return frame;
}

FrameDrop parse(std::span<const std::byte> frame, const gw::Endpoint& local,
                ParsedFrame* out = nullptr,
                ChecksumState ip = ChecksumState::kUnknown,
                ChecksumState udp = ChecksumState::kUnknown) {
  ParsedFrame scratch;
  return parse_wan_frame(frame, WanAddress{kOurMac, local}, ip, udp, out ? out : &scratch);
}

TEST(FrameTest, Ipv4RoundTrip) {
  const gw::Endpoint a = endpoint("10.0.0.1:4789");
  const gw::Endpoint b = endpoint("10.0.0.2:4790");
  const auto frame = make_frame(a, b, 101);
  ASSERT_EQ(frame.size(), 14u + 20u + 8u + 101u);
  // Fields a receiver's stack looks at.
  EXPECT_EQ(wire::load_be16(frame.data() + 12), kEtherTypeIpv4);
  EXPECT_EQ(std::to_integer<uint8_t>(frame[15]), 46 << 2);                 // DSCP EF
  EXPECT_EQ(wire::load_be16(frame.data() + 14 + 6), 0x4000);               // DF
  EXPECT_EQ(std::to_integer<uint8_t>(frame[14 + 8]), 64);                  // TTL
  ParsedFrame parsed;
  ASSERT_EQ(parse(frame, b, &parsed), FrameDrop::kNone);
  EXPECT_EQ(parsed.udp_payload_offset, 42u);
  EXPECT_EQ(parsed.udp_payload_bytes, 101u);
  EXPECT_EQ(parsed.source, a);
}

TEST(FrameTest, Ipv6RoundTrip) {
  const gw::Endpoint a = endpoint("[fd00::1]:4789");
  const gw::Endpoint b = endpoint("[fd00::2]:4789");
  const auto frame = make_frame(a, b, 1001, 10);
  ASSERT_EQ(frame.size(), 14u + 40u + 8u + 1001u);
  EXPECT_EQ(wire::load_be16(frame.data() + 12), kEtherTypeIpv6);
  EXPECT_EQ(wire::load_be32(frame.data() + 14) >> 20, (6u << 8) | (10u << 2));
  ParsedFrame parsed;
  ASSERT_EQ(parse(frame, b, &parsed), FrameDrop::kNone);
  EXPECT_EQ(parsed.udp_payload_offset, 62u);
  EXPECT_EQ(parsed.udp_payload_bytes, 1001u);
  EXPECT_EQ(parsed.source, a);
}

TEST(FrameTest, ChecksumsAgreeWithDpdk) {
  // DPDK computes over the header with the checksum field zeroed: compare against a copy.
  for (std::size_t bytes : {0u, 1u, 2u, 3u, 63u, 64u, 1400u, 1459u}) {
    const auto v4 = make_frame(endpoint("192.168.7.1:1000"), endpoint("172.16.0.9:4789"), bytes);
    auto zeroed = v4;
    zeroed[24] = zeroed[25] = std::byte{0};
    zeroed[40] = zeroed[41] = std::byte{0};
    const auto* ip4 = reinterpret_cast<const rte_ipv4_hdr*>(zeroed.data() + 14);
    uint16_t stored = 0;
    std::memcpy(&stored, v4.data() + 14 + 10, 2);
    EXPECT_EQ(stored, rte_ipv4_cksum(ip4)) << bytes;
    std::memcpy(&stored, v4.data() + 34 + 6, 2);
    EXPECT_EQ(stored, rte_ipv4_udptcp_cksum(ip4, zeroed.data() + 34)) << bytes;

    const auto v6 = make_frame(endpoint("[2001:db8::1]:1000"), endpoint("[2001:db8::2]:9"), bytes);
    auto zeroed6 = v6;
    zeroed6[60] = zeroed6[61] = std::byte{0};
    const auto* ip6 = reinterpret_cast<const rte_ipv6_hdr*>(zeroed6.data() + 14);
    std::memcpy(&stored, v6.data() + 54 + 6, 2);
    EXPECT_EQ(stored, rte_ipv6_udptcp_cksum(ip6, zeroed6.data() + 54)) << bytes;
  }
}

TEST(FrameTest, InternetChecksumKnownVector) {
  // IPv4 header from RFC 1071 style examples: 4500 0073 0000 4000 4011 [b861] c0a8 0001 c0a8 00c7
  const uint8_t header[20] = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                              0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
  EXPECT_EQ(internet_checksum(std::as_bytes(std::span(header))), 0xb861);
  const uint8_t odd[3] = {0x01, 0x02, 0x03};  // 0x0102 + 0x0300 = 0x0402 -> ~ = 0xfbfd
  EXPECT_EQ(internet_checksum(std::as_bytes(std::span(odd))), 0xfbfd);
}

// The checksum word by word, the RFC 1071 way: the reference for the fast sum.
uint16_t reference_checksum(const std::byte* p, std::size_t n) {
  uint32_t sum = 0;
  for (std::size_t i = 0; i < n; i += 2) {
    const uint32_t hi = std::to_integer<uint32_t>(p[i]);
    const uint32_t lo = i + 1 < n ? std::to_integer<uint32_t>(p[i + 1]) : 0;
    sum += (hi << 8) | lo;
    sum = (sum & 0xFFFF) + (sum >> 16);
  }
  return static_cast<uint16_t>(~sum & 0xFFFF);
}

TEST(FrameTest, InternetChecksumEveryLengthAndAlignment) {
  std::vector<std::byte> data(1600 + 8);
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  for (auto& b : data) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = std::byte{static_cast<uint8_t>(x)};
  }
  const std::vector<std::byte> ones(1600 + 8, std::byte{0xFF});  // every add carries
  for (const std::vector<std::byte>* bytes : {&std::as_const(data), &ones}) {
    for (std::size_t offset : {0u, 1u, 2u, 5u}) {  // the sum loads unaligned words
      for (std::size_t n = 0; n <= 1600; n += (n < 80 ? 1 : 37)) {
        const std::byte* p = bytes->data() + offset;
        ASSERT_EQ(internet_checksum(std::span<const std::byte>(p, n)), reference_checksum(p, n))
            << n << " bytes at offset " << offset;
      }
    }
  }
}

TEST(FrameTest, OffloadLeavesPseudoHeaderSum) {
  const gw::Endpoint a = endpoint("10.0.0.1:1");
  const gw::Endpoint b = endpoint("10.0.0.2:2");
  std::vector<std::byte> frame(outer_header_bytes(false) + 10);
  ASSERT_TRUE(build_outer_headers(frame, OuterSpec{kPeerMac, kOurMac, &a, &b, 0}, true, true));
  const auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(frame.data() + 14);
  uint16_t stored = 0;
  std::memcpy(&stored, frame.data() + 14 + 20 + 6, 2);
  EXPECT_EQ(stored, rte_ipv4_phdr_cksum(ip, 0));
  EXPECT_EQ(ip->hdr_checksum, 0);  // left to the NIC
}

TEST(FrameTest, BuildRefusesBadInput) {
  const gw::Endpoint v4 = endpoint("10.0.0.1:1");
  const gw::Endpoint v6 = endpoint("[fd00::1]:1");
  std::vector<std::byte> frame(100);
  EXPECT_FALSE(build_outer_headers(frame, OuterSpec{kPeerMac, kOurMac, &v4, &v6, 0}, false, false));
  EXPECT_FALSE(build_outer_headers(frame, OuterSpec{kPeerMac, kOurMac, &v4, nullptr, 0}, false,
                                   false));
  std::vector<std::byte> short_frame(outer_header_bytes(true) - 1);
  EXPECT_FALSE(
      build_outer_headers(short_frame, OuterSpec{kPeerMac, kOurMac, &v6, &v6, 0}, false, false));
  std::vector<std::byte> huge(outer_header_bytes(false) + 65508);
  EXPECT_FALSE(build_outer_headers(huge, OuterSpec{kPeerMac, kOurMac, &v4, &v4, 0}, false, false));
  EXPECT_TRUE(std::all_of(frame.begin(), frame.end(), [](std::byte b) { return b == std::byte{0}; }));
}

class FrameDropTest : public ::testing::Test {
 protected:
  const gw::Endpoint a_ = endpoint("10.0.0.1:4789");
  const gw::Endpoint b_ = endpoint("10.0.0.2:4789");
  std::vector<std::byte> frame_ = make_frame(a_, b_, 64);
  std::byte* ip_ = frame_.data() + 14;
  std::byte* udp_ = frame_.data() + 34;
  // Recomputes the IPv4 header checksum after a header edit (so only the edit is judged).
  void fix_ip_checksum() {
    wire::store_be16(ip_ + 10, 0);
    wire::store_be16(ip_ + 10, internet_checksum(std::span<const std::byte>(ip_, 20)));
  }
};

TEST_F(FrameDropTest, EachReason) {
  EXPECT_EQ(parse(frame_, b_), FrameDrop::kNone);
  {
    auto f = frame_;
    f[5] = std::byte{0xff};
    EXPECT_EQ(parse(f, b_), FrameDrop::kOtherMac);
  }
  {
    auto f = frame_;
    wire::store_be16(f.data() + 12, 0x0806);  // ARP
    EXPECT_EQ(parse(f, b_), FrameDrop::kNotIp);
    EXPECT_EQ(parse(std::span<const std::byte>(f.data(), 13), b_), FrameDrop::kNotIp);
  }
  EXPECT_EQ(parse(std::span<const std::byte>(frame_.data(), 14 + 19), b_),
            FrameDrop::kBadIpHeader);
  EXPECT_EQ(parse(std::span<const std::byte>(frame_.data(), frame_.size() - 1), b_),
            FrameDrop::kBadIpHeader);  // total length beyond the frame
  {
    ip_[0] = std::byte{0x44};  // IHL 4
    fix_ip_checksum();
    EXPECT_EQ(parse(frame_, b_), FrameDrop::kBadIpHeader);
    ip_[0] = std::byte{0x45};
    fix_ip_checksum();
  }
  for (uint16_t fragment : {0x2000, 0x0001, 0x6001}) {
    wire::store_be16(ip_ + 6, fragment);
    fix_ip_checksum();
    EXPECT_EQ(parse(frame_, b_), FrameDrop::kFragment) << fragment;
  }
  wire::store_be16(ip_ + 6, 0x4000);
  fix_ip_checksum();
  ip_[9] = std::byte{6};  // TCP
  fix_ip_checksum();
  EXPECT_EQ(parse(frame_, b_), FrameDrop::kNotUdp);
  ip_[9] = std::byte{17};
  fix_ip_checksum();
  EXPECT_EQ(parse(frame_, endpoint("10.0.0.3:4789")), FrameDrop::kWrongAddress);
  EXPECT_EQ(parse(frame_, endpoint("[fd00::2]:4789")), FrameDrop::kWrongAddress);
  EXPECT_EQ(parse(frame_, endpoint("10.0.0.2:4790")), FrameDrop::kWrongPort);
  ip_[10] ^= std::byte{1};
  EXPECT_EQ(parse(frame_, b_), FrameDrop::kBadChecksum);  // IPv4 header checksum
  ip_[10] ^= std::byte{1};
  EXPECT_EQ(parse(frame_, b_), FrameDrop::kNone);
}

TEST_F(FrameDropTest, UdpLengthAndChecksum) {
  auto f = frame_;
  wire::store_be16(f.data() + 34 + 4, 7);
  EXPECT_EQ(parse(f, b_), FrameDrop::kBadUdpLength);
  wire::store_be16(f.data() + 34 + 4, 8 + 63);  // shorter than the IP payload
  EXPECT_EQ(parse(f, b_), FrameDrop::kBadUdpLength);
  f = frame_;
  f.back() ^= std::byte{0x40};
  EXPECT_EQ(parse(f, b_), FrameDrop::kBadChecksum);
  // The NIC's verdict wins over software.
  EXPECT_EQ(parse(f, b_, nullptr, ChecksumState::kUnknown, ChecksumState::kGood), FrameDrop::kNone);
  EXPECT_EQ(parse(frame_, b_, nullptr, ChecksumState::kUnknown, ChecksumState::kBad),
            FrameDrop::kBadChecksum);
  EXPECT_EQ(parse(frame_, b_, nullptr, ChecksumState::kBad, ChecksumState::kGood),
            FrameDrop::kBadChecksum);
  // UDP checksum 0 = none: accepted over IPv4 ...
  wire::store_be16(udp_ + 6, 0);
  EXPECT_EQ(parse(frame_, b_), FrameDrop::kNone);
  // ... but not over IPv6.
  const gw::Endpoint b6 = endpoint("[fd00::2]:4789");
  auto v6 = make_frame(endpoint("[fd00::1]:4789"), b6, 64);
  wire::store_be16(v6.data() + 54 + 6, 0);
  EXPECT_EQ(parse(v6, b6), FrameDrop::kBadChecksum);
  wire::store_be16(v6.data() + 14 + 4, 7);  // IPv6 payload length below a UDP header
  EXPECT_EQ(parse(v6, b6), FrameDrop::kBadUdpLength);
  v6[14 + 6] = std::byte{0};  // hop-by-hop extension header: not handled, dropped
  EXPECT_EQ(parse(v6, b6), FrameDrop::kNotUdp);
}

TEST_F(FrameDropTest, EthernetPaddingIsIgnored) {
  auto small = make_frame(a_, b_, 4);  // 46 bytes: a NIC pads to 60
  small.resize(60, std::byte{0xAA});
  ParsedFrame parsed;
  ASSERT_EQ(parse(small, b_, &parsed), FrameDrop::kNone);
  EXPECT_EQ(parsed.udp_payload_bytes, 4u);
}

TEST(FrameFuzzTest, RandomCorruptionStaysInBounds) {
  const gw::Endpoint a = endpoint("10.0.0.1:4789");
  const gw::Endpoint b = endpoint("10.0.0.2:4789");
  const gw::Endpoint a6 = endpoint("[fd00::1]:4789");
  const gw::Endpoint b6 = endpoint("[fd00::2]:4789");
  std::mt19937_64 random(20261130);
  int accepted = 0;
  for (int round = 0; round < 20000; ++round) {
    const bool v6 = (round & 1) != 0;
    auto frame = make_frame(v6 ? a6 : a, v6 ? b6 : b, random() % 200);
    const int flips = 1 + static_cast<int>(random() % 4);
    for (int i = 0; i < flips; ++i) {
      frame[random() % std::min<std::size_t>(frame.size(), 70)] ^=
          static_cast<std::byte>(1u << (random() % 8));
    }
    frame.resize(random() % (frame.size() + 8));
    ParsedFrame parsed;
    if (parse(frame, v6 ? b6 : b, &parsed) == FrameDrop::kNone) {
      ++accepted;
      EXPECT_LE(parsed.udp_payload_offset + parsed.udp_payload_bytes, frame.size());
    }
  }
  EXPECT_LT(accepted, 20000);  // most corruptions are caught by a check or a checksum
}

TEST(FrameTest, MacParsing) {
  MacAddress mac;
  ASSERT_TRUE(parse_mac("02:00:5e:10:AB:ff", &mac));
  EXPECT_EQ(mac, (MacAddress{{0x02, 0x00, 0x5e, 0x10, 0xab, 0xff}}));
  ASSERT_TRUE(parse_mac("02-00-5e-10-ab-fe", &mac));
  EXPECT_EQ(mac.bytes[5], 0xfe);
  for (const char* bad : {"", "02:00:5e:10:ab", "02:00:5e:10:ab:fg", "02:00-5e:10:ab:ff",
                          "02:00:5e:10:ab:ff:", "0200:5e:10:ab:ff0"}) {
    EXPECT_FALSE(parse_mac(bad, &mac)) << bad;
  }
  EXPECT_EQ(to_string(FrameDrop::kBadChecksum), "bad_checksum");
  EXPECT_EQ(to_string(FrameDrop::kCount), "unknown");
}

}  // namespace
}  // namespace detwan::dataplane::dpdk

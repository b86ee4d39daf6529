// common/net_address: IP addresses, prefixes and endpoints as text.
#include "common/net_address.h"

#include <random>
#include <string>

#include <gtest/gtest.h>

namespace detwan::common {
namespace {

IpAddress address(const std::string& text) {
  const auto a = parse_ip_address(text);
  EXPECT_TRUE(a.has_value()) << text << ": " << (a ? "" : a.error().message);
  return a ? *a : IpAddress{};
}

IpPrefix prefix(const std::string& text) {
  const auto p = parse_ip_prefix(text);
  EXPECT_TRUE(p.has_value()) << text << ": " << (p ? "" : p.error().message);
  return p ? *p : IpPrefix{};
}

void expect_refused(const Result<IpPrefix>& r, const std::string& words) {
  ASSERT_FALSE(r.has_value()) << "accepted";
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message.find(words), std::string::npos) << r.error().message;
}

TEST(NetAddress, ParsesAndFormatsAddresses) {
  const IpAddress v4 = address("10.20.30.40");
  EXPECT_FALSE(v4.ipv6);
  EXPECT_EQ(v4.bytes[0], 10);
  EXPECT_EQ(v4.bytes[3], 40);
  EXPECT_EQ(v4.bytes[4], 0);
  EXPECT_EQ(format_ip_address(v4), "10.20.30.40");
  const IpAddress v6 = address("fd00::1");
  EXPECT_TRUE(v6.ipv6);
  EXPECT_EQ(v6.bytes[0], 0xfd);
  EXPECT_EQ(v6.bytes[15], 1);
  EXPECT_EQ(format_ip_address(v6), "fd00::1");
  EXPECT_EQ(format_ip_address(address("FD00:0:0::0001")), "fd00::1");
  for (const char* bad :
       {"", "1.2.3", "1.2.3.4.5", "256.1.1.1", "::g", "1.2.3.4/8", "host", " 1.2.3.4"}) {
    const auto r = parse_ip_address(bad);
    EXPECT_FALSE(r.has_value()) << "'" << bad << "' accepted";
    if (!r) {
      EXPECT_NE(r.error().message.find(std::string("'") + bad + "'"), std::string::npos)
          << r.error().message;
    }
  }
}

TEST(NetAddress, PrefixesMustHaveHostBitsClear) {
  IpPrefix p = prefix("10.20.2.0/24");
  EXPECT_EQ(p.length, 24);
  EXPECT_EQ(format_ip_prefix(p), "10.20.2.0/24");
  expect_refused(parse_ip_prefix("10.20.2.1/24"), "did you mean 10.20.2.0/24?");
  expect_refused(parse_ip_prefix("10.192.0.0/9"), "did you mean 10.128.0.0/9?");
  EXPECT_EQ(prefix("10.128.0.0/9").length, 9);
  expect_refused(parse_ip_prefix("fd00::1/64"), "did you mean fd00::/64?");
  EXPECT_EQ(format_ip_prefix(prefix("fd00::/64")), "fd00::/64");
  EXPECT_EQ(prefix("10.1.2.3").length, 32);  // a bare address is a host prefix
  EXPECT_EQ(prefix("::1").length, 128);
  EXPECT_EQ(prefix("0.0.0.0/0").length, 0);
  EXPECT_EQ(prefix("::/0").length, 0);
  expect_refused(parse_ip_prefix("10.0.0.0/33"), "0..32");
  expect_refused(parse_ip_prefix("fd00::/129"), "0..128");
  expect_refused(parse_ip_prefix("10.0.0.0/"), "0..32");
  expect_refused(parse_ip_prefix("10.0.0.0/x"), "0..32");
  expect_refused(parse_ip_prefix("10.0.0.0/-1"), "0..32");
  expect_refused(parse_ip_prefix("/24"), "not a prefix like");
  expect_refused(parse_ip_prefix("ten/8"), "not a prefix like");
}

TEST(NetAddress, HostPort) {
  auto e = parse_host_port("127.0.0.1:7800");
  ASSERT_TRUE(e.has_value()) << e.error().message;
  EXPECT_EQ(e->port, 7800);
  EXPECT_EQ(format_host_port(*e), "127.0.0.1:7800");
  e = parse_host_port("[::1]:7800");
  ASSERT_TRUE(e.has_value()) << e.error().message;
  EXPECT_TRUE(e->address.ipv6);
  EXPECT_EQ(format_host_port(*e), "[::1]:7800");
  EXPECT_EQ(parse_host_port("[fd00::1]:65535")->port, 65535);
  // Port 0 only when asked for.
  EXPECT_FALSE(parse_host_port("127.0.0.1:0").has_value());
  e = parse_host_port("127.0.0.1:0", true);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->port, 0);
  for (const char* bad :
       {"127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1:80x",
        "localhost:80", "::1:80", "[::1]", "[::1]:", "[::1:80", ":80", ""}) {
    const auto r = parse_host_port(bad);
    EXPECT_FALSE(r.has_value()) << "'" << bad << "' accepted";
    if (!r) {
      EXPECT_NE(r.error().message.find(std::string("'") + bad + "'"), std::string::npos)
          << r.error().message;
    }
  }
  EXPECT_NE(parse_host_port("::1:80").error().message.find("brackets"), std::string::npos);
}

TEST(NetAddress, ContainsAndOverlaps) {
  const IpPrefix ten = prefix("10.0.0.0/8");
  EXPECT_TRUE(prefix_contains(ten, address("10.255.1.2")));
  EXPECT_TRUE(prefix_contains(ten, address("10.0.0.0")));
  EXPECT_FALSE(prefix_contains(ten, address("11.0.0.0")));
  EXPECT_FALSE(prefix_contains(ten, address("9.255.255.255")));
  EXPECT_FALSE(prefix_contains(prefix("0.0.0.0/0"), address("::1")));  // other family
  EXPECT_TRUE(prefix_contains(prefix("0.0.0.0/0"), address("203.0.113.9")));
  EXPECT_TRUE(prefix_contains(prefix("fd00::/8"), address("fdff::1")));
  EXPECT_FALSE(prefix_contains(prefix("fd00::/8"), address("fe00::1")));
  EXPECT_TRUE(prefix_contains(prefix("10.1.2.3"), address("10.1.2.3")));
  EXPECT_FALSE(prefix_contains(prefix("10.1.2.3"), address("10.1.2.4")));

  EXPECT_TRUE(prefixes_overlap(ten, prefix("10.1.0.0/16")));
  EXPECT_TRUE(prefixes_overlap(prefix("10.1.0.0/16"), ten));
  EXPECT_TRUE(prefixes_overlap(ten, ten));
  EXPECT_FALSE(prefixes_overlap(prefix("10.0.0.0/16"), prefix("10.1.0.0/16")));
  EXPECT_FALSE(prefixes_overlap(prefix("0.0.0.0/0"), prefix("::/0")));
}

// prefix_contains against a bit-by-bit reference on random addresses and lengths.
TEST(NetAddress, ContainsMatchesABitwiseReference) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    const bool v6 = rng() % 2 == 0;
    const int bits = v6 ? 128 : 32;
    IpAddress a;
    a.ipv6 = v6;
    for (int b = 0; b < bits / 8; ++b) a.bytes[b] = static_cast<uint8_t>(rng());
    IpAddress other = a;
    // Flip one random bit (or none).
    const int flip = static_cast<int>(rng() % static_cast<uint64_t>(bits + 1)) - 1;
    if (flip >= 0) other.bytes[flip / 8] ^= static_cast<uint8_t>(0x80 >> (flip % 8));
    const auto length = static_cast<uint8_t>(rng() % static_cast<uint64_t>(bits + 1));
    IpPrefix p;
    p.address = a;
    p.length = length;
    for (int b = length; b < bits; ++b) {
      p.address.bytes[b / 8] &= static_cast<uint8_t>(~(0x80 >> (b % 8)));
    }
    const bool expected = flip < 0 || flip >= length;
    ASSERT_EQ(prefix_contains(p, other), expected) << "length " << int{length} << " flip " << flip;
    // Parsing the formatted prefix gives it back.
    const auto parsed = parse_ip_prefix(format_ip_prefix(p));
    ASSERT_TRUE(parsed.has_value()) << format_ip_prefix(p);
    ASSERT_EQ(*parsed, p);
  }
}

}  // namespace
}  // namespace detwan::common

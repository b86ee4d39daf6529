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

// The one endpoint grammar, every accepted and refused form, under each set of rules the
// programs use: tcp/verbs listen (empty host, port 0), udp (port 0), collectives' bootstrap
// (names), agent URLs (default port), the gateway (literals only).
TEST(NetAddress, EndpointGrammar) {
  EndpointRules strict;  // names allowed; host and port required; port 1..65535
  EndpointRules listen;
  listen.allow_empty_host = true;
  listen.allow_zero_port = true;
  EndpointRules literal;
  literal.allow_names = false;
  EndpointRules url;
  url.default_port = 80;
  struct Case {
    const char* text;
    const EndpointRules* rules;
    const char* host;   // expected host, or nullptr when refused
    int port;           // expected port
    bool is_literal;    // expected: an IP literal (no name, no zone)
    const char* error;  // expected substring when refused
  };
  const Case cases[] = {
      {"10.0.0.1:7800", &strict, "10.0.0.1", 7800, true, ""},
      {"[fd00::1]:7800", &strict, "fd00::1", 7800, true, ""},
      {"[::]:65535", &strict, "::", 65535, true, ""},
      {"agent-1.example_site:7800", &strict, "agent-1.example_site", 7800, false, ""},
      {"localhost:1", &strict, "localhost", 1, false, ""},
      {"[fe80::1%eth0]:7800", &strict, "fe80::1%eth0", 7800, false, ""},
      {":7800", &listen, "", 7800, false, ""},
      {"127.0.0.1:0", &listen, "127.0.0.1", 0, true, ""},
      {"[::1]:0", &listen, "::1", 0, true, ""},
      {"agent.example", &url, "agent.example", 80, false, ""},
      {"[::1]", &url, "::1", 80, true, ""},
      {"10.0.0.1:8080", &url, "10.0.0.1", 8080, true, ""},
      {"10.0.0.1:7800", &literal, "10.0.0.1", 7800, true, ""},
      // refused
      {":7800", &strict, nullptr, 0, false, "no host"},
      {"", &strict, nullptr, 0, false, "no host"},
      {"10.0.0.1", &strict, nullptr, 0, false, "no port"},
      {"[::1]", &strict, nullptr, 0, false, "no port"},
      {"10.0.0.1:", &strict, nullptr, 0, false, "port '' is not a number in [1, 65535]"},
      {"10.0.0.1:0", &strict, nullptr, 0, false, "[1, 65535]"},
      {"10.0.0.1:65536", &listen, nullptr, 0, false, "port '65536' is not a number in [0, 65535]"},
      {"10.0.0.1:-1", &strict, nullptr, 0, false, "port '-1'"},
      {"10.0.0.1:80x", &strict, nullptr, 0, false, "port '80x'"},
      {"10.0.0.1: 80", &strict, nullptr, 0, false, "port ' 80'"},
      {"fd00::1:80", &strict, nullptr, 0, false, "IPv6 address in brackets"},
      {"::1", &url, nullptr, 0, false, "IPv6 address in brackets"},
      {"[::1:80", &strict, nullptr, 0, false, "'[' without ']'"},
      {"[::1]80", &strict, nullptr, 0, false, "expected ':PORT' after ']'"},
      {"[10.0.0.1]:80", &strict, nullptr, 0, false, "in brackets is not an IPv6 address"},
      {"[host.example]:80", &strict, nullptr, 0, false, "in brackets is not an IPv6 address"},
      {"[]:80", &strict, nullptr, 0, false, "in brackets is not an IPv6 address"},
      {"[fe80::1%]:80", &strict, nullptr, 0, false, "is not a zone"},
      {"[fe80::1%eth0]:80", &literal, nullptr, 0, false, "an IP address is expected here"},
      {"host.example:80", &literal, nullptr, 0, false, "an IP address is expected here"},
      {"10.0.0.256:80", &strict, nullptr, 0, false, "is not an IP address or a host name"},
      {"ho st:80", &strict, nullptr, 0, false, "is not an IP address or a host name"},
      {"host/x:80", &strict, nullptr, 0, false, "is not an IP address or a host name"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const auto parsed = parse_endpoint(c.text, *c.rules);
    if (c.host == nullptr) {
      ASSERT_FALSE(parsed.has_value()) << "accepted as host '" << parsed->host << "'";
      EXPECT_NE(parsed.error().message.find(c.error), std::string::npos) << parsed.error().message;
      // The message quotes the text it refused.
      EXPECT_NE(parsed.error().message.find(std::string("'") + c.text + "'"), std::string::npos)
          << parsed.error().message;
      continue;
    }
    ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
    EXPECT_EQ(parsed->host, c.host);
    EXPECT_EQ(parsed->port, c.port);
    EXPECT_EQ(parsed->literal.has_value(), c.is_literal);
    if (c.host[0] != '\0' && parsed->port != 0) {
      // join_host_port writes what parse_endpoint reads back.
      const auto again = parse_endpoint(join_host_port(parsed->host, parsed->port), *c.rules);
      ASSERT_TRUE(again.has_value()) << again.error().message;
      EXPECT_EQ(again->host, parsed->host);
      EXPECT_EQ(again->port, parsed->port);
    }
  }
  EXPECT_EQ(join_host_port("fd00::1", 80), "[fd00::1]:80");
  EXPECT_EQ(join_host_port("10.0.0.1", 80), "10.0.0.1:80");
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

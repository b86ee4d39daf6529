// parse_ip() on hostile input and the Classifier's rules (longest prefix, then port range, then
// best effort on behalf of the longest matching prefix).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "dataplane/gw/classify.h"
#include "tests/dataplane/gw/engine_test_util.h"

namespace detwan::dataplane::gw {
namespace {

using testing::Bytes;
using testing::ipv4_packet;
using testing::ipv6_packet;
using testing::put_be;
using testing::v4_prefix;
using testing::v6_prefix;

constexpr uint8_t kDst[4] = {10, 2, 3, 4};

std::optional<IpInfo> parse(const Bytes& b) {
  IpInfo info;
  if (!parse_ip(b, &info)) return std::nullopt;
  return info;
}

TEST(ParseIp, Ipv4Udp) {
  const auto info = parse(ipv4_packet(kDst, 5001, 100, {}));
  ASSERT_TRUE(info);
  EXPECT_FALSE(info->ipv6);
  EXPECT_EQ(info->destination[0], 10);
  EXPECT_EQ(info->destination[3], 4);
  EXPECT_EQ(info->destination[4], 0);
  EXPECT_TRUE(info->has_udp_port);
  EXPECT_EQ(info->udp_destination_port, 5001);
  EXPECT_EQ(info->data_type(), wire::DataType::kIpv4);
}

TEST(ParseIp, Ipv4WithOptionsReadsThePortAfterThem) {
  Bytes b = ipv4_packet(kDst, 0, 100, {});
  b[0] = std::byte{0x46};  // IHL 6: 4 bytes of options, the UDP header starts at 24
  put_be(b, 26, 6001, 2);
  const auto info = parse(b);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->udp_destination_port, 6001);
}

TEST(ParseIp, Ipv4HostileHeaders) {
  const Bytes good = ipv4_packet(kDst, 5001, 60, {});
  for (std::size_t n = 0; n < 20; ++n) {
    EXPECT_FALSE(parse(Bytes(good.begin(), good.begin() + static_cast<long>(n)))) << n;
  }
  for (int ihl = 0; ihl < 5; ++ihl) {
    Bytes b = good;
    b[0] = std::byte(static_cast<uint8_t>(0x40 | ihl));
    EXPECT_FALSE(parse(b)) << "IHL " << ihl;
  }
  Bytes b = good;
  b[0] = std::byte{0x4F};  // 60-byte header in a 60-byte packet: valid, no room for UDP
  ASSERT_TRUE(parse(b));
  EXPECT_FALSE(parse(b)->has_udp_port);
  b = good;
  put_be(b, 2, 61, 2);  // total length beyond the bytes given (truncated packet)
  EXPECT_FALSE(parse(b));
  b = good;
  put_be(b, 2, 19, 2);  // total length shorter than the header
  EXPECT_FALSE(parse(b));
  b = good;
  put_be(b, 2, 24, 2);  // UDP header cut to 4 bytes: no port
  ASSERT_TRUE(parse(b));
  EXPECT_FALSE(parse(b)->has_udp_port);
  b = good;
  b.resize(80);  // trailing bytes after total length are tolerated
  ASSERT_TRUE(parse(b));
  EXPECT_EQ(parse(b)->udp_destination_port, 5001);
  for (int version : {0, 1, 5, 7, 15}) {
    b = good;
    b[0] = std::byte(static_cast<uint8_t>(version << 4 | 5));
    EXPECT_FALSE(parse(b)) << "version " << version;
  }
  EXPECT_FALSE(parse(Bytes{}));
}

TEST(ParseIp, Ipv4FragmentsHaveNoPort) {
  for (uint16_t field : {0x2000, 0x0001, 0x2001, 0x1FFF}) {
    Bytes b = ipv4_packet(kDst, 5001, 60, {});
    put_be(b, 6, field, 2);
    const auto info = parse(b);
    ASSERT_TRUE(info) << field;
    EXPECT_TRUE(info->fragment) << field;
    EXPECT_FALSE(info->has_udp_port) << field;
  }
  Bytes df = ipv4_packet(kDst, 5001, 60, {});
  put_be(df, 6, 0x4000, 2);  // DF alone is not a fragment
  ASSERT_TRUE(parse(df));
  EXPECT_TRUE(parse(df)->has_udp_port);
}

TEST(ParseIp, Ipv4NonUdpHasNoPort) {
  const auto info = parse(ipv4_packet(kDst, 5001, 60, {}, /*protocol=*/6));
  ASSERT_TRUE(info);
  EXPECT_EQ(info->protocol, 6);
  EXPECT_FALSE(info->has_udp_port);
}

TEST(ParseIp, Ipv6UdpAndExtensionHeaders) {
  const Bytes good = ipv6_packet(2, 9, 5002, 80, {});
  auto info = parse(good);
  ASSERT_TRUE(info);
  EXPECT_TRUE(info->ipv6);
  EXPECT_EQ(info->destination[0], 0xfd);
  EXPECT_EQ(info->destination[1], 2);
  EXPECT_EQ(info->destination[15], 9);
  EXPECT_TRUE(info->has_udp_port);
  EXPECT_EQ(info->udp_destination_port, 5002);
  EXPECT_EQ(info->data_type(), wire::DataType::kIpv6);

  for (uint8_t next : {0, 43, 60, 6}) {  // hop-by-hop, routing, destination options, TCP
    Bytes b = good;
    b[6] = std::byte{next};
    info = parse(b);
    ASSERT_TRUE(info) << int{next};
    EXPECT_FALSE(info->has_udp_port) << int{next};
  }
  Bytes frag = good;
  frag[6] = std::byte{44};
  ASSERT_TRUE(parse(frag));
  EXPECT_TRUE(parse(frag)->fragment);
  EXPECT_FALSE(parse(frag)->has_udp_port);

  for (std::size_t n = 0; n < 40; ++n) {
    EXPECT_FALSE(parse(Bytes(good.begin(), good.begin() + static_cast<long>(n)))) << n;
  }
  Bytes b = good;
  put_be(b, 4, 41, 2);  // payload length beyond the bytes given
  EXPECT_FALSE(parse(b));
  b = good;
  put_be(b, 4, 4, 2);  // UDP header cut short
  ASSERT_TRUE(parse(b));
  EXPECT_FALSE(parse(b)->has_udp_port);
}

// Every truncation and every single-byte change of valid packets, then random bytes: parse_ip
// never reads outside the span (ASan builds check it) and accepts only self-consistent packets.
TEST(ParseIp, SurvivesMutationsAndRandomBytes) {
  std::mt19937_64 rng(7);
  const std::vector<Bytes> seeds = {ipv4_packet(kDst, 5001, 64, {}), ipv6_packet(2, 9, 5, 64, {})};
  uint64_t accepted = 0;
  for (const Bytes& seed : seeds) {
    for (std::size_t n = 0; n <= seed.size(); ++n) {
      // A heap copy of exactly n bytes, so an overread is an ASan error.
      const Bytes cut(seed.begin(), seed.begin() + static_cast<long>(n));
      IpInfo info;
      accepted += parse_ip(cut, &info) ? 1 : 0;
    }
    for (int i = 0; i < 20000; ++i) {
      Bytes b = seed;
      b[rng() % b.size()] = std::byte(static_cast<uint8_t>(rng()));
      IpInfo info;
      if (parse_ip(b, &info)) {
        ++accepted;
        EXPECT_EQ(info.ipv6, (std::to_integer<uint8_t>(b[0]) >> 4) == 6);
      }
    }
  }
  for (int i = 0; i < 20000; ++i) {
    Bytes b(rng() % 100);
    for (auto& x : b) x = std::byte(static_cast<uint8_t>(rng()));
    IpInfo info;
    (void)parse_ip(b, &info);
  }
  EXPECT_GT(accepted, 0u);
}

TunnelConfig tunnel(uint32_t id, std::vector<Prefix> prefixes, std::vector<PortRange> ports = {}) {
  TunnelConfig t;
  t.id = id;
  t.dst_prefixes = std::move(prefixes);
  t.udp_ports = std::move(ports);
  return t;
}

IpInfo v4_to(uint8_t a, uint8_t b, uint8_t c, uint8_t d, std::optional<uint16_t> port) {
  IpInfo ip;
  ip.destination[0] = a;
  ip.destination[1] = b;
  ip.destination[2] = c;
  ip.destination[3] = d;
  ip.has_udp_port = port.has_value();
  ip.udp_destination_port = port.value_or(0);
  return ip;
}

TEST(Classifier, LongestPrefixThenPortRangeThenBestEffort) {
  // 0: 10.0.0.0/8 any; 1: 10.1.0.0/16 ports 5000-5999; 2: 10.1.0.0/16 ports 6000 and 7000-7001;
  // 3: 10.1.2.0/24 port 9000; 4: fd02::/16 any.
  const std::vector<TunnelConfig> tunnels = {
      tunnel(1, {v4_prefix(10, 0, 0, 0, 8)}),
      tunnel(2, {v4_prefix(10, 1, 0, 0, 16)}, {{5000, 5999}}),
      tunnel(3, {v4_prefix(10, 1, 0, 0, 16)}, {{6000, 6000}, {7000, 7001}}),
      tunnel(4, {v4_prefix(10, 1, 2, 0, 24)}, {{9000, 9000}}),
      tunnel(5, {v6_prefix(2, 16)}),
  };
  auto c = Classifier::create(tunnels);
  ASSERT_TRUE(c.has_value()) << c.error().describe();
  EXPECT_EQ(c->rule_count(), 5u);
  const auto route = [&](const IpInfo& ip) { return c->classify(ip); };
  const auto expect = [&](const IpInfo& ip, RouteKind kind, uint32_t index, const char* what) {
    const Route r = route(ip);
    EXPECT_EQ(r.kind, kind) << what;
    if (kind != RouteKind::kNoRoute) {
      EXPECT_EQ(r.tunnel_index, index) << what;
    }
  };
  expect(v4_to(10, 9, 9, 9, 80), RouteKind::kTunnel, 0, "only the /8");
  expect(v4_to(10, 1, 9, 9, 5500), RouteKind::kTunnel, 1, "/16 with its port");
  expect(v4_to(10, 1, 9, 9, 6000), RouteKind::kTunnel, 2, "second /16, first range");
  expect(v4_to(10, 1, 9, 9, 7001), RouteKind::kTunnel, 2, "second /16, last port of a range");
  expect(v4_to(10, 1, 9, 9, 7002), RouteKind::kTunnel, 0, "/16 ports miss: the /8 takes it");
  expect(v4_to(10, 1, 2, 9, 9000), RouteKind::kTunnel, 3, "/24 with its port");
  expect(v4_to(10, 1, 2, 9, 5000), RouteKind::kTunnel, 1, "/24 port miss, /16 port hit");
  expect(v4_to(10, 1, 2, 9, std::nullopt), RouteKind::kTunnel, 0, "not UDP: the any-port /8");
  expect(v4_to(11, 1, 2, 9, 9000), RouteKind::kNoRoute, 0, "outside every prefix");
  IpInfo v6;
  v6.ipv6 = true;
  v6.destination[0] = 0xfd;
  v6.destination[1] = 2;
  expect(v6, RouteKind::kTunnel, 4, "IPv6 /16");
  v6.destination[1] = 3;
  expect(v6, RouteKind::kNoRoute, 0, "IPv6 outside");
  // An IPv4 address whose bytes match an IPv6 prefix does not match it.
  expect(v4_to(0xfd, 2, 0, 0, 1), RouteKind::kNoRoute, 0, "family mismatch");
}

TEST(Classifier, PortMissWithoutAnAnyPortRuleIsBestEffortOfTheLongestPrefix) {
  const std::vector<TunnelConfig> tunnels = {
      tunnel(1, {v4_prefix(10, 0, 0, 0, 8)}, {{1, 1}}),
      tunnel(2, {v4_prefix(10, 1, 0, 0, 16)}, {{2, 2}}),
  };
  auto c = Classifier::create(tunnels);
  ASSERT_TRUE(c.has_value());
  Route r = c->classify(v4_to(10, 1, 0, 1, 3));
  EXPECT_EQ(r.kind, RouteKind::kBestEffort);
  EXPECT_EQ(r.tunnel_index, 1u);
  r = c->classify(v4_to(10, 2, 0, 1, std::nullopt));
  EXPECT_EQ(r.kind, RouteKind::kBestEffort);
  EXPECT_EQ(r.tunnel_index, 0u);
  r = c->classify(v4_to(10, 1, 0, 1, 1));
  EXPECT_EQ(r.kind, RouteKind::kTunnel);
  EXPECT_EQ(r.tunnel_index, 0u);
}

TEST(Classifier, EqualPrefixesKeepConfigurationOrderAndHostBitsAreIgnored) {
  Prefix sloppy = v4_prefix(10, 1, 2, 3, 16);  // host bits set: treated as 10.1.0.0/16
  const std::vector<TunnelConfig> tunnels = {tunnel(1, {sloppy}),
                                             tunnel(2, {v4_prefix(10, 1, 0, 0, 16)})};
  auto c = Classifier::create(tunnels);
  ASSERT_TRUE(c.has_value());
  const Route r = c->classify(v4_to(10, 1, 200, 1, 80));
  EXPECT_EQ(r.kind, RouteKind::kTunnel);
  EXPECT_EQ(r.tunnel_index, 0u);
  // A /0 matches every address of its family.
  auto all = Classifier::create({tunnel(3, {v4_prefix(0, 0, 0, 0, 0)})});
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(all->classify(v4_to(203, 0, 113, 9, std::nullopt)).kind, RouteKind::kTunnel);
}

// The rule the classifier promises, written as the plain scan it replaced: by decreasing prefix
// length then configuration order, the first rule whose prefix contains the destination and
// whose ports match; else best effort for the first containing rule; else no route.
Route reference_route(const std::vector<TunnelConfig>& tunnels, const IpInfo& ip) {
  struct Rule {
    uint32_t index;
    const Prefix* prefix;
  };
  std::vector<Rule> rules;
  for (uint32_t t = 0; t < tunnels.size(); ++t) {
    for (const Prefix& p : tunnels[t].dst_prefixes) rules.push_back({t, &p});
  }
  std::stable_sort(rules.begin(), rules.end(), [](const Rule& a, const Rule& b) {
    return a.prefix->length > b.prefix->length;
  });
  const Rule* fallback = nullptr;
  for (const Rule& rule : rules) {
    const Prefix& p = *rule.prefix;
    if (p.ipv6 != ip.ipv6) continue;
    bool inside = true;
    for (unsigned bit = 0; bit < p.length && inside; ++bit) {
      const uint8_t m = static_cast<uint8_t>(0x80u >> (bit % 8));
      inside = (ip.destination[bit / 8] & m) == (p.address[bit / 8] & m);
    }
    if (!inside) continue;
    const auto& ports = tunnels[rule.index].udp_ports;
    bool port_ok = ports.empty();
    for (const PortRange& r : ports) {
      port_ok = port_ok || (ip.has_udp_port && ip.udp_destination_port >= r.first &&
                            ip.udp_destination_port <= r.last);
    }
    if (port_ok) return {RouteKind::kTunnel, rule.index};
    if (fallback == nullptr) fallback = &rule;
  }
  if (fallback != nullptr) return {RouteKind::kBestEffort, fallback->index};
  return {};
}

TEST(Classifier, AgreesWithThePlainScanOnRandomTablesAndPackets) {
  std::mt19937 rng(17);
  auto pick = [&](uint32_t n) { return static_cast<uint32_t>(rng() % n); };
  for (int table = 0; table < 200; ++table) {
    // Few distinct address bytes and lengths so that prefixes overlap and repeat.
    std::vector<TunnelConfig> tunnels;
    const uint32_t count = 1 + pick(40);
    for (uint32_t t = 0; t < count; ++t) {
      std::vector<Prefix> prefixes;
      for (uint32_t k = 0, n = 1 + pick(3); k < n; ++k) {
        static constexpr uint8_t kLengths[] = {0, 8, 16, 23, 24, 31, 32};
        Prefix p = v4_prefix(10, static_cast<uint8_t>(pick(3)), static_cast<uint8_t>(pick(3)),
                             static_cast<uint8_t>(pick(4)), kLengths[pick(7)]);
        if (pick(5) == 0) p = v6_prefix(static_cast<uint8_t>(pick(3)), pick(2) == 0 ? 16 : 8);
        prefixes.push_back(p);
      }
      std::vector<PortRange> ports;
      if (pick(2) == 0)
        ports.push_back({static_cast<uint16_t>(pick(4)), static_cast<uint16_t>(4 + pick(4))});
      tunnels.push_back(tunnel(t + 1, prefixes, ports));
    }
    auto c = Classifier::create(tunnels);
    ASSERT_TRUE(c.has_value()) << c.error().describe();
    for (int packet = 0; packet < 200; ++packet) {
      IpInfo ip = v4_to(10, static_cast<uint8_t>(pick(3)), static_cast<uint8_t>(pick(3)),
                        static_cast<uint8_t>(pick(5)),
                        pick(4) == 0 ? std::nullopt : std::optional<uint16_t>(pick(10)));
      if (pick(5) == 0) {
        ip.ipv6 = true;
        std::memset(ip.destination, 0, sizeof(ip.destination));
        ip.destination[0] = 0xfd;
        ip.destination[1] = static_cast<uint8_t>(pick(3));
      }
      const Route want = reference_route(tunnels, ip);
      const Route got = c->classify(ip);
      ASSERT_EQ(got.kind, want.kind) << "table " << table << " packet " << packet;
      if (want.kind != RouteKind::kNoRoute) {
        ASSERT_EQ(got.tunnel_index, want.tunnel_index) << "table " << table << " packet " << packet;
      }
    }
  }
}

TEST(Classifier, SetupErrorsNameTheTunnel) {
  Prefix too_long = v4_prefix(10, 0, 0, 0, 33);
  auto c = Classifier::create({tunnel(12, {too_long})});
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message.find("tunnel 12"), std::string::npos) << c.error().message;
  EXPECT_NE(c.error().message.find("33"), std::string::npos);
  c = Classifier::create({tunnel(13, {v4_prefix(10, 0, 0, 0, 8)}, {{10, 9}})});
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message.find("tunnel 13"), std::string::npos) << c.error().message;
  Prefix v6_129 = v6_prefix(1, 128);
  v6_129.length = 129;
  EXPECT_FALSE(Classifier::create({tunnel(14, {v6_129})}).has_value());
  EXPECT_TRUE(Classifier::create({tunnel(15, {v6_prefix(1, 128)})}).has_value());
}

}  // namespace
}  // namespace detwan::dataplane::gw

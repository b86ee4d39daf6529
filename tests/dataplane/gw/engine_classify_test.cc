// parse_ip() on hostile input and the Classifier's rules (longest prefix, then source, then port
// range, then best effort on behalf of the longest matching prefix, then a foreign source); the
// egress check of decapsulated packets (inner_verdict).
#include <algorithm>
#include <array>
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

TunnelConfig tunnel(uint32_t id, std::vector<Prefix> prefixes, std::vector<PortRange> ports = {},
                    std::vector<Prefix> sources = {}) {
  TunnelConfig t;
  t.id = id;
  t.dst_prefixes = std::move(prefixes);
  t.udp_ports = std::move(ports);
  t.src_prefixes = std::move(sources);
  return t;
}

IpInfo from(IpInfo ip, uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  ip.source[0] = a;
  ip.source[1] = b;
  ip.source[2] = c;
  ip.source[3] = d;
  return ip;
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
// length then configuration order, the first rule whose prefix contains the destination, whose
// sources contain the source and whose ports match; else best effort for the first rule that
// contains destination and source; else a foreign source for the first that contains the
// destination; else no route.
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
  const auto inside = [](const Prefix& p, bool ipv6, const uint8_t* address) {
    if (p.ipv6 != ipv6) return false;
    for (unsigned bit = 0; bit < p.length; ++bit) {
      const uint8_t m = static_cast<uint8_t>(0x80u >> (bit % 8));
      if ((address[bit / 8] & m) != (p.address[bit / 8] & m)) return false;
    }
    return true;
  };
  const Rule* fallback = nullptr;
  const Rule* foreign = nullptr;
  for (const Rule& rule : rules) {
    if (!inside(*rule.prefix, ip.ipv6, ip.destination)) continue;
    const auto& sources = tunnels[rule.index].src_prefixes;
    bool source_ok = sources.empty();
    for (const Prefix& p : sources) source_ok = source_ok || inside(p, ip.ipv6, ip.source);
    if (!source_ok) {
      if (foreign == nullptr) foreign = &rule;
      continue;
    }
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
  if (foreign != nullptr) return {RouteKind::kForeignSource, foreign->index};
  return {};
}

TEST(Classifier, AgreesWithThePlainScanOnRandomTablesAndPackets) {
  std::mt19937 rng(17);
  auto pick = [&](uint32_t n) { return static_cast<uint32_t>(rng() % n); };
  std::array<int, 4> seen{};  // by RouteKind
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
      std::vector<Prefix> sources;  // a third of the tunnels carry only some sources
      for (uint32_t k = 0, n = pick(3) == 0 ? 1 + pick(2) : 0; k < n; ++k) {
        static constexpr uint8_t kLengths[] = {8, 24, 30, 32};
        sources.push_back(v4_prefix(10, 50, static_cast<uint8_t>(pick(2)),
                                    static_cast<uint8_t>(pick(6)), kLengths[pick(4)]));
        if (pick(4) == 0) sources.back() = v6_prefix(static_cast<uint8_t>(50 + pick(2)), 16);
      }
      tunnels.push_back(tunnel(t + 1, prefixes, ports, sources));
    }
    auto c = Classifier::create(tunnels);
    ASSERT_TRUE(c.has_value()) << c.error().describe();
    for (int packet = 0; packet < 200; ++packet) {
      IpInfo ip = v4_to(10, static_cast<uint8_t>(pick(3)), static_cast<uint8_t>(pick(3)),
                        static_cast<uint8_t>(pick(5)),
                        pick(4) == 0 ? std::nullopt : std::optional<uint16_t>(pick(10)));
      ip = from(ip, 10, 50, static_cast<uint8_t>(pick(2)), static_cast<uint8_t>(pick(6)));
      if (pick(5) == 0) {
        ip.ipv6 = true;
        std::memset(ip.destination, 0, sizeof(ip.destination));
        ip.destination[0] = 0xfd;
        ip.destination[1] = static_cast<uint8_t>(pick(3));
        std::memset(ip.source, 0, sizeof(ip.source));
        ip.source[0] = 0xfd;
        ip.source[1] = static_cast<uint8_t>(50 + pick(2));
      }
      const Route want = reference_route(tunnels, ip);
      const Route got = c->classify(ip);
      ASSERT_EQ(got.kind, want.kind) << "table " << table << " packet " << packet;
      if (want.kind != RouteKind::kNoRoute) {
        ASSERT_EQ(got.tunnel_index, want.tunnel_index) << "table " << table << " packet " << packet;
      }
      ++seen[static_cast<std::size_t>(want.kind)];
    }
  }
  // The tables exercised every outcome.
  for (std::size_t kind = 0; kind < seen.size(); ++kind) EXPECT_GT(seen[kind], 100) << kind;
}

TEST(Classifier, SourcesPickTheTenantsTunnelAndOthersAreForeign) {
  // Two jobs at this site (hosts 10.1.0.5 and 10.1.0.6) each reserved 10.2.0.9; a third job
  // (10.1.0.0/24 hosts .128-.255) reserved all of 10.2.0.0/16; IPv6 alike.
  Prefix v6_src = v6_prefix(1, 128);
  v6_src.address[15] = 5;
  Prefix v6_dst = v6_prefix(2, 128);
  v6_dst.address[15] = 9;
  const std::vector<TunnelConfig> tunnels = {
      tunnel(1, {v4_prefix(10, 2, 0, 9, 32), v6_dst}, {}, {v4_prefix(10, 1, 0, 5, 32), v6_src}),
      tunnel(2, {v4_prefix(10, 2, 0, 9, 32)}, {}, {v4_prefix(10, 1, 0, 6, 32)}),
      tunnel(3, {v4_prefix(10, 2, 0, 0, 16)}, {}, {v4_prefix(10, 1, 0, 128, 25)}),
  };
  auto c = Classifier::create(tunnels);
  ASSERT_TRUE(c.has_value()) << c.error().describe();
  const auto expect = [&](const IpInfo& ip, RouteKind kind, uint32_t index, const char* what) {
    const Route r = c->classify(ip);
    EXPECT_EQ(r.kind, kind) << what;
    if (kind != RouteKind::kNoRoute) {
      EXPECT_EQ(r.tunnel_index, index) << what;
    }
  };
  const IpInfo to_9 = v4_to(10, 2, 0, 9, 80);
  expect(from(to_9, 10, 1, 0, 5), RouteKind::kTunnel, 0, "job 1's host: job 1's tunnel");
  expect(from(to_9, 10, 1, 0, 6), RouteKind::kTunnel, 1, "job 2's host: job 2's tunnel");
  expect(from(to_9, 10, 1, 0, 200), RouteKind::kTunnel, 2, "job 3's host: its /16 tunnel");
  expect(from(to_9, 10, 1, 0, 7), RouteKind::kForeignSource, 0,
         "a co-tenant: foreign, named by the longest prefix (first in configuration order)");
  expect(from(v4_to(10, 2, 7, 7, 80), 10, 1, 0, 5), RouteKind::kForeignSource, 2,
         "job 1's host outside job 1's destination: foreign to the /16");
  expect(from(v4_to(10, 3, 0, 9, 80), 10, 1, 0, 5), RouteKind::kNoRoute, 0, "no prefix");
  IpInfo v6;
  v6.ipv6 = true;
  std::memcpy(v6.destination, v6_dst.address, 16);
  std::memcpy(v6.source, v6_src.address, 16);
  expect(v6, RouteKind::kTunnel, 0, "IPv6 tenant");
  v6.source[15] = 6;
  expect(v6, RouteKind::kForeignSource, 0, "IPv6 co-tenant");
  // The IPv4 source bytes of an IPv6 packet never match an IPv4 source prefix.
  IpInfo mixed = from(to_9, 10, 1, 0, 5);
  mixed.ipv6 = true;
  expect(mixed, RouteKind::kNoRoute, 0, "family mismatch");
}

TEST(Classifier, APortMissOfTheTenantIsBestEffortNotForeign) {
  const std::vector<TunnelConfig> tunnels = {
      tunnel(1, {v4_prefix(10, 2, 0, 0, 16)}, {{5000, 5000}}, {v4_prefix(10, 1, 0, 5, 32)})};
  auto c = Classifier::create(tunnels);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->classify(from(v4_to(10, 2, 0, 1, 5000), 10, 1, 0, 5)).kind, RouteKind::kTunnel);
  EXPECT_EQ(c->classify(from(v4_to(10, 2, 0, 1, 6000), 10, 1, 0, 5)).kind, RouteKind::kBestEffort);
  EXPECT_EQ(c->classify(from(v4_to(10, 2, 0, 1, 5000), 10, 1, 0, 6)).kind,
            RouteKind::kForeignSource);
}

TEST(ParseIp, SourcesOfBothFamilies) {
  Bytes v4 = ipv4_packet(kDst, 5001, 60, {});
  const auto four = parse(v4);
  ASSERT_TRUE(four);
  EXPECT_EQ(four->source[0], 10);  // ipv4_packet's source 10.99.0.1
  EXPECT_EQ(four->source[1], 99);
  EXPECT_EQ(four->source[3], 1);
  EXPECT_EQ(four->source[4], 0);
  Bytes v6 = ipv6_packet(2, 9, 5002, 80, {});
  v6[8] = std::byte{0xfd};
  v6[9] = std::byte{1};
  v6[23] = std::byte{5};
  const auto six = parse(v6);
  ASSERT_TRUE(six);
  EXPECT_EQ(six->source[0], 0xfd);
  EXPECT_EQ(six->source[1], 1);
  EXPECT_EQ(six->source[15], 5);
  EXPECT_EQ(six->destination[15], 9);
}

// A decapsulated packet of a tenant-bound tunnel at site b (10.2/16): the far side's tenant is
// 10.1.0.5 (the tunnel's dst_prefixes here), this side's 10.2.0.9 (src_prefixes).
TEST(InnerVerdict, OnlyTheTenantsAddressesAreDelivered) {
  TunnelConfig t = tunnel(1, {v4_prefix(10, 1, 0, 5, 32)}, {}, {v4_prefix(10, 2, 0, 9, 32)});
  const uint8_t to_tenant[4] = {10, 2, 0, 9};
  const uint8_t to_other[4] = {10, 2, 0, 10};
  const auto packet = [](const uint8_t dst[4], uint8_t src_last) {
    Bytes b = ipv4_packet(dst, 5001, 60, {});
    const uint8_t src[4] = {10, 1, 0, src_last};
    for (int i = 0; i < 4; ++i) b[12 + i] = std::byte{src[i]};
    return b;
  };
  const auto verdict = [&](const Bytes& b, bool foreign_ok = false,
                           wire::DataType type = wire::DataType::kIpv4) {
    return inner_verdict(t, type, b, foreign_ok);
  };
  EXPECT_EQ(verdict(packet(to_tenant, 5)), InnerVerdict::kAllowed);
  EXPECT_EQ(verdict(packet(to_tenant, 6)), InnerVerdict::kForeignSource);
  EXPECT_EQ(verdict(packet(to_other, 5)), InnerVerdict::kForeignDestination);
  // A best-effort packet of a foreign_source best-effort tunnel: any source, still our tenant.
  EXPECT_EQ(verdict(packet(to_tenant, 6), true), InnerVerdict::kAllowed);
  EXPECT_EQ(verdict(packet(to_other, 6), true), InnerVerdict::kForeignDestination);
  // Not an IP packet where one is checked; a service datagram is not checked.
  EXPECT_EQ(verdict(Bytes(60, std::byte{0x11})), InnerVerdict::kNotIp);
  EXPECT_EQ(verdict(Bytes(3)), InnerVerdict::kNotIp);
  EXPECT_EQ(verdict(Bytes(60, std::byte{0x11}), false, wire::DataType::kDatagram),
            InnerVerdict::kAllowed);
  // IPv6 against IPv4 prefixes: outside.
  EXPECT_EQ(verdict(ipv6_packet(2, 9, 5002, 80, {}), false, wire::DataType::kIpv6),
            InnerVerdict::kForeignDestination);
  // IPv6 tenants.
  Prefix far = v6_prefix(1, 64);
  Prefix near = v6_prefix(2, 120);
  TunnelConfig t6 = tunnel(2, {far}, {}, {near});
  Bytes v6 = ipv6_packet(2, 9, 5002, 80, {});
  v6[8] = std::byte{0xfd};
  v6[9] = std::byte{1};
  EXPECT_EQ(inner_verdict(t6, wire::DataType::kIpv6, v6, false), InnerVerdict::kAllowed);
  v6[9] = std::byte{3};
  EXPECT_EQ(inner_verdict(t6, wire::DataType::kIpv6, v6, false), InnerVerdict::kForeignSource);
  // A tunnel without match.src is not tenant-bound: nothing is checked.
  t.src_prefixes.clear();
  EXPECT_EQ(verdict(packet(to_other, 6)), InnerVerdict::kAllowed);
  EXPECT_EQ(verdict(Bytes(60, std::byte{0x11})), InnerVerdict::kAllowed);
}

// inner_verdict's word-wise prefix test against prefix_contains (config.h) on random prefixes of
// every length and addresses near them, both families.
TEST(InnerVerdict, AgreesWithPrefixContainsOnRandomPrefixes) {
  std::mt19937 rng(31);
  int allowed = 0, foreign = 0;
  for (int round = 0; round < 20000; ++round) {
    const bool v6 = rng() % 2 == 0;
    Prefix near;
    near.ipv6 = v6;
    near.length = static_cast<uint8_t>(rng() % ((v6 ? 128 : 32) + 1));
    uint8_t destination[16] = {};
    for (int i = 0; i < (v6 ? 16 : 4); ++i) {
      destination[i] = static_cast<uint8_t>(rng() % 4);
      near.address[i] = rng() % 4 == 0 ? static_cast<uint8_t>(rng() % 4) : destination[i];
    }
    for (unsigned bit = near.length; bit < (v6 ? 128u : 32u); ++bit) {  // host bits clear
      near.address[bit / 8] = static_cast<uint8_t>(near.address[bit / 8] & ~(0x80u >> (bit % 8)));
    }
    Prefix far = near;  // the far tenant: any source of the family
    far.length = 0;
    std::memset(far.address, 0, sizeof(far.address));
    TunnelConfig t = tunnel(1, {far}, {}, {near});
    Bytes packet = v6 ? ipv6_packet(0, 0, 5002, 80, {}) : ipv4_packet(kDst, 5001, 60, {});
    const std::size_t at = v6 ? 24 : 16;
    for (int i = 0; i < (v6 ? 16 : 4); ++i) packet[at + i] = std::byte{destination[i]};
    const bool want = prefix_contains(near, v6, destination);
    const InnerVerdict got =
        inner_verdict(t, v6 ? wire::DataType::kIpv6 : wire::DataType::kIpv4, packet, false);
    ASSERT_EQ(got, want ? InnerVerdict::kAllowed : InnerVerdict::kForeignDestination)
        << "round " << round << " length " << int{near.length};
    ++(want ? allowed : foreign);
  }
  EXPECT_GT(allowed, 1000);
  EXPECT_GT(foreign, 1000);
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
  c = Classifier::create({tunnel(16, {v4_prefix(10, 0, 0, 0, 8)}, {}, {too_long})});
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message.find("tunnel 16"), std::string::npos) << c.error().message;
}

}  // namespace
}  // namespace detwan::dataplane::gw

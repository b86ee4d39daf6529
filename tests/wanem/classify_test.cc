// classify(): hand-built Ethernet/VLAN/IPv4/IPv6 frames, fragments, bad headers, truncation.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "tools/wanem/engine/emulator.h"
#include "tools/wanem/engine/spec.h"

namespace detwan::wanem {
namespace {

constexpr auto kReserved = TrafficClass::kReserved;
constexpr auto kBestEffort = TrafficClass::kBestEffort;

void put16(std::vector<uint8_t>& f, size_t at, uint16_t v) {
  f[at] = static_cast<uint8_t>(v >> 8);
  f[at + 1] = static_cast<uint8_t>(v & 0xff);
}

struct Ipv4Options {
  uint8_t dscp = 0;
  uint8_t protocol = 17;
  uint16_t dst_port = 9;
  uint8_t ihl_words = 5;
  uint16_t flags_fragment = 0;  // flags (3 bits) + fragment offset (13 bits)
  bool vlan = false;
};

std::vector<uint8_t> ipv4_frame(const Ipv4Options& o) {
  const size_t l3 = o.vlan ? 18 : 14;
  const size_t ihl = size_t{o.ihl_words} * 4;
  std::vector<uint8_t> f(l3 + std::max<size_t>(ihl, 20) + 8 + 32, 0);
  if (o.vlan) {
    put16(f, 12, 0x8100);
    put16(f, 14, 0x0064);  // VID 100
    put16(f, 16, 0x0800);
  } else {
    put16(f, 12, 0x0800);
  }
  f[l3] = static_cast<uint8_t>(0x40 | o.ihl_words);
  f[l3 + 1] = static_cast<uint8_t>(o.dscp << 2 | 0x2);  // ECN bits set: must be ignored
  put16(f, l3 + 6, o.flags_fragment);
  f[l3 + 9] = o.protocol;
  const size_t l4 = l3 + ihl;
  if (l4 + 4 <= f.size()) {
    put16(f, l4, 40000);
    put16(f, l4 + 2, o.dst_port);
  }
  return f;
}

std::vector<uint8_t> ipv6_frame(uint8_t dscp, uint8_t next_header, uint16_t dst_port,
                                bool vlan = false) {
  const size_t l3 = vlan ? 18 : 14;
  std::vector<uint8_t> f(l3 + 40 + 8 + 16, 0);
  if (vlan) {
    put16(f, 12, 0x8100);
    put16(f, 16, 0x86dd);
  } else {
    put16(f, 12, 0x86dd);
  }
  const auto traffic_class = static_cast<uint8_t>(dscp << 2 | 0x1);
  f[l3] = static_cast<uint8_t>(0x60 | (traffic_class >> 4));
  f[l3 + 1] = static_cast<uint8_t>((traffic_class & 0x0f) << 4 | 0x0a);  // + flow label bits
  f[l3 + 6] = next_header;
  put16(f, l3 + 40 + 2, dst_port);
  return f;
}

TrafficClass run(const ImpairmentSpec& spec, const std::vector<uint8_t>& f) {
  return classify(spec, f.data(), static_cast<uint32_t>(f.size()));
}

ImpairmentSpec prio_spec() {
  auto s = parse_spec("prio-dscp=46/34,prio-port=5000-5999/7000");
  EXPECT_TRUE(s.has_value());
  return *s;
}

TEST(Classify, Ipv4DscpAndUdpPort) {
  const ImpairmentSpec s = prio_spec();
  EXPECT_EQ(run(s, ipv4_frame({.dscp = 46})), kReserved);
  EXPECT_EQ(run(s, ipv4_frame({.dscp = 34, .protocol = 6})), kReserved);  // DSCP, any protocol
  EXPECT_EQ(run(s, ipv4_frame({.dscp = 45})), kBestEffort);
  EXPECT_EQ(run(s, ipv4_frame({.dst_port = 5000})), kReserved);
  EXPECT_EQ(run(s, ipv4_frame({.dst_port = 5999})), kReserved);
  EXPECT_EQ(run(s, ipv4_frame({.dst_port = 7000})), kReserved);
  EXPECT_EQ(run(s, ipv4_frame({.dst_port = 4999})), kBestEffort);
  EXPECT_EQ(run(s, ipv4_frame({.dst_port = 6000})), kBestEffort);
  EXPECT_EQ(run(s, ipv4_frame({.protocol = 6, .dst_port = 5000})), kBestEffort);  // TCP
}

TEST(Classify, Ipv4OptionsMoveTheUdpHeader) {
  const ImpairmentSpec s = prio_spec();
  EXPECT_EQ(run(s, ipv4_frame({.dst_port = 5100, .ihl_words = 7})), kReserved);
  EXPECT_EQ(run(s, ipv4_frame({.dst_port = 5100, .ihl_words = 15})), kReserved);
}

TEST(Classify, Ipv4BadHeaderLengthIsBestEffort) {
  const ImpairmentSpec s = prio_spec();
  auto f = ipv4_frame({.dst_port = 5100});
  f[14] = 0x44;  // IHL 4 words < 20 bytes
  EXPECT_EQ(run(s, f), kBestEffort);
  f[14] = 0x45;
  f[14] = 0x65;  // version 6 in an IPv4 ethertype
  EXPECT_EQ(run(s, f), kBestEffort);
  // IHL 15 (60 bytes) in a frame that ends inside the options.
  auto g = ipv4_frame({.dst_port = 5100, .ihl_words = 15});
  g.resize(14 + 40);
  EXPECT_EQ(run(s, g), kBestEffort);
}

TEST(Classify, Ipv4FragmentsOnlyFirstHasPorts) {
  const ImpairmentSpec s = prio_spec();
  // First fragment (MF set, offset 0) carries the UDP header.
  EXPECT_EQ(run(s, ipv4_frame({.dst_port = 5100, .flags_fragment = 0x2000})), kReserved);
  // Later fragments: the bytes where a port would be are payload.
  EXPECT_EQ(run(s, ipv4_frame({.dst_port = 5100, .flags_fragment = 0x2000 | 185})), kBestEffort);
  EXPECT_EQ(run(s, ipv4_frame({.dst_port = 5100, .flags_fragment = 1})), kBestEffort);
  // DSCP still counts in any fragment.
  EXPECT_EQ(run(s, ipv4_frame({.dscp = 46, .flags_fragment = 185})), kReserved);
}

TEST(Classify, VlanTaggedFrames) {
  const ImpairmentSpec s = prio_spec();
  EXPECT_EQ(run(s, ipv4_frame({.dst_port = 5001, .vlan = true})), kReserved);
  EXPECT_EQ(run(s, ipv4_frame({.dscp = 46, .vlan = true})), kReserved);
  EXPECT_EQ(run(s, ipv4_frame({.dst_port = 80, .vlan = true})), kBestEffort);
  EXPECT_EQ(run(s, ipv6_frame(0, 17, 7000, /*vlan=*/true)), kReserved);
  // Two tags (QinQ) are not parsed: best effort.
  auto f = ipv4_frame({.dst_port = 5001, .vlan = true});
  put16(f, 16, 0x8100);
  EXPECT_EQ(run(s, f), kBestEffort);
}

TEST(Classify, Ipv6TrafficClassAndUdpPort) {
  const ImpairmentSpec s = prio_spec();
  EXPECT_EQ(run(s, ipv6_frame(46, 6, 80)), kReserved);
  EXPECT_EQ(run(s, ipv6_frame(10, 17, 5500)), kReserved);
  EXPECT_EQ(run(s, ipv6_frame(10, 17, 80)), kBestEffort);
  EXPECT_EQ(run(s, ipv6_frame(10, 6, 5500)), kBestEffort);  // TCP
  EXPECT_EQ(run(s, ipv6_frame(10, 0, 5500)), kBestEffort);  // hop-by-hop header: no walk
  EXPECT_EQ(run(s, ipv6_frame(47, 17, 80)), kBestEffort);
}

TEST(Classify, OtherEtherTypesAndNoListsAreBestEffort) {
  const ImpairmentSpec s = prio_spec();
  auto arp = ipv4_frame({.dscp = 46});
  put16(arp, 12, 0x0806);
  EXPECT_EQ(run(s, arp), kBestEffort);
  EXPECT_EQ(run(ImpairmentSpec{}, ipv4_frame({.dscp = 46, .dst_port = 5000})), kBestEffort);
  EXPECT_EQ(classify(s, nullptr, 100), kBestEffort);
}

// Every prefix of a reserved frame is classified without reading past its end (each prefix is
// copied into a buffer of exactly that size, so ASan builds catch any overread) and is reserved
// only once the deciding field is inside the prefix.
TEST(Classify, TruncatedFramesNeverOverread) {
  const ImpairmentSpec s = prio_spec();
  struct Case {
    std::vector<uint8_t> frame;
    size_t needed;  // shortest prefix that is reserved
  };
  const Case cases[] = {
      {ipv4_frame({.dst_port = 5000}), 14 + 20 + 4},
      {ipv4_frame({.dst_port = 5000, .vlan = true}), 18 + 20 + 4},
      {ipv4_frame({.dscp = 46}), 14 + 20},
      {ipv6_frame(0, 17, 5000), 14 + 40 + 4},
      {ipv6_frame(46, 17, 80), 14 + 40},
  };
  for (const Case& c : cases) {
    for (size_t n = 0; n <= c.frame.size(); ++n) {
      std::vector<uint8_t> prefix(c.frame.begin(),
                                  c.frame.begin() + static_cast<std::ptrdiff_t>(n));
      prefix.shrink_to_fit();
      const TrafficClass expected = n >= c.needed ? kReserved : kBestEffort;
      EXPECT_EQ(classify(s, prefix.data(), static_cast<uint32_t>(n)), expected) << "prefix " << n;
    }
  }
}

}  // namespace
}  // namespace detwan::wanem

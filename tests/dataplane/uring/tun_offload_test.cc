// TUN offload (dataplane/uring/tun_offload.h): a UDP GSO run read from the TUN device is cut
// into the datagrams the host would have sent without offload (headers and checksums checked
// independently here), a partial checksum is completed, malformed reads are refused; and end to
// end, a run a host socket sends with UDP_SEGMENT into an offloading TUN device leaves the
// gateway as one tunnel frame per datagram, each intact.
#include "dataplane/uring/tun_offload.h"

#include <cstring>
#include <numeric>
#include <vector>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "common/unique_fd.h"
#include "dataplane/gw/tun.h"
#include "dataplane/uring/gateway.h"
#include "dataplane/wire/byte_order.h"
#include "dataplane/wire/checksum.h"
#include "dataplane/wire/header.h"
#include "tests/common/private_netns.h"
#include "tests/dataplane/uring/uring_site.h"
#include "tests/dataplane/uring/uring_test_util.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif

namespace detwan::dataplane::uring {
namespace {

using Bytes = std::vector<std::byte>;
using wire::load_be16;
using wire::store_be16;

constexpr uint32_t kVnet = gw::kVnetHeaderBytes;

// The one's-complement sum of `bytes` folded: 0xFFFF when a checksum in them verifies.
uint16_t folded(const std::byte* p, size_t n) { return wire::fold(wire::sum_native(p, n)); }

bool udp_checksum_verifies(const Bytes& packet, bool ipv6) {
  const size_t ip = ipv6 ? 40 : 20;
  const auto udp_bytes = static_cast<uint32_t>(packet.size() - ip);
  const std::byte* source = packet.data() + (ipv6 ? 8 : 12);
  const std::byte* destination = packet.data() + (ipv6 ? 24 : 16);
  return wire::fold(wire::pseudo_header_sum(ipv6, source, destination, udp_bytes) +
                    wire::sum_native(packet.data() + ip, udp_bytes)) == 0xFFFF;
}

// A read of the device: vnet header + IP + UDP header + payload (checksum left as the host
// leaves it for offload: the pseudo-header sum, not inverted).
Bytes gso_read(bool ipv6, uint32_t payload_bytes, uint16_t gso_size) {
  const uint32_t ip = ipv6 ? 40 : 20;
  Bytes read(kVnet + ip + 8 + payload_bytes);
  gw::VnetHeader vnet;
  vnet.flags = gw::kVnetNeedsChecksum;
  vnet.gso_type = gw::kVnetGsoUdpL4;
  vnet.header_bytes = static_cast<uint16_t>(ip + 8);
  vnet.gso_size = gso_size;
  vnet.csum_start = static_cast<uint16_t>(ip);
  vnet.csum_offset = 6;
  std::memcpy(read.data(), &vnet, sizeof vnet);
  std::byte* p = read.data() + kVnet;
  if (ipv6) {
    p[0] = std::byte{0x60};
    store_be16(p + 4, static_cast<uint16_t>(8 + payload_bytes));
    p[6] = std::byte{17};
    p[7] = std::byte{64};
    for (int i = 0; i < 16; ++i) {
      p[8 + i] = std::byte{static_cast<uint8_t>(0xFD)};
      p[24 + i] = std::byte{static_cast<uint8_t>(0x10 + i)};
    }
  } else {
    p[0] = std::byte{0x45};
    store_be16(p + 2, static_cast<uint16_t>(ip + 8 + payload_bytes));
    store_be16(p + 4, 0xFFFE);  // identification: segment k gets 0xFFFE + k (wrapping)
    p[8] = std::byte{64};
    p[9] = std::byte{17};
    const uint8_t addresses[8] = {10, 1, 2, 3, 10, 20, 2, 5};
    std::memcpy(p + 12, addresses, 8);
  }
  std::byte* udp = p + ip;
  store_be16(udp, 4000);
  store_be16(udp + 2, 5000);
  store_be16(udp + 4, static_cast<uint16_t>(8 + payload_bytes));
  for (uint32_t i = 0; i < payload_bytes; ++i) udp[8 + i] = std::byte{static_cast<uint8_t>(i * 7)};
  return read;
}

void expect_segments(bool ipv6, uint32_t payload_bytes, uint16_t gso_size) {
  const Bytes read = gso_read(ipv6, payload_bytes, gso_size);
  TunRead parsed;
  ASSERT_TRUE(parse_tun_read(read, kVnet, &parsed));
  const uint32_t expected = (payload_bytes + gso_size - 1) / gso_size;
  ASSERT_EQ(parsed.segments, expected);
  const uint32_t ip = ipv6 ? 40 : 20;
  for (uint32_t k = 0; k < expected; ++k) {
    Bytes out(2000);
    const uint32_t length = build_tun_packet(parsed, k, out);
    const uint32_t payload = std::min<uint32_t>(gso_size, payload_bytes - k * gso_size);
    ASSERT_EQ(length, ip + 8 + payload) << k;
    out.resize(length);
    if (ipv6) {
      EXPECT_EQ(load_be16(out.data() + 4), 8 + payload);
    } else {
      EXPECT_EQ(load_be16(out.data() + 2), length);
      EXPECT_EQ(load_be16(out.data() + 4), static_cast<uint16_t>(0xFFFE + k));
      EXPECT_EQ(folded(out.data(), 20), 0xFFFF) << "IPv4 header checksum of segment " << k;
    }
    EXPECT_EQ(load_be16(out.data() + ip), 4000);
    EXPECT_EQ(load_be16(out.data() + ip + 2), 5000);
    EXPECT_EQ(load_be16(out.data() + ip + 4), 8 + payload);
    EXPECT_NE(load_be16(out.data() + ip + 6), 0);
    EXPECT_TRUE(udp_checksum_verifies(out, ipv6)) << "segment " << k;
    EXPECT_EQ(
        std::memcmp(out.data() + ip + 8, read.data() + kVnet + ip + 8 + k * gso_size, payload), 0);
  }
  Bytes out(2000);
  EXPECT_EQ(build_tun_packet(parsed, expected, out), 0u);  // past the last segment
}

TEST(TunOffload, Ipv4RunsAreCutIntoDatagramsWithTheirOwnHeadersAndChecksums) {
  expect_segments(false, 3000, 1000);  // three equal segments
  expect_segments(false, 2500, 1000);  // the last one shorter
  expect_segments(false, 64 * 100, 100);
}

TEST(TunOffload, Ipv6RunsToo) {
  expect_segments(true, 4321, 1232);
  expect_segments(true, 1, 1232);  // a run of one
}

TEST(TunOffload, APartialChecksumIsCompleted) {
  // A whole UDP datagram (not a run) with its checksum left partial by the host.
  Bytes read = gso_read(false, 301, 1000);
  gw::VnetHeader vnet;
  std::memcpy(&vnet, read.data(), sizeof vnet);
  vnet.gso_type = gw::kVnetGsoNone;
  vnet.gso_size = 0;
  std::memcpy(read.data(), &vnet, sizeof vnet);
  std::byte* packet = read.data() + kVnet;
  store_be16(packet + 10, 0);
  store_be16(packet + 10, static_cast<uint16_t>(~folded(packet, 20)));  // a valid IPv4 header
  const auto partial = static_cast<uint16_t>(
      wire::fold(wire::pseudo_header_sum(false, packet + 12, packet + 16, 8 + 301)));
  std::memcpy(packet + 26, &partial, 2);  // native order, as the kernel stores a sum
  TunRead parsed;
  ASSERT_TRUE(parse_tun_read(read, kVnet, &parsed));
  EXPECT_FALSE(parsed.gso);
  ASSERT_TRUE(parsed.needs_checksum);
  Bytes out(2000);
  const uint32_t length = build_tun_packet(parsed, 0, out);
  ASSERT_EQ(length, 20u + 8 + 301);
  out.resize(length);
  EXPECT_TRUE(udp_checksum_verifies(out, false));
  EXPECT_EQ(std::memcmp(out.data() + 28, packet + 28, 301), 0);
  // Without the flag the packet is passed as read.
  vnet.flags = 0;
  std::memcpy(read.data(), &vnet, sizeof vnet);
  ASSERT_TRUE(parse_tun_read(read, kVnet, &parsed));
  Bytes plain(2000);
  ASSERT_EQ(build_tun_packet(parsed, 0, plain), length);
  EXPECT_EQ(std::memcmp(plain.data(), packet, length), 0);
}

TEST(TunOffload, MalformedReadsAreRefused) {
  TunRead parsed;
  const Bytes good = gso_read(false, 3000, 1000);
  ASSERT_TRUE(parse_tun_read(good, kVnet, &parsed));
  EXPECT_FALSE(parse_tun_read(std::span(good).first(kVnet), kVnet, &parsed));       // no packet
  EXPECT_FALSE(parse_tun_read(std::span(good).first(kVnet + 24), kVnet, &parsed));  // no UDP
  auto with = [&](auto change) {
    Bytes read = good;
    gw::VnetHeader vnet;
    std::memcpy(&vnet, read.data(), sizeof vnet);
    change(vnet, read.data() + kVnet);
    std::memcpy(read.data(), &vnet, sizeof vnet);
    return parse_tun_read(read, kVnet, &parsed);
  };
  EXPECT_FALSE(with([](gw::VnetHeader& v, std::byte*) { v.gso_type = 1; }));  // TCPv4 GSO
  EXPECT_FALSE(with([](gw::VnetHeader& v, std::byte*) { v.gso_size = 0; }));
  EXPECT_FALSE(with([](gw::VnetHeader& v, std::byte*) { v.gso_size = 40; }));         // 75 segments
  EXPECT_FALSE(with([](gw::VnetHeader&, std::byte* p) { p[9] = std::byte{6}; }));     // TCP
  EXPECT_FALSE(with([](gw::VnetHeader&, std::byte* p) { p[6] = std::byte{0x20}; }));  // MF
  EXPECT_FALSE(with([](gw::VnetHeader&, std::byte* p) { p[0] = std::byte{0x35}; }));  // version
  EXPECT_FALSE(with([](gw::VnetHeader& v, std::byte*) {
    v.gso_type = gw::kVnetGsoNone;
    v.csum_start =
        3021;  // the field (at csum_start + 6, 2 bytes) would end past the 3,028-byte packet
  }));
  // A segment larger than the output is not written.
  ASSERT_TRUE(parse_tun_read(good, kVnet, &parsed));
  Bytes small(500);
  EXPECT_EQ(build_tun_packet(parsed, 0, small), 0u);
}

// End to end: a host socket sends one UDP_SEGMENT run of 5 x 1000 bytes into an offloading TUN
// device; the gateway reads it as one run and sends one tunnel frame per datagram. With offload
// off the same five datagrams arrive (the kernel cut them before the device).
void run_through_tun(bool offload) {
  testing::TestSocket peer = testing::TestSocket::open();
  gw::GatewayConfig config =
      testing::site_config("site-a", "site-b", testing::loopback(0), peer.local, 1'000'000'000);
  config.tun.enabled = true;
  config.tun.offload = offload;
  config.tun.name = "dtwo0";
  auto route = gw::parse_prefix("10.20.2.0/24");
  ASSERT_TRUE(route);
  config.tun.routes = {*route};
  config.tunnels[0].dst_prefixes = {*route};
  config.tunnels[0].burst_bytes = 1 << 20;
  testing::Site a(config);
  ASSERT_TRUE(a.opened());
  testing::set_ipv4_address("dtwo0", "10.77.0.1");
  a.start();

  common::UniqueFd host(::socket(AF_INET, SOCK_DGRAM, 0));
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(9999);
  ::inet_pton(AF_INET, "10.20.2.5", &remote.sin_addr);
  std::vector<uint8_t> payload(5000);
  std::iota(payload.begin(), payload.end(), uint8_t{0});
  const uint16_t segment = 1000;
  alignas(cmsghdr) char control_buffer[CMSG_SPACE(sizeof(uint16_t))] = {};
  iovec vector{payload.data(), payload.size()};
  msghdr message{};
  message.msg_name = &remote;
  message.msg_namelen = sizeof remote;
  message.msg_iov = &vector;
  message.msg_iovlen = 1;
  message.msg_control = control_buffer;
  message.msg_controllen = sizeof control_buffer;
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_UDP;
  header->cmsg_type = UDP_SEGMENT;
  header->cmsg_len = CMSG_LEN(sizeof segment);
  std::memcpy(CMSG_DATA(header), &segment, sizeof segment);
  ASSERT_EQ(::sendmsg(host.get(), &message, 0), 5000) << std::strerror(errno);

  std::vector<Bytes> inner;
  while (inner.size() < 5) {
    const auto datagram = peer.receive();
    ASSERT_TRUE(datagram) << "only " << inner.size() << " of 5 frames";
    const auto decoded = wire::decode(*datagram);
    ASSERT_TRUE(decoded);
    if (!decoded->header.is_data()) continue;  // keepalives, time requests
    inner.emplace_back(decoded->payload.begin(), decoded->payload.end());
  }
  for (size_t k = 0; k < inner.size(); ++k) {
    ASSERT_EQ(inner[k].size(), 20u + 8 + 1000) << k;
    EXPECT_EQ(folded(inner[k].data(), 20), 0xFFFF) << "IPv4 header checksum of datagram " << k;
    EXPECT_TRUE(udp_checksum_verifies(inner[k], false)) << "datagram " << k;
    EXPECT_EQ(std::memcmp(inner[k].data() + 28, payload.data() + k * 1000, 1000), 0) << k;
  }
  const auto stats = a.stats_when([](const auto& s) {
    return testing::counter(s, {"local", "tun_rx_packets"}) >= 5;
  });
  EXPECT_GE(testing::counter(stats, {"local", "tun_rx_packets"}), 5);
  EXPECT_EQ(testing::counter(stats, {"local", "tun_rx_errors"}), 0);
  if (offload) {
    EXPECT_GE(testing::counter(stats, {"local", "tun_rx_batches"}), 1);
  } else {
    EXPECT_EQ(testing::counter(stats, {"local", "tun_rx_batches"}), 0);
  }
}

TEST(TunOffload, AUdpGsoRunThroughTheDeviceLeavesAsOneFramePerDatagram) {
  DETWAN_RUN_IN_NETNS([] { run_through_tun(true); });
}

TEST(TunOffload, WithoutOffloadTheSameDatagramsLeave) {
  DETWAN_RUN_IN_NETNS([] { run_through_tun(false); });
}

}  // namespace
}  // namespace detwan::dataplane::uring

// UDP GSO runs written to the TUN device (dataplane/uring/tun_offload.h, the write side): which
// packets may start or join a run; a run's header, read back by the read side's parser, gives the
// original packets byte for byte (IPv4 and IPv6, a shorter last packet); and end to end, a burst
// of tunnel frames from the peer, released in one round, crosses a real TUN device in a private
// netns as one write and reaches a host socket as the same datagrams, with offload on and off.
#include <cstring>
#include <ctime>
#include <vector>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/socket.h>

#include "common/unique_fd.h"
#include "dataplane/gw/tun.h"
#include "dataplane/uring/gateway.h"
#include "dataplane/uring/tun_offload.h"
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

void store_native16(std::byte* p, uint16_t value) { std::memcpy(p, &value, 2); }

// A complete UDP packet of flow 10.20.2.5:4000 -> 10.77.0.1:5000 (or fd..:4000 -> 10..:5000),
// IPv4 identification `id`, payload bytes from `seed`, with valid checksums.
Bytes udp_packet(bool ipv6, uint16_t id, uint32_t payload_bytes, uint8_t seed) {
  const uint32_t ip = ipv6 ? 40 : 20;
  Bytes packet(ip + 8 + payload_bytes);
  std::byte* p = packet.data();
  if (ipv6) {
    p[0] = std::byte{0x60};
    store_be16(p + 4, static_cast<uint16_t>(8 + payload_bytes));
    p[6] = std::byte{17};
    p[7] = std::byte{64};
    for (int i = 0; i < 16; ++i) {
      p[8 + i] = std::byte{0xFD};
      p[24 + i] = std::byte{static_cast<uint8_t>(0x10 + i)};
    }
  } else {
    p[0] = std::byte{0x45};
    store_be16(p + 2, static_cast<uint16_t>(packet.size()));
    store_be16(p + 4, id);
    p[6] = std::byte{0x40};  // DF
    p[8] = std::byte{64};
    p[9] = std::byte{17};
    const uint8_t addresses[8] = {10, 20, 2, 5, 10, 77, 0, 1};
    std::memcpy(p + 12, addresses, 8);
    store_native16(p + 10, static_cast<uint16_t>(~wire::fold(wire::sum_native(p, 20))));
  }
  std::byte* udp = p + ip;
  store_be16(udp, 4000);
  store_be16(udp + 2, 5000);
  store_be16(udp + 4, static_cast<uint16_t>(8 + payload_bytes));
  for (uint32_t i = 0; i < payload_bytes; ++i)
    udp[8 + i] = std::byte{static_cast<uint8_t>(seed + i)};
  uint16_t check = static_cast<uint16_t>(~wire::fold(
      wire::pseudo_header_sum(ipv6, p + (ipv6 ? 8 : 12), p + (ipv6 ? 24 : 16), 8 + payload_bytes) +
      wire::sum_native(udp, 8 + payload_bytes)));
  store_native16(udp + 6, check == 0 ? 0xFFFF : check);
  return packet;
}

TEST(TunRun, WhichPacketsMayStartOrJoinARun) {
  const Bytes v4 = udp_packet(false, 1, 100, 0);
  const Bytes v6 = udp_packet(true, 1, 100, 0);
  EXPECT_EQ(tun_run_header_bytes(v4), 28u);
  EXPECT_EQ(tun_run_header_bytes(v6), 48u);
  Bytes fragment = v4;
  fragment[6] = std::byte{0x20};  // more fragments
  EXPECT_EQ(tun_run_header_bytes(fragment), 0u);
  Bytes options = v4;
  options[0] = std::byte{0x46};
  EXPECT_EQ(tun_run_header_bytes(options), 0u);
  Bytes tcp = v4;
  tcp[9] = std::byte{6};
  EXPECT_EQ(tun_run_header_bytes(tcp), 0u);
  Bytes short_udp = v4;
  store_be16(short_udp.data() + 24, 50);  // UDP length not the packet's
  EXPECT_EQ(tun_run_header_bytes(short_udp), 0u);
  Bytes extension = v6;
  extension[6] = std::byte{0};  // hop-by-hop options first
  EXPECT_EQ(tun_run_header_bytes(extension), 0u);
  EXPECT_EQ(tun_run_header_bytes(udp_packet(false, 1, 0, 0)), 0u);  // no payload
  EXPECT_EQ(tun_run_header_bytes(std::span(v4).first(20)), 0u);

  const Bytes next = udp_packet(false, 2, 100, 9);  // another id and payload: same flow
  EXPECT_TRUE(tun_run_same_flow(v4.data(), next.data(), 28));
  Bytes other_port = next;
  store_be16(other_port.data() + 22, 5001);
  EXPECT_FALSE(tun_run_same_flow(v4.data(), other_port.data(), 28));
  Bytes other_ttl = next;
  other_ttl[8] = std::byte{63};
  EXPECT_FALSE(tun_run_same_flow(v4.data(), other_ttl.data(), 28));
  Bytes other_tos = next;
  other_tos[1] = std::byte{0xB8};
  EXPECT_FALSE(tun_run_same_flow(v4.data(), other_tos.data(), 28));
  Bytes other_flow_label = udp_packet(true, 1, 100, 0);
  other_flow_label[3] = std::byte{1};
  EXPECT_FALSE(tun_run_same_flow(v6.data(), other_flow_label.data(), 48));
  EXPECT_TRUE(tun_run_same_flow(v6.data(), udp_packet(true, 1, 60, 3).data(), 48));
}

// Packets of `segment` payload bytes (the last `last`) with identifications 0xFFFE + k made into
// one run as the datapath writes it, then read back by the read side: the same packets.
void expect_round_trip(bool ipv6, uint32_t count, uint32_t segment, uint32_t last) {
  std::vector<Bytes> packets;
  for (uint32_t k = 0; k < count; ++k) {
    packets.push_back(udp_packet(ipv6, static_cast<uint16_t>(0xFFFE + k),
                                 k + 1 == count ? last : segment, static_cast<uint8_t>(k * 13)));
  }
  const uint32_t header = ipv6 ? 48 : 28;
  Bytes run(kVnet + packets[0].size());
  std::memcpy(run.data() + kVnet, packets[0].data(), packets[0].size());
  uint32_t payload = segment;
  for (uint32_t k = 1; k < count; ++k) {
    run.insert(run.end(), packets[k].begin() + header, packets[k].end());
    payload += static_cast<uint32_t>(packets[k].size()) - header;
  }
  write_tun_run_header(run.data(), kVnet, run.data() + kVnet, header, segment, payload);
  gw::VnetHeader vnet;
  std::memcpy(&vnet, run.data(), sizeof vnet);
  EXPECT_EQ(vnet.gso_type, gw::kVnetGsoUdpL4);
  EXPECT_EQ(vnet.flags, gw::kVnetNeedsChecksum);
  EXPECT_EQ(vnet.gso_size, segment);
  EXPECT_EQ(vnet.csum_start, header - 8);
  EXPECT_EQ(vnet.csum_offset, 6);
  if (!ipv6) {
    EXPECT_EQ(load_be16(run.data() + kVnet + 2), run.size() - kVnet);
    EXPECT_EQ(wire::fold(wire::sum_native(run.data() + kVnet, 20)), 0xFFFF)
        << "the run's IPv4 header checksum";
  }
  TunRead read;
  ASSERT_TRUE(parse_tun_read(run, kVnet, &read));
  ASSERT_EQ(read.segments, count);
  for (uint32_t k = 0; k < count; ++k) {
    Bytes out(2000);
    const uint32_t length = build_tun_packet(read, k, out);
    ASSERT_EQ(length, packets[k].size()) << k;
    out.resize(length);
    EXPECT_EQ(out, packets[k]) << "packet " << k;
  }
}

TEST(TunRun, ARunReadBackGivesThePacketsByteForByte) {
  expect_round_trip(false, 5, 1000, 1000);
  expect_round_trip(false, 64, 1000, 17);
  expect_round_trip(true, 7, 1200, 333);
  expect_round_trip(true, 2, 1, 1);
}

int64_t tai_now_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_TAI, &now);
  return int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

// End to end: the peer sends kFrames tunnel frames of equal size in one UDP_SEGMENT send, so
// the gateway receives them in one GRO receive and releases them in one round; each carries a
// 1000-byte UDP datagram to a host socket behind the TUN device. With offload they are written
// as one run; without, one by one. Either way the socket receives every datagram intact.
constexpr uint32_t kFrames = 8;

void run_into_tun(bool offload) {
  testing::TestSocket peer = testing::TestSocket::open();
  gw::GatewayConfig config =
      testing::site_config("site-a", "site-b", testing::loopback(0), peer.local, 1'000'000'000);
  config.tun.enabled = true;
  config.tun.offload = offload;
  config.tun.name = "dtwr0";
  auto route = gw::parse_prefix("10.20.2.0/24");
  ASSERT_TRUE(route);
  config.tun.routes = {*route};
  config.tunnels[0].dst_prefixes = {*route};
  testing::Site a(config);
  ASSERT_TRUE(a.opened());
  testing::set_ipv4_address("dtwr0", "10.77.0.1");
  a.start();

  common::UniqueFd listener(::socket(AF_INET, SOCK_DGRAM, 0));
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_port = htons(5000);
  ::inet_pton(AF_INET, "10.77.0.1", &local.sin_addr);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&local), sizeof local), 0);

  Bytes frames;
  std::vector<Bytes> inner;
  const int64_t sent_ns = tai_now_ns();
  for (uint32_t k = 0; k < kFrames; ++k) {
    const Bytes packet =
        udp_packet(false, static_cast<uint16_t>(100 + k), 1000, static_cast<uint8_t>(k * 31));
    wire::TunnelHeader header;
    header.type = static_cast<uint8_t>(wire::DataType::kIpv4);
    header.tunnel_id = 7;
    header.payload_length = static_cast<uint16_t>(packet.size());
    header.sequence = k + 1;
    header.tx_time_ns = sent_ns;
    Bytes outer(wire::kHeaderSize);
    ASSERT_EQ(wire::encode(header, outer).status, wire::EncodeStatus::kOk);
    frames.insert(frames.end(), outer.begin(), outer.end());
    frames.insert(frames.end(), packet.begin(), packet.end());
    inner.push_back(packet);
  }
  const auto frame_bytes = static_cast<uint16_t>(frames.size() / kFrames);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(a.wan().port);
  std::memcpy(&to.sin_addr, a.wan().address, 4);
  alignas(cmsghdr) char control_buffer[CMSG_SPACE(sizeof(uint16_t))] = {};
  iovec vector{frames.data(), frames.size()};
  msghdr message{};
  message.msg_name = &to;
  message.msg_namelen = sizeof to;
  message.msg_iov = &vector;
  message.msg_iovlen = 1;
  message.msg_control = control_buffer;
  message.msg_controllen = sizeof control_buffer;
  cmsghdr* cmsg = CMSG_FIRSTHDR(&message);
  cmsg->cmsg_level = SOL_UDP;
  cmsg->cmsg_type = UDP_SEGMENT;
  cmsg->cmsg_len = CMSG_LEN(sizeof frame_bytes);
  std::memcpy(CMSG_DATA(cmsg), &frame_bytes, sizeof frame_bytes);
  ASSERT_EQ(::sendmsg(peer.fd.get(), &message, 0), static_cast<ssize_t>(frames.size()))
      << std::strerror(errno);

  for (uint32_t k = 0; k < kFrames; ++k) {
    pollfd readable{listener.get(), POLLIN, 0};
    ASSERT_EQ(::poll(&readable, 1, 10'000), 1) << "only " << k << " of " << kFrames;
    char received[2000];
    ASSERT_EQ(::recv(listener.get(), received, sizeof received, 0), 1000) << k;
    EXPECT_EQ(std::memcmp(received, inner[k].data() + 28, 1000), 0) << "datagram " << k;
  }
  const auto stats = a.stats_when([](const auto& s) {
    return testing::counter(s, {"local", "tun_tx_packets"}) >= kFrames;
  });
  EXPECT_EQ(testing::counter(stats, {"local", "tun_tx_packets"}), kFrames);
  EXPECT_EQ(testing::counter(stats, {"local", "tun_tx_errors"}), 0);
  EXPECT_EQ(testing::counter(stats, {"local", "tun_gso_refused"}), 0);
  if (offload) {
    EXPECT_GE(testing::counter(stats, {"local", "tun_tx_batches"}), 1);
  } else {
    EXPECT_EQ(testing::counter(stats, {"local", "tun_tx_batches"}), 0);
  }
}

TEST(TunRun, ABurstFromThePeerCrossesTheDeviceAsOneWriteAndArrivesIntact) {
  DETWAN_RUN_IN_NETNS([] { run_into_tun(true); });
}

TEST(TunRun, WithoutOffloadTheSameBurstArrivesPacketByPacket) {
  DETWAN_RUN_IN_NETNS([] { run_into_tun(false); });
}

}  // namespace
}  // namespace detwan::dataplane::uring

// Two DPDK gateways back to back over net_ring devices, stepped in virtual time: local packets
// cross the tunnel and come out decapsulated, the frames on the WAN are well formed, hostile
// frames are dropped and counted by reason, TX failures are counted, no mbuf leaks.
#include <algorithm>
#include <cstring>

#include "dataplane/wire/byte_order.h"
#include "dataplane/wire/header.h"
#include "tests/dataplane/dpdk/gateway_pair.h"

namespace detwan::dataplane::dpdk::testing {
namespace {

constexpr std::size_t kIpOffset = kEtherHeaderBytes;

std::vector<std::byte> ip_part(const std::vector<std::byte>& frame) {
  return std::vector<std::byte>(frame.begin() + kIpOffset, frame.end());
}

uint64_t at(const boost::json::value& v, std::initializer_list<boost::json::string_view> path) {
  const boost::json::value* node = &v;
  for (auto key : path) node = &node->as_object().at(key);
  return node->to_number<uint64_t>();
}
uint64_t port_io(const boost::json::value& stats, const char* key) {
  return stats.at("ports").as_array().at(0).at("io").at(key).to_number<uint64_t>();
}

using GatewayTest = GatewayPairTest;

TEST_F(GatewayTest, LocalPacketsCrossTheTunnelBothWays) {
  open_gateways();
  std::vector<std::vector<std::byte>> to_b, to_a;
  for (uint32_t i = 0; i < 20; ++i) {
    to_b.push_back(host_frame("10.20.1.5:5000", "10.20.2.9:6000", kHostMacA, 64 + i * 50, i));
    to_a.push_back(host_frame("10.20.2.9:6000", "10.20.1.5:5000", kHostMacB, 1000 + i, 100 + i));
    inject(host_a_in_.get(), to_b.back());
    inject(host_b_in_.get(), to_a.back());
  }
  step(600);  // 1.2 ms: every frame finds a slot of tunnel 7 (slots 0-49 of 1 ms)
  const auto at_b = drain(host_b_out_.get());
  const auto at_a = drain(host_a_out_.get());
  ASSERT_EQ(at_b.size(), to_b.size());
  ASSERT_EQ(at_a.size(), to_a.size());
  MacAddress host_b;
  ASSERT_TRUE(parse_mac(kHostMacB, &host_b));
  for (std::size_t i = 0; i < at_b.size(); ++i) {
    // Decapsulated: exactly the IP packet host A sent, in order, framed for host B.
    EXPECT_EQ(ip_part(at_b[i]), ip_part(to_b[i])) << i;
    EXPECT_EQ(std::memcmp(at_b[i].data(), host_b.bytes, 6), 0) << i;
    EXPECT_EQ(wire::load_be16(at_b[i].data() + 12), kEtherTypeIpv4);
    EXPECT_EQ(ip_part(at_a[i]), ip_part(to_a[i])) << i;
  }
  const auto stats_a = stats(*engine_a_, now_ns_);
  const auto stats_b = stats(*engine_b_, now_ns_);
  // A sent its 20 data frames (plus keepalives); B received them all and A got B's 20.
  EXPECT_GE(port_io(stats_a, "tx_packets"), 20u);
  EXPECT_GE(port_io(stats_b, "rx_packets"), 20u);
  EXPECT_EQ(port_io(stats_a, "rx_errors"), 0u);
  EXPECT_EQ(port_io(stats_b, "rx_errors"), 0u);
  EXPECT_EQ(at(stats_a, {"local", "tun_rx_packets"}), 20u);
  EXPECT_EQ(at(stats_b, {"local", "tun_tx_packets"}), 20u);
  EXPECT_EQ(counters(*gateway_a_).at("tx_failed").to_number<uint64_t>(), 0u);
  // Every test mbuf came back: nothing leaked on the way.
  EXPECT_EQ(rte_mempool_avail_count(pool_), kTestPoolMbufs);
}

TEST_F(GatewayTest, PortCountersFollowBurstsLargerThanOneTxBuffer) {
  // 300 frames due in one poll: the TX buffer (64) flushes itself several times before the end
  // of the poll; the engine's port counters must still count every frame the device took.
  // Frames queued while tunnel 7's window (slots 0-49 of the 1 ms cycle) is shut all become
  // due when it opens; at 400 Gbit/s they are 3 ns apart, so one poll takes them all.
  config_a_.wan_ports[0].line_rate_bps = 400'000'000'000;
  open_gateways();
  now_ns_ += 600'000;  // slot 60: shut
  constexpr uint32_t kFrames = 300;
  for (uint32_t i = 0; i < kFrames; ++i) {
    inject(host_a_in_.get(), host_frame("10.20.1.5:5000", "10.20.2.9:6000", kHostMacA, 64, i));
  }
  for (int i = 0; i < 220; ++i) {  // only A runs: its frames stay on the wan_ab ring
    now_ns_ += 2'000;
    (void)gateway_a_->poll_once_st(now_ns_);
  }
  const auto on_wire = drain(wan_ab_.get());
  const auto stats_a = stats(*engine_a_, now_ns_);
  EXPECT_GE(on_wire.size(), kFrames);
  EXPECT_EQ(port_io(stats_a, "tx_packets"), on_wire.size());
  EXPECT_EQ(counters(*gateway_a_).at("wan_ports").at(0).at("tx_packets").to_number<uint64_t>(),
            on_wire.size());
}

TEST_F(GatewayTest, WanFramesAreWellFormed) {
  open_gateways();
  const auto sent = host_frame("10.20.1.5:5000", "10.20.2.9:6000", kHostMacA, 200, 42);
  inject(host_a_in_.get(), sent);
  inject(host_a_in_.get(), sent);
  for (int i = 0; i < 600; ++i) {  // only A runs: its frames stay on the wan_ab ring
    now_ns_ += 2'000;
    (void)gateway_a_->poll_once_st(now_ns_);
  }
  const auto frames = drain(wan_ab_.get());
  std::vector<std::vector<std::byte>> data;
  WanAddress b;
  ASSERT_TRUE(parse_mac(kMacB, &b.mac));
  b.local = endpoint("10.0.0.2:4789");
  for (const auto& frame : frames) {
    ParsedFrame parsed;
    ASSERT_EQ(parse_wan_frame(frame, b, ChecksumState::kUnknown, ChecksumState::kUnknown, &parsed),
              FrameDrop::kNone);  // checksums verified in software
    EXPECT_EQ(parsed.source, endpoint("10.0.0.1:4789"));
    const auto decoded = wire::decode(std::span<const std::byte>(frame).subspan(
        parsed.udp_payload_offset, parsed.udp_payload_bytes));
    ASSERT_TRUE(decoded.ok());
    if (decoded.value().header.is_data()) data.push_back(frame);
  }
  ASSERT_EQ(data.size(), 2u);
  for (std::size_t i = 0; i < data.size(); ++i) {
    const auto& frame = data[i];
    EXPECT_EQ(std::to_integer<uint8_t>(frame[kIpOffset + 1]), 46 << 2);  // tunnel DSCP
    const auto view = wire::decode(std::span<const std::byte>(frame).subspan(42)).value();
    EXPECT_EQ(view.header.tunnel_id, 7u);
    EXPECT_EQ(view.header.data_type(), wire::DataType::kIpv4);
    EXPECT_EQ(view.header.sequence, i);
    EXPECT_GE(view.header.tx_time_ns, kStartNs);
    EXPECT_TRUE(std::equal(view.payload.begin(), view.payload.end(), sent.begin() + kIpOffset,
                           sent.end()));
  }
  EXPECT_EQ(rte_mempool_avail_count(pool_), kTestPoolMbufs);
}

TEST_F(GatewayTest, HostileWanFramesAreDroppedAndCounted) {
  open_gateways();
  // A valid frame from A to B carrying a valid tunnel packet, as a template.
  const gw::Endpoint a = endpoint("10.0.0.1:4789");
  const gw::Endpoint b = endpoint("10.0.0.2:4789");
  const gw::Endpoint stranger = endpoint("10.0.0.9:4789");
  auto tunnel_frame = [&](const gw::Endpoint& from, std::size_t udp_payload_bytes,
                          bool valid_header) {
    std::vector<std::byte> frame(outer_header_bytes(false) + udp_payload_bytes);
    if (valid_header && udp_payload_bytes >= wire::kHeaderSize) {
      wire::TunnelHeader header;
      header.tunnel_id = 7;
      header.type = static_cast<uint8_t>(wire::DataType::kIpv4);
      header.payload_length = static_cast<uint16_t>(udp_payload_bytes - wire::kHeaderSize);
      header.tx_time_ns = kStartNs;
      (void)wire::encode(header, std::span<std::byte>(frame).subspan(42));
    }
    OuterSpec spec;
    (void)parse_mac(kMacA, &spec.source_mac);
    (void)parse_mac(kMacB, &spec.destination_mac);
    spec.source = &from;
    spec.destination = &b;
    EXPECT_TRUE(build_outer_headers(frame, spec, false, false));
    return frame;
  };
  auto wrong_mac = tunnel_frame(a, 60, true);
  wrong_mac[0] = std::byte{0xff};
  auto arp = tunnel_frame(a, 60, true);
  wire::store_be16(arp.data() + 12, 0x0806);
  auto bad_checksum = tunnel_frame(a, 60, true);
  bad_checksum.back() ^= std::byte{1};
  auto wrong_port = tunnel_frame(a, 60, true);
  wire::store_be16(wrong_port.data() + 36, 4790);  // UDP destination port (checksum now wrong
                                                   // too, but the port is checked first)
  auto truncated = tunnel_frame(a, 40, true);
  truncated.resize(truncated.size() - 5);  // IP total length beyond the frame
  const auto bad_magic = tunnel_frame(a, 60, false);     // zeroed tunnel header
  const auto too_short = tunnel_frame(a, 10, false);     // UDP payload of 10 bytes
  const auto from_stranger = tunnel_frame(stranger, 60, true);  // known tunnel, wrong peer
  const std::vector<std::byte>* hostile[] = {&wrong_mac, &arp,       &bad_checksum,
                                             &wrong_port, &truncated, &bad_magic,
                                             &too_short,  &from_stranger};
  for (const std::vector<std::byte>* frame : hostile) {
    inject(wan_ab_.get(), *frame);
  }
  step(10);
  EXPECT_TRUE(drain(host_b_out_.get()).empty());
  const auto backend = counters(*gateway_b_);
  const auto& drops = backend.at("wan_ports").as_array().at(0).at("frame_drops");
  EXPECT_EQ(drops.at("other_mac").to_number<uint64_t>(), 1u);
  EXPECT_EQ(drops.at("not_ip").to_number<uint64_t>(), 1u);
  EXPECT_EQ(drops.at("bad_checksum").to_number<uint64_t>(), 1u);
  EXPECT_EQ(drops.at("wrong_port").to_number<uint64_t>(), 1u);
  EXPECT_EQ(drops.at("bad_ip_header").to_number<uint64_t>(), 1u);
  EXPECT_EQ(backend.at("wan_frame_drops").to_number<uint64_t>(), 5u);
  const auto stats_b = stats(*engine_b_, now_ns_);
  EXPECT_EQ(port_io(stats_b, "rx_errors"), 5u);  // the backend's drops, summed
  const auto& rx_drops = stats_b.at("ports").as_array().at(0).at("rx_drops");
  EXPECT_EQ(rx_drops.at("bad_magic").to_number<uint64_t>(), 1u);
  EXPECT_EQ(rx_drops.at("too_short").to_number<uint64_t>(), 1u);
  EXPECT_EQ(stats_b.at("drops").at("wrong_peer").to_number<uint64_t>(), 1u);
  EXPECT_EQ(rte_mempool_avail_count(pool_), kTestPoolMbufs);
}

// A stall of the loop longer than the scheduler's wheel horizon (a few cycles) — idle, or with
// frames still queued — must not turn later frames into beyond_horizon drops. Frames queued
// before the stall have missed their windows: by the default policy they move to the tunnel's
// next window (never sent late, never dropped for a horizon measured from before the stall).
TEST_F(GatewayTest, StallsLongerThanTheWheelHorizonLoseNothing) {
  open_gateways();
  step(1);
  now_ns_ += 50'000'000;  // 50 ms idle: nothing polled, nothing queued
  std::vector<std::vector<std::byte>> sent;
  for (uint32_t i = 0; i < 60; ++i) {
    sent.push_back(host_frame("10.20.1.5:5000", "10.20.2.9:6000", kHostMacA, 1000, i));
  }
  for (uint32_t i = 0; i < 40; ++i) inject(host_a_in_.get(), sent[i]);
  (void)gateway_a_->poll_once_st(now_ns_);  // 32 queued, 1 sent: the rest wait for the line
  now_ns_ += 50'000'000;                    // 50 ms stall with frames queued
  for (uint32_t i = 40; i < 60; ++i) inject(host_a_in_.get(), sent[i]);
  step(600);
  const auto frames = drain(host_b_out_.get());
  const auto stats_a = stats(*engine_a_, now_ns_);
  const auto& tunnel = stats_a.at("tunnels").as_array().at(0).at("tx");
  const auto& port = stats_a.at("ports").as_array().at(0).at("tx").at("port");
  EXPECT_EQ(port.at("dropped").at("beyond_horizon").to_number<uint64_t>(), 0u);
  EXPECT_EQ(tunnel.at("missed_slot_packets").to_number<uint64_t>(), 0u);
  EXPECT_GT(port.at("rescheduled").to_number<uint64_t>(), 0u);
  // Everything arrived, in the order offered.
  ASSERT_EQ(frames.size(), 60u);
  for (std::size_t i = 0; i < 60; ++i) EXPECT_EQ(ip_part(frames[i]), ip_part(sent[i])) << i;
  EXPECT_EQ(rte_mempool_avail_count(pool_), kTestPoolMbufs);
}

class SmallWanRingTest : public GatewayPairTest {
 protected:
  SmallWanRingTest() { wan_ring_size_ = 16; }  // holds 15 frames
};

TEST_F(SmallWanRingTest, TxFailuresAreCountedAndFreed) {
  open_gateways();
  for (uint32_t i = 0; i < 40; ++i) {
    inject(host_a_in_.get(),
           host_frame("10.20.1.5:5000", "10.20.2.9:6000", kHostMacA, 100, i));
  }
  for (int i = 0; i < 600; ++i) {  // B does not read: A's TX ring fills up
    now_ns_ += 2'000;
    (void)gateway_a_->poll_once_st(now_ns_);
  }
  const auto stats_a = stats(*engine_a_, now_ns_);
  const uint64_t sent = port_io(stats_a, "tx_packets");
  const uint64_t failed = port_io(stats_a, "tx_errors");
  EXPECT_EQ(sent, 15u);
  EXPECT_GE(failed, 25u);  // 40 data frames (+ keepalives) did not fit
  EXPECT_EQ(counters(*gateway_a_).at("tx_failed").to_number<uint64_t>(), failed);
  EXPECT_EQ(drain(wan_ab_.get()).size(), 15u);
  EXPECT_EQ(rte_mempool_avail_count(pool_), kTestPoolMbufs);  // refused frames were freed
}

}  // namespace
}  // namespace detwan::dataplane::dpdk::testing

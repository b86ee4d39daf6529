// Frame classification: Ethernet II, at most one 802.1Q tag, IPv4 or IPv6; reserved if the
// DSCP is in prio-dscp or the UDP destination port is in prio-port. Every read is bounds-checked
// against frame_bytes; anything malformed or unknown is best effort.
#include <algorithm>
#include <cstdint>

#include "tools/wanem/engine/emulator.h"

namespace detwan::wanem {
namespace {

constexpr uint32_t kEthernetHeaderBytes = 14;
constexpr uint32_t kVlanTagBytes = 4;
constexpr uint16_t kEtherTypeVlan = 0x8100;
constexpr uint16_t kEtherTypeIpv4 = 0x0800;
constexpr uint16_t kEtherTypeIpv6 = 0x86dd;
constexpr uint32_t kIpv4MinHeaderBytes = 20;
constexpr uint32_t kIpv6HeaderBytes = 40;
constexpr uint8_t kProtocolUdp = 17;
constexpr uint16_t kIpv4FragmentOffsetMask = 0x1fff;

uint16_t read_be16(const uint8_t* p) noexcept {
  return static_cast<uint16_t>((static_cast<uint16_t>(p[0]) << 8) | p[1]);
}

bool dscp_is_reserved(const ImpairmentSpec& spec, uint8_t dscp) noexcept {
  return std::find(spec.prio_dscp.begin(), spec.prio_dscp.end(), dscp) != spec.prio_dscp.end();
}

bool port_is_reserved(const ImpairmentSpec& spec, uint16_t port) noexcept {
  return std::any_of(spec.prio_ports.begin(), spec.prio_ports.end(),
                     [port](const PortRange& r) { return port >= r.first && port <= r.last; });
}

// UDP destination port at `l4` if the 4 bytes up to it are inside the frame.
bool udp_port_is_reserved(const ImpairmentSpec& spec, const uint8_t* frame, uint32_t frame_bytes,
                          uint32_t l4) noexcept {
  if (spec.prio_ports.empty() || frame_bytes < 4 || l4 > frame_bytes - 4) return false;
  return port_is_reserved(spec, read_be16(frame + l4 + 2));
}

}  // namespace

TrafficClass classify(const ImpairmentSpec& spec, const uint8_t* frame,
                      uint32_t frame_bytes) noexcept {
  if (frame == nullptr || (spec.prio_dscp.empty() && spec.prio_ports.empty()) ||
      frame_bytes < kEthernetHeaderBytes) {
    return TrafficClass::kBestEffort;
  }
  uint32_t l3 = kEthernetHeaderBytes;
  uint16_t ether_type = read_be16(frame + 12);
  if (ether_type == kEtherTypeVlan) {
    if (frame_bytes < kEthernetHeaderBytes + kVlanTagBytes) return TrafficClass::kBestEffort;
    ether_type = read_be16(frame + 16);
    l3 += kVlanTagBytes;
  }
  const uint32_t l3_bytes = frame_bytes - l3;
  const uint8_t* ip = frame + l3;
  if (ether_type == kEtherTypeIpv4) {
    if (l3_bytes < kIpv4MinHeaderBytes || (ip[0] >> 4) != 4) return TrafficClass::kBestEffort;
    const uint32_t ihl = (ip[0] & 0x0fu) * 4u;
    if (ihl < kIpv4MinHeaderBytes || ihl > l3_bytes) return TrafficClass::kBestEffort;
    if (dscp_is_reserved(spec, static_cast<uint8_t>(ip[1] >> 2))) return TrafficClass::kReserved;
    // Only the first fragment (offset 0) carries the UDP header.
    const bool first_fragment = (read_be16(ip + 6) & kIpv4FragmentOffsetMask) == 0;
    if (ip[9] == kProtocolUdp && first_fragment &&
        udp_port_is_reserved(spec, frame, frame_bytes, l3 + ihl)) {
      return TrafficClass::kReserved;
    }
    return TrafficClass::kBestEffort;
  }
  if (ether_type == kEtherTypeIpv6) {
    if (l3_bytes < kIpv6HeaderBytes || (ip[0] >> 4) != 6) return TrafficClass::kBestEffort;
    const auto traffic_class = static_cast<uint8_t>(((ip[0] & 0x0fu) << 4) | (ip[1] >> 4));
    if (dscp_is_reserved(spec, static_cast<uint8_t>(traffic_class >> 2))) {
      return TrafficClass::kReserved;
    }
    if (ip[6] == kProtocolUdp &&
        udp_port_is_reserved(spec, frame, frame_bytes, l3 + kIpv6HeaderBytes)) {
      return TrafficClass::kReserved;
    }
  }
  return TrafficClass::kBestEffort;
}

}  // namespace detwan::wanem

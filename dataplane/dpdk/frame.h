#pragma once
// Ethernet / IPv4 / IPv6 / UDP framing of tunnel packets for the DPDK backend, on plain bytes:
// no DPDK types here, so the parser and the builder are unit-tested without an EAL.
//
// parse_wan_frame() treats every byte as hostile (docs/errors.md, tier 1): each length is
// checked before it is read, nothing is asserted, and a rejected frame yields exactly one
// FrameDrop reason to count. build_outer_headers() writes the outer headers in front of a UDP
// payload that is already in place. Neither allocates, throws nor logs.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "dataplane/gw/config.h"
#include "dataplane/wire/checksum.h"

namespace detwan::dataplane::dpdk {

inline constexpr uint32_t kEtherHeaderBytes = 14;
inline constexpr uint32_t kIpv4HeaderBytes = 20;
inline constexpr uint32_t kIpv6HeaderBytes = 40;
inline constexpr uint32_t kUdpHeaderBytes = 8;
inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr uint16_t kEtherTypeIpv6 = 0x86DD;
inline constexpr uint8_t kIpProtoUdp = 17;

// Ethernet + IP (IPv4 without options) + UDP in front of a tunnel datagram.
[[nodiscard]] constexpr uint32_t outer_header_bytes(bool ipv6) noexcept {
  return kEtherHeaderBytes + (ipv6 ? kIpv6HeaderBytes : kIpv4HeaderBytes) + kUdpHeaderBytes;
}

struct MacAddress {
  uint8_t bytes[6] = {};
  friend bool operator==(const MacAddress&, const MacAddress&) = default;
};

// Why a frame received on a WAN port never reached the engine (the port's own drop reasons;
// the tunnel header's are wire::DropReason, counted by the engine).
enum class FrameDrop : uint8_t {
  kNone = 0,      // accepted
  kOtherMac,      // destination MAC is not this port's (we answer no ARP: no broadcast)
  kNotIp,         // EtherType is not IPv4 or IPv6 (ARP, VLAN, ...), or the frame is too short
  kBadIpHeader,   // IP version/header length/total length inconsistent with the frame
  kFragment,      // an IPv4 fragment (tunnels never rely on fragmentation)
  kNotUdp,        // IP protocol / IPv6 next header is not UDP (extension headers included)
  kWrongAddress,  // destination IP is not the port's local address
  kWrongPort,     // destination UDP port is not the port's local port
  kBadUdpLength,  // UDP length field below 8 or different from the IP payload length
  kBadChecksum,   // IPv4 header checksum or UDP checksum wrong (IPv6 UDP checksum 0 too)
  kMultiSegment,  // frame larger than one mbuf (jumbo frame without a large enough pool)
  kCount
};
inline constexpr int kFrameDropCount = static_cast<int>(FrameDrop::kCount);
// "other_mac", "not_ip", ... (counter names in docs/gateway-dpdk.md, "Counters").
std::string_view to_string(FrameDrop reason) noexcept;

// What the NIC already checked (RX checksum offload); kUnknown means "verify in software".
enum class ChecksumState : uint8_t { kUnknown = 0, kGood, kBad };

// The local side of a WAN port: frames must be addressed to these.
struct WanAddress {
  MacAddress mac;
  gw::Endpoint local;  // IP version, address and UDP port the port listens on
};

struct ParsedFrame {
  uint32_t udp_payload_offset = 0;  // from the start of the frame
  uint32_t udp_payload_bytes = 0;
  gw::Endpoint source;  // sender's IP address and UDP port
};

// Parses one received Ethernet frame. Accepts exactly: destination MAC = `address.mac`,
// IPv4 (no fragment, header checksum right) or IPv6 (next header UDP) of the port's IP version,
// destination = `address.local`, UDP length consistent with the IP length, UDP checksum right
// (0 = none is accepted over IPv4 only). Bytes after the IP packet (Ethernet padding) are
// ignored. On kNone, *out is filled.
[[nodiscard]] FrameDrop parse_wan_frame(std::span<const std::byte> frame, const WanAddress& address,
                                        ChecksumState ip_checksum, ChecksumState udp_checksum,
                                        ParsedFrame* out) noexcept;

// What goes in front of a tunnel datagram.
struct OuterSpec {
  MacAddress source_mac;
  MacAddress destination_mac;
  const gw::Endpoint* source = nullptr;       // the WAN port's local endpoint
  const gw::Endpoint* destination = nullptr;  // the peer; same IP version as source
  uint8_t dscp = 0;
};

// Writes Ethernet + IP + UDP into frame[0, outer_header_bytes) in front of the UDP payload at
// frame[outer_header_bytes, frame.size()), with DSCP, DF (IPv4), TTL/hop limit 64, the IPv4
// header checksum and, unless `udp_checksum_offloaded`, the UDP checksum over the payload (with
// offload it leaves the pseudo-header sum the NIC expects). The frame must be exactly
// outer_header_bytes + UDP payload long and the payload at most 65507 (IPv4) bytes; returns
// false (writing nothing) otherwise or if the IP versions of the endpoints differ.
[[nodiscard]] bool build_outer_headers(std::span<std::byte> frame, const OuterSpec& spec,
                                       bool ip_checksum_offloaded,
                                       bool udp_checksum_offloaded) noexcept;

// One's-complement sum (RFC 1071), exposed for tests: dataplane/wire/checksum.h.
using wire::internet_checksum;

// Parses "02:00:00:00:00:01" (also '-' separated); false on anything else.
[[nodiscard]] bool parse_mac(std::string_view text, MacAddress* out) noexcept;

}  // namespace detwan::dataplane::dpdk

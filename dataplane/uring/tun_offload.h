#pragma once
// Reads of a TUN device with offload (gw::TunDevice::open(config, true), tun.offload): each read
// is a virtio-net header and either one IP packet, whose UDP or TCP checksum the host may have
// left partial (kVnetNeedsChecksum), or a UDP GSO run (kVnetGsoUdpL4: one IP and UDP header for
// up to 64 KiB of payload, cut every gso_size bytes). The gateway tunnels packets, so it turns a
// read back into the packets the host would have sent without offload: a partial checksum is
// completed, a run is cut into UDP datagrams with their own IP and UDP headers (IPv4 total
// length, identification + k and header checksum; IPv6 payload length; UDP length and full
// checksum). One read of a run replaces up to 64 reads of the device.
//
// Per packet (tier 1): no allocation, no exception; a read that does not parse is refused whole.
#include <cstddef>
#include <cstdint>
#include <span>

namespace detwan::dataplane::uring {

struct TunRead {
  std::span<const std::byte> packet;  // after the virtio-net header
  uint32_t segments = 1;              // packets the read stands for
  uint32_t header_bytes = 0;          // a run: IP + UDP header bytes
  uint32_t segment_bytes = 0;         // a run: UDP payload bytes per packet (the last may be less)
  bool ipv6 = false;
  bool gso = false;
  bool needs_checksum = false;  // one packet whose checksum at csum_start + csum_offset is partial
  uint16_t csum_start = 0;
  uint16_t csum_offset = 0;
};

// Parses a read of `header_bytes` of virtio-net header followed by a packet. False for anything
// that is not one: too short, a GSO type other than UDP, a run without an IPv4/IPv6 + UDP
// header (IPv6 extension headers included), a segment size of 0, more than 64 segments, or a
// checksum position outside the packet.
[[nodiscard]] bool parse_tun_read(std::span<const std::byte> read, uint32_t header_bytes,
                                  TunRead* out) noexcept;

// Writes packet `index` (< read.segments) of the read into `out`; returns its length, or 0 if it
// does not fit.
[[nodiscard]] uint32_t build_tun_packet(const TunRead& read, uint32_t index,
                                        std::span<std::byte> out) noexcept;

}  // namespace detwan::dataplane::uring

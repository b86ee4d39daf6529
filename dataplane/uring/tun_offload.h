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
// Writes (the same switch): packets the engine releases to the device in one loop round, one
// right after the other, of one UDP flow (addresses, ports, traffic class, TTL / hop limit) and
// one size (the last may be shorter) are written as one UDP GSO packet: the first packet's IP and
// UDP headers with the run's lengths, the UDP checksum left partial, a virtio-net header of type
// UDP_L4 with gso_size = the packets' payload bytes, and the other packets' payloads behind it in
// one writev (no copy). The kernel cuts it into the same datagrams, with IPv4 identifications
// counting up from the first packet's, when it forwards them; a local socket with UDP_GRO takes
// the run whole. One write replaces up to 64, and the host's stack handles one packet instead of
// each. A device that refuses such a write (a kernel without UDP_L4 on TUN writes) turns it off;
// the run's packets are written again one by one.
//
// Per packet (tier 1): no allocation, no exception; a read that does not parse is refused whole.
#include <cstddef>
#include <cstdint>
#include <span>

#include <sys/uio.h>

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

// ---- the write side ----

inline constexpr uint32_t kTunRunSegments = 64;          // UDP_MAX_SEGMENTS of older kernels
inline constexpr uint32_t kTunRunPayloadBytes = 65'000;  // the run's IPv4 total length fits 16 bits
inline constexpr uint32_t kTunRunRecords = 16;           // runs in flight at once
inline constexpr uint32_t kTunRunSavedHeaderBytes = 48;  // IPv6 + UDP

// The IP + UDP header bytes of `packet` if it can be part of a run (IPv4 without options or
// fragmentation, or IPv6 without extension headers, carrying UDP with consistent lengths and at
// least one payload byte), else 0.
[[nodiscard]] uint32_t tun_run_header_bytes(std::span<const std::byte> packet) noexcept;

// True if `packet` (header_bytes of IP + UDP header, checked by tun_run_header_bytes) belongs to
// the flow of `first`: same IP version, addresses, traffic class, TTL / hop limit (IPv6: flow
// label), IPv4 flags, and UDP ports.
[[nodiscard]] bool tun_run_same_flow(const std::byte* first, const std::byte* packet,
                                     uint32_t header_bytes) noexcept;

// Rewrites the first packet of a run in place into the run's header: IPv4 total length and header
// checksum or IPv6 payload length, UDP length, UDP checksum partial (the pseudo-header sum over
// the run's length), and writes the virtio-net header (vnet_bytes, zeros beyond the 10 defined)
// at `vnet`, just before `packet`.
void write_tun_run_header(std::byte* vnet, uint32_t vnet_bytes, std::byte* packet,
                          uint32_t header_bytes, uint32_t segment_bytes,
                          uint32_t payload_bytes) noexcept;

// One run being built while packets join it, then in flight in one writev until its completion;
// the packets' buffers stay held until then.
struct TunRun {
  iovec vectors[kTunRunSegments]{};
  uint32_t buffers[kTunRunSegments]{};
  std::byte saved_header[kTunRunSavedHeaderBytes]{};  // the first packet's, to undo a refusal
  uint32_t count = 0;
  uint32_t header_bytes = 0;   // IP + UDP
  uint32_t segment_bytes = 0;  // UDP payload bytes per packet (the last may be less)
  uint32_t payload_bytes = 0;  // of all packets
  bool closed = false;         // a shorter packet ended it
  bool in_use = false;
};

}  // namespace detwan::dataplane::uring

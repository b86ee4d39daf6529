#pragma once
// The detwan tunnel header (version 1): 40 bytes, network byte order, carried as the first bytes
// of a UDP payload over IPv4 or IPv6 alike. docs/wire-format.md is the source of truth for the
// layout, the ranges and the receiver rules; this header mirrors it.
//
//  0                   1                   2                   3
//  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// |         Magic (0xDE7A)        |  Version (1)  |D|C|R|F|B|A|Rs|   0
// |                           Tunnel ID                           |   4
// |    Path ID    |     Type      |        Payload Length         |   8
// |             Session (flag A; zero without A)                  |  12
// |                  Sequence Number (64 bits)                    |  16
// |                      Cycle ID (64 bits)                       |  24
// |            Transmit Timestamp (64 bits, ns, TAI)              |  32
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Threading: everything here is a pure function of its arguments (no state); call from any
// thread. Nothing allocates, throws or logs; malformed input yields a DropReason to count.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "dataplane/wire/decoded.h"
#include "dataplane/wire/drop_reason.h"

namespace detwan::dataplane::wire {

inline constexpr uint16_t kMagic = 0xDE7A;
inline constexpr uint8_t kVersion = 1;
inline constexpr std::size_t kHeaderSize = 40;

// Field offsets from the start of the header.
inline constexpr std::size_t kMagicOffset = 0;
inline constexpr std::size_t kVersionOffset = 2;
inline constexpr std::size_t kFlagsOffset = 3;
inline constexpr std::size_t kTunnelIdOffset = 4;
inline constexpr std::size_t kPathIdOffset = 8;
inline constexpr std::size_t kTypeOffset = 9;
inline constexpr std::size_t kPayloadLengthOffset = 10;
inline constexpr std::size_t kSessionOffset = 12;
inline constexpr std::size_t kSequenceOffset = 16;
inline constexpr std::size_t kCycleIdOffset = 24;
inline constexpr std::size_t kTxTimeOffset = 32;

// Flags octet. Exactly one of D and C; R, F and B only with D; A with either. The low 2 bits
// are reserved.
inline constexpr uint8_t kFlagData = 0x80;        // D: payload is tunnel traffic
inline constexpr uint8_t kFlagControl = 0x40;     // C: payload is a control body (control.h)
inline constexpr uint8_t kFlagReplica = 0x20;     // R: sent on more than one path (PREOF)
inline constexpr uint8_t kFlagFec = 0x10;         // F: payload is FEC repair data
inline constexpr uint8_t kFlagBestEffort = 0x08;  // B: best effort, not on time: the receiver
                                                  // releases it on receipt, without playout
inline constexpr uint8_t kFlagAuth = 0x04;  // A: payload sealed with the tunnel's AEAD key, a
                                           // 16-byte tag after it; Session is nonzero
inline constexpr uint8_t kFlagReservedMask = 0x03;

// Type octet of a data packet: what the payload is, so the receiver knows where it goes.
enum class DataType : uint8_t {
  kDatagram = 1,  // an application datagram (UDP service port), delivered as is
  kIpv4 = 4,      // an IPv4 packet (TUN)
  kIpv6 = 6,      // an IPv6 packet (TUN)
};

// Type octet of a control packet: which body follows (control.h).
enum class ControlType : uint8_t {
  kTimeRequest = 1,
  kTimeResponse = 2,
  kKeepalive = 3,
};

[[nodiscard]] constexpr bool is_known(DataType t) noexcept {
  return t == DataType::kDatagram || t == DataType::kIpv4 || t == DataType::kIpv6;
}
[[nodiscard]] constexpr bool is_known(ControlType t) noexcept {
  return t == ControlType::kTimeRequest || t == ControlType::kTimeResponse ||
         t == ControlType::kKeepalive;
}

// Largest payload any receiver accepts: the largest UDP payload over IPv4 (65535 - 20 - 8)
// minus the tunnel header. IPv6 could carry 20 bytes more; one limit keeps the header
// independent of the IP version.
inline constexpr std::size_t kMaxPayloadBytes = 65535 - 20 - 8 - kHeaderSize;  // 65467

enum class IpVersion : uint8_t { kV4 = 4, kV6 = 6 };

// Bytes the tunnel adds in front of a payload: IP header (IPv4 without options) + UDP + tunnel.
[[nodiscard]] constexpr std::size_t encap_overhead_bytes(IpVersion ip) noexcept {
  return (ip == IpVersion::kV4 ? 20 : 40) + 8 + kHeaderSize;
}

// Largest tunnel payload that fits a WAN link MTU (the IP packet size) without fragmentation;
// 0 if the MTU cannot even hold the headers.
[[nodiscard]] constexpr std::size_t max_payload_for_mtu(std::size_t mtu_bytes,
                                                        IpVersion ip) noexcept {
  const std::size_t overhead = encap_overhead_bytes(ip);
  return mtu_bytes <= overhead ? 0 : std::min(mtu_bytes - overhead, kMaxPayloadBytes);
}

// The header's fields in host order. Magic and version are not stored: the encoder writes
// kMagic and kVersion; the decoder checks them.
struct TunnelHeader {
  uint8_t flags = kFlagData;
  uint8_t type = static_cast<uint8_t>(DataType::kDatagram);
  uint32_t tunnel_id = 0;       // 1 .. 2^32-1; 0 is invalid
  uint8_t path_id = 0;          // 0 .. 255
  uint16_t payload_length = 0;  // bytes after the header, <= the receiver's max payload
  uint64_t sequence = 0;        // per tunnel (data) or per tunnel+path (control); any value
  uint64_t cycle_id = 0;        // k: the packet left in [base_time + k*C, base_time + (k+1)*C)
  int64_t tx_time_ns = 0;       // TAI ns since 1970-01-01 TAI; >= 0
  uint32_t session = 0;         // flag A: the sender's AEAD session (nonzero); else 0

  [[nodiscard]] constexpr bool is_data() const noexcept { return (flags & kFlagData) != 0; }
  [[nodiscard]] constexpr bool is_control() const noexcept { return (flags & kFlagControl) != 0; }
  [[nodiscard]] constexpr bool is_replica() const noexcept { return (flags & kFlagReplica) != 0; }
  [[nodiscard]] constexpr bool is_fec() const noexcept { return (flags & kFlagFec) != 0; }
  [[nodiscard]] constexpr bool is_auth() const noexcept { return (flags & kFlagAuth) != 0; }
  [[nodiscard]] constexpr bool is_best_effort() const noexcept {
    return (flags & kFlagBestEffort) != 0;
  }
  [[nodiscard]] constexpr DataType data_type() const noexcept { return DataType{type}; }
  [[nodiscard]] constexpr ControlType control_type() const noexcept { return ControlType{type}; }

  friend constexpr bool operator==(const TunnelHeader&, const TunnelHeader&) = default;
};

// A decoded packet: the header and the payload, which points into the decoded buffer (valid as
// long as that buffer is).
struct PacketView {
  TunnelHeader header;
  std::span<const std::byte> payload;
};

// The field rules a receiver applies to a header (everything decode() checks except magic,
// version and the datagram's actual length), in decode's order: reserved_set (a reserved flag
// bit, or a session without flag A), bad_flags (incl. flag A with session 0), bad_type,
// bad_tunnel_id, bad_timestamp, oversize. nullopt: valid.
[[nodiscard]] std::optional<DropReason> validate(
    const TunnelHeader& header, std::size_t max_payload_bytes = kMaxPayloadBytes) noexcept;

// Parses one UDP payload. Never reads outside `datagram`; any byte sequence is safe input.
// `max_payload_bytes` is this receiver's limit (e.g. max_payload_for_mtu of its WAN port);
// values above kMaxPayloadBytes are treated as kMaxPayloadBytes. The checks run in the order of
// DropReason (too_short first, length_mismatch last) and the first failure is returned.
[[nodiscard]] Decoded<PacketView> decode(std::span<const std::byte> datagram,
                                         std::size_t max_payload_bytes = kMaxPayloadBytes) noexcept;

enum class [[nodiscard]] EncodeStatus : uint8_t {
  kOk = 0,
  kNoSpace,        // the output buffer is shorter than what must be written
  kInvalidHeader,  // validate() rejects the header: a receiver would drop it
};

struct [[nodiscard]] EncodeResult {
  EncodeStatus status = EncodeStatus::kOk;
  std::size_t size = 0;  // bytes written (0 unless kOk)
};

// Writes the 40 header bytes to the front of `out` (the payload, header.payload_length bytes,
// is the caller's to place right after). Writes nothing unless it returns kOk.
EncodeResult encode(const TunnelHeader& header, std::span<std::byte> out) noexcept;

}  // namespace detwan::dataplane::wire

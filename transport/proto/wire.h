#pragma once
// Wire format of the detwan transport protocol (docs/transport.md "Wire format").
//
// DATA datagrams have a 24-byte header of their own (the short form, below); every other
// datagram = common header (26 bytes, big-endian) + a type-specific body:
//   magic u16 | version u8 | type u8 | path_id u8 | flags u8 | connection_id u64 |
//   tx_time_ns u64 | crc32c u32 (CRC32C of the whole datagram with this field zero)
//
// Short form (DATA only), no more header bytes than TCP with timestamps leaves for payload:
//   0xA0|A|path_id u8 | connection_id low 32 bits u32 | tx_time_us mod 2^32 u32 | crc32c u32 |
//   seq mod 2^32 u32 | index u28 + last_index u28 (7 bytes) | [ACK body] | payload (the rest)
// A (0x10): an ACK body (as in an ACK datagram) rides between the header and the payload.
// A message's segments have consecutive seqs and, but for the last, the sender's segment
// size (announced in HELLO): the segment's message is the one whose first seq is seq - index,
// its offset index * segment size, its length the datagram's remainder. The receiver expands
// the seq against its cumulative ACK point (windows stay below 2^30 segments).
//
// Authenticated channels (docs/transport.md "Authenticated channels") use version 3 of the
// common header and the same short form, with the CRC32C field holding the low 32 bits of the
// sender's packet number instead, and a 16-byte AES-GCM tag after the datagram; HELLO and
// HELLO_ACK carry a mode byte, a fresh 16-byte nonce and a 16-byte MAC after the plain body.
// The short form has no version byte: a connection knows its mode from its handshake.
//
// Decoders bounds-check every field: a datagram from the network is hostile input. Encoders
// write into a caller buffer and return the number of bytes written (0 = does not fit).
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/status.h"

namespace detwan::transport::proto::wire {

inline constexpr uint16_t kMagic = 0xD7A9;
inline constexpr uint8_t kVersion = 2;        // the plain protocol (SecurityMode::kNone)
inline constexpr uint8_t kVersionSealed = 3;  // authenticated channels: packet number, tag
inline constexpr size_t kHeaderBytes = 26;
inline constexpr size_t kCrcOffset = 22;
// DATA's short form: first byte kDataMarker | kDataAckBit? | path_id (below kMaxShortPaths).
inline constexpr uint8_t kDataMarker = 0xA0;
inline constexpr uint8_t kDataMarkerMask = 0xE0;
inline constexpr uint8_t kDataAckBit = 0x10;
inline constexpr uint32_t kMaxShortPaths = 16;
// Header::flags of a decoded DATA: an ACK rides along (decode_data's `ack`).
inline constexpr uint8_t kFlagAck = 0x01;
inline constexpr size_t kShortHeaderBytes = 13;  // marker, connection id, tx time, crc
inline constexpr size_t kShortCrcOffset = 9;
inline constexpr size_t kDataHeaderBytes = kShortHeaderBytes + 4 + 7;  // + seq, index, last
// A message has at most 2^28 segments (index and last_index are 28-bit fields).
inline constexpr uint32_t kMaxSegmentIndex = (uint32_t{1} << 28) - 1;
inline constexpr size_t kMaxSackRanges = 16;

enum class Type : uint8_t {
  kHello = 1,
  kHelloAck = 2,
  kData = 3,
  kAck = 4,
  kFec = 5,
  kKeepalive = 6,
  kClose = 7,
};

struct Header {
  Type type = Type::kKeepalive;
  // Encoders: kVersion writes the CRC32C, kVersionSealed the packet number (the caller seals).
  // Decoders: the common header's version (2 or 3); the short form says kVersion.
  uint8_t version = kVersion;
  uint32_t packet_number = 0;  // low 32 bits (sealed); decoders read the CRC field into it
  uint8_t path_id = 0;
  uint8_t flags = 0;
  bool short_form = false;  // decoded from DATA's short form: connection_id is 32 bits
  uint64_t connection_id = 0;
  int64_t tx_time_ns = 0;   // encoders take it; the short form keeps tx_time_us only
  uint32_t tx_time_us = 0;  // decoders: the send time in microseconds modulo 2^32
};

// HELLO and HELLO_ACK: the sender's receive window, protocol version and the payload bytes of
// its full DATA segments (every segment of a message but the last has exactly that many).
struct HelloBody {
  uint64_t recv_window_bytes = 0;
  uint8_t version = kVersion;
  uint16_t segment_bytes = 0;
};
inline constexpr size_t kHelloBodyBytes = 11;

// Version 3 HELLO / HELLO_ACK: the plain body, then the sender's security mode, its fresh nonce
// and a MAC over everything before it (truncated HMAC-SHA256, transport/proto/handshake.h).
inline constexpr size_t kHandshakeNonceBytes = 16;
inline constexpr size_t kHandshakeMacBytes = 16;
inline constexpr size_t kSealedHelloBodyBytes =
    kHelloBodyBytes + 1 + kHandshakeNonceBytes + kHandshakeMacBytes;
struct SealedHelloBody {
  HelloBody hello;
  uint8_t mode = 0;  // SecurityMode
  std::array<std::byte, kHandshakeNonceBytes> nonce{};
  std::array<std::byte, kHandshakeMacBytes> mac{};
};
// The 16-byte AEAD tag after every sealed datagram but HELLO and HELLO_ACK.
inline constexpr size_t kTagBytes = 16;

// CLOSE reasons. kCloseSecurityMismatch answers, in the plain protocol, a HELLO of the other
// protocol: the two endpoints disagree on SecurityMode::kNone.
inline constexpr uint16_t kCloseNormal = 0;
inline constexpr uint16_t kCloseSecurityMismatch = 1;

// DATA: seq (reused by retransmissions; mod 2^32 on the wire, decoders return it so), then the
// seq-independent part that FEC protects: the segment's index in its message and the message's
// last index. In an FEC symbol that part is followed by the payload length (u16).
inline constexpr size_t kDataSymbolFixedBytes = 7 + 2;
struct DataBody {
  uint64_t seq = 0;
  uint32_t index = 0;
  uint32_t last_index = 0;
  std::span<const std::byte> payload;
};

struct SackRange {
  uint64_t start = 0;  // [start, end) in segment sequence numbers
  uint64_t end = 0;
};

struct AckBody {
  uint64_t cumulative = 0;        // next expected seq: every seq below it was received
  uint32_t echo_tx_time_us = 0;   // tx_time_us of the datagram that triggered this ACK
  int64_t ack_delay_ns = 0;       // how long the receiver held it
  uint64_t window_bytes = 0;      // receive window beyond `cumulative`
  uint8_t range_count = 0;
  SackRange ranges[kMaxSackRanges];  // most recent first (RFC 2018)
};
inline constexpr size_t kAckFixedBytes = 8 + 4 + 8 + 8 + 1;

// FEC parity: block [first_seq, first_seq + k), parity index, symbol (padded DATA symbols).
inline constexpr size_t kFecFixedBytes = 8 + 1 + 1 + 1 + 2;
struct FecBody {
  uint64_t first_seq = 0;
  uint8_t k = 0;
  uint8_t m = 0;
  uint8_t index = 0;
  std::span<const std::byte> symbol;
};

struct CloseBody {
  uint16_t reason = 0;
};
inline constexpr size_t kCloseBodyBytes = 2;

// True if the datagram is a DATA (short form), whatever its validity.
[[nodiscard]] inline bool is_data(std::span<const std::byte> d) {
  return d.size() >= kDataHeaderBytes &&
         (std::to_integer<uint8_t>(d[0]) & kDataMarkerMask) == kDataMarker;
}

// Encoders: write header + body, then the CRC. Return bytes written, 0 if `out` is too small.
[[nodiscard]] size_t encode_hello(const Header& h, const HelloBody& b, std::span<std::byte> out);
// Version 3 (h.version = kVersionSealed): the MAC field is written as given; the caller
// computes it over the first size - kHandshakeMacBytes bytes and stores it there.
[[nodiscard]] size_t encode_sealed_hello(const Header& h, const SealedHelloBody& b,
                                         std::span<std::byte> out);
// DATA (short form): h.path_id < kMaxShortPaths, the low 32 bits of h.connection_id, b.index
// <= b.last_index <= kMaxSegmentIndex; 0 otherwise. With `ack`, that ACK rides along.
[[nodiscard]] size_t encode_data(const Header& h, const DataBody& b, std::span<std::byte> out,
                                 const AckBody* ack = nullptr);
// Bytes an ACK body takes (in an ACK datagram or riding on a DATA).
[[nodiscard]] inline size_t ack_body_bytes(const AckBody& b) {
  return kAckFixedBytes + 16 * (b.range_count > kMaxSackRanges ? kMaxSackRanges : b.range_count);
}
[[nodiscard]] size_t encode_ack(const Header& h, const AckBody& b, std::span<std::byte> out);
[[nodiscard]] size_t encode_fec(const Header& h, const FecBody& b, std::span<std::byte> out);
[[nodiscard]] size_t encode_empty(const Header& h, std::span<std::byte> out);  // KEEPALIVE
[[nodiscard]] size_t encode_close(const Header& h, const CloseBody& b, std::span<std::byte> out);

// Writes the seq-independent DATA part (what FEC protects: index, last_index, payload length,
// payload) into `out`; returns its length.
[[nodiscard]] size_t encode_data_symbol(const DataBody& b, std::span<std::byte> out);
// Parses a (possibly zero-padded) symbol back into a DataBody (seq left untouched).
[[nodiscard]] common::Status decode_data_symbol(std::span<const std::byte> symbol, DataBody& b);

// Header parse without CRC check (peek), either form; kMalformed if too short / bad magic /
// version. The body starts at header_bytes(h).
[[nodiscard]] common::Status decode_header(std::span<const std::byte> datagram, Header& h);
[[nodiscard]] inline size_t header_bytes(const Header& h) {
  return h.short_form ? kShortHeaderBytes : kHeaderBytes;
}
// True if the stored CRC matches (either form).
[[nodiscard]] bool crc_ok(std::span<const std::byte> datagram);
[[nodiscard]] uint32_t crc32c(std::span<const std::byte> bytes);

// Body decoders: `body` is the datagram after the header (header_bytes). Views point into the
// datagram. decode_data takes the short form's body (seq, index, last_index, payload).
[[nodiscard]] common::Status decode_hello(std::span<const std::byte> body, HelloBody& b);
[[nodiscard]] common::Status decode_sealed_hello(std::span<const std::byte> body,
                                                 SealedHelloBody& b);
// With h.flags & kFlagAck, pass `ack`: the ACK riding on the DATA is decoded into it.
[[nodiscard]] common::Status decode_data(std::span<const std::byte> body, DataBody& b,
                                         AckBody* ack = nullptr);
[[nodiscard]] common::Status decode_ack(std::span<const std::byte> body, AckBody& b);
[[nodiscard]] common::Status decode_fec(std::span<const std::byte> body, FecBody& b);
[[nodiscard]] common::Status decode_close(std::span<const std::byte> body, CloseBody& b);

}  // namespace detwan::transport::proto::wire

#pragma once
// Wire format of the detwan transport protocol (docs/transport.md "Wire format").
//
// Every datagram = common header (26 bytes, big-endian) + a type-specific body:
//   magic u16 | version u8 | type u8 | path_id u8 | flags u8 | connection_id u64 |
//   tx_time_ns u64 | crc32c u32 (CRC32C of the whole datagram with this field zero)
//
// Decoders bounds-check every field: a datagram from the network is hostile input. Encoders
// write into a caller buffer and return the number of bytes written (0 = does not fit).
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/status.h"

namespace detwan::transport::proto::wire {

inline constexpr uint16_t kMagic = 0xD7A9;
inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kHeaderBytes = 26;
inline constexpr size_t kCrcOffset = 22;
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
  uint8_t version = kVersion;
  uint8_t path_id = 0;
  uint8_t flags = 0;
  uint64_t connection_id = 0;
  int64_t tx_time_ns = 0;
};

// HELLO and HELLO_ACK: the sender's receive window and protocol version.
struct HelloBody {
  uint64_t recv_window_bytes = 0;
  uint8_t version = kVersion;
};
inline constexpr size_t kHelloBodyBytes = 9;

// DATA: seq (reused by retransmissions), then the seq-independent part that FEC protects.
inline constexpr size_t kDataSeqBytes = 8;
inline constexpr size_t kDataFixedBytes = 8 + 8 + 8 + 2;  // message_id, size, offset, len
struct DataBody {
  uint64_t seq = 0;
  uint64_t message_id = 0;
  uint64_t message_size = 0;
  uint64_t offset = 0;
  std::span<const std::byte> payload;
};

struct SackRange {
  uint64_t start = 0;  // [start, end) in segment sequence numbers
  uint64_t end = 0;
};

struct AckBody {
  uint64_t cumulative = 0;        // next expected seq: every seq below it was received
  int64_t echo_tx_time_ns = 0;    // tx_time_ns of the datagram that triggered this ACK
  int64_t ack_delay_ns = 0;       // how long the receiver held it
  uint64_t window_bytes = 0;      // receive window beyond `cumulative`
  uint8_t range_count = 0;
  SackRange ranges[kMaxSackRanges];  // most recent first (RFC 2018)
};
inline constexpr size_t kAckFixedBytes = 8 + 8 + 8 + 8 + 1;

// FEC parity: block [first_seq, first_seq + k), parity index, symbol (padded DATA bodies).
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

// Encoders: write header + body, then the CRC. Return bytes written, 0 if `out` is too small.
[[nodiscard]] size_t encode_hello(const Header& h, const HelloBody& b, std::span<std::byte> out);
[[nodiscard]] size_t encode_data(const Header& h, const DataBody& b, std::span<std::byte> out);
[[nodiscard]] size_t encode_ack(const Header& h, const AckBody& b, std::span<std::byte> out);
[[nodiscard]] size_t encode_fec(const Header& h, const FecBody& b, std::span<std::byte> out);
[[nodiscard]] size_t encode_empty(const Header& h, std::span<std::byte> out);  // KEEPALIVE
[[nodiscard]] size_t encode_close(const Header& h, const CloseBody& b, std::span<std::byte> out);

// Writes the seq-independent DATA part (what FEC protects) into `out`; returns its length.
[[nodiscard]] size_t encode_data_symbol(const DataBody& b, std::span<std::byte> out);
// Parses a (possibly zero-padded) symbol back into a DataBody (seq left untouched).
[[nodiscard]] common::Status decode_data_symbol(std::span<const std::byte> symbol, DataBody& b);

// Header parse without CRC check (peek); kMalformed if too short / bad magic / version.
[[nodiscard]] common::Status decode_header(std::span<const std::byte> datagram, Header& h);
// True if the stored CRC matches.
[[nodiscard]] bool crc_ok(std::span<const std::byte> datagram);
[[nodiscard]] uint32_t crc32c(std::span<const std::byte> bytes);

// Body decoders: `body` is the datagram after the header. Views point into the datagram.
[[nodiscard]] common::Status decode_hello(std::span<const std::byte> body, HelloBody& b);
[[nodiscard]] common::Status decode_data(std::span<const std::byte> body, DataBody& b);
[[nodiscard]] common::Status decode_ack(std::span<const std::byte> body, AckBody& b);
[[nodiscard]] common::Status decode_fec(std::span<const std::byte> body, FecBody& b);
[[nodiscard]] common::Status decode_close(std::span<const std::byte> body, CloseBody& b);

}  // namespace detwan::transport::proto::wire

#pragma once
// Wire format of the tcp backend: a hello in each direction, then length-framed messages.
//
//   hello   magic "DWT1" (4 bytes) | version u32 | max_message_bytes u64     (16 bytes, big endian)
//   frame   length u64 (big endian) | length bytes of message
//
// Each side sends its hello as soon as the connection is up (client first; the server answers
// after validating the client's). `max_message_bytes` is the largest message the sender of the
// hello accepts; the peer refuses to send anything larger (kInvalidArgument on that send).
//
// Authenticated channels (EndpointOptions::security, docs/transport.md "Authenticated
// channels"; sealed_handshake.h): the hello's magic is "DWT2", version 2, and 33 bytes follow
// it: mode u8 | nonce (16) | MAC (16). The client sends first; the server answers only a hello
// whose MAC verifies, with its own nonce and a MAC bound to both nonces. Then every message is
// sent as records, each  length u32 | payload | AES-GCM tag (16)  under the direction's key,
// the nonce the direction's record counter: first a record of 8 bytes (the message's length),
// then its bytes in records of at most kMaxRecordBytes. kAuthenticate: the payload in clear,
// the tag over it; kEncrypt: the payload encrypted. The tag also covers the length (GCM's
// length block), so a record cannot be cut, reordered, replayed or moved between directions.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "common/status.h"
#include "transport/security.h"

namespace detwan::transport::tcp {

inline constexpr std::array<std::byte, 4> kHelloMagic{std::byte{'D'}, std::byte{'W'},
                                                      std::byte{'T'}, std::byte{'1'}};
inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr size_t kHelloBytes = 16;
inline constexpr size_t kFrameHeaderBytes = 8;
inline constexpr std::array<std::byte, 4> kSealedHelloMagic{std::byte{'D'}, std::byte{'W'},
                                                            std::byte{'T'}, std::byte{'2'}};
inline constexpr uint32_t kSealedProtocolVersion = 2;
inline constexpr size_t kNonceBytes = 16;
inline constexpr size_t kMacBytes = 16;
inline constexpr size_t kSealedHelloExtraBytes = 1 + kNonceBytes + kMacBytes;
inline constexpr size_t kRecordHeaderBytes = 4;
inline constexpr size_t kRecordTagBytes = 16;
inline constexpr size_t kMaxRecordBytes = size_t{64} << 10;

struct Hello {
  uint32_t version = kProtocolVersion;
  uint64_t max_message_bytes = 0;
  // Authenticated channels: the mode both ends run and this side's keys (tx: what it sends).
  SecurityMode mode = SecurityMode::kNone;
  std::array<std::byte, 32> tx_key{};
  std::array<std::byte, 32> rx_key{};
};

void encode_hello(const Hello& hello, std::span<std::byte, kHelloBytes> out);
// The sealed hello's first 16 bytes ("DWT2", version 2, max_message_bytes).
void encode_sealed_hello_prefix(uint64_t max_message_bytes, std::span<std::byte, kHelloBytes> out);
[[nodiscard]] bool is_sealed_hello(std::span<const std::byte, kHelloBytes> in);

// Validates a received hello. Errors name the offending field and value, e.g.
// "bad hello magic 'HTTP' (0x48545450), expected 'DWT1'"; `peer` prefixes the message.
common::Result<Hello> decode_hello(std::span<const std::byte, kHelloBytes> in,
                                   const std::string& peer);

}  // namespace detwan::transport::tcp

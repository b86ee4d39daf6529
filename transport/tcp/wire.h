#pragma once
// Wire format of the tcp backend: a hello in each direction, then length-framed messages.
//
//   hello   magic "DWT1" (4 bytes) | version u32 | max_message_bytes u64     (16 bytes, big endian)
//   frame   length u64 (big endian) | length bytes of message
//
// Each side sends its hello as soon as the connection is up (client first; the server answers
// after validating the client's). `max_message_bytes` is the largest message the sender of the
// hello accepts; the peer refuses to send anything larger (kInvalidArgument on that send).
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "common/status.h"

namespace detwan::transport::tcp {

inline constexpr std::array<std::byte, 4> kHelloMagic{std::byte{'D'}, std::byte{'W'},
                                                      std::byte{'T'}, std::byte{'1'}};
inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr size_t kHelloBytes = 16;
inline constexpr size_t kFrameHeaderBytes = 8;

struct Hello {
  uint32_t version = kProtocolVersion;
  uint64_t max_message_bytes = 0;
};

void encode_hello(const Hello& hello, std::span<std::byte, kHelloBytes> out);

// Validates a received hello. Errors name the offending field and value, e.g.
// "bad hello magic 'HTTP' (0x48545450), expected 'DWT1'"; `peer` prefixes the message.
common::Result<Hello> decode_hello(std::span<const std::byte, kHelloBytes> in,
                                   const std::string& peer);

}  // namespace detwan::transport::tcp

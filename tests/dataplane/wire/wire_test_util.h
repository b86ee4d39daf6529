#pragma once
// Helpers for the wire tests: building datagrams and reading raw fields.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "dataplane/wire/header.h"

namespace detwan::dataplane::wire::testing {

using Bytes = std::vector<std::byte>;

// A header that validate() accepts, with every field distinct from its default.
inline TunnelHeader sample_header() {
  TunnelHeader h;
  h.flags = kFlagData | kFlagReplica;
  h.type = static_cast<uint8_t>(DataType::kIpv4);
  h.tunnel_id = 0x01020304;
  h.path_id = 0x05;
  h.payload_length = 0;
  h.sequence = 0x1112131415161718;
  h.cycle_id = 0x2122232425262728;
  h.tx_time_ns = 0x3132333435363738;
  return h;
}

inline Bytes payload_of(std::size_t n, uint8_t seed = 0) {
  Bytes p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = std::byte(static_cast<uint8_t>(seed + i * 7));
  return p;
}

// Header + payload as one UDP payload; the header's payload_length is set to payload.size().
// Returns an empty vector if encode() refuses the header.
inline Bytes datagram(TunnelHeader h, std::span<const std::byte> payload = {}) {
  h.payload_length = static_cast<uint16_t>(payload.size());
  Bytes out(kHeaderSize + payload.size());
  if (encode(h, out).status != EncodeStatus::kOk) return {};
  std::copy(payload.begin(), payload.end(), out.begin() + kHeaderSize);
  return out;
}

inline void put_be(Bytes& b, std::size_t offset, uint64_t value, std::size_t size) {
  for (std::size_t i = 0; i < size; ++i) {
    b.at(offset + i) = std::byte(static_cast<uint8_t>(value >> (8 * (size - 1 - i))));
  }
}

inline uint64_t get_be(const Bytes& b, std::size_t offset, std::size_t size) {
  uint64_t v = 0;
  for (std::size_t i = 0; i < size; ++i) v = (v << 8) | std::to_integer<uint64_t>(b.at(offset + i));
  return v;
}

}  // namespace detwan::dataplane::wire::testing

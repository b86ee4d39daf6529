#pragma once
// Big-endian (network order) loads and stores at any address. Packet buffers are not aligned
// for the header's fields (after Ethernet + IPv4 + UDP the header starts at offset 42), so these
// assemble bytes with shifts instead of casting pointers; compilers turn them into one
// load/store plus a byte swap.
//
// Callers bounds-check first: these read or write exactly N bytes at `p`.
//
// One copy for the whole tree: the tunnel wire format (dataplane/wire), detwan-perf's test and
// STAMP packets and detwan-probe's use it. The uint8_t* overloads serve code whose buffers are
// plain bytes (recvmmsg); uint8_t and std::byte may alias each other.
#include <cstddef>
#include <cstdint>

namespace detwan::common {

[[nodiscard]] constexpr uint16_t load_be16(const std::byte* p) noexcept {
  return static_cast<uint16_t>((std::to_integer<uint16_t>(p[0]) << 8) |
                               std::to_integer<uint16_t>(p[1]));
}

[[nodiscard]] constexpr uint32_t load_be32(const std::byte* p) noexcept {
  return (std::to_integer<uint32_t>(p[0]) << 24) | (std::to_integer<uint32_t>(p[1]) << 16) |
         (std::to_integer<uint32_t>(p[2]) << 8) | std::to_integer<uint32_t>(p[3]);
}

[[nodiscard]] constexpr uint64_t load_be64(const std::byte* p) noexcept {
  return (static_cast<uint64_t>(load_be32(p)) << 32) | load_be32(p + 4);
}

constexpr void store_be16(std::byte* p, uint16_t v) noexcept {
  p[0] = static_cast<std::byte>(v >> 8);
  p[1] = static_cast<std::byte>(v);
}

constexpr void store_be32(std::byte* p, uint32_t v) noexcept {
  p[0] = static_cast<std::byte>(v >> 24);
  p[1] = static_cast<std::byte>(v >> 16);
  p[2] = static_cast<std::byte>(v >> 8);
  p[3] = static_cast<std::byte>(v);
}

constexpr void store_be64(std::byte* p, uint64_t v) noexcept {
  store_be32(p, static_cast<uint32_t>(v >> 32));
  store_be32(p + 4, static_cast<uint32_t>(v));
}

inline uint16_t load_be16(const uint8_t* p) noexcept {
  return load_be16(reinterpret_cast<const std::byte*>(p));
}
inline uint32_t load_be32(const uint8_t* p) noexcept {
  return load_be32(reinterpret_cast<const std::byte*>(p));
}
inline uint64_t load_be64(const uint8_t* p) noexcept {
  return load_be64(reinterpret_cast<const std::byte*>(p));
}
inline void store_be16(uint8_t* p, uint16_t v) noexcept {
  store_be16(reinterpret_cast<std::byte*>(p), v);
}
inline void store_be32(uint8_t* p, uint32_t v) noexcept {
  store_be32(reinterpret_cast<std::byte*>(p), v);
}
inline void store_be64(uint8_t* p, uint64_t v) noexcept {
  store_be64(reinterpret_cast<std::byte*>(p), v);
}

}  // namespace detwan::common

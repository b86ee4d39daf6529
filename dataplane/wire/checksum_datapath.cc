// Internet checksums (checksum.h): the vector one's-complement sum and its users.
#include <array>

#include "dataplane/wire/checksum.h"

namespace detwan::dataplane::wire {

using v2u64 = uint64_t __attribute__((vector_size(16)));

uint64_t sum_native(const std::byte* p, std::size_t n) noexcept {
  v2u64 lo0 = {0, 0};
  v2u64 hi0 = {0, 0};
  v2u64 lo1 = {0, 0};
  v2u64 hi1 = {0, 0};
  const v2u64 low_half = {0xFFFFFFFFu, 0xFFFFFFFFu};
  while (n >= 32) {  // lanes hold sums of 32-bit halves: 2^32 rounds before they could overflow
    v2u64 x;
    v2u64 y;
    std::memcpy(&x, p, 16);
    std::memcpy(&y, p + 16, 16);
    lo0 += x & low_half;
    hi0 += x >> 32;
    lo1 += y & low_half;
    hi1 += y >> 32;
    p += 32;
    n -= 32;
  }
  const v2u64 lanes = (lo0 + hi0) + (lo1 + hi1);
  uint64_t sum = lanes[0] + lanes[1];
  while (n >= 4) {
    uint32_t word = 0;
    std::memcpy(&word, p, 4);
    sum += word;
    p += 4;
    n -= 4;
  }
  if (n >= 2) {
    uint16_t half = 0;
    std::memcpy(&half, p, 2);
    sum += half;
    p += 2;
    n -= 2;
  }
  if (n == 1) {
    // The odd byte is the high-order byte of a zero-padded 16-bit word in network order,
    // i.e. the first byte in memory: load it the same way a native 16-bit load would.
    const std::array<std::byte, 2> pad{*p, std::byte{0}};
    uint16_t half = 0;
    std::memcpy(&half, pad.data(), 2);
    sum += half;
  }
  // 2^16 - 1 divides 2^32 - 1: folding 64 -> 32 bits with the carry added back keeps the sum.
  return (sum & 0xFFFFFFFFu) + (sum >> 32);
}

uint64_t pseudo_header_sum(bool ipv6, const std::byte* source, const std::byte* destination,
                           uint32_t udp_bytes) noexcept {
  // The tail (IPv4: zero, protocol, UDP length; IPv6: 32-bit length, zeros, next header) summed
  // from its values.
  if (ipv6) {
    return sum_fixed<16>(source) + sum_fixed<16>(destination) +
           native_be16(static_cast<uint16_t>(udp_bytes >> 16)) +
           native_be16(static_cast<uint16_t>(udp_bytes)) + native_be16(kIpProtoUdpNumber);
  }
  return sum_fixed<4>(source) + sum_fixed<4>(destination) + native_be16(kIpProtoUdpNumber) +
         native_be16(static_cast<uint16_t>(udp_bytes));
}

uint16_t internet_checksum(std::span<const std::byte> bytes) noexcept {
  uint16_t native = static_cast<uint16_t>(~fold(sum_native(bytes.data(), bytes.size())));
  if constexpr (std::endian::native == std::endian::little) native = std::byteswap(native);
  return native;
}

}  // namespace detwan::dataplane::wire

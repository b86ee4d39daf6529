#pragma once
// Internet checksums (RFC 1071) for the datapaths: the DPDK backend's outer headers and the
// io_uring backend's TUN offload (segments of a GSO packet, partial checksums completed).
// Per packet: no allocation, no exceptions.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace detwan::dataplane::wire {

inline constexpr uint8_t kIpProtoUdpNumber = 17;

// One's-complement sum of native-order loads (RFC 1071 §2(B): the sum is byte-order
// independent, so it is folded and stored natively). Regions must start at even offsets of the
// checksummed whole, which every caller here guarantees. The bulk runs 32 bytes at a time in
// 128-bit vectors (SSE2 on x86-64: each 64-bit lane adds the low and the high 32-bit halves of
// its word into separate accumulators, so no carry is ever lost; 4x the scalar 32-bit loop, the
// dominant cost of a 1,400-byte forward). The result is at most 33 bits, so callers can add a
// few of them in 64 bits.
uint64_t sum_native(const std::byte* p, std::size_t n) noexcept;

// The same for a fixed size (a multiple of 4: IP headers, addresses, the pseudo header's tail),
// unrolled in place: a few loads and adds instead of a call into the vector loop.
template <std::size_t N>
[[gnu::always_inline]] inline uint64_t sum_fixed(const std::byte* p) noexcept {
  static_assert(N % 4 == 0);
  uint64_t sum = 0;
  for (std::size_t i = 0; i < N; i += 4) {
    uint32_t word = 0;
    std::memcpy(&word, p + i, 4);
    sum += word;
  }
  return sum;
}

// A 16-bit field's contribution to a native-order sum: the value a native load of its
// big-endian bytes gives. Lets a header being built be summed from the values written, without
// reading back bytes just stored (a wide load of narrow stores stalls on store forwarding).
constexpr uint64_t native_be16(uint16_t value) noexcept {
  if constexpr (std::endian::native == std::endian::little) return std::byteswap(value);
  return value;
}

inline uint16_t fold(uint64_t sum) noexcept {
  while ((sum >> 16) != 0) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(sum);
}

// Pseudo-header sum (RFC 768 / RFC 8200 §8.1) for a UDP datagram of udp_bytes.
uint64_t pseudo_header_sum(bool ipv6, const std::byte* source, const std::byte* destination,
                           uint32_t udp_bytes) noexcept;

// The checksum of `bytes` as stored in a header (network byte order in memory).
[[nodiscard]] uint16_t internet_checksum(std::span<const std::byte> bytes) noexcept;

}  // namespace detwan::dataplane::wire

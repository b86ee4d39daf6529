#pragma once
// The bytes detwan-bench transport sends, so the receiver can check every byte of every
// message without a copy of the data.
//
// Message i (0-based) of a run is `kHeaderBytes` of header (little-endian u64 index, u64 send
// time in CLOCK_MONOTONIC ns, shared by every network namespace of one machine) followed by
// pattern bytes: byte j of the pattern is block[(j + i * kShiftBytes) % kBlockBytes], where the
// block is a fixed pseudo-random sequence. The block length is not a multiple of any segment
// size a transport uses, so a segment delivered at the wrong offset or in the wrong message is
// counted as wrong bytes, not silently accepted.
//
// Not thread-safe per object; const methods may be shared.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace detwan::bench {

class MessagePattern {
 public:
  static constexpr size_t kHeaderBytes = 16;
  static constexpr size_t kBlockBytes = (size_t{1} << 20) + 4093;  // 1 MiB + a prime
  static constexpr size_t kShiftBytes = 7919;

  explicit MessagePattern(uint64_t seed = 0x6465747761ULL);

  // Writes message `index` (header included) into `out` (at least kHeaderBytes long).
  void fill(uint64_t index, int64_t send_time_ns, std::span<std::byte> out) const;

  struct Check {
    uint64_t index = 0;          // from the header
    int64_t send_time_ns = 0;    // from the header
    uint64_t wrong_bytes = 0;    // pattern bytes that differ from what message `expected` holds
  };
  // Checks `message` against message `expected_index`. A wrong index in the header counts
  // every pattern byte as wrong (the payload would belong to another message).
  [[nodiscard]] Check verify(uint64_t expected_index, std::span<const std::byte> message) const;

 private:
  // The block twice over, so any window of up to kBlockBytes is one contiguous range.
  std::vector<std::byte> doubled_;
};

}  // namespace detwan::bench

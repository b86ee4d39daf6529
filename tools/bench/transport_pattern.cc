#include "tools/bench/transport_pattern.h"

#include <algorithm>
#include <cstring>

namespace detwan::bench {
namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

void put_u64(std::byte* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>(v >> (8 * i));
}

uint64_t get_u64(const std::byte* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(in[i]) << (8 * i);
  return v;
}

size_t start_offset(uint64_t index) {
  return static_cast<size_t>((index % MessagePattern::kBlockBytes) * MessagePattern::kShiftBytes %
                             MessagePattern::kBlockBytes);
}

// Counts differing bytes; memcmp first so the common (all equal) case runs at memory speed.
uint64_t count_diff(const std::byte* a, const std::byte* b, size_t n) {
  if (std::memcmp(a, b, n) == 0) return 0;
  uint64_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += a[i] != b[i] ? 1 : 0;
  return wrong;
}

}  // namespace

MessagePattern::MessagePattern(uint64_t seed) : doubled_(2 * kBlockBytes) {
  uint64_t state = seed;
  for (size_t i = 0; i < kBlockBytes; i += 8) {
    const uint64_t v = splitmix64(state);
    const size_t n = std::min<size_t>(8, kBlockBytes - i);
    for (size_t b = 0; b < n; ++b) doubled_[i + b] = static_cast<std::byte>(v >> (8 * b));
  }
  std::memcpy(doubled_.data() + kBlockBytes, doubled_.data(), kBlockBytes);
}

void MessagePattern::fill(uint64_t index, int64_t send_time_ns, std::span<std::byte> out) const {
  if (out.size() < kHeaderBytes) return;
  put_u64(out.data(), index);
  put_u64(out.data() + 8, static_cast<uint64_t>(send_time_ns));
  size_t pos = start_offset(index);
  for (size_t done = kHeaderBytes; done < out.size();) {
    const size_t n = std::min(out.size() - done, kBlockBytes);
    std::memcpy(out.data() + done, doubled_.data() + pos, n);
    done += n;
    pos = (pos + n) % kBlockBytes;
  }
}

MessagePattern::Check MessagePattern::verify(uint64_t expected_index,
                                             std::span<const std::byte> message) const {
  Check check;
  if (message.size() < kHeaderBytes) {
    check.index = ~uint64_t{0};
    check.wrong_bytes = message.size();
    return check;
  }
  check.index = get_u64(message.data());
  check.send_time_ns = static_cast<int64_t>(get_u64(message.data() + 8));
  if (check.index != expected_index) {
    check.wrong_bytes = message.size() - kHeaderBytes;
    return check;
  }
  size_t pos = start_offset(expected_index);
  for (size_t done = kHeaderBytes; done < message.size();) {
    const size_t n = std::min(message.size() - done, kBlockBytes);
    check.wrong_bytes += count_diff(message.data() + done, doubled_.data() + pos, n);
    done += n;
    pos = (pos + n) % kBlockBytes;
  }
  return check;
}

}  // namespace detwan::bench

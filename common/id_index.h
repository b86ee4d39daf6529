#pragma once
// A fixed map from 32-bit ids to 32-bit indices for per-packet lookups (a tunnel id to its
// state): open addressing with linear probing, built once at setup, read-only afterwards. A
// lookup is one multiply, one shift and, at a load factor of at most 1/2, one or two probes of
// one cache line: no data-dependent branch per level as a binary search over sorted ids takes
// (with 64 tunnels, six unpredictable branches per packet; docs/benchmarks.md, issue 17).
//
// Any 32-bit key (0 included); values must be below kNone. Threading: immutable after build();
// any number of readers.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace detwan::common {

class IdIndex {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  IdIndex() : IdIndex(std::span<const std::pair<uint32_t, uint32_t>>{}) {}

  // Setup: the entries' keys must be distinct (a later duplicate is ignored) and their values
  // below kNone (others are ignored).
  explicit IdIndex(std::span<const std::pair<uint32_t, uint32_t>> entries) {
    const auto wanted = static_cast<uint32_t>(std::max<size_t>(4, entries.size() * 2));
    const uint32_t size = std::bit_ceil(wanted);
    table_.assign(size, Entry{});
    shift_ = 32 - std::countr_zero(size);
    for (const auto& [key, value] : entries) {
      if (value == kNone) continue;
      uint32_t slot = home(key);
      while (table_[slot].value != kNone && table_[slot].key != key) slot = next(slot);
      if (table_[slot].value == kNone) table_[slot] = Entry{key, value};
    }
  }

  // The value stored for `key`, kNone if there is none.
  [[nodiscard]] uint32_t find(uint32_t key) const noexcept {
    for (uint32_t slot = home(key);; slot = next(slot)) {
      const Entry entry = table_[slot];
      if (entry.key == key || entry.value == kNone) return entry.value;
    }
  }

 private:
  struct Entry {
    uint32_t key = 0;
    uint32_t value = kNone;  // kNone: an empty slot (ends every probe sequence)
  };

  // Fibonacci hashing: the top bits of key * 2^32/phi spread consecutive ids over the table.
  [[nodiscard]] uint32_t home(uint32_t key) const noexcept {
    return static_cast<uint32_t>(key * 0x9E3779B9u) >> shift_;
  }
  [[nodiscard]] uint32_t next(uint32_t slot) const noexcept {
    return (slot + 1) & static_cast<uint32_t>(table_.size() - 1);
  }

  std::vector<Entry> table_;  // a power of two, at least twice the entries: never full
  int shift_ = 30;            // 32 - log2(table size); the table has at least 4 slots
};

}  // namespace detwan::common

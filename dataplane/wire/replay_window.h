#pragma once
// Anti-replay / duplicate-elimination window over 64-bit sequence numbers, in the style of
// IPsec ESP (RFC 4303 section 3.4.3) with RFC 6479's ring of 64-bit blocks, so that sliding
// never shifts the bitmap.
//
// Semantics, for a window of W bits and `top` = the highest sequence number accepted so far:
//   * nothing accepted yet         -> accept any sequence number (kNew)
//   * seq > top                    -> kNew: accepted, the window slides so top = seq
//   * top - W < seq <= top, unseen -> kLate: accepted (reordered, or the first PREOF copy)
//   * top - W < seq <= top, seen   -> kDuplicate: rejected
//   * seq <= top - W               -> kTooOld: rejected (the window cannot tell, so refuse)
// Sequence numbers do not wrap: after top = 2^64 - 1 nothing is new any more, and the sender
// must start a new epoch (the receiver calls reset()). At 100 Mpps that is 5,800 years.
//
// Cost: check() is O(1). check_and_update() is O(1) except when the window slides into new
// 64-bit blocks, which it clears: at most W/64 + 1 words (1025 for the largest window), however
// far it jumps.
// Memory: ~2W bits, allocated once by create(); nothing allocates afterwards.
//
// Threading: not thread-safe; owned by one datapath thread (`_st` in the callers' sense).
// Security: without authentication of the tunnel packets an on-path attacker can slide the
// window (send seq = 2^64 - 1) and make later traffic too old; see docs/wire-format.md.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "dataplane/wire/drop_reason.h"

namespace detwan::dataplane::wire {

enum class [[nodiscard]] ReplayVerdict : uint8_t {
  kNew = 0,     // accepted; the highest sequence number so far
  kLate,        // accepted; below the highest but inside the window and not seen before
  kDuplicate,   // rejected: seen before
  kTooOld,      // rejected: below the window
};

[[nodiscard]] constexpr bool accepted(ReplayVerdict v) noexcept {
  return v == ReplayVerdict::kNew || v == ReplayVerdict::kLate;
}

// The counter to bump for a rejection (kDuplicate / kTooOld); nullopt for an acceptance.
[[nodiscard]] constexpr std::optional<DropReason> drop_reason(ReplayVerdict v) noexcept {
  switch (v) {
    case ReplayVerdict::kDuplicate:
      return DropReason::kDuplicate;
    case ReplayVerdict::kTooOld:
      return DropReason::kTooOld;
    default:
      return std::nullopt;
  }
}

std::string_view to_string(ReplayVerdict v) noexcept;  // "new", "late", "duplicate", "too_old"

class ReplayWindow {
 public:
  static constexpr uint64_t kMinWindowBits = 64;
  static constexpr uint64_t kMaxWindowBits = 65536;
  static constexpr uint64_t kDefaultWindowBits = 4096;
  static constexpr std::string_view kWindowBitsRule = "a power of two in [64, 65536]";

  [[nodiscard]] static constexpr bool valid_window_bits(uint64_t bits) noexcept {
    return bits >= kMinWindowBits && bits <= kMaxWindowBits && (bits & (bits - 1)) == 0;
  }

  // Setup: allocates the bitmap. nullopt if !valid_window_bits(window_bits) (config code wants
  // make_replay_window() in dataplane/wire/status.h, whose error names the value and the rule).
  [[nodiscard]] static std::optional<ReplayWindow> create(uint64_t window_bits);

  ReplayWindow(ReplayWindow&&) noexcept = default;
  ReplayWindow& operator=(ReplayWindow&&) noexcept = default;

  // What check_and_update(seq) would answer, without changing anything (IPsec checks before
  // verifying a packet and updates after).
  ReplayVerdict check(uint64_t seq) const noexcept;

  // Classifies seq and, if accepted, records it.
  ReplayVerdict check_and_update(uint64_t seq) noexcept;

  // Forget everything (a new sender epoch).
  void reset() noexcept;

  [[nodiscard]] uint64_t window_bits() const noexcept { return window_bits_; }
  [[nodiscard]] bool empty() const noexcept { return empty_; }
  // Highest accepted sequence number; 0 while empty().
  [[nodiscard]] uint64_t top() const noexcept { return top_; }

 private:
  ReplayWindow(uint64_t window_bits, std::size_t words);

  [[nodiscard]] std::size_t slot(uint64_t block) const noexcept { return block & word_mask_; }
  void slide_to(uint64_t seq) noexcept;

  std::unique_ptr<uint64_t[]> bits_;  // ring of 64-bit blocks; block b holds seqs [64b, 64b+63]
  std::size_t words_ = 0;             // power of two >= window_bits / 64 + 1
  std::size_t word_mask_ = 0;
  uint64_t window_bits_ = 0;
  uint64_t top_ = 0;
  bool empty_ = true;
};

}  // namespace detwan::dataplane::wire

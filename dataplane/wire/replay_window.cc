// Setup half of the replay window: validation and the one allocation.
#include "dataplane/wire/replay_window.h"

#include <bit>

namespace detwan::dataplane::wire {

std::string_view to_string(ReplayVerdict v) noexcept {
  switch (v) {
    case ReplayVerdict::kNew:
      return "new";
    case ReplayVerdict::kLate:
      return "late";
    case ReplayVerdict::kDuplicate:
      return "duplicate";
    case ReplayVerdict::kTooOld:
      return "too_old";
  }
  return "unknown";
}

std::optional<ReplayWindow> ReplayWindow::create(uint64_t window_bits) {
  if (!valid_window_bits(window_bits)) return std::nullopt;
  // One block more than the window so that sliding by one block never overwrites a block still
  // inside the window (RFC 6479); rounded up to a power of two so indexing is a mask.
  const std::size_t words = std::bit_ceil(static_cast<std::size_t>(window_bits / 64 + 1));
  return ReplayWindow(window_bits, words);
}

ReplayWindow::ReplayWindow(uint64_t window_bits, std::size_t words)
    : bits_(std::make_unique<uint64_t[]>(words)),  // value-initialized: all zero
      words_(words),
      word_mask_(words - 1),
      window_bits_(window_bits) {}

}  // namespace detwan::dataplane::wire

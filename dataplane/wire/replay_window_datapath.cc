// Per-packet half of the replay window: no allocation, exceptions or logging.
#include <algorithm>

#include "dataplane/wire/replay_window.h"

namespace detwan::dataplane::wire {

namespace {
constexpr uint64_t bit_of(uint64_t seq) noexcept { return uint64_t{1} << (seq & 63); }
}  // namespace

ReplayVerdict ReplayWindow::check(uint64_t seq) const noexcept {
  if (empty_ || seq > top_) return ReplayVerdict::kNew;
  if (top_ - seq >= window_bits_) return ReplayVerdict::kTooOld;
  return (bits_[slot(seq >> 6)] & bit_of(seq)) != 0 ? ReplayVerdict::kDuplicate
                                                    : ReplayVerdict::kLate;
}

ReplayVerdict ReplayWindow::check_and_update(uint64_t seq) noexcept {
  const ReplayVerdict verdict = check(seq);
  switch (verdict) {
    case ReplayVerdict::kNew:
      if (empty_) {
        empty_ = false;  // every block is zero (create() / reset())
        top_ = seq;
      } else {
        slide_to(seq);
      }
      break;
    case ReplayVerdict::kLate:
      break;
    case ReplayVerdict::kDuplicate:
    case ReplayVerdict::kTooOld:
      return verdict;
  }
  bits_[slot(seq >> 6)] |= bit_of(seq);
  return verdict;
}

// Precondition: seq > top_. Blocks (top_ block, seq block] are entering the window and may hold
// stale bits from a lap of the ring ago: clear them. Only the newest W/64 + 1 of them can be
// inside the new window, so a big jump clears just those; older slots are cleared when the
// window reaches them.
void ReplayWindow::slide_to(uint64_t seq) noexcept {
  const uint64_t new_block = seq >> 6;
  const uint64_t entering = new_block - (top_ >> 6);
  const uint64_t to_clear = std::min<uint64_t>(entering, window_bits_ / 64 + 1);
  for (uint64_t i = 0; i < to_clear; ++i) bits_[slot(new_block - i)] = 0;
  top_ = seq;
}

void ReplayWindow::reset() noexcept {
  std::fill_n(bits_.get(), words_, uint64_t{0});
  top_ = 0;
  empty_ = true;
}

}  // namespace detwan::dataplane::wire

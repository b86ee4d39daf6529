#pragma once
// Bridges from the wire core to common/status.h: the datapath Status a receive path returns for
// a wire drop, and the setup-time Result for a replay window built from configuration.
// Kept apart from the core headers so the libFuzzer build (clang 14, no std::expected) never
// includes common/status.h.
#include <cstdint>
#include <string>
#include <utility>

#include "common/status.h"
#include "dataplane/wire/drop_reason.h"
#include "dataplane/wire/replay_window.h"

namespace detwan::dataplane::wire {

// kMalformed for anything decode()/decode_control() reject (the bytes failed validation);
// kDropped for a well-formed packet the replay window refuses (duplicate, too_old).
[[nodiscard]] constexpr common::Status to_status(DropReason reason) noexcept {
  return reason == DropReason::kDuplicate || reason == DropReason::kTooOld
             ? common::Status::kDropped
             : common::Status::kMalformed;
}

// Setup (tier 2): the window for a configured size, or an error naming the value and the rule:
// "replay window of 1000 bits: must be a power of two in [64, 65536]".
[[nodiscard]] inline common::Result<ReplayWindow> make_replay_window(uint64_t window_bits) {
  auto window = ReplayWindow::create(window_bits);
  if (!window) {
    return common::make_error(common::ErrorCode::kInvalidArgument,
                              "replay window of " + std::to_string(window_bits) +
                                  " bits: must be " + std::string(ReplayWindow::kWindowBitsRule));
  }
  return std::move(*window);
}

}  // namespace detwan::dataplane::wire

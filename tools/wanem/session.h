#pragma once
// The poll thread's emulation state: one impairment engine per direction (ab = A->B, ba = B->A),
// and the handling of control requests against it.
//
// Threading: owned by the poll thread. The control thread never touches it directly; it posts a
// closure (PostQueue) that calls handle_request_st() there.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "tools/wanem/engine/emulator.h"
#include "tools/wanem/engine/spec.h"
#include "tools/wanem/post_queue.h"

namespace detwan::wanem {

enum class Direction : uint8_t { kAb = 0, kBa = 1 };
inline constexpr int kDirectionCount = 2;
[[nodiscard]] constexpr int index_of(Direction direction) noexcept {
  return static_cast<int>(direction);
}
[[nodiscard]] constexpr std::string_view name_of(Direction direction) noexcept {
  return direction == Direction::kAb ? "ab" : "ba";
}
// Frames of direction ab arrive on side A and leave on side B.
[[nodiscard]] constexpr Side ingress_of(Direction direction) noexcept {
  return direction == Direction::kAb ? Side::kA : Side::kB;
}
[[nodiscard]] constexpr Side egress_of(Direction direction) noexcept {
  return direction == Direction::kAb ? Side::kB : Side::kA;
}

class Session {
 public:
  // max_frames bounds what each engine holds at once (the port's pool size is the real limit).
  Session(const ImpairmentSpec& spec_ab, const ImpairmentSpec& spec_ba, int64_t start_ns,
          uint32_t max_frames, std::string backend);

  [[nodiscard]] Emulator& emulator(Direction direction) noexcept {
    return *emulators_[index_of(direction)];
  }
  [[nodiscard]] int64_t start_ns() const noexcept { return start_ns_; }

  // One control request (a JSON object, see docs/wanem.md) -> one JSON response line body.
  // Never throws: malformed requests get {"ok":false,"error":...}.
  [[nodiscard]] std::string handle_request_st(std::string_view request, PollThreadView& view);

  // {"ab":<engine counters>,"ba":..,"port":<port counters>,"uptime_ns":..,"backend":..,
  //  "spec":{"ab":..,"ba":..},"link_up":{"ab":..,"ba":..}}
  [[nodiscard]] std::string stats_json_st(PollThreadView& view) const;

 private:
  std::string set_st(std::string_view dir, std::string_view tokens, int64_t now_ns);
  std::string link_st(std::string_view dir, bool up, int64_t now_ns);

  std::array<std::unique_ptr<Emulator>, kDirectionCount> emulators_;
  std::array<bool, kDirectionCount> link_up_{true, true};
  int64_t start_ns_ = 0;
  std::string backend_;
};

// Parses "ab", "ba" or "both" into a mask of directions (bit 0 = ab, bit 1 = ba); 0 if invalid.
[[nodiscard]] unsigned parse_direction_mask(std::string_view dir) noexcept;

}  // namespace detwan::wanem

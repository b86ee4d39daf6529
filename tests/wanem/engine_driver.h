#pragma once
// Test helper: drives an Emulator in virtual time the way a poll loop would, but exactly:
// it wakes at every next_event_ns() and records the virtual time of each release.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/status.h"
#include "tools/wanem/engine/emulator.h"
#include "tools/wanem/engine/spec.h"

namespace detwan::wanem::testing {

inline constexpr int64_t kUs = 1'000;
inline constexpr int64_t kMs = 1'000'000;
inline constexpr int64_t kSec = 1'000'000'000;
// Handles of duplicates carry this bit so tests can tell copies from originals.
inline constexpr uint64_t kDuplicateBit = uint64_t{1} << 63;

struct Released {
  uint64_t handle = 0;
  uint32_t frame_bytes = 0;
  bool deliver = false;
  int64_t at_ns = 0;

  bool operator==(const Released&) const = default;
};

inline ImpairmentSpec spec_of(std::string_view text) {
  auto spec = parse_spec(text);
  EXPECT_TRUE(spec.has_value()) << text << ": " << (spec ? "" : spec.error().message);
  return spec.value_or(ImpairmentSpec{});
}

class Driver {
 public:
  explicit Driver(Emulator& emulator, int64_t now_ns = 0) : emulator_(emulator), now_ns_(now_ns) {}

  // Releases everything due up to t_ns, waking exactly at each next_event_ns().
  void run_until(int64_t t_ns) {
    int stalls = 0;
    for (;;) {
      const int64_t next = emulator_.next_event_ns();
      if (next > t_ns) break;
      now_ns_ = std::max(now_ns_, next);
      const uint32_t n = release_at(now_ns_);
      // A wake-up without a release is allowed (internal link work), but not forever.
      stalls = n == 0 ? stalls + 1 : 0;
      if (stalls > 100'000) {
        ADD_FAILURE() << "next_event_ns() does not make progress at " << now_ns_;
        return;
      }
      if (n == 0) ++empty_wakeups_;
    }
    now_ns_ = std::max(now_ns_, t_ns);
    release_at(now_ns_);
  }

  // Runs until nothing is held any more (or the time limit).
  void drain(int64_t limit_ns = INT64_MAX / 2) {
    while (emulator_.held_frames() > 0 && emulator_.next_event_ns() <= limit_ns) {
      run_until(emulator_.next_event_ns());
    }
  }

  // Offers a frame at t_ns (after releasing what is due before). Offers the duplicate too if
  // asked, with handle | kDuplicateBit. Returns the original's status.
  common::Status offer(uint64_t handle, uint32_t frame_bytes, int64_t t_ns,
                       TrafficClass traffic_class = TrafficClass::kBestEffort) {
    run_until(t_ns);
    const Frame frame{handle, frame_bytes, traffic_class};
    const OfferResult result = emulator_.offer(frame, t_ns);
    if (result.duplicate) {
      ++duplicates_requested_;
      const Frame copy{handle | kDuplicateBit, frame_bytes, traffic_class};
      if (emulator_.offer_duplicate(copy, t_ns) != common::Status::kOk) ++duplicates_dropped_;
    }
    return result.status;
  }

  uint32_t release_at(int64_t t_ns) {
    return emulator_.release(t_ns, [&](uint64_t handle, uint32_t frame_bytes, bool deliver) {
      released_.push_back(Released{handle, frame_bytes, deliver, t_ns});
    });
  }

  [[nodiscard]] const std::vector<Released>& released() const { return released_; }
  [[nodiscard]] int64_t now_ns() const { return now_ns_; }
  [[nodiscard]] uint64_t duplicates_requested() const { return duplicates_requested_; }
  [[nodiscard]] uint64_t duplicates_dropped() const { return duplicates_dropped_; }
  [[nodiscard]] uint64_t empty_wakeups() const { return empty_wakeups_; }

 private:
  Emulator& emulator_;
  int64_t now_ns_;
  std::vector<Released> released_;
  uint64_t duplicates_requested_ = 0;
  uint64_t duplicates_dropped_ = 0;
  uint64_t empty_wakeups_ = 0;
};

inline uint64_t total_dropped(const ClassCounters& c) {
  uint64_t sum = 0;
  for (uint64_t d : c.dropped) sum += d;
  return sum;
}

inline uint64_t dropped(const Emulator& e, TrafficClass cls, DropReason reason) {
  return e.counters().by_class[static_cast<int>(cls)].dropped[static_cast<int>(reason)];
}

inline const ClassCounters& class_counters(const Emulator& e, TrafficClass cls) {
  return e.counters().by_class[static_cast<int>(cls)];
}

}  // namespace detwan::wanem::testing

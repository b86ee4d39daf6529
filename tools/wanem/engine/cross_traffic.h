#pragma once
// Synthetic best-effort cross traffic: an on/off source in front of the link.
//
// "On" bursts emit frames of cross_frame_bytes back-to-back at line rate (one per frame time
// T = bytes * 8 / rate); the number of frames in a burst is geometric with P(n >= k) =
// exp(-(k-1) T / cross_burst_ns), i.e. an exponential on-period of mean cross_burst_ns rounded up
// to whole frames (mean n T = T / (1 - exp(-T / cross_burst_ns))). "Off" periods are exponential
// with mean n_mean T (1 - share) / share, so the long-run offered load is exactly `share` of the
// line rate. The source starts with an off period at its reset time.
//
// Arrival instants are exact LinkTime values; the emulator consumes them in time order.
#include <cstdint>

#include "tools/wanem/engine/link_time.h"
#include "tools/wanem/engine/random.h"
#include "tools/wanem/engine/spec.h"

namespace detwan::wanem {

class CrossTrafficSource {
 public:
  explicit CrossTrafficSource(uint64_t seed) noexcept : rng_(seed, RngStream::kCross) {}

  // (Re)starts the source at now_ns with the spec's cross settings; disabled when share == 0 or
  // rate == 0. The random stream continues across resets.
  void reset(const ImpairmentSpec& spec, int64_t now_ns) noexcept;

  [[nodiscard]] bool enabled() const noexcept { return enabled_; }
  [[nodiscard]] uint32_t frame_bytes() const noexcept { return frame_bytes_; }
  // Arrival instant of the next cross frame (valid when enabled).
  [[nodiscard]] const LinkTime& next_arrival() const noexcept { return next_; }
  // Frames left in the current burst, the next one included (>= 1 when enabled).
  [[nodiscard]] uint64_t remaining_in_burst() const noexcept { return remaining_; }
  // Arrival instant of the k-th next frame of the current burst (k < remaining_in_burst()).
  [[nodiscard]] LinkTime arrival(uint64_t k) const noexcept;
  // How many of the current burst's remaining frames arrive at or before now_ns.
  [[nodiscard]] uint64_t arrivals_until(int64_t now_ns) const noexcept;

  // Consumes `count` (1..remaining) arrivals; at the end of a burst draws the off period and
  // the next burst.
  void consume(uint64_t count) noexcept;

 private:
  void start_burst_after(LinkTime burst_end) noexcept;

  Rng rng_;
  bool enabled_ = false;
  uint32_t frame_bytes_ = 0;
  uint64_t rate_bps_ = 0;
  double frames_per_burst_scale_ = 0;  // cross_burst_ns / T
  double mean_off_ns_ = 0;
  LinkTime next_;
  uint64_t remaining_ = 0;
};

}  // namespace detwan::wanem

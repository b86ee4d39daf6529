#include "tools/wanem/engine/cross_traffic.h"

#include <algorithm>
#include <cmath>

namespace detwan::wanem {
namespace {

constexpr double kMaxFramesPerBurst = 1e12;
constexpr double kMaxOffNs = 1e15;  // ~11.6 days: far beyond any run, keeps sums in int64

}  // namespace

void CrossTrafficSource::reset(const ImpairmentSpec& spec, int64_t now_ns) noexcept {
  enabled_ = spec.cross_share > 0.0 && spec.rate_bps > 0 && spec.cross_frame_bytes > 0 &&
             spec.cross_burst_ns > 0;
  remaining_ = 0;
  if (!enabled_) return;
  frame_bytes_ = spec.cross_frame_bytes;
  rate_bps_ = spec.rate_bps;
  const double frame_ns = static_cast<double>(frame_bytes_) * 8e9 / static_cast<double>(rate_bps_);
  frames_per_burst_scale_ = static_cast<double>(spec.cross_burst_ns) / frame_ns;
  const double mean_burst_ns =
      frame_ns / -std::expm1(-frame_ns / static_cast<double>(spec.cross_burst_ns));
  mean_off_ns_ = mean_burst_ns * (1.0 - spec.cross_share) / spec.cross_share;
  start_burst_after(LinkTime::at(now_ns));
}

LinkTime CrossTrafficSource::arrival(uint64_t k) const noexcept {
  __extension__ typedef unsigned __int128 u128;
  const u128 bits = static_cast<u128>(frame_bytes_) * 8 * k;
  // 128 bits hold k * bits * 1e9 for every burst length the source draws (< 1e12 frames).
  const u128 whole_ns = bits * 1'000'000'000u / rate_bps_;
  const u128 frac = bits * 1'000'000'000u % rate_bps_ + next_.frac;
  return LinkTime{next_.ns + static_cast<int64_t>(whole_ns + frac / rate_bps_),
                  static_cast<uint64_t>(frac % rate_bps_)};
}

uint64_t CrossTrafficSource::arrivals_until(int64_t now_ns) const noexcept {
  if (!enabled_ || next_ > LinkTime::at(now_ns)) return 0;
  return std::min(remaining_, steps_until(next_, uint64_t{frame_bytes_} * 8, rate_bps_, now_ns));
}

void CrossTrafficSource::consume(uint64_t count) noexcept {
  const LinkTime after = arrival(count);
  remaining_ -= count;
  if (remaining_ > 0) {
    next_ = after;
    return;
  }
  start_burst_after(after);
}

void CrossTrafficSource::start_burst_after(LinkTime burst_end) noexcept {
  const double off = std::min(-std::log(rng_.uniform_open01()) * mean_off_ns_, kMaxOffNs);
  next_ = LinkTime{burst_end.ns + std::llround(off), burst_end.frac};
  const double frames = std::min(
      std::floor(-std::log(rng_.uniform_open01()) * frames_per_burst_scale_), kMaxFramesPerBurst);
  remaining_ = 1 + static_cast<uint64_t>(frames);
}

}  // namespace detwan::wanem

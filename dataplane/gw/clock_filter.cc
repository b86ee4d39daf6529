#include "dataplane/gw/clock_filter.h"

namespace detwan::dataplane::gw {

void ClockFilter::add(const wire::ClockSample& sample, int64_t now_ns) noexcept {
  ring_[next_] = sample;
  next_ = (next_ + 1) % kWindow;
  if (stored_ < kWindow) ++stored_;
  ++total_;
  last_ = sample;
  last_sample_ns_ = now_ns;
}

void ClockFilter::reset() noexcept { *this = ClockFilter(); }

wire::ClockSample ClockFilter::best() const noexcept {
  if (stored_ == 0) return {};
  // Walk from the newest to the oldest so that a tie keeps the newest sample.
  wire::ClockSample best = ring_[(next_ + kWindow - 1) % kWindow];
  for (uint32_t age = 1; age < stored_; ++age) {
    const wire::ClockSample& s = ring_[(next_ + kWindow - 1 - age) % kWindow];
    if (s.rtt_ns < best.rtt_ns) best = s;
  }
  return best;
}

}  // namespace detwan::dataplane::gw

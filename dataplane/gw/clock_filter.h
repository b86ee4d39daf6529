#pragma once
// Clock-offset estimate of one peer from two-way time exchanges (wire/control.h), in the way of
// NTP's clock filter (RFC 5905 section 10, simplified): keep the last kWindow samples and use
// the one with the smallest round trip, whose offset error is at most rtt / 2 (queueing on
// either direction only adds to the round trip). Ties go to the newest sample.
//
// Offsets here are as clock_sample() reports them: peer clock - local clock.
//
// Threading: one owner (the datapath thread). add() is datapath-safe: fixed memory, no
// allocation, no exceptions.
#include <array>
#include <cstdint>

#include "dataplane/wire/control.h"

namespace detwan::dataplane::gw {

class ClockFilter {
 public:
  static constexpr uint32_t kWindow = 8;

  void add(const wire::ClockSample& sample, int64_t now_ns) noexcept;
  void reset() noexcept;

  [[nodiscard]] bool has_estimate() const noexcept { return stored_ != 0; }
  // The sample with the smallest rtt among the last kWindow; {0, 0} without any.
  [[nodiscard]] wire::ClockSample best() const noexcept;
  // Samples accepted since creation (or reset).
  [[nodiscard]] uint64_t samples() const noexcept { return total_; }
  [[nodiscard]] uint32_t window_samples() const noexcept { return stored_; }
  [[nodiscard]] const wire::ClockSample& last() const noexcept { return last_; }
  [[nodiscard]] int64_t last_sample_ns() const noexcept { return last_sample_ns_; }

 private:
  std::array<wire::ClockSample, kWindow> ring_{};
  uint32_t next_ = 0;    // ring position of the next sample
  uint32_t stored_ = 0;  // min(total_, kWindow)
  uint64_t total_ = 0;
  wire::ClockSample last_{};
  int64_t last_sample_ns_ = 0;
};

}  // namespace detwan::dataplane::gw

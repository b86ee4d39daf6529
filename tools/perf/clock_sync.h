#pragma once
// Clock offset between two hosts from two-way time exchanges (NTP on-wire algorithm, RFC 5905):
//   t1 local send, t2 remote receive, t3 remote send, t4 local receive
//   offset = ((t2 - t1) + (t3 - t4)) / 2      (remote clock minus local clock)
//   rtt    = (t4 - t1) - (t3 - t2)
// The true offset lies within offset +- rtt/2 whatever the path's asymmetry, so the sample with
// the smallest rtt gives the tightest bound: offset_ns() is that sample's offset and error_ns()
// its rtt/2 (clock drift over a test of minutes is far below that and is not modelled). Every
// sample's rtt is recorded in rtt().
#include <cstdint>

#include "common/histogram.h"
#include "tools/perf/options.h"

namespace detwan::perf {

class ClockSync {
 public:
  ClockSync();

  // Returns false (and records nothing) for an impossible sample: rtt < 0 (the remote's
  // processing time exceeds the local round trip: a clock stepped, or a forged reply).
  bool add(int64_t t1_ns, int64_t t2_ns, int64_t t3_ns, int64_t t4_ns) noexcept;

  [[nodiscard]] bool valid() const noexcept { return samples_ > 0; }
  [[nodiscard]] uint64_t samples() const noexcept { return samples_; }
  [[nodiscard]] int64_t offset_ns() const noexcept { return best_offset_ns_; }  // remote - local
  [[nodiscard]] int64_t error_ns() const noexcept { return best_rtt_ns_ / 2; }
  [[nodiscard]] const common::LogLinearHistogram& rtt() const noexcept { return rtt_; }

  // The correction to subtract from (remote receive - local send) one-way delays under `mode`
  // (see ClockMode): 0 or offset_ns(). 0 when no sample exists.
  [[nodiscard]] int64_t correction_ns(ClockMode mode) const noexcept;

 private:
  common::LogLinearHistogram rtt_;
  uint64_t samples_ = 0;
  int64_t best_rtt_ns_ = 0;
  int64_t best_offset_ns_ = 0;
};

}  // namespace detwan::perf

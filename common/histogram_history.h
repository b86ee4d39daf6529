#pragma once
// Percentiles over the last seconds or minutes of a cumulative histogram (`stats --json`'s
// "windows": last 10 s, 1 min, 5 min; docs/gateway-stats.md, "Statistics").
//
// The histogram keeps counting from its start; a HistogramHistory keeps compact copies of it
// (only its used buckets) taken every `tick_ns`, for `horizon_ns`. A window of W is the
// difference between the histogram now and the newest copy taken at least W ago: the samples of
// the last W to W + tick_ns (span_ns says exactly how long). Until a copy that old exists, the
// window starts at the oldest copy (or at the start of the histogram): span_ns is then shorter.
//
// Cost: snapshot() walks the histogram's used buckets and allocates their copy (control path,
// never per packet); memory is (horizon / tick + 1) copies of the used buckets (~1-3 kB each
// for a delay distribution). A history must follow one histogram; after the histogram is reset
// (a reconfigured tunnel), call clear().
//
// Threading: not synchronised; the histogram's thread owns it.
#include <cstdint>
#include <deque>
#include <vector>

#include "common/histogram.h"

namespace detwan::common {

struct HistogramWindow {
  int64_t window_ns = 0;  // asked for
  int64_t span_ns = 0;    // covered: from the copy used to now
  uint64_t count = 0;
  int64_t p50 = 0, p90 = 0, p99 = 0, p99_9 = 0;
  int64_t max = 0;  // bucket precision (the histogram's own max is over all time)
};

class HistogramHistory {
 public:
  static constexpr int64_t kDefaultTickNs = 10'000'000'000;
  static constexpr int64_t kDefaultHorizonNs = 300'000'000'000;

  HistogramHistory() : HistogramHistory(kDefaultTickNs, kDefaultHorizonNs) {}
  HistogramHistory(int64_t tick_ns, int64_t horizon_ns);

  // Whether a copy is due at now_ns (the first one is due at once).
  [[nodiscard]] bool due(int64_t now_ns) const noexcept {
    return copies_.empty() || now_ns - copies_.back().at_ns >= tick_ns_;
  }
  // Takes a copy of `h` at now_ns and forgets the copies older than the horizon needs.
  void snapshot(const LogLinearHistogram& h, int64_t now_ns);
  // The samples of `current` (the histogram the copies were taken of) in the last window_ns.
  [[nodiscard]] HistogramWindow window(const LogLinearHistogram& current, int64_t window_ns,
                                       int64_t now_ns) const;
  void clear() noexcept { copies_.clear(); }
  [[nodiscard]] size_t copies() const noexcept { return copies_.size(); }
  [[nodiscard]] size_t memory_bytes() const noexcept;

 private:
  struct Copy {
    int64_t at_ns = 0;
    uint64_t count = 0;
    std::vector<LogLinearHistogram::Bucket> buckets;
  };
  int64_t tick_ns_;
  int64_t horizon_ns_;
  std::deque<Copy> copies_;
};

}  // namespace detwan::common

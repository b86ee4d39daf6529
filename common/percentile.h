#pragma once
// Exact percentiles of a small sample by nearest rank (benchmark reports: per-iteration times).
// For streams or large samples use common/histogram.h.
#include <algorithm>
#include <cmath>
#include <vector>

namespace detwan::common {

// The smallest value v of `values` with at least q * n values <= v (q in (0, 1]; q = 1 is the
// max). 0 for an empty sample. With 20 samples p99 is the max, p50 the 10th smallest.
[[nodiscard]] inline double nearest_rank_percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto n = static_cast<double>(values.size());
  const auto rank = static_cast<size_t>(std::max(1.0, std::ceil(q * n)));
  return values[std::min(rank, values.size()) - 1];
}

}  // namespace detwan::common

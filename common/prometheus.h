#pragma once
// The Prometheus text exposition format 0.0.4, written by every detwan exporter (the gateway's
// /metrics and control-socket "prometheus", the agent's /metrics): one writer, so that label
// escaping, family grouping and histogram layout are the same everywhere (docs/metrics.md).
//
// Families are written in first-use order, each as one group under its # HELP and # TYPE lines,
// however the samples were interleaved when added. Counters end in _total (the caller names
// them). Latencies are histograms in seconds with the fixed buckets below: cumulative,
// aggregatable across gateways and over time (rate(..._bucket[5m]) then histogram_quantile).
//
// Threading: an Exposition is one writer's scratch object; nothing is shared.
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/counter_table.h"
#include "common/histogram.h"

namespace detwan::common::prometheus {

// Bucket upper bounds (seconds) of every detwan histogram of that kind (docs/metrics.md lists
// them; dashboards rely on them, so they change only with a note there).
// Delays that cross a WAN: one-way delay, WAN delay, request and admission times.
inline constexpr double kDelayBucketsSeconds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                  0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                                  1,      2.5,     5,      10};
// Errors against a schedule: lateness, departure and playout errors, queue waits.
inline constexpr double kErrorBucketsSeconds[] = {1e-6,   2.5e-6, 5e-6,   1e-5, 2.5e-5, 5e-5,
                                                  1e-4,   2.5e-4, 5e-4,   1e-3, 2.5e-3, 5e-3,
                                                  0.01,   0.025,  0.05,   0.1,  0.25,   1};

using Labels = std::vector<std::pair<std::string_view, std::string>>;

// A label value as the format wants it: backslash, double quote and newline escaped.
std::string escape_label(std::string_view value);

class Exposition {
 public:
  void counter(std::string_view name, std::string_view help, const Labels& labels, uint64_t value);
  void gauge(std::string_view name, std::string_view help, const Labels& labels, double value);
  // Every field of a counter table (common/counter_table.h) as a counter named prefix + metric,
  // with `labels` and the field's constant label if it has one.
  template <typename Counters, size_t N>
  void counters(std::string_view prefix, const Labels& labels, const Counters& c,
                const CounterField<Counters> (&fields)[N]) {
    for (const CounterField<Counters>& f : fields) {
      table_counter(prefix, f.metric, f.help, labels, f.label_name, f.label_value, c.*f.member);
    }
  }
  // A histogram of nanoseconds as a Prometheus histogram in seconds: one cumulative _bucket per
  // bound (le="..."; a value counts in every bucket whose bound it does not exceed, so negative
  // values count from the first), le="+Inf", _sum and _count. Bucket counts carry the source
  // histogram's precision (a value within 2^-sub_bucket_bits of a bound may count on its other
  // side); _count and _sum are exact.
  void histogram_ns(std::string_view name, std::string_view help, const Labels& labels,
                    const LogLinearHistogram& h, std::span<const double> bounds_seconds);
  [[nodiscard]] std::string text() const;
  [[nodiscard]] size_t families() const noexcept { return families_.size(); }

 private:
  struct Family {
    std::string name, help, type, lines;
  };
  Family& add(std::string_view name, std::string_view help, std::string_view type);
  void table_counter(std::string_view prefix, std::string_view metric, std::string_view help,
                     const Labels& labels, std::string_view label_name,
                     std::string_view label_value, uint64_t value);
  std::vector<Family> families_;
  std::map<std::string, size_t, std::less<>> index_;
};

// Expositions written in parts (a gateway builds its /metrics over several polls) joined into
// one: each family's samples brought together under the first part's # HELP and # TYPE lines,
// families in first-seen order; other comment lines are dropped.
std::string merge(const std::vector<std::string>& parts);

}  // namespace detwan::common::prometheus

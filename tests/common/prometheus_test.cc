// common/prometheus.h and common/histogram_history.h: the exposition writer's histograms
// against a brute-force count of the recorded values, and the windowed percentiles against
// the values recorded in each window.
#include "common/prometheus.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/histogram.h"
#include "common/histogram_history.h"

namespace detwan::common {
namespace {

TEST(HistogramCounts, AtOrBelowBoundsMatchABruteForceCountWithinBucketPrecision) {
  LogLinearHistogram h;
  std::mt19937_64 random(7);
  std::vector<int64_t> values;
  for (int i = 0; i < 20000; ++i) {
    // Delays from 1 us to ~1 s, some negative (a clock offset), a few exact bounds.
    int64_t v = static_cast<int64_t>(std::exp(std::uniform_real_distribution<>(7, 20.7)(random)));
    if (i % 10 == 0) v = -v / 100;
    if (i % 97 == 0) v = 5'000'000;
    values.push_back(v);
    h.record(v);
  }
  const std::vector<int64_t> bounds = {-1000, 0, 1000, 100'000, 5'000'000, 1'000'000'000, INT64_MAX};
  std::vector<uint64_t> counts(bounds.size());
  h.counts_at_or_below(bounds, counts);
  for (size_t k = 0; k < bounds.size(); ++k) {
    SCOPED_TRACE(bounds[k]);
    const auto exact = static_cast<uint64_t>(
        std::count_if(values.begin(), values.end(), [&](int64_t v) { return v <= bounds[k]; }));
    // Bucket precision: values within 1/128 of the bound may count on its other side.
    const double slack = std::abs(static_cast<double>(bounds[k])) / 128.0;
    const auto near = static_cast<uint64_t>(std::count_if(values.begin(), values.end(), [&](int64_t v) {
      return std::abs(static_cast<double>(v) - static_cast<double>(bounds[k])) <= slack && v != bounds[k];
    }));
    EXPECT_LE(counts[k], exact + near);
    EXPECT_GE(counts[k] + near, exact);
    EXPECT_EQ(counts[k], h.count() - h.count_above(bounds[k]));  // the same rule as count_above
  }
  EXPECT_EQ(counts.back(), h.count());
  // An exact bound value is counted at that bound (5 ms lies on a bucket's lowest value or in a
  // bucket whose lowest value is below it).
  std::vector<uint64_t> at5(1);
  const std::vector<int64_t> five = {5'000'000};
  h.counts_at_or_below(five, at5);
  EXPECT_GE(at5[0], static_cast<uint64_t>(std::count(values.begin(), values.end(), 5'000'000)));
}

TEST(HistogramCounts, EmptyAndExtremes) {
  LogLinearHistogram h;
  std::vector<uint64_t> out(2, 9);
  const std::vector<int64_t> bounds = {0, 10};
  h.counts_at_or_below(bounds, out);
  EXPECT_EQ(out, (std::vector<uint64_t>{0, 0}));
  h.record(1'000'000);
  h.counts_at_or_below(std::vector<int64_t>{999'999, 1'000'000}, out);
  EXPECT_EQ(out, (std::vector<uint64_t>{0, 1}));  // exact at min() and max()
}

TEST(Exposition, HistogramIsCumulativeWithSumAndCountAndFamiliesGroup) {
  LogLinearHistogram h;
  for (int i = 1; i <= 100; ++i) h.record(int64_t{i} * 1'000'000);  // 1..100 ms
  prometheus::Exposition e;
  e.counter("x_total", "X", {{"a", "1"}}, 3);
  e.histogram_ns("d_seconds", "D", {{"t", "q\"uote"}}, h, prometheus::kDelayBucketsSeconds);
  e.counter("x_total", "X", {{"a", "2"}}, 4);
  const std::string text = e.text();
  EXPECT_EQ(e.families(), 2u);
  EXPECT_NE(text.find("# TYPE x_total counter\nx_total{a=\"1\"} 3\nx_total{a=\"2\"} 4\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE d_seconds histogram\n"), std::string::npos);
  EXPECT_NE(text.find("d_seconds_bucket{t=\"q\\\"uote\",le=\"0.001\"} 1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("d_seconds_bucket{t=\"q\\\"uote\",le=\"0.01\"} 10\n"), std::string::npos);
  EXPECT_NE(text.find("d_seconds_bucket{t=\"q\\\"uote\",le=\"0.05\"} 50\n"), std::string::npos);
  EXPECT_NE(text.find("d_seconds_bucket{t=\"q\\\"uote\",le=\"+Inf\"} 100\n"), std::string::npos);
  EXPECT_NE(text.find("d_seconds_sum{t=\"q\\\"uote\"} 5.05\n"), std::string::npos) << text;
  EXPECT_NE(text.find("d_seconds_count{t=\"q\\\"uote\"} 100\n"), std::string::npos);
}

TEST(HistogramHistory, WindowsHoldOnlyTheirSamples) {
  LogLinearHistogram h;
  HistogramHistory history;  // copies every 10 s, 5 min kept
  constexpr int64_t kSecond = 1'000'000'000;
  // One sample per second for 400 s: the value is 1 ms for the first 340 s, then 50 ms.
  for (int64_t t = 0; t < 400; ++t) {
    const int64_t now = t * kSecond;
    if (history.due(now)) history.snapshot(h, now);
    h.record(t < 340 ? 1'000'000 : 50'000'000);
  }
  const int64_t now = 400 * kSecond;
  const HistogramWindow last10 = history.window(h, 10 * kSecond, now);
  EXPECT_EQ(last10.span_ns, 10 * kSecond);
  EXPECT_EQ(last10.count, 10u);
  EXPECT_NEAR(static_cast<double>(last10.p50), 50e6, 50e6 / 128);
  const HistogramWindow last60 = history.window(h, 60 * kSecond, now);
  EXPECT_EQ(last60.count, 60u);
  EXPECT_NEAR(static_cast<double>(last60.p99), 50e6, 50e6 / 128);  // the last 60 samples
  const HistogramWindow last300 = history.window(h, 300 * kSecond, now);
  EXPECT_EQ(last300.span_ns, 300 * kSecond);
  EXPECT_EQ(last300.count, 300u);
  EXPECT_NEAR(static_cast<double>(last300.p50), 1e6, 1e6 / 128);  // 240 of 300 were 1 ms
  EXPECT_NEAR(static_cast<double>(last300.p90), 50e6, 50e6 / 128);
  EXPECT_LE(history.copies(), 32u);  // bounded: the horizon's copies only
  // A window longer than the history: from the oldest copy, span says so.
  const HistogramWindow hour = history.window(h, 3600 * kSecond, now);
  EXPECT_LT(hour.span_ns, 3600 * kSecond);
  EXPECT_EQ(hour.count, static_cast<uint64_t>(hour.span_ns / kSecond));
}

TEST(HistogramHistory, ResetHistogramStartsAfresh) {
  LogLinearHistogram h;
  HistogramHistory history(10, 100);
  for (int i = 0; i < 50; ++i) h.record(7);
  history.snapshot(h, 0);
  h.reset();  // a reconfigured tunnel
  h.record(9);
  const HistogramWindow w = history.window(h, 10, 20);
  EXPECT_EQ(w.count, 1u);  // the stale copy is not subtracted
  EXPECT_EQ(w.p50, 9);
  history.snapshot(h, 20);
  EXPECT_EQ(history.copies(), 1u);  // the stale copy is gone
}

TEST(HistogramHistory, ResetHistogramThatCountedPastTheCopyIsNotSubtracted) {
  LogLinearHistogram h;
  HistogramHistory history(10, 100);
  for (int i = 0; i < 8; ++i) h.record(1000);  // the tunnel's earlier life
  history.snapshot(h, 0);
  h.reset();
  for (int i = 0; i < 20; ++i) h.record(2000);  // more samples than the copy, other buckets
  const HistogramWindow w = history.window(h, 10, 20);
  EXPECT_EQ(w.count, 20u);  // not 20 - 8
  EXPECT_EQ(w.span_ns, 0);
  history.snapshot(h, 20);
  EXPECT_EQ(history.copies(), 1u);
}

}  // namespace
}  // namespace detwan::common

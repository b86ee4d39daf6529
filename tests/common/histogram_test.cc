#include "common/histogram.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "common/status.h"

namespace detwan::common {
namespace {

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr double kQuantiles[] = {0.0001, 0.001, 0.01,  0.1,    0.25,    0.5,     0.75,
                                 0.9,    0.99,  0.999, 0.9999, 0.99999, 0.999999};

// The exact answer: the smallest sample with at least q * n samples <= it (q * n rounded
// with a tiny relative slack, as binary fractions make 0.9 * 100 slightly above 90).
int64_t reference_percentile(const std::vector<int64_t>& sorted, double q) {
  const double exact = q * static_cast<double>(sorted.size());
  auto rank = static_cast<size_t>(std::ceil(exact - exact * 1e-12));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

// The histogram reports the top of the bucket holding the reference sample: never below it,
// and above it by at most |reference| * 2^-bits.
void expect_within_precision(const LogLinearHistogram& h, const std::vector<int64_t>& sorted,
                             double q) {
  const int64_t expected = reference_percentile(sorted, q);
  const int64_t got = h.percentile(q);
  const long double bound =
      std::fabs(static_cast<long double>(expected)) * std::ldexp(1.0L, -h.sub_bucket_bits());
  EXPECT_GE(got, expected) << "q=" << q;
  EXPECT_LE(static_cast<long double>(got) - static_cast<long double>(expected), bound)
      << "q=" << q << " expected=" << expected << " got=" << got;
}

// Samples spread over many decades (log-uniform magnitude), optionally with random signs.
std::vector<int64_t> random_samples(uint64_t seed, size_t n, bool with_negatives) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> exponent(0.0, 40.0);
  std::bernoulli_distribution negative(0.3);
  std::vector<int64_t> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    auto v = static_cast<int64_t>(std::exp2(exponent(rng)));
    if (with_negatives && negative(rng)) v = -v;
    out.push_back(v);
  }
  return out;
}

class HistogramPrecisionTest : public ::testing::TestWithParam<int> {};

TEST_P(HistogramPrecisionTest, PercentilesMatchSortedReferenceWithinBound) {
  for (bool with_negatives : {false, true}) {
    LogLinearHistogram h(GetParam());
    auto samples = random_samples(42 + static_cast<uint64_t>(GetParam()), 200'000, with_negatives);
    for (int64_t v : samples) h.record(v);
    std::sort(samples.begin(), samples.end());
    for (double q : kQuantiles) expect_within_precision(h, samples, q);
    EXPECT_EQ(h.percentile(0.0), samples.front());
    EXPECT_EQ(h.percentile(1.0), samples.back());
    EXPECT_EQ(h.min(), samples.front());
    EXPECT_EQ(h.max(), samples.back());
    EXPECT_EQ(h.count(), samples.size());
  }
}

INSTANTIATE_TEST_SUITE_P(SubBucketBits, HistogramPrecisionTest, ::testing::Values(1, 3, 7, 12));

TEST(Histogram, SmallValuesAreExact) {
  LogLinearHistogram h(7);
  std::vector<int64_t> samples;
  for (int64_t v = -255; v <= 255; ++v) {
    h.record(v);
    samples.push_back(v);
  }
  for (double q : kQuantiles) EXPECT_EQ(h.percentile(q), reference_percentile(samples, q));
  EXPECT_EQ(h.count_above(0), 255U);
  EXPECT_EQ(h.count_above(-1), 256U);
  EXPECT_EQ(h.count_above(254), 1U);
  EXPECT_EQ(h.count_above(255), 0U);
  EXPECT_EQ(h.count_above(-256), 511U);
}

TEST(Histogram, TailPercentilesAndMaxWithOutliers) {
  LogLinearHistogram h;
  std::mt19937_64 rng(7);
  std::normal_distribution<double> body(1'000'000.0, 20'000.0);  // ~1 ms +- 20 us
  std::vector<int64_t> samples;
  for (int i = 0; i < 300'000; ++i) samples.push_back(static_cast<int64_t>(body(rng)));
  // Three outliers: p99.999 of 300003 samples is rank 300000, the largest body sample.
  for (int64_t outlier : {50'000'000, 80'000'000, 123'456'789}) samples.push_back(outlier);
  for (int64_t v : samples) h.record(v);
  std::sort(samples.begin(), samples.end());
  expect_within_precision(h, samples, 0.99999);
  expect_within_precision(h, samples, 0.9999);
  EXPECT_LT(h.percentile(0.99999), 50'000'000);
  EXPECT_EQ(h.percentile(1.0), 123'456'789);
  EXPECT_EQ(h.max(), 123'456'789);
  // Clamped into [min, max]: the bucket of the max ends above it.
  EXPECT_EQ(h.percentile(0.9999999), 123'456'789);
  EXPECT_EQ(h.count_above(100'000'000), 1U);
}

TEST(Histogram, NegativesMirrorPositives) {
  LogLinearHistogram pos;
  LogLinearHistogram neg;
  std::vector<int64_t> negated;
  for (int64_t v : random_samples(3, 50'000, false)) {
    pos.record(v);
    neg.record(-v);
    negated.push_back(-v);
  }
  EXPECT_EQ(neg.min(), -pos.max());
  EXPECT_EQ(neg.max(), -pos.min());
  EXPECT_DOUBLE_EQ(neg.mean(), -pos.mean());
  EXPECT_DOUBLE_EQ(neg.stddev(), pos.stddev());
  // Same relative precision on the negative side.
  std::sort(negated.begin(), negated.end());
  for (double q : kQuantiles) expect_within_precision(neg, negated, q);
  // Mirrored buckets: values above -x-1 on one side are values <= x on the other (x = 2^k - 1
  // ends a bucket, so bucket precision is exact there).
  for (int64_t x : {int64_t{1}, int64_t{255}, (int64_t{1} << 20) - 1, (int64_t{1} << 35) - 1}) {
    EXPECT_EQ(neg.count_above(-x - 1), pos.count() - pos.count_above(x)) << x;
  }
}

TEST(Histogram, MergeEqualsRecordingBoth) {
  LogLinearHistogram a;
  LogLinearHistogram b;
  LogLinearHistogram both;
  for (int64_t v : random_samples(11, 40'000, true)) {
    a.record(v);
    both.record(v);
  }
  for (int64_t v : random_samples(12, 60'000, true)) {
    b.record(v);
    both.record(v);
  }
  b.record_n(kMax, 3);
  both.record_n(kMax, 3);
  ASSERT_TRUE(a.merge(b));
  EXPECT_EQ(a.count(), both.count());
  EXPECT_EQ(a.min(), both.min());
  EXPECT_EQ(a.max(), both.max());
  EXPECT_DOUBLE_EQ(a.mean(), both.mean());
  EXPECT_DOUBLE_EQ(a.stddev(), both.stddev());
  for (double q : kQuantiles) EXPECT_EQ(a.percentile(q), both.percentile(q)) << q;
  EXPECT_EQ(a.summary_json(), both.summary_json());

  LogLinearHistogram empty;
  ASSERT_TRUE(empty.merge(both));
  EXPECT_EQ(empty.summary_json(), both.summary_json());
  ASSERT_TRUE(both.merge(LogLinearHistogram()));
  EXPECT_EQ(empty.summary_json(), both.summary_json());
}

TEST(Histogram, MergeRejectsDifferentPrecision) {
  LogLinearHistogram a(7);
  LogLinearHistogram b(6);
  a.record(5);
  b.record(1000);
  const std::string before = a.summary_json();
  EXPECT_FALSE(a.merge(b));
  EXPECT_EQ(a.summary_json(), before);
}

TEST(Histogram, MemoryIsFixedAtConstruction) {
  LogLinearHistogram h;
  const size_t before = h.memory_bytes();
  EXPECT_GT(before, 0U);
  EXPECT_LT(before, 256U * 1024U);  // default precision stays small
  for (int64_t v : random_samples(5, 100'000, true)) h.record(v);
  h.record(kMin);
  h.record(kMax);
  EXPECT_EQ(h.memory_bytes(), before);
  h.reset();
  EXPECT_EQ(h.memory_bytes(), before);
  EXPECT_LT(LogLinearHistogram(4).memory_bytes(), before);
}

TEST(Histogram, ExtremeValuesDoNotOverflow) {
  LogLinearHistogram h;
  h.record(kMin);
  h.record(kMax);
  h.record(0);
  h.record(-1);
  EXPECT_EQ(h.min(), kMin);
  EXPECT_EQ(h.max(), kMax);
  EXPECT_EQ(h.percentile(0.0), kMin);
  EXPECT_EQ(h.percentile(0.25), kMin);
  EXPECT_EQ(h.percentile(0.5), -1);
  EXPECT_EQ(h.percentile(0.75), 0);
  EXPECT_EQ(h.percentile(0.99), kMax);
  EXPECT_EQ(h.percentile(1.0), kMax);
  EXPECT_DOUBLE_EQ(h.mean(), -0.5);  // (INT64_MIN + INT64_MAX - 1) / 4 = -2 / 4
  EXPECT_EQ(h.count_above(kMax), 0U);
  EXPECT_EQ(h.count_above(kMin), 3U);
  EXPECT_EQ(h.summary_json(),
            "{\"count\":4,\"min\":-9223372036854775808,\"mean\":-1,\"p50\":-1,\"p90\":"
            "9223372036854775807,\"p99\":9223372036854775807,\"p99_9\":9223372036854775807,"
            "\"p99_99\":9223372036854775807,\"p99_999\":9223372036854775807,"
            "\"max\":9223372036854775807}");

  // Sums far beyond int64 stay exact.
  LogLinearHistogram big;
  big.record_n(kMax, 1'000'000);
  EXPECT_DOUBLE_EQ(big.mean(), static_cast<double>(kMax));
  EXPECT_EQ(big.percentile(0.5), kMax);
  LogLinearHistogram small;
  small.record_n(kMin, 1'000'000);
  EXPECT_DOUBLE_EQ(small.mean(), static_cast<double>(kMin));
  EXPECT_EQ(small.percentile(0.5), kMin);
  EXPECT_NE(small.summary_json().find("\"mean\":-9223372036854775808"), std::string::npos);
}

TEST(Histogram, ExtremeValuesAtEverySubBucketWidth) {
  for (int bits = 1; bits <= 12; ++bits) {
    LogLinearHistogram h(bits);
    for (int shift = 0; shift < 63; ++shift) {
      const int64_t v = int64_t{1} << shift;
      h.record(v);
      h.record(v - 1);
      h.record(-v);
    }
    h.record(kMax);
    h.record(kMin);
    EXPECT_EQ(h.count(), 63U * 3 + 2) << bits;
    EXPECT_EQ(h.min(), kMin);
    EXPECT_EQ(h.max(), kMax);
    EXPECT_EQ(h.percentile(1e-9), kMin);
  }
}

TEST(Histogram, EmptyHistogram) {
  LogLinearHistogram h;
  EXPECT_EQ(h.count(), 0U);
  EXPECT_EQ(h.min(), 0);
  EXPECT_EQ(h.max(), 0);
  EXPECT_EQ(h.mean(), 0.0);
  EXPECT_EQ(h.stddev(), 0.0);
  EXPECT_EQ(h.percentile(0.5), 0);
  EXPECT_EQ(h.count_above(-5), 0U);
  EXPECT_EQ(h.summary_json(),
            "{\"count\":0,\"min\":0,\"mean\":0,\"p50\":0,\"p90\":0,\"p99\":0,\"p99_9\":0,"
            "\"p99_99\":0,\"p99_999\":0,\"max\":0}");
}

TEST(Histogram, SummaryJsonKeysAndValues) {
  LogLinearHistogram h;
  for (int64_t v = 1; v <= 100; ++v) h.record(v);
  EXPECT_EQ(h.summary_json(),
            "{\"count\":100,\"min\":1,\"mean\":51,\"p50\":50,\"p90\":90,\"p99\":99,"
            "\"p99_9\":100,\"p99_99\":100,\"p99_999\":100,\"max\":100}");
}

TEST(Histogram, MeanStddevAndRecordN) {
  LogLinearHistogram h;
  for (int64_t v : {2, 4, 4, 4, 5, 5, 7, 9}) h.record(v);
  EXPECT_DOUBLE_EQ(h.mean(), 5.0);
  EXPECT_DOUBLE_EQ(h.stddev(), 2.0);
  LogLinearHistogram n;
  n.record_n(4, 3);
  n.record_n(5, 2);
  n.record_n(100, 0);  // no-op
  EXPECT_EQ(n.count(), 5U);
  EXPECT_EQ(n.max(), 5);
  EXPECT_DOUBLE_EQ(n.mean(), 4.4);
}

TEST(Histogram, ResetForgetsEverything) {
  LogLinearHistogram h;
  h.record(-17);
  h.record(1'000'000);
  h.reset();
  EXPECT_EQ(h.count(), 0U);
  h.record(5);
  EXPECT_EQ(h.min(), 5);
  EXPECT_EQ(h.max(), 5);
  EXPECT_EQ(h.percentile(0.5), 5);
  EXPECT_EQ(h.count_above(0), 1U);
}

// reset() clears only the buckets between min() and max(): whatever was recorded (one sign or
// both, a narrow range or the extremes, merged in from another histogram), the reset histogram
// then answers exactly like a new one. stddev() sums every non-zero bucket and count_above()
// is probed on both sides of every power of two, so a bucket left over would show.
TEST(Histogram, ResetClearsEveryBucketItUsed) {
  const std::vector<std::vector<int64_t>> cases = {
      {1'000, 1'003, 1'900},
      {-5, -70'000, -1},
      {-3'000'000, 0, 12, 4'000'000'000},
      {kMin, kMax},
      {kMin, -1},
      {0, kMax},
      random_samples(11, 10'000, true),
  };
  const std::vector<int64_t> probe = {-40, 3, 3, 77, 1'000'001};
  std::vector<int64_t> thresholds = {kMin, kMax, 0, -1};
  // Below and at every power of two of either sign: a count left in any bucket shows as a
  // difference at the threshold just under it (count_above scans every bucket, so six
  // thresholds per power cost 38 s under ASan at -O0 for nothing two do not find).
  for (int shift = 0; shift < 63; ++shift) {
    const int64_t v = int64_t{1} << shift;
    for (int64_t t : {v - 1, -v - 1}) thresholds.push_back(t);
  }
  for (int bits : {1, 7, 12}) {
    for (size_t c = 0; c < cases.size(); ++c) {
      for (bool merged : {false, true}) {
        LogLinearHistogram h(bits);
        LogLinearHistogram other(bits);
        for (int64_t v : cases[c]) (merged ? other : h).record(v);
        if (merged) {
          ASSERT_TRUE(h.merge(other));
        }
        h.reset();
        LogLinearHistogram fresh(bits);
        for (int64_t v : probe) {
          h.record(v);
          fresh.record(v);
        }
        EXPECT_EQ(h.summary_json(), fresh.summary_json()) << bits << " " << c;
        EXPECT_EQ(h.stddev(), fresh.stddev()) << bits << " " << c;
        for (int64_t t : thresholds) {
          ASSERT_EQ(h.count_above(t), fresh.count_above(t)) << bits << " " << c << " " << t;
        }
      }
    }
  }
}

TEST(Histogram, RejectsInvalidSubBucketBits) {
  EXPECT_THROW(LogLinearHistogram(0), Failure);
  EXPECT_THROW(LogLinearHistogram(13), Failure);
  EXPECT_NO_THROW(LogLinearHistogram(1));
  EXPECT_NO_THROW(LogLinearHistogram(12));
}

}  // namespace
}  // namespace detwan::common

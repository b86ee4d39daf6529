#include "common/histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "common/status.h"

namespace detwan::common {
namespace {

// -Wpedantic rejects the spelling i128; __extension__ on the alias silences it.
__extension__ typedef __int128 i128;
__extension__ typedef unsigned __int128 u128;

constexpr int kMinSubBucketBits = 1;
constexpr int kMaxSubBucketBits = 12;

// Magnitudes go up to 2^63 (|INT64_MIN|). With S = 2^b sub-buckets, magnitudes below 2S are
// exact and each power-of-two range [2^e, 2^(e+1)) for e in [b+1, 63] adds S buckets:
// (65 - b) * S buckets in all.
size_t bucket_count(int sub_bucket_bits) {
  return static_cast<size_t>(65 - sub_bucket_bits) << sub_bucket_bits;
}

uint64_t magnitude_of(int64_t value) noexcept {
  // Well defined for INT64_MIN: unsigned negation is modular.
  return value < 0 ? 0 - static_cast<uint64_t>(value) : static_cast<uint64_t>(value);
}

int64_t negate_magnitude(uint64_t magnitude) noexcept {
  // -magnitude for magnitude in [0, 2^63]; modular conversion maps 2^63 to INT64_MIN.
  return static_cast<int64_t>(0 - magnitude);
}

}  // namespace

LogLinearHistogram::LogLinearHistogram(int sub_bucket_bits) : sub_bucket_bits_(sub_bucket_bits) {
  if (sub_bucket_bits < kMinSubBucketBits || sub_bucket_bits > kMaxSubBucketBits) {
    throw Failure(Error{ErrorCode::kInvalidArgument,
                        fmt::format("histogram sub_bucket_bits {} out of range [{}, {}]",
                                    sub_bucket_bits, kMinSubBucketBits, kMaxSubBucketBits)});
  }
  positive_.assign(bucket_count(sub_bucket_bits_), 0);
  negative_.assign(bucket_count(sub_bucket_bits_), 0);
}

uint64_t LogLinearHistogram::lowest_of(size_t index) const noexcept {
  const size_t sub_count = size_t{1} << sub_bucket_bits_;
  if (index < 2 * sub_count) return index;
  const size_t shift = (index >> sub_bucket_bits_) - 1;
  const uint64_t mantissa = (index & (sub_count - 1)) + sub_count;
  return mantissa << shift;
}

uint64_t LogLinearHistogram::highest_of(size_t index) const noexcept {
  const size_t sub_count = size_t{1} << sub_bucket_bits_;
  if (index < 2 * sub_count) return index;
  const size_t shift = (index >> sub_bucket_bits_) - 1;
  return lowest_of(index) + ((uint64_t{1} << shift) - 1);  // top bucket ends at 2^64 - 1
}

bool LogLinearHistogram::merge(const LogLinearHistogram& other) noexcept {
  if (other.sub_bucket_bits_ != sub_bucket_bits_) return false;
  if (other.empty_) return true;
  for (size_t i = 0; i < positive_.size(); ++i) positive_[i] += other.positive_[i];
  for (size_t i = 0; i < negative_.size(); ++i) negative_[i] += other.negative_[i];
  if (empty_) {
    min_ = other.min_;
    max_ = other.max_;
    empty_ = false;
  } else {
    min_ = std::min(min_, other.min_);
    max_ = std::max(max_, other.max_);
  }
  count_ += other.count_;
  sum_ = static_cast<i128>(static_cast<u128>(sum_) + static_cast<u128>(other.sum_));
  return true;
}

void LogLinearHistogram::reset() noexcept {
  // Every non-zero bucket lies between the buckets of min_ and max_ (record_n and merge keep
  // them the extremes of all that was counted), so only that range is cleared: a histogram that
  // saw a narrow range of values is reset without touching the rest of its ~120 kB.
  if (!empty_) {
    const auto clear = [](std::vector<uint64_t>& buckets, size_t first, size_t last) {
      std::fill(buckets.begin() + static_cast<std::ptrdiff_t>(first),
                buckets.begin() + static_cast<std::ptrdiff_t>(last) + 1, 0);
    };
    if (max_ >= 0) {
      clear(positive_, index_of(magnitude_of(std::max<int64_t>(min_, 0))),
            index_of(magnitude_of(max_)));
    }
    if (min_ < 0) {
      clear(negative_, index_of(magnitude_of(std::min<int64_t>(max_, -1))),
            index_of(magnitude_of(min_)));
    }
  }
  count_ = 0;
  min_ = 0;
  max_ = 0;
  sum_ = 0;
  empty_ = true;
}

int64_t LogLinearHistogram::min() const noexcept { return empty_ ? 0 : min_; }
int64_t LogLinearHistogram::max() const noexcept { return empty_ ? 0 : max_; }

double LogLinearHistogram::mean() const noexcept {
  if (empty_ || count_ == 0) return 0.0;
  return static_cast<double>(static_cast<long double>(sum_) / static_cast<long double>(count_));
}

double LogLinearHistogram::stddev() const noexcept {
  if (empty_ || count_ == 0) return 0.0;
  const long double avg = static_cast<long double>(mean());
  long double acc = 0.0L;
  auto add = [&](const std::vector<uint64_t>& buckets, long double sign) {
    for (size_t i = 0; i < buckets.size(); ++i) {
      if (buckets[i] == 0) continue;
      const long double mid =
          (static_cast<long double>(lowest_of(i)) + static_cast<long double>(highest_of(i))) / 2.0L;
      const long double d = sign * mid - avg;
      acc += d * d * static_cast<long double>(buckets[i]);
    }
  };
  add(negative_, -1.0L);
  add(positive_, 1.0L);
  return static_cast<double>(std::sqrt(acc / static_cast<long double>(count_)));
}

int64_t LogLinearHistogram::percentile(double q) const noexcept {
  if (empty_ || count_ == 0) return 0;
  if (!(q > 0.0)) return min_;  // also NaN
  if (q >= 1.0) return max_;

  // Rank of the sample we want (1-based): the smallest r with r >= q * count. The relative
  // slack keeps binary rounding from skipping a rank (0.9 * 100 is 90.000000000000002).
  const double exact = q * static_cast<double>(count_);
  auto rank = static_cast<uint64_t>(std::ceil(exact - exact * 1e-12));
  rank = std::clamp<uint64_t>(rank, 1, count_);

  // The answer is the highest value of the bucket holding that rank, so at least q * count
  // samples are <= it; its distance from the true sample is below one bucket width.
  i128 answer = max_;
  uint64_t seen = 0;
  bool found = false;
  for (size_t i = negative_.size(); i-- > 1 && !found;) {  // most negative first
    seen += negative_[i];
    if (seen >= rank) {
      answer = negate_magnitude(lowest_of(i));
      found = true;
    }
  }
  for (size_t i = 0; i < positive_.size() && !found; ++i) {
    seen += positive_[i];
    if (seen >= rank) {
      answer = static_cast<i128>(highest_of(i));
      found = true;
    }
  }
  answer = std::clamp<i128>(answer, min_, max_);
  return static_cast<int64_t>(answer);
}

uint64_t LogLinearHistogram::count_above(int64_t value) const noexcept {
  if (empty_ || value >= max_) return 0;
  if (value < min_) return count_;
  // A bucket counts when its lowest value is above `value`: exact for |v| < 2S, otherwise the
  // bucket holding `value` itself is not counted.
  uint64_t above = 0;
  for (size_t i = 1; i < negative_.size(); ++i) {
    if (negative_[i] != 0 && static_cast<i128>(value) < -static_cast<i128>(highest_of(i))) {
      above += negative_[i];
    }
  }
  for (size_t i = 0; i < positive_.size(); ++i) {
    if (positive_[i] != 0 && static_cast<i128>(value) < static_cast<i128>(lowest_of(i))) {
      above += positive_[i];
    }
  }
  return above;
}

void LogLinearHistogram::counts_at_or_below(std::span<const int64_t> bounds_ascending,
                                            std::span<uint64_t> out) const noexcept {
  std::fill(out.begin(), out.end(), 0);
  if (empty_) return;
  const size_t n = std::min(bounds_ascending.size(), out.size());
  size_t k = 0;
  uint64_t cumulative = 0;
  // Buckets in ascending value order; before a bucket is added, every bound below its lowest
  // value gets the count so far.
  const auto visit = [&](i128 lowest_value, uint64_t samples) {
    while (k < n && static_cast<i128>(bounds_ascending[k]) < lowest_value) out[k++] = cumulative;
    cumulative += samples;
  };
  if (min_ < 0) {
    const size_t first = index_of(magnitude_of(std::min<int64_t>(max_, -1)));
    for (size_t i = index_of(magnitude_of(min_)) + 1; i-- > first;) {
      if (negative_[i] != 0) visit(-static_cast<i128>(highest_of(i)), negative_[i]);
    }
  }
  if (max_ >= 0) {
    const size_t last = index_of(magnitude_of(max_));
    for (size_t i = index_of(magnitude_of(std::max<int64_t>(min_, 0))); i <= last; ++i) {
      if (positive_[i] != 0) visit(static_cast<i128>(lowest_of(i)), positive_[i]);
    }
  }
  while (k < n) out[k++] = cumulative;
  // Exact at the ends: nothing is below min(), everything is at or below max().
  for (size_t b = 0; b < n; ++b) {
    if (bounds_ascending[b] < min_) out[b] = 0;
    if (bounds_ascending[b] >= max_) out[b] = count_;
  }
}

void LogLinearHistogram::nonzero_buckets(std::vector<Bucket>& out) const {
  if (empty_) return;
  if (min_ < 0) {
    const size_t first = index_of(magnitude_of(std::min<int64_t>(max_, -1)));
    for (size_t i = index_of(magnitude_of(min_)) + 1; i-- > first;) {
      if (negative_[i] != 0) out.push_back({-static_cast<int32_t>(i), negative_[i]});
    }
  }
  if (max_ >= 0) {
    const size_t last = index_of(magnitude_of(max_));
    for (size_t i = index_of(magnitude_of(std::max<int64_t>(min_, 0))); i <= last; ++i) {
      if (positive_[i] != 0) out.push_back({static_cast<int32_t>(i), positive_[i]});
    }
  }
}

int64_t LogLinearHistogram::highest_value_of(int32_t key) const noexcept {
  if (key < 0) return negate_magnitude(lowest_of(static_cast<size_t>(-static_cast<int64_t>(key))));
  const uint64_t highest = highest_of(static_cast<size_t>(key));
  return highest > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(highest);
}

int64_t LogLinearHistogram::percentile_of(std::span<const Bucket> ascending,
                                          double q) const noexcept {
  uint64_t total = 0;
  for (const Bucket& b : ascending) total += b.count;
  if (total == 0) return 0;
  const double exact = std::clamp(q, 0.0, 1.0) * static_cast<double>(total);
  auto rank = static_cast<uint64_t>(std::ceil(exact - exact * 1e-12));
  rank = std::clamp<uint64_t>(rank, 1, total);
  uint64_t seen = 0;
  for (const Bucket& b : ascending) {
    seen += b.count;
    if (seen >= rank) return highest_value_of(b.key);
  }
  return highest_value_of(ascending.back().key);
}

size_t LogLinearHistogram::memory_bytes() const noexcept {
  return sizeof(*this) + (positive_.capacity() + negative_.capacity()) * sizeof(uint64_t);
}

std::string LogLinearHistogram::summary_json() const {
  // Mean as an integer rounded to nearest, computed from the exact 128-bit sum.
  int64_t mean_int = 0;
  if (!empty_ && count_ > 0) {
    const auto n = static_cast<i128>(count_);
    i128 quotient = sum_ / n;
    const i128 remainder = sum_ % n;
    if (2 * (remainder < 0 ? -remainder : remainder) >= n) quotient += (sum_ < 0 ? -1 : 1);
    mean_int = static_cast<int64_t>(std::clamp<i128>(quotient, min(), max()));
  }
  return fmt::format(
      "{{\"count\":{},\"min\":{},\"mean\":{},\"p50\":{},\"p90\":{},\"p99\":{},\"p99_9\":{},"
      "\"p99_99\":{},\"p99_999\":{},\"max\":{}}}",
      count_, min(), mean_int, percentile(0.5), percentile(0.9), percentile(0.99),
      percentile(0.999), percentile(0.9999), percentile(0.99999), max());
}

}  // namespace detwan::common

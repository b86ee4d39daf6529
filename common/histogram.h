#pragma once
// Log-linear histogram (HdrHistogram-style): fixed memory chosen at construction, O(1) record,
// mergeable, percentiles up to p99.999 and max. Exact count, min, max and sum; percentiles carry
// a relative error of at most 2^-sub_bucket_bits (default 7 bits: < 0.79 %).
//
// Values are signed int64 (one-way delays with a clock offset can be negative): negative values
// are kept in a mirrored set of buckets, so precision is symmetric around zero.
//
// Threading: not synchronised. One writer; copy or merge into a reader's histogram to publish.
// record() never allocates or throws and is safe on a datapath.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace detwan::common {

class LogLinearHistogram {
 public:
  // sub_bucket_bits in [1, 12]: each power-of-two range is split into 2^sub_bucket_bits linear
  // buckets. Values with |v| < 2^sub_bucket_bits are recorded exactly.
  explicit LogLinearHistogram(int sub_bucket_bits = 7);

  void record(int64_t value) noexcept { record_n(value, 1); }
  // Inline: the dataplane records several delays per packet (docs/benchmarks/dataplane.md,
  // issue 17).
  void record_n(int64_t value, uint64_t count) noexcept {
    if (count == 0) return;
    // Well defined for INT64_MIN: unsigned negation is modular.
    const uint64_t magnitude =
        value < 0 ? 0 - static_cast<uint64_t>(value) : static_cast<uint64_t>(value);
    (value < 0 ? negative_ : positive_)[index_of(magnitude)] += count;
    if (empty_) {
      min_ = value;
      max_ = value;
      empty_ = false;
    } else {
      min_ = std::min(min_, value);
      max_ = std::max(max_, value);
    }
    count_ += count;
    // Modular arithmetic in unsigned 128 bits: no UB even for absurd count * value products.
    sum_ = static_cast<Int128>(static_cast<UInt128>(sum_) +
                               static_cast<UInt128>(static_cast<Int128>(value)) * count);
  }

  // Adds `other` into this one. Both must have the same sub_bucket_bits; returns false (and
  // changes nothing) otherwise.
  [[nodiscard]] bool merge(const LogLinearHistogram& other) noexcept;
  // Back to empty, as constructed. Clears only the buckets between min() and max().
  void reset() noexcept;

  [[nodiscard]] uint64_t count() const noexcept { return count_; }
  [[nodiscard]] int64_t min() const noexcept;    // exact; 0 when empty
  [[nodiscard]] int64_t max() const noexcept;    // exact; 0 when empty
  [[nodiscard]] double mean() const noexcept;    // exact (from the running sum); 0 when empty
  [[nodiscard]] double stddev() const noexcept;  // from bucket midpoints

  // Value at quantile q in [0, 1] (0.99 = p99). Returns a value v such that at least q*count
  // samples are <= v within the bucket precision, clamped to [min(), max()]; q >= 1 returns
  // max() exactly and q <= 0 returns min() exactly. 0 when empty.
  [[nodiscard]] int64_t percentile(double q) const noexcept;

  // Number of samples strictly greater than `value` (bucket precision).
  [[nodiscard]] uint64_t count_above(int64_t value) const noexcept;

  // Cumulative counts at sorted bounds in one pass over the used buckets (a Prometheus
  // histogram's _bucket series): out[k] = samples <= bounds[k], with count_above()'s precision
  // (a bucket counts when its lowest value is <= the bound). out.size() == bounds.size().
  void counts_at_or_below(std::span<const int64_t> bounds_ascending,
                          std::span<uint64_t> out) const noexcept;

  // The used buckets, for a compact copy of the histogram's state (HistogramHistory): `key`
  // orders buckets by value (negative values: minus the magnitude bucket's index, < 0).
  struct Bucket {
    int32_t key = 0;
    uint64_t count = 0;
  };
  // Appends the non-empty buckets in ascending key order. Walks only min()..max()'s buckets.
  void nonzero_buckets(std::vector<Bucket>& out) const;
  // percentile(q) over buckets of this geometry (ascending keys, as nonzero_buckets gives; a
  // difference of two such copies is a histogram of what was recorded in between). 0 if empty.
  [[nodiscard]] int64_t percentile_of(std::span<const Bucket> ascending, double q) const noexcept;
  // The highest value the bucket of `key` holds (its lowest for negative keys): a bucket
  // precision maximum of a copy.
  [[nodiscard]] int64_t highest_value_of(int32_t key) const noexcept;

  [[nodiscard]] int sub_bucket_bits() const noexcept { return sub_bucket_bits_; }
  [[nodiscard]] size_t memory_bytes() const noexcept;

  // {"count":..,"min":..,"mean":..,"p50":..,"p90":..,"p99":..,"p99_9":..,"p99_99":..,
  //  "p99_999":..,"max":..}  (integers, same unit as the recorded values)
  [[nodiscard]] std::string summary_json() const;

 private:
  // index = shift * S + (m >> shift), where shift = max(0, bit_width(m) - 1 - b); the mantissa
  // m >> shift lies in [S, 2S) once shift > 0, so every bucket index is used exactly once.
  [[nodiscard]] size_t index_of(uint64_t magnitude) const noexcept {
    const int width = std::bit_width(magnitude);
    const int shift = std::max(0, width - 1 - sub_bucket_bits_);
    return (static_cast<size_t>(shift) << sub_bucket_bits_) +
           static_cast<size_t>(magnitude >> shift);
  }
  [[nodiscard]] uint64_t lowest_of(size_t index) const noexcept;
  [[nodiscard]] uint64_t highest_of(size_t index) const noexcept;

  int sub_bucket_bits_;
  std::vector<uint64_t> positive_;  // magnitude buckets for values >= 0
  std::vector<uint64_t> negative_;  // magnitude buckets for values < 0 (stores -value)
  uint64_t count_ = 0;
  int64_t min_ = 0;
  int64_t max_ = 0;
  // __extension__: no -Wpedantic error for the 128-bit types.
  __extension__ typedef __int128 Int128;
  __extension__ typedef unsigned __int128 UInt128;
  Int128 sum_ = 0;  // exact running sum
  bool empty_ = true;
};

}  // namespace detwan::common

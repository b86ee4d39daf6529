#include "common/histogram_history.h"

#include <algorithm>

namespace detwan::common {
namespace {

// Whether every bucket of `copy` is in `now` with at least its count (both ascending by key):
// `now` is the same histogram later, not reset since.
bool covers(const std::vector<LogLinearHistogram::Bucket>& now,
            const std::vector<LogLinearHistogram::Bucket>& copy) {
  size_t i = 0;
  for (const auto& c : copy) {
    while (i < now.size() && now[i].key < c.key) ++i;
    if (i == now.size() || now[i].key != c.key || now[i].count < c.count) return false;
  }
  return true;
}

}  // namespace

HistogramHistory::HistogramHistory(int64_t tick_ns, int64_t horizon_ns)
    : tick_ns_(std::max<int64_t>(tick_ns, 1)), horizon_ns_(std::max<int64_t>(horizon_ns, 0)) {}

void HistogramHistory::snapshot(const LogLinearHistogram& h, int64_t now_ns) {
  Copy copy;
  copy.at_ns = now_ns;
  copy.count = h.count();
  h.nonzero_buckets(copy.buckets);
  // The last copy not within the histogram now: it was reset; the old copies mean nothing.
  if (!copies_.empty() && !covers(copy.buckets, copies_.back().buckets)) copies_.clear();
  copies_.push_back(std::move(copy));
  // Keep the newest copy at least horizon_ns old (a window of the horizon needs it), drop the
  // ones before it.
  while (copies_.size() >= 2 && now_ns - copies_[1].at_ns >= horizon_ns_) copies_.pop_front();
}

HistogramWindow HistogramHistory::window(const LogLinearHistogram& current, int64_t window_ns,
                                         int64_t now_ns) const {
  HistogramWindow w;
  w.window_ns = window_ns;
  // The newest copy taken at least window_ns ago; else the oldest one.
  const Copy* base = nullptr;
  for (auto it = copies_.rbegin(); it != copies_.rend(); ++it) {
    if (now_ns - it->at_ns >= window_ns) {
      base = &*it;
      break;
    }
  }
  if (base == nullptr && !copies_.empty()) base = &copies_.front();
  if (base != nullptr && base->count > current.count()) base = nullptr;  // reset since
  std::vector<LogLinearHistogram::Bucket> now_buckets;
  current.nonzero_buckets(now_buckets);
  std::vector<LogLinearHistogram::Bucket> delta;
  if (base == nullptr) {
    delta = std::move(now_buckets);
    w.span_ns = 0;  // no copy yet: everything so far, for an unknown span
  } else {
    w.span_ns = now_ns - base->at_ns;
    if (!covers(now_buckets, base->buckets)) {
      // A bucket of the copy above the histogram's own: the histogram was reset since (and has
      // counted past the copy's total again). The copy is of another life: everything so far.
      delta = std::move(now_buckets);
      w.span_ns = 0;
    } else {
      // Both ascending by key: a merge that keeps what was added since the copy.
      size_t j = 0;
      for (const auto& b : now_buckets) {
        while (j < base->buckets.size() && base->buckets[j].key < b.key) ++j;
        const uint64_t before =
            j < base->buckets.size() && base->buckets[j].key == b.key ? base->buckets[j].count : 0;
        if (b.count > before) delta.push_back({b.key, b.count - before});
      }
    }
  }
  for (const auto& b : delta) w.count += b.count;
  if (w.count == 0) return w;
  // Bucket values, kept within what the histogram has seen at all.
  const auto clamp = [&](int64_t v) { return std::clamp(v, current.min(), current.max()); };
  w.p50 = clamp(current.percentile_of(delta, 0.5));
  w.p90 = clamp(current.percentile_of(delta, 0.9));
  w.p99 = clamp(current.percentile_of(delta, 0.99));
  w.p99_9 = clamp(current.percentile_of(delta, 0.999));
  w.max = clamp(current.highest_value_of(delta.back().key));
  return w;
}

size_t HistogramHistory::memory_bytes() const noexcept {
  size_t bytes = sizeof(*this);
  for (const Copy& c : copies_) {
    bytes += sizeof(Copy) + c.buckets.capacity() * sizeof(LogLinearHistogram::Bucket);
  }
  return bytes;
}

}  // namespace detwan::common

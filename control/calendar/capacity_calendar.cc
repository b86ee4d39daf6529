#include "control/calendar/capacity_calendar.h"

#include <algorithm>

namespace detwan::control::calendar {

size_t CapacityCalendar::upper(int64_t t_ns) const {
  return static_cast<size_t>(std::upper_bound(levels_.begin(), levels_.end(), t_ns,
                                              [](int64_t t, const std::pair<int64_t, uint64_t>& b) {
                                                return t < b.first;
                                              }) -
                             levels_.begin());
}

uint64_t CapacityCalendar::at_bps(int64_t t_ns) const {
  const size_t i = upper(t_ns);
  return i == 0 ? 0 : levels_[i - 1].second;
}

uint64_t CapacityCalendar::peak_bps(int64_t start_ns, int64_t end_ns) const {
  if (end_ns <= start_ns) return 0;
  size_t i = upper(start_ns);
  uint64_t peak = i == 0 ? 0 : levels_[i - 1].second;
  for (; i < levels_.size() && levels_[i].first < end_ns; ++i)
    peak = std::max(peak, levels_[i].second);
  return peak;
}

size_t CapacityCalendar::split_at(int64_t t_ns) {
  const size_t i = upper(t_ns);
  if (i > 0 && levels_[i - 1].first == t_ns) return i - 1;
  const uint64_t level = i == 0 ? 0 : levels_[i - 1].second;
  levels_.insert(levels_.begin() + static_cast<std::ptrdiff_t>(i), {t_ns, level});
  return i;
}

void CapacityCalendar::merge_around(int64_t t_ns) {
  const size_t i = upper(t_ns);
  if (i == 0 || levels_[i - 1].first != t_ns) return;
  const uint64_t before = i - 1 == 0 ? 0 : levels_[i - 2].second;
  if (levels_[i - 1].second == before)
    levels_.erase(levels_.begin() + static_cast<std::ptrdiff_t>(i - 1));
}

void CapacityCalendar::add(int64_t start_ns, int64_t end_ns, uint64_t rate_bps, bool subtract) {
  if (end_ns <= start_ns || rate_bps == 0) return;
  split_at(start_ns);
  split_at(end_ns);
  for (size_t i = upper(start_ns) - 1; i < levels_.size() && levels_[i].first < end_ns; ++i) {
    uint64_t& level = levels_[i].second;
    level = subtract ? (level >= rate_bps ? level - rate_bps : 0) : level + rate_bps;
  }
  merge_around(end_ns);
  merge_around(start_ns);
}

void CapacityCalendar::book(int64_t start_ns, int64_t end_ns, uint64_t rate_bps) {
  add(start_ns, end_ns, rate_bps, false);
}

void CapacityCalendar::unbook(int64_t start_ns, int64_t end_ns, uint64_t rate_bps) {
  add(start_ns, end_ns, rate_bps, true);
}

}  // namespace detwan::control::calendar

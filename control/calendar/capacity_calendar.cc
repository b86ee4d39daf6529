#include "control/calendar/capacity_calendar.h"

#include <algorithm>
#include <iterator>

namespace detwan::control::calendar {

uint64_t CapacityCalendar::at_bps(int64_t t_ns) const {
  auto it = levels_.upper_bound(t_ns);
  if (it == levels_.begin()) return 0;
  return std::prev(it)->second;
}

uint64_t CapacityCalendar::peak_bps(int64_t start_ns, int64_t end_ns) const {
  if (end_ns <= start_ns) return 0;
  uint64_t peak = at_bps(start_ns);
  for (auto it = levels_.upper_bound(start_ns); it != levels_.end() && it->first < end_ns; ++it) {
    peak = std::max(peak, it->second);
  }
  return peak;
}

void CapacityCalendar::split_at(int64_t t_ns) {
  if (levels_.count(t_ns) != 0) return;
  levels_.emplace(t_ns, at_bps(t_ns));
}

void CapacityCalendar::merge_around(int64_t t_ns) {
  auto it = levels_.find(t_ns);
  if (it == levels_.end()) return;
  const uint64_t before = it == levels_.begin() ? 0 : std::prev(it)->second;
  if (it->second == before) levels_.erase(it);
}

void CapacityCalendar::book(int64_t start_ns, int64_t end_ns, uint64_t rate_bps) {
  if (end_ns <= start_ns || rate_bps == 0) return;
  split_at(start_ns);
  split_at(end_ns);
  for (auto it = levels_.find(start_ns); it != levels_.end() && it->first < end_ns; ++it) {
    it->second += rate_bps;
  }
  merge_around(end_ns);
  merge_around(start_ns);
}

void CapacityCalendar::unbook(int64_t start_ns, int64_t end_ns, uint64_t rate_bps) {
  if (end_ns <= start_ns || rate_bps == 0) return;
  split_at(start_ns);
  split_at(end_ns);
  for (auto it = levels_.find(start_ns); it != levels_.end() && it->first < end_ns; ++it) {
    it->second = it->second >= rate_bps ? it->second - rate_bps : 0;
  }
  merge_around(end_ns);
  merge_around(start_ns);
}

}  // namespace detwan::control::calendar

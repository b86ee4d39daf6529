#include "control/calendar/capacity_calendar.h"

#include <algorithm>
#include <iterator>

namespace detwan::control::calendar {

uint64_t CapacityCalendar::level_at(Levels::const_iterator upper) const {
  return upper == levels_.begin() ? 0 : std::prev(upper)->second;
}

uint64_t CapacityCalendar::at_bps(int64_t t_ns) const {
  return level_at(levels_.upper_bound(t_ns));
}

uint64_t CapacityCalendar::peak_bps(int64_t start_ns, int64_t end_ns) const {
  if (end_ns <= start_ns) return 0;
  auto it = levels_.upper_bound(start_ns);
  uint64_t peak = level_at(it);
  for (; it != levels_.end() && it->first < end_ns; ++it) peak = std::max(peak, it->second);
  return peak;
}

CapacityCalendar::Levels::iterator CapacityCalendar::split_at(int64_t t_ns) {
  const auto upper = levels_.upper_bound(t_ns);
  if (upper != levels_.begin() && std::prev(upper)->first == t_ns) return std::prev(upper);
  return levels_.emplace_hint(upper, t_ns, level_at(upper));
}

void CapacityCalendar::merge_at(Levels::iterator it) {
  const uint64_t before = level_at(it);
  if (it->second == before) levels_.erase(it);
}

void CapacityCalendar::add(int64_t start_ns, int64_t end_ns, uint64_t rate_bps, bool subtract) {
  if (end_ns <= start_ns || rate_bps == 0) return;
  const auto first = split_at(start_ns);
  const auto last = split_at(end_ns);
  for (auto it = first; it != last; ++it) {
    uint64_t& level = it->second;
    level = subtract ? (level >= rate_bps ? level - rate_bps : 0) : level + rate_bps;
    if (!subtract) max_bound_bps_ = std::max(max_bound_bps_, level);
  }
  if (subtract) max_bound_stale_ = true;
  merge_at(last);
  merge_at(first);
}

void CapacityCalendar::book(int64_t start_ns, int64_t end_ns, uint64_t rate_bps) {
  add(start_ns, end_ns, rate_bps, false);
}

void CapacityCalendar::unbook(int64_t start_ns, int64_t end_ns, uint64_t rate_bps) {
  add(start_ns, end_ns, rate_bps, true);
}

void CapacityCalendar::assign(std::vector<Window>& windows) {
  // Every boundary as (time, +rate or -rate), in time order; the level after each distinct
  // time is a breakpoint when it differs from the one before.
  struct Change {
    int64_t t_ns;
    uint64_t rate_bps;
    bool up;
  };
  std::vector<Change> changes;
  changes.reserve(2 * windows.size());
  for (const Window& w : windows) {
    if (w.end_ns <= w.start_ns || w.rate_bps == 0) continue;
    changes.push_back({w.start_ns, w.rate_bps, true});
    changes.push_back({w.end_ns, w.rate_bps, false});
  }
  std::sort(changes.begin(), changes.end(),
            [](const Change& a, const Change& b) { return a.t_ns < b.t_ns; });
  levels_.clear();
  max_bound_bps_ = 0;
  max_bound_stale_ = false;
  uint64_t level = 0;
  uint64_t last = 0;
  for (size_t i = 0; i < changes.size();) {
    const int64_t t = changes[i].t_ns;
    for (; i < changes.size() && changes[i].t_ns == t; ++i) {
      level = changes[i].up ? level + changes[i].rate_bps : level - changes[i].rate_bps;
    }
    if (level != last) levels_.emplace_hint(levels_.end(), t, level);
    last = level;
    max_bound_bps_ = std::max(max_bound_bps_, level);
  }
}

void CapacityCalendar::tighten_max_bound() const {
  if (!max_bound_stale_) return;
  max_bound_bps_ = 0;
  for (const auto& [t, level] : levels_) max_bound_bps_ = std::max(max_bound_bps_, level);
  max_bound_stale_ = false;
}

}  // namespace detwan::control::calendar

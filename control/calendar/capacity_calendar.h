#pragma once
// Reserved capacity of one link direction over time: a step function kept as a sorted map of
// breakpoints, so that "the most reserved at any instant of [start, end)" and booking a rate
// over [start, end) cost O(log n + k) for k breakpoints inside the window.
//
// Times are Unix ns (CLOCK_REALTIME) and windows half-open [start, end). Rates are bit/s.
// Not thread-safe: the agent's core owns every calendar under its one lock.
#include <cstdint>
#include <cstddef>
#include <map>

namespace detwan::control::calendar {

class CapacityCalendar {
 public:
  // The highest reserved rate at any instant of [start_ns, end_ns); 0 when nothing is booked.
  [[nodiscard]] uint64_t peak_bps(int64_t start_ns, int64_t end_ns) const;
  // The reserved rate at t_ns.
  [[nodiscard]] uint64_t at_bps(int64_t t_ns) const;
  // Adds rate_bps over [start_ns, end_ns). start < end.
  void book(int64_t start_ns, int64_t end_ns, uint64_t rate_bps);
  // Takes back exactly what book() added (same window and rate).
  void unbook(int64_t start_ns, int64_t end_ns, uint64_t rate_bps);
  // Instants at which the reserved rate changes, in (after_ns, ...), at most `limit` of them
  // (the "as soon as possible" search tries these as start times).
  template <typename F>
  void for_each_change_after(int64_t after_ns, F&& f) const {
    for (auto it = levels_.upper_bound(after_ns); it != levels_.end(); ++it) {
      if (!f(it->first)) return;
    }
  }
  [[nodiscard]] size_t breakpoints() const noexcept { return levels_.size(); }

 private:
  void split_at(int64_t t_ns);
  void merge_around(int64_t t_ns);
  // Level from each key until the next key; before the first key the level is 0.
  std::map<int64_t, uint64_t> levels_;
};

}  // namespace detwan::control::calendar

#pragma once
// Reserved capacity of one link direction over time: a step function kept as a sorted vector of
// breakpoints (time, level from then on), so that "the most reserved at any instant of
// [start, end)" and booking a rate over [start, end) cost a binary search plus a scan of the
// breakpoints inside the window, over contiguous memory (path computation asks this for every
// link it relaxes; a node-based map made it cache-miss bound).
//
// Times are Unix ns (CLOCK_REALTIME) and windows half-open [start, end). Rates are bit/s.
// Not thread-safe: the agent's core owns every calendar under its one lock.
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

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
  // Calls f(t) for each instant after after_ns at which the reserved rate changes, in order,
  // until f returns false.
  template <typename F>
  void for_each_change_after(int64_t after_ns, F&& f) const {
    for (size_t i = upper(after_ns); i < levels_.size(); ++i) {
      if (!f(levels_[i].first)) return;
    }
  }
  [[nodiscard]] size_t breakpoints() const noexcept { return levels_.size(); }

 private:
  // Index of the first breakpoint after t_ns.
  [[nodiscard]] size_t upper(int64_t t_ns) const;
  size_t split_at(int64_t t_ns);  // index of the breakpoint at t_ns (made if needed)
  void merge_around(int64_t t_ns);
  void add(int64_t start_ns, int64_t end_ns, uint64_t rate_bps, bool subtract);
  // Level from each time until the next breakpoint; before the first one the level is 0.
  std::vector<std::pair<int64_t, uint64_t>> levels_;
};

}  // namespace detwan::control::calendar

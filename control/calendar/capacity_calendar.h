#pragma once
// Reserved capacity of one link direction over time: a step function kept as an ordered tree of
// breakpoints (time -> level from then on), so that "the most reserved at any instant of
// [start, end)" costs a tree descent plus a walk over the breakpoints inside the window, and
// booking a rate over [start, end) a descent plus the breakpoints it covers: O(log n + k) in the
// number n of breakpoints, whatever the number of reservations elsewhere on the time axis. (It
// was a sorted vector, whose every insertion moved the tail: at 100,000 reservations the hot
// links' inserts and the startup's replay were dominated by memmove.)
//
// Times are Unix ns (CLOCK_REALTIME) and windows half-open [start, end). Rates are bit/s.
// Not thread-safe: the agent's core owns every calendar under its one lock.
#include <cstddef>
#include <cstdint>
#include <map>
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
  // Many windows at once into an empty calendar (an agent's startup): the same levels as book()
  // of each, built by one sort and a sweep instead of a descent per boundary. Takes the vector's
  // contents (it is sorted in place).
  struct Window {
    int64_t start_ns;
    int64_t end_ns;
    uint64_t rate_bps;
  };
  void assign(std::vector<Window>& windows);
  // Calls f(t) for each instant after after_ns at which the reserved rate changes, in order,
  // until f returns false.
  template <typename F>
  void for_each_change_after(int64_t after_ns, F&& f) const {
    for (auto it = levels_.upper_bound(after_ns); it != levels_.end(); ++it) {
      if (!f(it->first)) return;
    }
  }
  [[nodiscard]] size_t breakpoints() const noexcept { return levels_.size(); }
  // An upper bound of the highest level at any time, O(1) (exact after book() and assign();
  // after unbook() it may stay above until the next exact recount, which a lookup makes when
  // the bound does not already answer it): "would rate_bps fit whatever the window" without a
  // descent -- most links of a large network are far from full.
  [[nodiscard]] uint64_t max_bound_bps() const noexcept { return max_bound_bps_; }
  // Recounts the bound exactly (a walk over every breakpoint) when unbook() left it stale.
  void tighten_max_bound() const;

 private:
  using Levels = std::map<int64_t, uint64_t>;
  // The level in force at t_ns (0 before the first breakpoint).
  [[nodiscard]] uint64_t level_at(Levels::const_iterator upper) const;
  Levels::iterator split_at(int64_t t_ns);  // the breakpoint at t_ns (made if needed)
  void merge_at(Levels::iterator it);       // drops it when it changes nothing
  void add(int64_t start_ns, int64_t end_ns, uint64_t rate_bps, bool subtract);
  // Level from each time until the next breakpoint; before the first one the level is 0.
  Levels levels_;
  mutable uint64_t max_bound_bps_ = 0;
  mutable bool max_bound_stale_ = false;  // an unbook since the last exact count
};

}  // namespace detwan::control::calendar

// Per-packet queries of the gate control list: no allocation, no exceptions.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "dataplane/sched/gate_control_list.h"

namespace detwan::dataplane::sched {

OwnerIndex GateControlList::find_owner(uint32_t tunnel_id) const noexcept {
  const auto it = std::lower_bound(tunnel_ids_.begin(), tunnel_ids_.end(), tunnel_id);
  if (it == tunnel_ids_.end() || *it != tunnel_id) return kNoOwner;
  return static_cast<OwnerIndex>(it - tunnel_ids_.begin());
}

SlotPosition GateControlList::position_at(int64_t t_ns) const noexcept {
  const int64_t since_base = t_ns - config_.base_time_ns;
  const int64_t cycle = floor_div(since_base, config_.cycle_ns);
  const int64_t offset = since_base - cycle * config_.cycle_ns;
  return SlotPosition{cycle, static_cast<uint32_t>(offset / slot_ns_), offset % slot_ns_};
}

Window GateControlList::window_from(const Owner& owner, int64_t first_cycle,
                                    uint64_t i) const noexcept {
  const uint64_t n = owner.windows.size();
  const CycleWindow& w = owner.windows[i % n];
  const int64_t cycle = first_cycle + static_cast<int64_t>(i / n);
  const int64_t start = config_.base_time_ns + cycle * config_.cycle_ns + w.start_offset_ns;
  return Window{start, start + w.length_ns, start + w.length_ns - config_.guard_ns};
}

// Windows numbered from cycle first_cycle on have increasing ends; the first ending after t_ns
// lies among the 3n windows of cycles first_cycle .. first_cycle + 2 when first_cycle is the
// cycle before t_ns (a window of the previous cycle may wrap past t_ns).
uint64_t GateControlList::first_window_ending_after(const Owner& owner, int64_t first_cycle,
                                                    int64_t t_ns) const noexcept {
  uint64_t lo = 0;
  uint64_t hi = 3 * owner.windows.size();
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (window_from(owner, first_cycle, mid).end_ns > t_ns) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

bool GateControlList::find_departure(OwnerIndex owner_index, uint32_t bytes, LinkTime earliest,
                                     Departure* out, Window* window) const noexcept {
  if (owner_index >= owners_.size() || bytes == 0 || bytes > config_.max_frame_bytes) return false;
  const Owner& owner = owners_[owner_index];
  const uint64_t bits = uint64_t{bytes} * 8;
  if (owner.always_open) {
    *out = Departure{earliest, add_bits(earliest, bits, config_.line_rate_bps),
                     std::numeric_limits<int64_t>::max()};
    if (window != nullptr) {
      *window = Window{std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                       std::numeric_limits<int64_t>::max()};
    }
    return true;
  }
  const uint64_t n = owner.windows.size();
  if (n == 0) return false;
  const int64_t first_cycle = cycle_at(earliest.ns) - 1;
  const uint64_t first = first_window_ending_after(owner, first_cycle, earliest.ns);
  // The window holding `earliest` may be too short for the rest of this frame; any frame that
  // fits some window fits one of the next n (one full cycle of windows).
  for (uint64_t i = first; i <= first + n; ++i) {
    const Window w = window_from(owner, first_cycle, i);
    const LinkTime start = std::max(earliest, LinkTime::at(w.start_ns));
    const LinkTime end = add_bits(start, bits, config_.line_rate_bps);
    if (end <= LinkTime::at(w.usable_end_ns)) {
      *out = Departure{start, end, w.usable_end_ns};
      if (window != nullptr) *window = w;
      return true;
    }
  }
  return false;
}

int64_t GateControlList::earliest_departure_ns(OwnerIndex owner, uint32_t bytes,
                                               int64_t t_ns) const noexcept {
  Departure departure;
  if (!find_departure(owner, bytes, LinkTime::at(t_ns), &departure)) return kNever;
  return departure.start.ceil_ns();
}

bool GateControlList::window_at(OwnerIndex owner_index, int64_t t_ns, Window* out) const noexcept {
  if (owner_index >= owners_.size()) return false;
  const Owner& owner = owners_[owner_index];
  if (owner.always_open) {
    *out = Window{std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                  std::numeric_limits<int64_t>::max()};
    return true;
  }
  if (owner.windows.empty()) return false;
  const int64_t first_cycle = cycle_at(t_ns) - 1;
  const Window w =
      window_from(owner, first_cycle, first_window_ending_after(owner, first_cycle, t_ns));
  if (w.start_ns > t_ns) return false;
  *out = w;
  return true;
}

}  // namespace detwan::dataplane::sched

#include "control/calendar/slot_calendar.h"

#include <algorithm>
#include <utility>

#include "common/link_time.h"

namespace detwan::control::calendar {
namespace {

using Uint128 = common::LinkUint128;

// Maximal circular runs of the set bits of `owned`: (start, length).
std::vector<std::pair<uint32_t, uint32_t>> runs_of(const std::vector<bool>& owned) {
  const auto n = static_cast<uint32_t>(owned.size());
  std::vector<std::pair<uint32_t, uint32_t>> runs;
  uint32_t first = 0;  // a slot whose predecessor differs
  while (first < n && owned[first] == owned[(first + n - 1) % n]) ++first;
  if (first == n) {
    if (n > 0 && owned[0]) runs.emplace_back(0, n);
    return runs;
  }
  uint32_t i = 0;
  while (i < n) {
    const uint32_t start = (first + i) % n;
    const bool value = owned[start];
    uint32_t length = 0;
    while (i < n && owned[(first + i) % n] == value) {
      ++length;
      ++i;
    }
    if (value) runs.emplace_back(start, length);
  }
  return runs;
}

std::vector<bool> bits_of(const SlotGeometry& g, const std::vector<uint32_t>& slots) {
  std::vector<bool> owned(g.slot_count, false);
  for (const uint32_t s : slots) {
    if (s < g.slot_count) owned[s] = true;
  }
  return owned;
}

}  // namespace

int64_t SlotGeometry::max_frame_ns() const noexcept {
  return line_rate_bps == 0
             ? 0
             : common::ceil_serialisation_ns(uint64_t{max_frame_bytes} * 8, line_rate_bps);
}

uint64_t nominal_rate_bps(const SlotGeometry& g, size_t slot_count) {
  return static_cast<uint64_t>(static_cast<Uint128>(slot_count) * g.line_rate_bps / g.slot_count);
}

uint64_t guaranteed_rate_bps(const SlotGeometry& g, const std::vector<uint32_t>& slots) {
  const auto runs = runs_of(bits_of(g, slots));
  if (runs.size() == 1 && runs[0].second == g.slot_count) return g.line_rate_bps;
  Uint128 usable_ns = 0;
  for (const auto& [start, length] : runs) {
    const int64_t usable =
        static_cast<int64_t>(length) * g.slot_ns() - g.guard_ns - g.max_frame_ns();
    if (usable > 0) usable_ns += static_cast<uint64_t>(usable);
  }
  return static_cast<uint64_t>(usable_ns * g.line_rate_bps / static_cast<uint64_t>(g.cycle_ns));
}

int64_t service_latency_ns(const SlotGeometry& g, const std::vector<uint32_t>& slots) {
  const auto runs = runs_of(bits_of(g, slots));
  if (runs.size() == 1 && runs[0].second == g.slot_count) return 0;
  int64_t shortest = -1;
  for (const auto& [start, length] : runs) {
    const int64_t usable =
        static_cast<int64_t>(length) * g.slot_ns() - g.guard_ns - g.max_frame_ns();
    if (usable > 0 && (shortest < 0 || usable < shortest)) shortest = usable;
  }
  return shortest < 0 ? g.cycle_ns : g.cycle_ns - shortest;
}

std::vector<bool> SlotCalendar::free_slots(int64_t start_ns, int64_t end_ns,
                                           uint64_t ignore_key) const {
  std::vector<bool> free(geometry_.slot_count, true);
  for (const Booking& b : bookings_) {
    if (b.key == ignore_key && ignore_key != 0) continue;
    if (b.end_ns <= start_ns || end_ns <= b.start_ns) continue;
    for (const uint32_t s : b.slots) free[s] = false;
  }
  return free;
}

uint32_t SlotCalendar::booked_at(int64_t t_ns) const {
  std::vector<bool> used(geometry_.slot_count, false);
  for (const Booking& b : bookings_) {
    if (b.start_ns <= t_ns && t_ns < b.end_ns) {
      for (const uint32_t s : b.slots) used[s] = true;
    }
  }
  return static_cast<uint32_t>(std::count(used.begin(), used.end(), true));
}

std::optional<std::vector<uint32_t>> SlotCalendar::plan(
    uint64_t rate_bps, int64_t start_ns, int64_t end_ns, uint64_t ignore_key,
    const std::vector<uint32_t>* preferred) const {
  const SlotGeometry& g = geometry_;
  const std::vector<bool> free = free_slots(start_ns, end_ns, ignore_key);
  const auto used_now = static_cast<uint32_t>(std::count(free.begin(), free.end(), false));
  // The reservable share caps the slots booked at once; with the window's peak usage unknown
  // per instant, the union over the window is the conservative count.
  const uint32_t budget = g.reservable_slots > used_now ? g.reservable_slots - used_now : 0;
  auto sufficient = [&](const std::vector<uint32_t>& slots) {
    return nominal_rate_bps(g, slots.size()) >= rate_bps &&
           guaranteed_rate_bps(g, slots) >= rate_bps;
  };
  if (preferred != nullptr && !preferred->empty() && preferred->size() <= budget) {
    bool all_free = true;
    for (const uint32_t s : *preferred) all_free = all_free && s < g.slot_count && free[s];
    if (all_free && sufficient(*preferred)) return *preferred;
  }
  // Candidate 1: one contiguous run (one guard band per cycle). Every run of L slots carries the
  // same rate, so find the shortest sufficient L, then the first free run that long (circular).
  const uint32_t limit = std::min(budget, g.slot_count);
  // One run of L slots carries (L * slot - guard - frame) * line / cycle (all S: the line rate),
  // the same as guaranteed_rate_bps() of such a run, without building the set.
  auto run_carries = [&](uint32_t length) {
    if (nominal_rate_bps(g, length) < rate_bps) return false;
    if (length == g.slot_count) return g.line_rate_bps >= rate_bps;
    const int64_t usable =
        static_cast<int64_t>(length) * g.slot_ns() - g.guard_ns - g.max_frame_ns();
    if (usable <= 0) return false;
    return static_cast<uint64_t>(static_cast<Uint128>(usable) * g.line_rate_bps /
                                 static_cast<uint64_t>(g.cycle_ns)) >= rate_bps;
  };
  uint32_t needed = 0;
  for (uint32_t lo = 1, hi = limit; lo <= hi;) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (run_carries(mid)) {
      needed = mid;
      hi = mid - 1;
    } else {
      lo = mid + 1;
    }
  }
  if (needed > 0) {
    auto runs = runs_of(free);
    std::sort(runs.begin(), runs.end());
    for (const auto& [start, length] : runs) {
      if (length < needed) continue;
      std::vector<uint32_t> slots;
      for (uint32_t k = 0; k < needed; ++k) slots.push_back((start + k) % g.slot_count);
      std::sort(slots.begin(), slots.end());
      return slots;
    }
  }
  // Candidate 2: the free runs, longest first, taken whole until sufficient.
  std::vector<std::pair<uint32_t, uint32_t>> runs = runs_of(free);
  std::sort(runs.begin(), runs.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<uint32_t> slots;
  for (const auto& [start, length] : runs) {
    for (uint32_t k = 0; k < length; ++k) {
      if (slots.size() >= budget) return std::nullopt;
      slots.push_back((start + k) % g.slot_count);
      std::vector<uint32_t> sorted = slots;
      std::sort(sorted.begin(), sorted.end());
      if (sufficient(sorted)) return sorted;
    }
  }
  return std::nullopt;
}

void SlotCalendar::book(uint64_t key, int64_t start_ns, int64_t end_ns,
                        std::vector<uint32_t> slots) {
  // A slot beyond the port's count cannot be booked (callers check: reservation::booking_of);
  // drop it rather than index past the end later.
  std::erase_if(slots, [this](uint32_t s) { return s >= geometry_.slot_count; });
  bookings_.push_back(Booking{key, start_ns, end_ns, std::move(slots)});
}

std::optional<std::pair<uint32_t, uint64_t>> SlotCalendar::shared_slot(uint64_t key) const {
  for (const Booking& mine : bookings_) {
    if (mine.key != key) continue;
    std::vector<bool> taken(geometry_.slot_count, false);
    for (const uint32_t s : mine.slots) taken[s] = true;
    for (const Booking& other : bookings_) {
      if (other.key == key || other.end_ns <= mine.start_ns || mine.end_ns <= other.start_ns)
        continue;
      for (const uint32_t s : other.slots) {
        if (taken[s]) return std::pair{s, other.key};
      }
    }
  }
  return std::nullopt;
}

void SlotCalendar::unbook(uint64_t key) {
  std::erase_if(bookings_, [key](const Booking& b) { return b.key == key; });
}

}  // namespace detwan::control::calendar

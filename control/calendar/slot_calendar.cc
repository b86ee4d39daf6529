#include "control/calendar/slot_calendar.h"

#include <algorithm>
#include <bit>
#include <iterator>
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

SlotCalendar::Levels::iterator SlotCalendar::split_at(int64_t t_ns) {
  const auto upper = levels_.upper_bound(t_ns);
  if (upper != levels_.begin() && std::prev(upper)->first == t_ns) return std::prev(upper);
  // The level in force until now (none before the first breakpoint).
  Bits level = upper == levels_.begin() ? Bits(words_, 0) : std::prev(upper)->second;
  return levels_.emplace_hint(upper, t_ns, std::move(level));
}

void SlotCalendar::merge_at(Levels::iterator it) {
  const bool same = it == levels_.begin()
                        ? std::all_of(it->second.begin(), it->second.end(),
                                      [](uint64_t w) { return w == 0; })
                        : it->second == std::prev(it)->second;
  if (same) levels_.erase(it);
}

bool SlotCalendar::apply(const Booking& b, bool set) {
  if (b.slots.empty() || b.end_ns <= b.start_ns) return false;
  const auto first = split_at(b.start_ns);
  const auto last = split_at(b.end_ns);
  bool taken = false;
  for (auto it = first; it != last; ++it) {
    Bits& level = it->second;
    for (const uint32_t s : b.slots) {
      const uint64_t mask = uint64_t{1} << (s % 64);
      taken = taken || (set && (level[s / 64] & mask) != 0);
      level[s / 64] = set ? level[s / 64] | mask : level[s / 64] & ~mask;
    }
  }
  merge_at(last);
  merge_at(first);
  return taken;
}

void SlotCalendar::rebuild() {
  levels_.clear();
  for (const auto& [key, list] : by_key_) {
    for (const Booking& b : list) apply(b, true);
  }
}

bool SlotCalendar::involved(uint64_t key) const {
  return std::any_of(shared_.begin(), shared_.end(),
                     [key](const Shared& s) { return s.key == key; });
}

std::vector<bool> SlotCalendar::free_slots(int64_t start_ns, int64_t end_ns,
                                           uint64_t ignore_key) const {
  const auto own = ignore_key == 0 ? by_key_.end() : by_key_.find(ignore_key);
  if (own != by_key_.end() && (own->second.size() > 1 || involved(ignore_key))) {
    return free_slots_by_scan(start_ns, end_ns, ignore_key);
  }
  std::vector<uint64_t> used(words_, 0);
  Bits level;
  // The level in force at start_ns, then every level that begins inside the window.
  auto it = levels_.upper_bound(start_ns);
  if (it != levels_.begin()) --it;
  for (; it != levels_.end(); ++it) {
    if (it->first > start_ns && it->first >= end_ns) break;
    const auto next = std::next(it);
    const int64_t from = std::max(it->first, start_ns);
    const int64_t to = next != levels_.end() ? std::min(next->first, end_ns) : end_ns;
    level = it->second;
    // A level is constant: while a booking of ours covers all of the level's part of the
    // window its slots are its own (no one else's), else they are someone else's there too.
    if (own != by_key_.end()) {
      for (const Booking& b : own->second) {
        if (b.start_ns > from || to > b.end_ns) continue;
        for (const uint32_t s : b.slots) level[s / 64] &= ~(uint64_t{1} << (s % 64));
      }
    }
    for (size_t w = 0; w < words_; ++w) used[w] |= level[w];
  }
  std::vector<bool> free(geometry_.slot_count, true);
  for (uint32_t s = 0; s < geometry_.slot_count; ++s) {
    if ((used[s / 64] >> (s % 64)) & 1) free[s] = false;
  }
  return free;
}

uint32_t SlotCalendar::booked_at(int64_t t_ns) const {
  if (!shared_.empty()) return booked_at_by_scan(t_ns);
  const auto upper = levels_.upper_bound(t_ns);
  if (upper == levels_.begin()) return 0;
  uint32_t n = 0;
  for (const uint64_t w : std::prev(upper)->second) n += static_cast<uint32_t>(std::popcount(w));
  return n;
}

std::vector<bool> SlotCalendar::free_slots_by_scan(int64_t start_ns, int64_t end_ns,
                                                   uint64_t ignore_key) const {
  std::vector<bool> free(geometry_.slot_count, true);
  for (const auto& [key, list] : by_key_) {
    if (key == ignore_key && ignore_key != 0) continue;
    for (const Booking& b : list) {
      if (b.end_ns <= start_ns || end_ns <= b.start_ns) continue;
      for (const uint32_t s : b.slots) free[s] = false;
    }
  }
  return free;
}

uint32_t SlotCalendar::booked_at_by_scan(int64_t t_ns) const {
  std::vector<bool> used(geometry_.slot_count, false);
  for (const auto& [key, list] : by_key_) {
    for (const Booking& b : list) {
      if (b.start_ns <= t_ns && t_ns < b.end_ns) {
        for (const uint32_t s : b.slots) used[s] = true;
      }
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
  // Not even every free slot the budget allows would carry the rate: nothing will (what the
  // planner's probes for the most a pair admits meet most; candidate 2 would try every prefix).
  const auto free_count = static_cast<uint32_t>(std::count(free.begin(), free.end(), true));
  if (nominal_rate_bps(g, std::min(budget, free_count)) < rate_bps) return std::nullopt;
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
  std::vector<uint32_t> sorted;  // the slots taken so far, in slot order
  for (const auto& [start, length] : runs) {
    for (uint32_t k = 0; k < length; ++k) {
      if (sorted.size() >= budget) return std::nullopt;
      const uint32_t slot = (start + k) % g.slot_count;
      sorted.insert(std::lower_bound(sorted.begin(), sorted.end(), slot), slot);
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
  std::sort(slots.begin(), slots.end());
  slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
  Booking mine{key, start_ns, end_ns, std::move(slots)};
  // A slot already taken somewhere in the window is a double booking: name the other key(s)
  // (a scan, on this rare path only).
  if (apply(mine, true)) {
    std::vector<bool> taken(geometry_.slot_count, false);
    for (const uint32_t s : mine.slots) taken[s] = true;
    for (const auto& [other_key, list] : by_key_) {
      if (other_key == key) continue;  // a key's own bookings may overlap (as before)
      for (const Booking& other : list) {
        if (other.end_ns <= start_ns || end_ns <= other.start_ns) continue;
        for (const uint32_t s : other.slots) {
          if (!taken[s]) continue;
          shared_.push_back(Shared{key, other_key, s});
          shared_.push_back(Shared{other_key, key, s});
          break;
        }
      }
    }
  }
  by_key_[key].push_back(std::move(mine));
  ++count_;
}

void SlotCalendar::assign(std::vector<Entry> entries) {
  levels_.clear();
  by_key_.clear();
  shared_.clear();
  count_ = 0;
  struct Change {
    int64_t t_ns;
    bool up;
    uint32_t entry;
  };
  std::vector<Change> changes;
  changes.reserve(2 * entries.size());
  for (uint32_t i = 0; i < entries.size(); ++i) {
    std::vector<uint32_t>& slots = entries[i].slots;
    std::erase_if(slots, [this](uint32_t s) { return s >= geometry_.slot_count; });
    std::sort(slots.begin(), slots.end());
    slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
    if (entries[i].end_ns <= entries[i].start_ns || slots.empty()) continue;
    changes.push_back({entries[i].start_ns, true, i});
    changes.push_back({entries[i].end_ns, false, i});
  }
  // At one instant, what ends goes before what starts: adjacent windows may share a slot.
  std::sort(changes.begin(), changes.end(), [](const Change& a, const Change& b) {
    return a.t_ns != b.t_ns ? a.t_ns < b.t_ns : a.up < b.up;
  });
  std::vector<uint32_t> owners(geometry_.slot_count, 0);
  Bits level(words_, 0);
  Bits last(words_, 0);
  bool shared = false;
  for (size_t i = 0; i < changes.size();) {
    const int64_t t = changes[i].t_ns;
    for (; i < changes.size() && changes[i].t_ns == t; ++i) {
      for (const uint32_t s : entries[changes[i].entry].slots) {
        const uint64_t mask = uint64_t{1} << (s % 64);
        if (changes[i].up) {
          shared = shared || owners[s] > 0;
          if (owners[s]++ == 0) level[s / 64] |= mask;
        } else if (--owners[s] == 0) {
          level[s / 64] &= ~mask;
        }
      }
    }
    if (level != last) levels_.emplace_hint(levels_.end(), t, level);
    last = level;
  }
  if (shared) {  // name the double bookings as book() does
    levels_.clear();
    for (Entry& e : entries) book(e.key, e.start_ns, e.end_ns, std::move(e.slots));
    return;
  }
  for (Entry& e : entries) {
    by_key_[e.key].push_back(Booking{e.key, e.start_ns, e.end_ns, std::move(e.slots)});
    ++count_;
  }
}

std::optional<std::pair<uint32_t, uint64_t>> SlotCalendar::shared_slot(uint64_t key) const {
  for (const Shared& s : shared_) {
    if (s.key == key) return std::pair{s.slot, s.other};
  }
  return std::nullopt;
}

void SlotCalendar::unbook(uint64_t key) {
  const auto it = by_key_.find(key);
  if (it == by_key_.end()) return;
  const std::vector<Booking> gone = std::move(it->second);
  count_ -= gone.size();
  by_key_.erase(it);
  if (involved(key)) {
    // Clearing its bits would clear the other owner's too: draw the bitmaps again.
    std::erase_if(shared_, [key](const Shared& s) { return s.key == key || s.other == key; });
    rebuild();
    return;
  }
  for (const Booking& b : gone) apply(b, false);
}

}  // namespace detwan::control::calendar

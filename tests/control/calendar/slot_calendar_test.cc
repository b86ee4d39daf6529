// control/calendar/slot_calendar: SlotCalendar::plan and bookings over time.
//
// Geometry used throughout: cycle 1 ms of 100 slots (10 us), no guard, 1 Gbit/s line rate,
// 1518-byte frames (12144 ns). A run of L slots guarantees (L * 10000 - 12144) ns per ms at
// 1 Gbit/s = (L * 10000 - 12144) * 1000 bit/s; 100 Mbit/s therefore needs 12 slots
// (107.856 Mbit/s; 11 give 97.856), and 12 slots carry 120 Mbit/s nominal.
#include "control/calendar/slot_calendar.h"

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace detwan::control::calendar {
namespace {

SlotGeometry lab_geometry(uint32_t reservable_slots = 100) {
  SlotGeometry g;
  g.cycle_ns = 1'000'000;
  g.slot_count = 100;
  g.guard_ns = 0;
  g.line_rate_bps = 1'000'000'000;
  g.max_frame_bytes = 1518;
  g.reservable_slots = reservable_slots;
  return g;
}

std::vector<uint32_t> range(uint32_t first, uint32_t count) {
  std::vector<uint32_t> out;
  for (uint32_t k = 0; k < count; ++k) out.push_back(first + k);
  return out;
}

constexpr uint64_t kRate = 100'000'000;  // needs 12 contiguous slots

TEST(SlotCalendar, HandComputedRunLength) {
  const SlotGeometry g = lab_geometry();
  EXPECT_EQ(guaranteed_rate_bps(g, range(0, 12)), 107'856'000u);
  EXPECT_EQ(guaranteed_rate_bps(g, range(0, 11)), 97'856'000u);
  EXPECT_EQ(nominal_rate_bps(g, 12), 120'000'000u);
}

TEST(SlotCalendar, EmptyCalendarGivesTheSmallestRunAtTheStart) {
  const SlotCalendar c(lab_geometry());
  const auto slots = c.plan(kRate, 0, 1000);
  ASSERT_TRUE(slots.has_value());
  EXPECT_EQ(*slots, range(0, 12));
}

TEST(SlotCalendar, FirstFreeRunThatIsLongEnough) {
  SlotCalendar c(lab_geometry());
  c.book(1, 0, 1000, range(0, 5));  // free: 5..19 (15 slots), 40..99 (60)
  c.book(2, 0, 1000, range(20, 20));
  auto slots = c.plan(kRate, 0, 1000);
  ASSERT_TRUE(slots.has_value());
  EXPECT_EQ(*slots, range(5, 12));
  // 150 Mbit/s needs 17 slots (157.856 Mbit/s; 16 give 147.856): 5..19 is too short.
  ASSERT_EQ(guaranteed_rate_bps(lab_geometry(), range(0, 16)), 147'856'000u);
  slots = c.plan(150'000'000, 0, 1000);
  ASSERT_TRUE(slots.has_value());
  EXPECT_EQ(*slots, range(40, 17));
}

TEST(SlotCalendar, RunWrappingAroundTheCycleEndIsOneWindow) {
  SlotCalendar c(lab_geometry());
  c.book(1, 0, 1000, range(6, 88));  // free: 94..99 and 0..5, one circular run of 12
  const auto slots = c.plan(kRate, 0, 1000);
  ASSERT_TRUE(slots.has_value());
  std::vector<uint32_t> expected = range(0, 6);
  for (uint32_t s = 94; s < 100; ++s) expected.push_back(s);
  EXPECT_EQ(*slots, expected);
  EXPECT_GE(guaranteed_rate_bps(c.geometry(), *slots), kRate);
}

TEST(SlotCalendar, SeveralRunsWhenNoRunIsLongEnough) {
  SlotCalendar c(lab_geometry());
  // Free runs of 8 slots (0..7, 10..17, ..., 90..97); 8 and 9 of every ten are booked.
  std::vector<uint32_t> booked;
  for (uint32_t s = 0; s < 100; ++s) {
    if (s % 10 >= 8) booked.push_back(s);
  }
  c.book(1, 0, 1000, booked);
  const auto slots = c.plan(kRate, 0, 1000);
  ASSERT_TRUE(slots.has_value());
  // One run of 8 guarantees 67.856 Mbit/s; the remaining 32.144 need 5 more slots of another
  // run (50000 - 12144 = 37856 ns): 13 slots in two windows.
  EXPECT_EQ(slots->size(), 13u);
  EXPECT_TRUE(std::is_sorted(slots->begin(), slots->end()));
  const auto free = c.free_slots(0, 1000);
  for (const uint32_t s : *slots) EXPECT_TRUE(free[s]) << "slot " << s << " is booked";
  EXPECT_GE(guaranteed_rate_bps(c.geometry(), *slots), kRate);
  EXPECT_GE(nominal_rate_bps(c.geometry(), slots->size()), kRate);
  // Exactly two windows.
  std::vector<bool> mine(100, false);
  for (const uint32_t s : *slots) mine[s] = true;
  int windows = 0;
  for (uint32_t s = 0; s < 100; ++s) windows += mine[s] && !mine[(s + 99) % 100] ? 1 : 0;
  EXPECT_EQ(windows, 2);
}

TEST(SlotCalendar, RespectsTheReservableShare) {
  // 11 slots may be reserved: 100 Mbit/s needs 12.
  EXPECT_FALSE(SlotCalendar(lab_geometry(11)).plan(kRate, 0, 1000).has_value());
  EXPECT_TRUE(SlotCalendar(lab_geometry(12)).plan(kRate, 0, 1000).has_value());
  // 20 reservable, 10 of them booked during the window: 10 left.
  SlotCalendar c(lab_geometry(20));
  c.book(1, 0, 1000, range(50, 10));
  EXPECT_FALSE(c.plan(kRate, 0, 1000).has_value());
  // Outside that booking's window the share is free again.
  const auto later = c.plan(kRate, 1000, 2000);
  ASSERT_TRUE(later.has_value());
  EXPECT_EQ(*later, range(0, 12));
  // The share also caps the several-runs fallback: with 20 slots booked (8 and 9 of every ten)
  // 100 Mbit/s needs 13 slots in two windows (SeveralRunsWhenNoRunIsLongEnough).
  std::vector<uint32_t> booked;
  for (uint32_t s = 0; s < 100; ++s) {
    if (s % 10 >= 8) booked.push_back(s);
  }
  SlotCalendar enough(lab_geometry(33));
  enough.book(1, 0, 1000, booked);
  EXPECT_TRUE(enough.plan(kRate, 0, 1000).has_value());
  SlotCalendar short_by_one(lab_geometry(32));
  short_by_one.book(1, 0, 1000, booked);
  EXPECT_FALSE(short_by_one.plan(kRate, 0, 1000).has_value());
}

TEST(SlotCalendar, ImpossibleRequestsGiveNothing) {
  SlotCalendar c(lab_geometry());
  EXPECT_FALSE(c.plan(1'000'000'001, 0, 1000).has_value());  // above the line rate
  // Every other slot booked: a single free slot never fits a 12144 ns frame.
  std::vector<uint32_t> even;
  for (uint32_t s = 0; s < 100; s += 2) even.push_back(s);
  c.book(1, 0, 1000, even);
  EXPECT_FALSE(c.plan(1'000'000, 0, 1000).has_value());
}

TEST(SlotCalendar, DisjointWindowsMayReuseSlotsOverlappingOnesNever) {
  SlotCalendar c(lab_geometry());
  c.book(1, 100, 200, range(0, 12));
  // Adjacent windows ([200, 300) after [100, 200)) do not overlap: same slots.
  auto after = c.plan(kRate, 200, 300);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(*after, range(0, 12));
  auto before = c.plan(kRate, 0, 100);
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(*before, range(0, 12));
  // Overlapping by one ns: other slots.
  auto overlapping = c.plan(kRate, 199, 300);
  ASSERT_TRUE(overlapping.has_value());
  EXPECT_EQ(*overlapping, range(12, 12));
  auto inside = c.plan(kRate, 150, 160);
  ASSERT_TRUE(inside.has_value());
  EXPECT_EQ(*inside, range(12, 12));
  EXPECT_EQ(c.booked_at(99), 0u);
  EXPECT_EQ(c.booked_at(100), 12u);
  EXPECT_EQ(c.booked_at(199), 12u);
  EXPECT_EQ(c.booked_at(200), 0u);
}

TEST(SlotCalendar, PreferredSlotsAreKeptWhileFreeAndSufficient) {
  SlotCalendar c(lab_geometry());
  const std::vector<uint32_t> preferred = range(50, 12);
  auto kept = c.plan(kRate, 0, 1000, 0, &preferred);
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(*kept, preferred);  // although 0..11 is the first fit
  // One preferred slot taken by someone else: first fit instead. The free slots are then one
  // circular run 56..99,0..54, and first fit takes its beginning (packed after slot 55).
  c.book(9, 0, 1000, {55});
  auto moved = c.plan(kRate, 0, 1000, 0, &preferred);
  ASSERT_TRUE(moved.has_value());
  EXPECT_EQ(*moved, range(56, 12));
  // Preferred slots that cannot carry the rate are not kept.
  const std::vector<uint32_t> too_few = range(70, 5);
  auto grown = c.plan(kRate, 0, 1000, 0, &too_few);
  ASSERT_TRUE(grown.has_value());
  EXPECT_EQ(*grown, range(56, 12));
}

TEST(SlotCalendar, IgnoreKeyLetsAModificationKeepItsOwnSlots) {
  SlotCalendar c(lab_geometry());
  const std::vector<uint32_t> own = range(30, 12);
  c.book(7, 0, 1000, own);
  // Without ignoring itself its own slots look taken (first fit: after them, 42..53).
  auto other = c.plan(kRate, 0, 1000, 0, &own);
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(*other, range(42, 12));
  auto same = c.plan(kRate, 0, 1000, 7, &own);
  ASSERT_TRUE(same.has_value());
  EXPECT_EQ(*same, own);
  const auto free = c.free_slots(0, 1000, 7);
  EXPECT_EQ(std::count(free.begin(), free.end(), true), 100);
  // unbook takes every booking of the key.
  c.book(7, 2000, 3000, range(0, 3));
  EXPECT_EQ(c.bookings(), 2u);
  c.unbook(7);
  EXPECT_EQ(c.bookings(), 0u);
}

// The bitmaps against the definition: a naive list of bookings, under random books (planned,
// and forced ones that double-book), unbooks and queries -- with ignore keys, empty and wide
// windows, and slot counts over one 64-bit word.
struct NaiveBooking {
  uint64_t key;
  int64_t start;
  int64_t end;
  std::vector<uint32_t> slots;
};

std::vector<bool> naive_free(const std::vector<NaiveBooking>& all, uint32_t n, int64_t start,
                             int64_t end, uint64_t ignore) {
  std::vector<bool> free(n, true);
  for (const NaiveBooking& b : all) {
    if (ignore != 0 && b.key == ignore) continue;
    if (b.end <= start || end <= b.start) continue;
    for (const uint32_t s : b.slots) free[s] = false;
  }
  return free;
}

bool naive_shares(const std::vector<NaiveBooking>& all, uint64_t key) {
  for (const NaiveBooking& a : all) {
    if (a.key != key) continue;
    for (const NaiveBooking& b : all) {
      if (b.key == key || b.end <= a.start || a.end <= b.start) continue;
      for (const uint32_t s : b.slots) {
        if (std::find(a.slots.begin(), a.slots.end(), s) != a.slots.end()) return true;
      }
    }
  }
  return false;
}

TEST(SlotCalendar, BitmapsAgreeWithTheBookingsUnderRandomOperations) {
  for (const uint32_t slot_count : {100u, 130u}) {
    SlotGeometry g = lab_geometry();
    g.slot_count = slot_count;
    g.reservable_slots = slot_count;
    SlotCalendar c(g);
    std::vector<NaiveBooking> all;
    std::mt19937_64 rng(slot_count);
    auto window = [&rng](int64_t* start, int64_t* end) {
      *start = static_cast<int64_t>(rng() % 200) * 10;
      *end = *start + 10 + static_cast<int64_t>(rng() % 60) * 10;
    };
    uint64_t next_key = 1;
    for (int step = 0; step < 3000; ++step) {
      const uint64_t op = rng() % 10;
      int64_t start = 0, end = 0;
      window(&start, &end);
      if (op < 5) {  // a planned booking
        const uint64_t rate = 10'000'000 + rng() % 200'000'000;
        if (auto slots = c.plan(rate, start, end)) {
          const auto free = naive_free(all, slot_count, start, end, 0);
          for (const uint32_t s : *slots) ASSERT_TRUE(free[s]) << "planned a taken slot " << s;
          c.book(next_key, start, end, *slots);
          all.push_back({next_key++, start, end, *slots});
        }
      } else if (op == 5 && step % 7 == 0) {  // forced: may double-book
        std::vector<uint32_t> slots{static_cast<uint32_t>(rng() % slot_count)};
        c.book(next_key, start, end, slots);
        all.push_back({next_key++, start, end, slots});
      } else if (op < 8 && !all.empty()) {  // unbook a random key
        const uint64_t key = all[rng() % all.size()].key;
        c.unbook(key);
        std::erase_if(all, [key](const NaiveBooking& b) { return b.key == key; });
      } else {  // queries
        const uint64_t ignore = all.empty() || rng() % 2 ? 0 : all[rng() % all.size()].key;
        const int64_t query_end = rng() % 8 == 0 ? start : end;  // sometimes an empty window
        if (query_end > start) {
          ASSERT_EQ(c.free_slots(start, query_end, ignore),
                    naive_free(all, slot_count, start, query_end, ignore))
              << "step " << step << " window " << start << ".." << query_end << " ignore "
              << ignore;
        }
        const auto used_at = naive_free(all, slot_count, start, start + 1, 0);
        ASSERT_EQ(c.booked_at(start), std::count(used_at.begin(), used_at.end(), false));
      }
      ASSERT_EQ(c.bookings(), all.size());
      if (step % 50 == 0) {
        for (const NaiveBooking& b : all) {
          const auto shared = c.shared_slot(b.key);
          ASSERT_EQ(shared.has_value(), naive_shares(all, b.key)) << "key " << b.key;
        }
      }
    }
    // Everything unbooked: no breakpoint left behind.
    for (const NaiveBooking& b : std::vector<NaiveBooking>(all)) c.unbook(b.key);
    EXPECT_EQ(c.bookings(), 0u);
    EXPECT_EQ(c.breakpoints(), 0u);
    EXPECT_FALSE(c.any_shared());
  }
}

// assign() (the startup's bulk build) gives the state book() of each gives: the same free slots
// in every window, the same double bookings named, the same count -- also when some share a
// slot (then it books each) and when adjacent windows reuse one.
TEST(SlotCalendar, AssignEqualsBookingEach) {
  std::mt19937_64 rng(29);
  for (int round = 0; round < 30; ++round) {
    SlotCalendar booked(lab_geometry());
    std::vector<SlotCalendar::Entry> entries;
    const bool forced = round % 3 == 0;  // one round in three may double-book
    for (uint64_t key = 1; key <= 60; ++key) {
      const int64_t start = static_cast<int64_t>(rng() % 50) * 10;
      const int64_t end = start + 10 + static_cast<int64_t>(rng() % 10) * 10;
      std::vector<uint32_t> slots;
      if (forced) {
        slots = {static_cast<uint32_t>(rng() % 100)};
      } else if (auto planned = booked.plan(20'000'000, start, end)) {
        slots = *planned;
      } else {
        continue;
      }
      booked.book(key, start, end, slots);
      entries.push_back({key, start, end, slots});
    }
    SlotCalendar assigned(lab_geometry());
    assigned.assign(entries);
    ASSERT_EQ(assigned.bookings(), booked.bookings());
    ASSERT_EQ(assigned.any_shared(), booked.any_shared()) << "round " << round;
    ASSERT_EQ(assigned.breakpoints(), booked.breakpoints()) << "round " << round;
    for (const auto& e : entries) {
      ASSERT_EQ(assigned.shared_slot(e.key).has_value(), booked.shared_slot(e.key).has_value());
    }
    for (int64_t t = 0; t < 700; t += 7) {
      ASSERT_EQ(assigned.free_slots(t, t + 25), booked.free_slots(t, t + 25)) << "t " << t;
      ASSERT_EQ(assigned.booked_at(t), booked.booked_at(t));
    }
  }
}

}  // namespace
}  // namespace detwan::control::calendar

// control/calendar/capacity_calendar: half-open windows, exact undo, and a seeded randomized
// comparison with a brute-force array of levels.
#include "control/calendar/capacity_calendar.h"

#include <algorithm>
#include <array>
#include <random>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

namespace detwan::control::calendar {
namespace {

TEST(CapacityCalendar, EmptyIsZeroEverywhere) {
  CapacityCalendar c;
  EXPECT_EQ(c.peak_bps(INT64_MIN, INT64_MAX), 0u);
  EXPECT_EQ(c.at_bps(0), 0u);
  EXPECT_EQ(c.breakpoints(), 0u);
}

TEST(CapacityCalendar, AdjacentWindowsNeverAddUp) {
  CapacityCalendar c;
  c.book(0, 10, 5);
  c.book(10, 20, 7);
  EXPECT_EQ(c.peak_bps(0, 20), 7u);
  EXPECT_EQ(c.peak_bps(0, 10), 5u);  // 10 is outside [0, 10)
  EXPECT_EQ(c.peak_bps(10, 20), 7u);
  EXPECT_EQ(c.peak_bps(9, 11), 7u);
  EXPECT_EQ(c.peak_bps(-5, 0), 0u);   // ends where the first booking starts
  EXPECT_EQ(c.peak_bps(20, 30), 0u);  // starts where the last one ends
  EXPECT_EQ(c.at_bps(-1), 0u);
  EXPECT_EQ(c.at_bps(0), 5u);
  EXPECT_EQ(c.at_bps(9), 5u);
  EXPECT_EQ(c.at_bps(10), 7u);
  EXPECT_EQ(c.at_bps(19), 7u);
  EXPECT_EQ(c.at_bps(20), 0u);
  EXPECT_EQ(c.breakpoints(), 3u);  // 0, 10, 20
}

TEST(CapacityCalendar, OverlappingWindowsAddUpOnlyWhereTheyOverlap) {
  CapacityCalendar c;
  c.book(0, 10, 5);
  c.book(5, 15, 7);
  EXPECT_EQ(c.peak_bps(0, 20), 12u);
  EXPECT_EQ(c.peak_bps(0, 5), 5u);
  EXPECT_EQ(c.peak_bps(5, 6), 12u);
  EXPECT_EQ(c.peak_bps(10, 15), 7u);
  EXPECT_EQ(c.peak_bps(15, 100), 0u);
  EXPECT_EQ(c.at_bps(4), 5u);
  EXPECT_EQ(c.at_bps(5), 12u);
  EXPECT_EQ(c.at_bps(9), 12u);
  EXPECT_EQ(c.at_bps(10), 7u);
  // Empty and inverted windows have no peak.
  EXPECT_EQ(c.peak_bps(6, 6), 0u);
  EXPECT_EQ(c.peak_bps(8, 2), 0u);
}

TEST(CapacityCalendar, BookThenUnbookRestoresTheExactState) {
  CapacityCalendar c;
  c.book(100, 200, 3);
  const size_t before = c.breakpoints();
  EXPECT_EQ(before, 2u);
  // A booking that splits the existing step twice, then its undo.
  c.book(120, 180, 4);
  EXPECT_EQ(c.breakpoints(), 4u);
  EXPECT_EQ(c.at_bps(150), 7u);
  c.unbook(120, 180, 4);
  EXPECT_EQ(c.breakpoints(), before);  // 120 and 180 merged back
  EXPECT_EQ(c.at_bps(150), 3u);
  EXPECT_EQ(c.peak_bps(INT64_MIN, INT64_MAX), 3u);
  // A booking that shares both ends with the existing one.
  c.book(100, 200, 2);
  EXPECT_EQ(c.breakpoints(), 2u);
  EXPECT_EQ(c.at_bps(100), 5u);
  c.unbook(100, 200, 2);
  c.unbook(100, 200, 3);
  EXPECT_EQ(c.breakpoints(), 0u);
  EXPECT_EQ(c.peak_bps(INT64_MIN, INT64_MAX), 0u);
}

TEST(CapacityCalendar, AdjacentBookingsOfTheSameRateMerge) {
  CapacityCalendar c;
  c.book(0, 10, 5);
  c.book(10, 20, 5);
  EXPECT_EQ(c.breakpoints(), 2u);  // one step [0, 20)
  c.unbook(0, 10, 5);
  EXPECT_EQ(c.breakpoints(), 2u);  // [10, 20)
  EXPECT_EQ(c.at_bps(5), 0u);
  EXPECT_EQ(c.at_bps(10), 5u);
}

TEST(CapacityCalendar, ZeroRateAndEmptyWindowsChangeNothing) {
  CapacityCalendar c;
  c.book(0, 10, 0);
  c.book(10, 10, 5);
  c.book(10, 5, 5);
  EXPECT_EQ(c.breakpoints(), 0u);
}

TEST(CapacityCalendar, ForEachChangeAfterListsLaterBreakpointsInOrder) {
  CapacityCalendar c;
  c.book(0, 10, 5);
  c.book(20, 30, 5);
  std::vector<int64_t> seen;
  c.for_each_change_after(0, [&](int64_t t) {
    seen.push_back(t);
    return true;
  });
  EXPECT_EQ(seen, (std::vector<int64_t>{10, 20, 30}));
  seen.clear();
  c.for_each_change_after(-1, [&](int64_t t) {
    seen.push_back(t);
    return seen.size() < 2;  // stop after two
  });
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 10}));
}

TEST(CapacityCalendar, RandomizedAgainstABruteForceArray) {
  constexpr int kTimes = 64;
  std::mt19937_64 rng(20261201);
  for (int round = 0; round < 50; ++round) {
    CapacityCalendar c;
    std::array<uint64_t, kTimes> level{};
    std::vector<std::tuple<int64_t, int64_t, uint64_t>> booked;
    for (int op = 0; op < 200; ++op) {
      const bool undo = !booked.empty() && rng() % 3 == 0;
      if (undo) {
        const size_t i = rng() % booked.size();
        const auto [s, e, r] = booked[i];
        booked.erase(booked.begin() + static_cast<std::ptrdiff_t>(i));
        c.unbook(s, e, r);
        for (int64_t t = s; t < e; ++t) level[static_cast<size_t>(t)] -= r;
      } else {
        const int64_t s = static_cast<int64_t>(rng() % (kTimes - 1));
        const int64_t e =
            s + 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(kTimes - 1 - s));
        const uint64_t r = 1 + rng() % 4;  // small rates: equal levels (merges) are frequent
        booked.emplace_back(s, e, r);
        c.book(s, e, r);
        for (int64_t t = s; t < e; ++t) level[static_cast<size_t>(t)] += r;
      }
      // Every instant, and the breakpoints exactly where the level changes (merged).
      size_t changes = 0;
      for (int t = 0; t < kTimes; ++t) {
        ASSERT_EQ(c.at_bps(t), level[static_cast<size_t>(t)])
            << "round " << round << " op " << op << " t " << t;
        if (level[static_cast<size_t>(t)] != (t == 0 ? 0 : level[static_cast<size_t>(t - 1)])) {
          ++changes;
        }
      }
      if (level[kTimes - 1] != 0) ++changes;  // the drop after the last instant
      ASSERT_EQ(c.breakpoints(), changes) << "round " << round << " op " << op;
      ASSERT_EQ(c.at_bps(kTimes + 10), 0u);
      for (int q = 0; q < 8; ++q) {
        const int64_t s = static_cast<int64_t>(rng() % kTimes);
        const int64_t e = s + 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(kTimes - s));
        const uint64_t want = *std::max_element(level.begin() + s, level.begin() + e);
        ASSERT_EQ(c.peak_bps(s, e), want) << "[" << s << ", " << e << ")";
      }
    }
    for (const auto& [s, e, r] : booked) c.unbook(s, e, r);
    EXPECT_EQ(c.breakpoints(), 0u);
  }
}

// The bound of the highest level: exact after bookings, never below the truth after an unbook,
// exact again once tightened.
TEST(CapacityCalendar, MaxBoundIsNeverBelowThePeakAndTightensAfterUnbook) {
  CapacityCalendar c;
  EXPECT_EQ(c.max_bound_bps(), 0u);
  c.book(0, 10, 5);
  c.book(5, 15, 7);
  EXPECT_EQ(c.max_bound_bps(), 12u);
  c.unbook(5, 15, 7);
  EXPECT_GE(c.max_bound_bps(), c.peak_bps(INT64_MIN, INT64_MAX));
  c.tighten_max_bound();
  EXPECT_EQ(c.max_bound_bps(), 5u);
  c.unbook(0, 10, 5);
  c.tighten_max_bound();
  EXPECT_EQ(c.max_bound_bps(), 0u);
}

// assign() (the startup's bulk build) gives the very calendar book() of each window gives:
// same levels everywhere and the same breakpoints (adjacent and equal levels merged alike).
TEST(CapacityCalendar, AssignEqualsBookingEachWindow) {
  std::mt19937_64 rng(17);
  for (int round = 0; round < 20; ++round) {
    std::vector<CapacityCalendar::Window> windows;
    CapacityCalendar booked;
    const int n = 1 + static_cast<int>(rng() % 300);
    for (int i = 0; i < n; ++i) {
      const int64_t start = static_cast<int64_t>(rng() % 100) * 10;
      const int64_t end = start + static_cast<int64_t>(rng() % 20) * 10;  // sometimes empty
      const uint64_t rate = rng() % 4 == 0 ? 0 : 1 + rng() % 5;
      windows.push_back({start, end, rate});
      if (end > start) booked.book(start, end, rate);
    }
    CapacityCalendar assigned;
    assigned.assign(windows);
    ASSERT_EQ(assigned.breakpoints(), booked.breakpoints()) << "round " << round;
    ASSERT_EQ(assigned.max_bound_bps(), booked.peak_bps(INT64_MIN, INT64_MAX));
    ASSERT_EQ(booked.max_bound_bps(), booked.peak_bps(INT64_MIN, INT64_MAX));
    for (int64_t t = -10; t <= 1200; t += 5) {
      ASSERT_EQ(assigned.at_bps(t), booked.at_bps(t)) << "round " << round << " t " << t;
      ASSERT_EQ(assigned.peak_bps(t, t + 37), booked.peak_bps(t, t + 37));
    }
  }
}

}  // namespace
}  // namespace detwan::control::calendar

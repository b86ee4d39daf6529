// control/calendar/ledger: bookings in both directions, free rate, and the consistency checks
// (fed with over-bookings made on purpose, bypassing admission).
#include "control/calendar/ledger.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/control/topology_builder.h"

namespace detwan::control::calendar {
namespace {

using testing::link_with;
using testing::TopologyBuilder;

// a --(a-r: 1 Gbit/s, 90 % reservable)-- r --(r-b)-- b; a and b have gateways.
model::Topology lab() {
  return TopologyBuilder()
      .site("a")
      .site("b")
      .transit("r")
      .link("a-r", "a", "r", link_with(1'000'000'000, 1'000'000))
      .link("r-b", "r", "b", link_with(1'000'000'000, 1'000'000))
      .build();
}

Booking booking(uint64_t key, int64_t start, int64_t end, uint64_t rate,
                std::vector<uint32_t> links, std::vector<SlotUse> slots = {}) {
  Booking b;
  b.key = key;
  b.start_ns = start;
  b.end_ns = end;
  b.rate_bps = rate;
  b.links = std::move(links);
  b.slots = std::move(slots);
  return b;
}

TEST(Ledger, SlotCalendarsExistOnlyOnGatewayPorts) {
  const model::Topology t = lab();
  const Ledger ledger(t);
  // a-r: direction 0 leaves a (gateway), direction 1 leaves r (transit).
  ASSERT_NE(ledger.slots(0, 0), nullptr);
  EXPECT_EQ(ledger.slots(0, 1), nullptr);
  EXPECT_EQ(ledger.slots(1, 0), nullptr);
  ASSERT_NE(ledger.slots(1, 1), nullptr);
  const SlotGeometry& g = ledger.slots(0, 0)->geometry();
  EXPECT_EQ(g.line_rate_bps, 1'000'000'000u);
  EXPECT_EQ(g.max_frame_bytes, 1518u);
  EXPECT_EQ(g.reservable_slots, 90u);
  EXPECT_EQ(g.cycle_ns, 1'000'000);
  EXPECT_EQ(g.slot_count, 100u);
}

TEST(Ledger, BookAndUnbookBothDirections) {
  const model::Topology t = lab();
  Ledger ledger(t);
  ledger.book(booking(1, 0, 100, 300'000'000, {0, 1}, {{0, 0, {0, 1, 2}}, {1, 1, {5, 6}}}));
  EXPECT_EQ(ledger.size(), 1u);
  for (uint32_t l = 0; l < 2; ++l) {
    for (int d = 0; d < 2; ++d) {
      EXPECT_EQ(ledger.capacity(l, d).at_bps(50), 300'000'000u) << l << "/" << d;
      EXPECT_EQ(ledger.capacity(l, d).at_bps(100), 0u);
      EXPECT_EQ(ledger.free_bps(l, d, 0, 100), 600'000'000u);
      EXPECT_EQ(ledger.free_bps(l, d, 100, 200), 900'000'000u);
    }
  }
  EXPECT_EQ(ledger.slots(0, 0)->booked_at(50), 3u);
  EXPECT_EQ(ledger.slots(1, 1)->booked_at(50), 2u);
  ASSERT_NE(ledger.find(1), nullptr);
  EXPECT_EQ(ledger.find(1)->rate_bps, 300'000'000u);

  // Booking the same key again replaces the earlier booking.
  ledger.book(booking(1, 0, 100, 100'000'000, {0}, {{0, 0, {7}}}));
  EXPECT_EQ(ledger.size(), 1u);
  EXPECT_EQ(ledger.capacity(0, 0).at_bps(50), 100'000'000u);
  EXPECT_EQ(ledger.capacity(1, 1).at_bps(50), 0u);
  EXPECT_EQ(ledger.slots(0, 0)->booked_at(50), 1u);
  EXPECT_EQ(ledger.slots(1, 1)->booked_at(50), 0u);

  ledger.unbook(1);
  EXPECT_EQ(ledger.size(), 0u);
  EXPECT_EQ(ledger.find(1), nullptr);
  for (uint32_t l = 0; l < 2; ++l) {
    for (int d = 0; d < 2; ++d) EXPECT_EQ(ledger.capacity(l, d).breakpoints(), 0u);
  }
  EXPECT_EQ(ledger.slots(0, 0)->bookings(), 0u);
  ledger.unbook(1);  // unknown key: nothing happens
  EXPECT_EQ(ledger.check(), "");
}

TEST(Ledger, FreeRateIgnoringAKeyOnlyWhenItCoversTheWindow) {
  const model::Topology t = lab();
  Ledger ledger(t);
  ledger.book(booking(1, 0, 100, 300'000'000, {0}));
  ledger.book(booking(2, 50, 150, 200'000'000, {0}));
  EXPECT_EQ(ledger.free_bps(0, 0, 0, 100), 400'000'000u);
  EXPECT_EQ(ledger.free_bps(0, 0, 0, 100, 1), 700'000'000u);
  EXPECT_EQ(ledger.free_bps(0, 1, 10, 90, 1), 700'000'000u);
  // Key 1 does not cover [50, 150): its rate is not subtracted (conservative).
  EXPECT_EQ(ledger.free_bps(0, 0, 50, 150), 400'000'000u);
  EXPECT_EQ(ledger.free_bps(0, 0, 50, 150, 1), 400'000'000u);
  // Ignoring a key that is not on the link changes nothing.
  EXPECT_EQ(ledger.free_bps(1, 0, 0, 100, 1), 900'000'000u);
  // Full: 0, never an underflow.
  ledger.book(booking(3, 0, 100, 900'000'000, {1}));
  EXPECT_EQ(ledger.free_bps(1, 0, 0, 100), 0u);
}

TEST(Ledger, CheckIsEmptyForValidStates) {
  const model::Topology t = lab();
  Ledger ledger(t);
  EXPECT_EQ(ledger.check(), "");
  // Exactly the reservable rate, and the same slots in adjacent windows.
  ledger.book(booking(1, 0, 100, 600'000'000, {0}, {{0, 0, {1, 2}}}));
  ledger.book(booking(2, 0, 100, 300'000'000, {0}, {{0, 0, {3}}}));
  ledger.book(booking(3, 100, 200, 900'000'000, {0}, {{0, 0, {1, 2, 3}}}));
  EXPECT_EQ(ledger.check(), "");
  EXPECT_EQ(ledger.check_booking(1), "");
  EXPECT_EQ(ledger.check_booking(3), "");
  EXPECT_EQ(ledger.check_booking(99), "");  // unknown key
}

TEST(Ledger, CheckFindsAnOverBooking) {
  const model::Topology t = lab();
  Ledger ledger(t);
  ledger.book(booking(1, 0, 100, 600'000'000, {1}));
  ledger.book(booking(2, 99, 200, 600'000'000, {1}));  // overlaps by 1 ns: 1.2 Gbit/s > 900M
  const std::string problem = ledger.check();
  EXPECT_NE(problem.find("link 'r-b'"), std::string::npos) << problem;
  EXPECT_NE(problem.find("1200000000 bit/s booked at once"), std::string::npos) << problem;
  EXPECT_NE(problem.find("reservable 900000000"), std::string::npos) << problem;
  const std::string own = ledger.check_booking(2);
  EXPECT_NE(own.find("link 'r-b'"), std::string::npos) << own;
  EXPECT_NE(own.find("booking 2"), std::string::npos) << own;
  EXPECT_NE(ledger.check_booking(1), "");
  EXPECT_EQ(ledger.check_calendars(), problem);
  // Moved one ns later the windows are adjacent: nothing over-booked.
  ledger.book(booking(2, 100, 200, 600'000'000, {1}));
  EXPECT_EQ(ledger.check(), "");
  EXPECT_EQ(ledger.check_calendars(), "");
}

TEST(Ledger, CheckFindsADoubleBookedSlot) {
  const model::Topology t = lab();
  Ledger ledger(t);
  ledger.book(booking(1, 0, 100, 1'000'000, {0}, {{0, 0, {3, 4}}}));
  ledger.book(booking(2, 50, 150, 1'000'000, {0}, {{0, 0, {4, 5}}}));
  const std::string problem = ledger.check();
  EXPECT_NE(problem.find("slot 4 of link 'a-r' leaving 'a'"), std::string::npos) << problem;
  EXPECT_NE(ledger.check_booking(2).find("slot 4"), std::string::npos);
  EXPECT_EQ(ledger.check_calendars(), problem);  // the calendars as they stand say the same
  ledger.unbook(1);
  EXPECT_EQ(ledger.check_calendars(), "");
  EXPECT_EQ(ledger.check(), "");
  // The same slot in the other direction of a link is another gateway's port: no conflict.
  const model::Topology direct =
      TopologyBuilder().site("a").site("b").link("a-b", "a", "b").build();
  Ledger other(direct);
  other.book(booking(1, 0, 100, 1'000'000, {0}, {{0, 0, {4}}}));
  other.book(booking(2, 0, 100, 1'000'000, {0}, {{0, 1, {4}}}));
  EXPECT_EQ(other.check(), "");
  // ...but the same direction is.
  other.book(booking(3, 0, 100, 1'000'000, {0}, {{0, 1, {4}}}));
  EXPECT_NE(other.check_booking(3).find("slot 4 of link 'a-b' leaving 'b'"), std::string::npos)
      << other.check_booking(3);
  // Disjoint windows: no conflict.
  Ledger later(t);
  later.book(booking(1, 0, 100, 1'000'000, {0}, {{0, 0, {4}}}));
  later.book(booking(2, 100, 150, 1'000'000, {0}, {{0, 0, {4}}}));
  EXPECT_EQ(later.check(), "");
  EXPECT_EQ(later.check_calendars(), "");
}

TEST(Ledger, EndsAfterIsSortedAndUnique) {
  const model::Topology t = lab();
  Ledger ledger(t);
  ledger.book(booking(1, 0, 200, 1, {0}));
  ledger.book(booking(2, 0, 100, 1, {0}));
  ledger.book(booking(3, 50, 200, 1, {1}));
  ledger.book(booking(4, 0, 300, 1, {1}));
  EXPECT_EQ(ledger.ends_after(50), (std::vector<int64_t>{100, 200, 300}));
  EXPECT_EQ(ledger.ends_after(100), (std::vector<int64_t>{200, 300}));
  EXPECT_EQ(ledger.ends_after(299), (std::vector<int64_t>{300}));
  EXPECT_TRUE(ledger.ends_after(300).empty());
}

// book_all (the startup's bulk build) leaves the ledger book() of each leaves, and the same
// violations are found in it; a key twice falls back to book() (the later replaces).
TEST(Ledger, BookAllEqualsBookingEach) {
  const model::Topology t = lab();
  std::vector<Booking> all;
  for (uint64_t k = 1; k <= 40; ++k) {
    const int64_t start = static_cast<int64_t>(k % 7) * 100;
    all.push_back(booking(k, start, start + 150 + static_cast<int64_t>(k % 3) * 50, 20'000'000,
                          {k % 2 == 0 ? 0u : 1u}, {{0, 0, {static_cast<uint32_t>(k % 100)}}}));
  }
  Ledger one_by_one(t);
  for (const Booking& b : all) one_by_one.book(b);
  Ledger bulk(t);
  bulk.book_all(all);
  EXPECT_EQ(bulk.size(), one_by_one.size());
  for (uint32_t l = 0; l < 2; ++l) {
    for (int d = 0; d < 2; ++d) {
      EXPECT_EQ(bulk.capacity(l, d).breakpoints(), one_by_one.capacity(l, d).breakpoints());
      for (int64_t at = 0; at < 1000; at += 25) {
        EXPECT_EQ(bulk.capacity(l, d).at_bps(at), one_by_one.capacity(l, d).at_bps(at));
      }
    }
  }
  EXPECT_EQ(bulk.check(), one_by_one.check());
  EXPECT_EQ(bulk.check_calendars(), bulk.check());
  // fits() answers what free_bps() would, with and without ignoring a key, before and after
  // an unbook (the bound is stale until tightened).
  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t at = 0; at < 1000; at += 50) {
      for (const uint64_t rate : {10'000'000ull, 500'000'000ull, 850'000'000ull, 900'000'001ull}) {
        for (const uint64_t ignore : {0ull, 3ull}) {
          EXPECT_EQ(bulk.fits(1, 0, at, at + 120, rate, ignore),
                    bulk.free_bps(1, 0, at, at + 120, ignore) >= rate)
              << "at " << at << " rate " << rate;
        }
      }
    }
    bulk.unbook(2);
  }
  // An over-booking and a shared slot, found alike.
  all.push_back(booking(41, 0, 1000, 900'000'000, {1}, {{0, 0, {1}}}));
  Ledger bad_one(t);
  for (const Booking& b : all) bad_one.book(b);
  Ledger bad_bulk(t);
  bad_bulk.book_all(all);
  EXPECT_NE(bad_bulk.check(), "");
  EXPECT_EQ(bad_bulk.check(), bad_one.check());
  EXPECT_EQ(bad_bulk.check_calendars(), bad_bulk.check());
  // The same key twice: as book() of each (the second replaces the first).
  Ledger twice(t);
  twice.book_all({booking(1, 0, 100, 5, {0}), booking(1, 200, 300, 7, {0})});
  EXPECT_EQ(twice.size(), 1u);
  EXPECT_EQ(twice.capacity(0, 0).at_bps(50), 0u);
  EXPECT_EQ(twice.capacity(0, 0).at_bps(250), 7u);
}

}  // namespace
}  // namespace detwan::control::calendar

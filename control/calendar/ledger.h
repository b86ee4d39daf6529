#pragma once
// The resource book of one domain: a capacity calendar per link direction and a slot calendar
// per gateway WAN port (the direction leaving a site with a gateway). A reservation books its
// rate on every link of its path in both directions (reservations are bidirectional and
// symmetric) over its window, and its slots on the two gateway ports it leaves from.
//
// `check()` recomputes from the bookings whether anything is over-booked (used by tests and by
// `detwan-agent journal check`, which replays a journal into a fresh ledger).
// Not thread-safe: the agent's core owns it under its lock.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "control/calendar/capacity_calendar.h"
#include "control/calendar/slot_calendar.h"
#include "control/model/topology.h"

namespace detwan::control::calendar {

struct SlotUse {
  uint32_t link = model::kNone;
  int direction = 0;  // leaving link.ends[direction]
  std::vector<uint32_t> slots;
};

struct Booking {
  uint64_t key = 0;  // the reservation's numeric key (> 0)
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint64_t rate_bps = 0;
  std::vector<uint32_t> links;  // every link of every path, both directions
  std::vector<SlotUse> slots;
};

class Ledger {
 public:
  explicit Ledger(const model::Topology& topology);

  [[nodiscard]] const CapacityCalendar& capacity(uint32_t link, int direction) const {
    return capacity_[2 * link + static_cast<size_t>(direction)];
  }
  // nullptr when the node at link.ends[direction] has no gateway (no slots to allocate).
  [[nodiscard]] const SlotCalendar* slots(uint32_t link, int direction) const {
    const auto& s = slots_[2 * link + static_cast<size_t>(direction)];
    return s ? &*s : nullptr;
  }
  // Free reservable rate on the link direction over the window, not counting `ignore_key`'s own
  // booking (a modification re-plans in place).
  [[nodiscard]] uint64_t free_bps(uint32_t link, int direction, int64_t start_ns, int64_t end_ns,
                                  uint64_t ignore_key = 0) const;

  // free_bps(...) >= rate_bps, answered without a window lookup when the link direction's
  // highest level ever leaves room for it (what path search asks of every link it relaxes).
  [[nodiscard]] bool fits(uint32_t link, int direction, int64_t start_ns, int64_t end_ns,
                          uint64_t rate_bps, uint64_t ignore_key = 0) const;

  void book(const Booking& booking);  // replaces an earlier booking of the same key
  // Many bookings of distinct keys at once (an agent's startup): the same state as book() of
  // each, each calendar built by one sort and a sweep. Into an empty ledger; otherwise, or with
  // a key twice, book() of each.
  void book_all(std::vector<Booking> bookings);
  void unbook(uint64_t key);
  [[nodiscard]] const Booking* find(uint64_t key) const;
  [[nodiscard]] size_t size() const noexcept { return bookings_.size(); }
  // End times of bookings after t_ns, sorted and unique (the "as soon as possible" search tries
  // them as start times: capacity only ever frees up when a booking ends).
  [[nodiscard]] std::vector<int64_t> ends_after(int64_t t_ns) const;

  // "" if no link direction is above its reservable rate and no slot is booked twice at any
  // instant; else a description of the first violation found.
  [[nodiscard]] std::string check() const;
  // The same from the calendars as they stand (no rebuild: what an agent's startup runs once it
  // has booked everything it loaded).
  [[nodiscard]] std::string check_calendars() const;
  // The same for one booking against the others (what a journal replay runs after each event).
  [[nodiscard]] std::string check_booking(uint64_t key) const;

 private:
  // The first link direction whose calendar (of `calendars`, 2 per link) is above its
  // reservable rate at some instant; the first booking check_booking() faults. "" if none.
  [[nodiscard]] std::string over_capacity(const std::vector<CapacityCalendar>& calendars) const;
  [[nodiscard]] std::string first_booking_problem() const;

  const model::Topology& topology_;
  std::vector<CapacityCalendar> capacity_;          // 2 per link
  std::vector<std::optional<SlotCalendar>> slots_;  // 2 per link
  std::map<uint64_t, Booking> bookings_;
};

SlotGeometry geometry_of(const model::Link& link);

}  // namespace detwan::control::calendar

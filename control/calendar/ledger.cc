#include "control/calendar/ledger.h"

#include <algorithm>

#include <fmt/format.h>

namespace detwan::control::calendar {

SlotGeometry geometry_of(const model::Link& link) {
  SlotGeometry g;
  g.cycle_ns = link.cycle_ns;
  g.slot_count = link.slot_count;
  g.guard_ns = link.guard_ns;
  g.line_rate_bps = link.capacity_bps;
  g.max_frame_bytes = link.mtu_bytes + 18;  // Ethernet header and FCS, as the gateway counts
  g.reservable_slots = link.reservable_slots();
  return g;
}

Ledger::Ledger(const model::Topology& topology)
    : topology_(topology), capacity_(2 * topology.links.size()), slots_(2 * topology.links.size()) {
  for (uint32_t l = 0; l < topology.links.size(); ++l) {
    for (int d = 0; d < 2; ++d) {
      if (topology.gateway_at_node(topology.links[l].ends[d]) != model::kNone) {
        slots_[2 * l + static_cast<size_t>(d)].emplace(geometry_of(topology.links[l]));
      }
    }
  }
}

uint64_t Ledger::free_bps(uint32_t link, int direction, int64_t start_ns, int64_t end_ns,
                          uint64_t ignore_key) const {
  const uint64_t limit = topology_.links[link].reservable_bps();
  uint64_t used = capacity(link, direction).peak_bps(start_ns, end_ns);
  if (ignore_key != 0) {
    // Conservative: subtract our own rate only if our booking covers the whole window on this
    // link (then every instant's level includes it).
    const Booking* own = find(ignore_key);
    if (own != nullptr && own->start_ns <= start_ns && end_ns <= own->end_ns &&
        std::find(own->links.begin(), own->links.end(), link) != own->links.end()) {
      used = used >= own->rate_bps ? used - own->rate_bps : 0;
    }
  }
  return used >= limit ? 0 : limit - used;
}

bool Ledger::fits(uint32_t link, int direction, int64_t start_ns, int64_t end_ns,
                  uint64_t rate_bps, uint64_t ignore_key) const {
  const uint64_t limit = topology_.links[link].reservable_bps();
  const CapacityCalendar& calendar = capacity(link, direction);
  // Our own booking only lowers what is used: the bound holds with it too.
  auto room = [&] {
    return calendar.max_bound_bps() <= limit && rate_bps <= limit - calendar.max_bound_bps();
  };
  if (room()) return true;
  calendar.tighten_max_bound();
  if (room()) return true;
  return free_bps(link, direction, start_ns, end_ns, ignore_key) >= rate_bps;
}

std::vector<int64_t> Ledger::ends_after(int64_t t_ns) const {
  std::vector<int64_t> out;
  for (const auto& [key, booking] : bookings_) {
    if (booking.end_ns > t_ns) out.push_back(booking.end_ns);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

const Booking* Ledger::find(uint64_t key) const {
  const auto it = bookings_.find(key);
  return it == bookings_.end() ? nullptr : &it->second;
}

void Ledger::book(const Booking& booking) {
  unbook(booking.key);
  for (const uint32_t l : booking.links) {
    for (int d = 0; d < 2; ++d) {
      capacity_[2 * l + static_cast<size_t>(d)].book(booking.start_ns, booking.end_ns,
                                                     booking.rate_bps);
    }
  }
  for (const SlotUse& use : booking.slots) {
    auto& calendar = slots_[2 * use.link + static_cast<size_t>(use.direction)];
    if (calendar) calendar->book(booking.key, booking.start_ns, booking.end_ns, use.slots);
  }
  bookings_[booking.key] = booking;
}

void Ledger::book_all(std::vector<Booking> bookings) {
  std::vector<uint64_t> keys;
  keys.reserve(bookings.size());
  for (const Booking& b : bookings) keys.push_back(b.key);
  std::sort(keys.begin(), keys.end());
  if (!bookings_.empty() || std::adjacent_find(keys.begin(), keys.end()) != keys.end()) {
    for (const Booking& b : bookings) book(b);
    return;
  }
  std::vector<std::vector<CapacityCalendar::Window>> windows(capacity_.size());
  std::vector<std::vector<SlotCalendar::Entry>> entries(slots_.size());
  for (const Booking& b : bookings) {
    for (const uint32_t l : b.links) {
      for (size_t d = 0; d < 2; ++d) windows[2 * l + d].push_back({b.start_ns, b.end_ns, b.rate_bps});
    }
    for (const SlotUse& use : b.slots) {
      const size_t at = 2 * use.link + static_cast<size_t>(use.direction);
      if (slots_[at]) entries[at].push_back({b.key, b.start_ns, b.end_ns, use.slots});
    }
  }
  for (size_t i = 0; i < capacity_.size(); ++i) {
    if (!windows[i].empty()) capacity_[i].assign(windows[i]);
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i] && !entries[i].empty()) slots_[i]->assign(std::move(entries[i]));
  }
  for (Booking& b : bookings) {
    const uint64_t key = b.key;
    bookings_.emplace(key, std::move(b));
  }
}

void Ledger::unbook(uint64_t key) {
  const auto it = bookings_.find(key);
  if (it == bookings_.end()) return;
  const Booking& booking = it->second;
  for (const uint32_t l : booking.links) {
    for (int d = 0; d < 2; ++d) {
      capacity_[2 * l + static_cast<size_t>(d)].unbook(booking.start_ns, booking.end_ns,
                                                       booking.rate_bps);
    }
  }
  for (const SlotUse& use : booking.slots) {
    auto& calendar = slots_[2 * use.link + static_cast<size_t>(use.direction)];
    if (calendar) calendar->unbook(key);
  }
  bookings_.erase(it);
}

std::string Ledger::over_capacity(const std::vector<CapacityCalendar>& calendars) const {
  for (uint32_t l = 0; l < topology_.links.size(); ++l) {
    const model::Link& link = topology_.links[l];
    for (int d = 0; d < 2; ++d) {
      const uint64_t peak =
          calendars[2 * l + static_cast<size_t>(d)].peak_bps(INT64_MIN, INT64_MAX);
      if (peak > link.reservable_bps()) {
        return fmt::format("link '{}' direction {}->{}: {} bit/s booked at once, reservable {}",
                           link.name, topology_.nodes[link.ends[d]].name,
                           topology_.nodes[link.ends[1 - d]].name, peak, link.reservable_bps());
      }
    }
  }
  return "";
}

std::string Ledger::first_booking_problem() const {
  for (const auto& [key, booking] : bookings_) {
    if (std::string problem = check_booking(key); !problem.empty()) return problem;
  }
  return "";
}

std::string Ledger::check() const {
  // Capacity: rebuild from the bookings alone (independent of the incremental calendars).
  std::vector<CapacityCalendar> fresh(2 * topology_.links.size());
  for (const auto& [key, booking] : bookings_) {
    for (const uint32_t l : booking.links) {
      for (int d = 0; d < 2; ++d) {
        fresh[2 * l + static_cast<size_t>(d)].book(booking.start_ns, booking.end_ns,
                                                   booking.rate_bps);
      }
    }
  }
  if (std::string problem = over_capacity(fresh); !problem.empty()) return problem;
  // Slots: two bookings with overlapping windows on one port never share a slot.
  return first_booking_problem();
}

std::string Ledger::check_calendars() const {
  if (std::string problem = over_capacity(capacity_); !problem.empty()) return problem;
  // Slots: only a calendar that recorded a double booking has one; then name it as check() does.
  const bool shared = std::any_of(slots_.begin(), slots_.end(), [](const auto& calendar) {
    return calendar && calendar->any_shared();
  });
  return shared ? first_booking_problem() : "";
}

std::string Ledger::check_booking(uint64_t key) const {
  const Booking* booking = find(key);
  if (booking == nullptr) return "";
  for (const uint32_t l : booking->links) {
    const model::Link& link = topology_.links[l];
    for (int d = 0; d < 2; ++d) {
      const uint64_t peak = capacity(l, d).peak_bps(booking->start_ns, booking->end_ns);
      if (peak > link.reservable_bps()) {
        return fmt::format("link '{}' {}->{}: {} bit/s booked at once, reservable {} (booking {})",
                           link.name, topology_.nodes[link.ends[d]].name,
                           topology_.nodes[link.ends[1 - d]].name, peak, link.reservable_bps(),
                           key);
      }
    }
  }
  for (const SlotUse& use : booking->slots) {
    const auto& calendar = slots_[2 * use.link + static_cast<size_t>(use.direction)];
    if (!calendar) continue;
    if (const auto shared = calendar->shared_slot(key)) {
      return fmt::format("slot {} of link '{}' leaving '{}' is booked by {} and {} at once",
                         shared->first, topology_.links[use.link].name,
                         topology_.nodes[topology_.links[use.link].ends[use.direction]].name, key,
                         shared->second);
    }
  }
  return "";
}

}  // namespace detwan::control::calendar

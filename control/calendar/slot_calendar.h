#pragma once
// Time slots of one gateway WAN port (one link direction) over time, and the slot arithmetic the
// gateway itself applies (dataplane/sched/gate_control_list.h), so a set the agent allocates is
// always one the gateway accepts:
//   nominal rate    = owned slots / slot_count * line rate
//   guaranteed rate = sum over the owner's windows (maximal circular runs of its slots) of
//                     (run length - guard - one max frame at line rate) * line rate / cycle
// A tunnel needs both >= its reserved rate.
//
// Bookings are (key, [start, end), slots); two bookings whose windows overlap never share a
// slot. Not thread-safe: owned by the agent's core.
//
// Storage: like CapacityCalendar, a step function over time -- an ordered tree of breakpoints,
// each with the bitmap of the slots booked from then on (at any instant a slot has at most one
// owner, so one bit says who has it) -- so free_slots() and plan() cost a descent plus the
// breakpoints inside the window, whatever the number of bookings on the port (it was a scan of
// every booking of the port). The bookings themselves are
// kept by key (unbook, and naming the other key of a double booking). A double booking (only a
// forced or corrupt state has one: plan() never makes it) is recorded when booked; while one
// exists, the queries that involve its keys answer from the bookings (a scan), exactly as
// before, and unbooking one of its keys rebuilds the bitmaps.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace detwan::control::calendar {

struct SlotGeometry {
  int64_t cycle_ns = 1'000'000;
  uint32_t slot_count = 100;
  int64_t guard_ns = 0;
  uint64_t line_rate_bps = 0;
  uint32_t max_frame_bytes = 1518;  // mtu + Ethernet header and FCS
  uint32_t reservable_slots = 100;  // at most this many slots are booked at any instant
  [[nodiscard]] int64_t slot_ns() const noexcept { return cycle_ns / slot_count; }
  [[nodiscard]] int64_t max_frame_ns() const noexcept;
};

// Guaranteed rate of a slot set (sorted, unique) exactly as the gateway computes it.
uint64_t guaranteed_rate_bps(const SlotGeometry& geometry, const std::vector<uint32_t>& slots);
uint64_t nominal_rate_bps(const SlotGeometry& geometry, size_t slot_count);
// The longest time in a cycle the owner of `slots` cannot start a frame that ends in its window
// (cycle - the shortest usable window): the latency T of the latency-rate server the slots form.
// 0 for every slot; cycle when no window is usable.
int64_t service_latency_ns(const SlotGeometry& geometry, const std::vector<uint32_t>& slots);

class SlotCalendar {
 public:
  explicit SlotCalendar(SlotGeometry geometry)
      : geometry_(geometry), words_((geometry.slot_count + 63) / 64) {}
  [[nodiscard]] const SlotGeometry& geometry() const noexcept { return geometry_; }

  // Slots free during all of [start_ns, end_ns), ignoring bookings under `ignore_key` (a
  // modification re-plans its own booking). Bit i set = slot i free.
  [[nodiscard]] std::vector<bool> free_slots(int64_t start_ns, int64_t end_ns,
                                             uint64_t ignore_key = 0) const;
  // Fewest slots that carry rate_bps (nominal and guaranteed) among the free ones, preferring
  // one contiguous run (one guard band), then the longest runs; nullopt if none suffice or the
  // port's reservable share would be exceeded. Prefers `preferred` when it is still free and
  // sufficient (a modification keeps its slots when it can).
  [[nodiscard]] std::optional<std::vector<uint32_t>> plan(
      uint64_t rate_bps, int64_t start_ns, int64_t end_ns, uint64_t ignore_key = 0,
      const std::vector<uint32_t>* preferred = nullptr) const;
  void book(uint64_t key, int64_t start_ns, int64_t end_ns, std::vector<uint32_t> slots);
  void unbook(uint64_t key);  // every booking of key
  // Many bookings at once into an empty calendar (an agent's startup): the same state as book()
  // of each, built by one sort and a sweep (book() of each again when two share a slot).
  struct Entry {
    uint64_t key;
    int64_t start_ns;
    int64_t end_ns;
    std::vector<uint32_t> slots;
  };
  void assign(std::vector<Entry> entries);
  [[nodiscard]] size_t bookings() const noexcept { return count_; }
  [[nodiscard]] size_t breakpoints() const noexcept { return levels_.size(); }
  // A slot that `key` shares with another booking whose window overlaps its own: (slot, other
  // key), or nullopt. What Ledger::check_booking asks of each port the booking holds slots on.
  [[nodiscard]] std::optional<std::pair<uint32_t, uint64_t>> shared_slot(uint64_t key) const;
  // Whether any two bookings share a slot at some instant.
  [[nodiscard]] bool any_shared() const noexcept { return !shared_.empty(); }
  // Slots booked at instant t_ns (for status).
  [[nodiscard]] uint32_t booked_at(int64_t t_ns) const;

 private:
  struct Booking {
    uint64_t key = 0;
    int64_t start_ns = 0;
    int64_t end_ns = 0;
    std::vector<uint32_t> slots;
  };
  struct Shared {
    uint64_t key = 0;
    uint64_t other = 0;
    uint32_t slot = 0;
  };
  using Bits = std::vector<uint64_t>;  // words_ words: bit s = slot s booked
  using Levels = std::map<int64_t, Bits>;
  Levels::iterator split_at(int64_t t_ns);  // the breakpoint at t_ns (made if needed)
  void merge_at(Levels::iterator it);       // drops it when it changes nothing
  // Sets or clears its slots over its window; whether setting found one of them set already.
  bool apply(const Booking& booking, bool set);
  void rebuild();                                // the bitmaps again from the bookings
  [[nodiscard]] bool involved(uint64_t key) const;  // in a double booking
  // The scans the bitmaps replace, for the states that have a double booking.
  [[nodiscard]] std::vector<bool> free_slots_by_scan(int64_t start_ns, int64_t end_ns,
                                                     uint64_t ignore_key) const;
  [[nodiscard]] uint32_t booked_at_by_scan(int64_t t_ns) const;

  SlotGeometry geometry_;
  size_t words_;                // 64-bit words per bitmap
  Levels levels_;  // the slots booked from each breakpoint on; before the first, none
  std::map<uint64_t, std::vector<Booking>> by_key_;
  size_t count_ = 0;
  std::vector<Shared> shared_;  // double bookings, both ways round
};

}  // namespace detwan::control::calendar

#pragma once
// Gate control list of one WAN port: the cyclic time-slot schedule (docs/dataplane.md,
// "The time-slot model").
//
// A cycle of cycle_ns starts at base_time_ns + k * cycle_ns for every integer k and is divided
// into slot_count equal slots. Each slot is owned by one tunnel or is unreserved (best effort).
// A maximal run of consecutive slots with the same owner is a *window*; runs continue across
// the cycle boundary (slot S-1 followed by slot 0 of the next cycle). Frames of an owner may
// straddle slot boundaries inside its window, and the serialisation of each frame at
// line_rate_bps must end at or before the window's end minus guard_ns ("usable end"), so the
// next owner's window starts on an idle line. An owner that holds every slot has one endless
// window and needs no guard.
//
// Setup: GateControlList::create() validates a GclConfig and returns a clear error naming the
// tunnel or slot at fault. Queries are datapath-safe: no allocation, no exceptions, O(log W)
// in the owner's number of windows W.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "dataplane/sched/link_time.h"

namespace detwan::dataplane::sched {

struct GclTunnel {
  uint32_t tunnel_id = 0;
  uint64_t reserved_rate_bps = 0;  // > 0; what the policer admits (tx_scheduler.h)
  std::vector<uint32_t> slots;     // owned slot indices in [0, slot_count), any order
};

struct GclConfig {
  int64_t cycle_ns = 1'000'000;  // > 0, a multiple of slot_count
  uint32_t slot_count = 100;     // > 0
  int64_t base_time_ns = 0;      // cycles start at base_time_ns + k * cycle_ns
  int64_t guard_ns = 0;          // idle time before the end of each window; < slot length
  uint64_t line_rate_bps = 10'000'000'000;
  uint32_t max_frame_bytes = 1518;  // largest frame the port sends (bytes on the wire)
  std::vector<GclTunnel> tunnels;
};

// Index of an owner inside one GateControlList: tunnels in increasing tunnel-id order, then
// best effort. Cheaper than looking the tunnel id up for every packet.
using OwnerIndex = uint32_t;
inline constexpr OwnerIndex kNoOwner = UINT32_MAX;
inline constexpr int64_t kNever = INT64_MAX;  // "no such time" from the queries below

// A window of one owner in absolute time: [start_ns, end_ns); frames must end by usable_end_ns.
struct Window {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t usable_end_ns = 0;  // end_ns - guard_ns; INT64_MAX for an owner of every slot
};

// Where a frame may leave: start (exact, >= the requested time) and the window it leaves in.
struct Departure {
  LinkTime start;
  LinkTime end;               // start + serialisation
  int64_t usable_end_ns = 0;  // of the window; the frame must leave by then
};

struct SlotPosition {
  int64_t cycle_id = 0;  // floor((t - base_time_ns) / cycle_ns); negative before base
  uint32_t slot = 0;
  int64_t offset_in_slot_ns = 0;
};

class GateControlList {
 public:
  // Validates and builds the windows. Errors (ErrorCode::kConfig) name the offending tunnel or
  // slot: slot out of range, slot claimed twice, guard >= slot length, a tunnel whose slots
  // cannot carry its reserved rate, total reservation above line rate, and the basic ranges.
  static common::Result<GateControlList> create(GclConfig config);

  [[nodiscard]] const GclConfig& config() const noexcept { return config_; }
  [[nodiscard]] int64_t slot_ns() const noexcept { return slot_ns_; }
  [[nodiscard]] uint32_t tunnel_count() const noexcept {
    return static_cast<uint32_t>(tunnel_ids_.size());
  }
  [[nodiscard]] OwnerIndex best_effort_owner() const noexcept { return tunnel_count(); }
  // Owner index of a tunnel id, kNoOwner if the list has no such tunnel (binary search).
  [[nodiscard]] OwnerIndex find_owner(uint32_t tunnel_id) const noexcept;
  // Tunnel id of owner index i < tunnel_count().
  [[nodiscard]] uint32_t tunnel_id_of(OwnerIndex owner) const noexcept {
    return tunnel_ids_[owner];
  }
  [[nodiscard]] uint64_t reserved_rate_bps(OwnerIndex owner) const noexcept;
  // Owner of a slot (best_effort_owner() for an unreserved one); slot < slot_count.
  [[nodiscard]] OwnerIndex owner_of_slot(uint32_t slot) const noexcept { return slot_owner_[slot]; }
  [[nodiscard]] uint32_t owned_slot_count(OwnerIndex owner) const noexcept;
  // Rate an owner can always carry with frames up to max_frame_bytes: its windows minus guard
  // bands minus one max frame per window (the part a frame that does not fit leaves idle).
  [[nodiscard]] uint64_t guaranteed_rate_bps(OwnerIndex owner) const noexcept;

  // ---- Datapath queries (no allocation, no exceptions) ----
  [[nodiscard]] SlotPosition position_at(int64_t t_ns) const noexcept;
  [[nodiscard]] int64_t cycle_at(int64_t t_ns) const noexcept { return position_at(t_ns).cycle_id; }
  [[nodiscard]] uint32_t slot_at(int64_t t_ns) const noexcept { return position_at(t_ns).slot; }

  // Earliest start >= earliest at which a frame of `bytes` can leave inside one of the owner's
  // windows and end by its usable end; later windows if it does not fit the current one.
  // Returns false (nothing written) if the owner has no window that fits such a frame, or
  // bytes is 0 or above max_frame_bytes. With `window`, also the window the frame leaves in
  // (an owner of every slot: one window from INT64_MIN to INT64_MAX).
  [[nodiscard]] bool find_departure(OwnerIndex owner, uint32_t bytes, LinkTime earliest,
                                    Departure* out, Window* window = nullptr) const noexcept;
  // Same, in whole nanoseconds: the first ns at or after the exact start; kNever if none.
  [[nodiscard]] int64_t earliest_departure_ns(OwnerIndex owner, uint32_t bytes,
                                              int64_t t_ns) const noexcept;
  // Window of `owner` containing t_ns, or false if t_ns is outside the owner's windows.
  [[nodiscard]] bool window_at(OwnerIndex owner, int64_t t_ns, Window* out) const noexcept;

  // The effective schedule, one line per owner: "tunnel 7: slots 0-39 (40/100), reserved
  // 3.9gbit, guaranteed 3.97gbit". For printing at start-up.
  [[nodiscard]] std::string describe() const;

 private:
  struct CycleWindow {
    int64_t start_offset_ns = 0;  // in [0, cycle_ns)
    int64_t length_ns = 0;        // may run past the cycle end (wraps into the next cycle)
  };
  struct Owner {
    std::vector<CycleWindow> windows;  // sorted by start_offset_ns
    bool always_open = false;          // owns every slot
    uint32_t owned_slots = 0;
    uint64_t reserved_rate_bps = 0;
  };

  GateControlList() = default;
  // Absolute window number i (counted from the first window of cycle first_cycle).
  [[nodiscard]] Window window_from(const Owner& owner, int64_t first_cycle,
                                   uint64_t i) const noexcept;
  [[nodiscard]] uint64_t first_window_ending_after(const Owner& owner, int64_t first_cycle,
                                                   int64_t t_ns) const noexcept;

  GclConfig config_;
  int64_t slot_ns_ = 0;
  std::vector<uint32_t> tunnel_ids_;    // sorted
  std::vector<OwnerIndex> slot_owner_;  // per slot
  std::vector<Owner> owners_;           // tunnels (sorted by id), then best effort
};

// "0-39,50,60-61" -> {0..39, 50, 60, 61}. Errors name the token and the slot count.
common::Result<std::vector<uint32_t>> parse_slot_list(std::string_view text, uint32_t slot_count);
// Inverse: sorted ranges, "0-39,50,60-61"; "" for no slots.
std::string format_slot_list(std::vector<uint32_t> slots);

}  // namespace detwan::dataplane::sched

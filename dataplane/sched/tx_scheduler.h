#pragma once
// Transmit scheduler of one WAN port: policer + optional shaper per tunnel, the gate control
// list's departure rule, and a timing wheel that releases each frame at its departure time
// (docs/dataplane.md, "The time-slot model"). Pure logic in injected time: no I/O, no clock
// reads, no allocation after create(), no exceptions on the datapath.
//
// Per frame, enqueue() at now_ns:
//   1. unknown tunnel -> drop unknown_tunnel; size 0 or above max_frame_bytes -> drop oversize;
//   2. policer (reserved rate, burst_bytes): an exceeding frame is dropped (policed) or, per the
//      tunnel's policy, downgraded to best effort (counted on the tunnel as downgraded, then
//      scheduled and counted as best effort);
//   3. the owner's queue holds queue_frames frames at most -> drop queue_full;
//   4. departure = the earliest exact instant >= max(now, end of the owner's previous frame,
//      shaper conformance time) at which the frame's serialisation at line rate fits one of
//      the owner's windows before its usable end (gate_control_list.h). If that is later than
//      the earliest instant it was *held* for a later slot (counted held_for_slot). If the wait
//      (departure - now) exceeds max_wait_ns -> drop max_wait. No window fits -> drop no_slot;
//   5. the frame goes into the timing wheel (capacity_frames for the whole port -> drop
//      no_capacity; past the wheel's horizon -> drop beyond_horizon).
// Frames of one owner never overlap and leave in order; owners have disjoint windows, so no two
// frames of the port overlap on the line.
//
// dequeue_due(now_ns) hands every frame whose departure time has come to the sink, in
// departure order. If the caller is so late that the frame can no longer end inside its
// window (now > the latest start), it is moved to the owner's next window that fits (policy
// MissedSlot::kNextWindow, the default; counted `rescheduled`) or, if it may not or cannot wait
// (max_wait, capacity), handed over with send == false and counted missed_slot: never silently
// late, never outside its slots. The caller frees every frame the sink receives.
//
// reconfigure() replaces the list and the policies at run time (a tunnel added, changed or
// removed) without disturbing the owners it does not change; see its comment.
//
// Status: kOk = queued (the scheduler holds the handle until the sink gets it);
//         kDropped = not queued, reason counted, the caller frees the frame.
// Time: arguments are absolute ns of one clock (the cycle's clock, e.g. CLOCK_TAI) and must not
// go backwards; an earlier value is treated as the latest seen.
// Threading: every method belongs to the port's thread.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/counter_table.h"
#include "common/histogram.h"
#include "common/status.h"
#include "dataplane/sched/gate_control_list.h"
#include "dataplane/sched/timing_wheel.h"
#include "dataplane/sched/token_bucket.h"

namespace detwan::dataplane::sched {

inline constexpr int64_t kNoMaxWait = std::numeric_limits<int64_t>::max();
inline constexpr uint32_t kNoTunnel = std::numeric_limits<uint32_t>::max();

enum class TxDrop : uint8_t {
  kUnknownTunnel = 0,  // enqueue() for a tunnel the port does not carry
  kOversize,           // 0 bytes or above max_frame_bytes
  kPoliced,            // above the reservation, policy drop
  kQueueFull,          // the owner's queue_frames reached
  kMaxWait,            // would wait longer than max_wait_ns for its slot
  kNoSlot,             // no window of the owner fits the frame (e.g. no unreserved slot)
  kNoCapacity,         // the port's capacity_frames reached
  kBeyondHorizon,      // departure beyond the timing wheel's horizon
  kMissedSlot,         // dequeued too late to end inside its window, and not moved to the next
                       // (policy MissedSlot::kDrop, or the next window is past max_wait/capacity)
  kReconfigured,       // queued when reconfigure() moved its owner's slots, and no new window
                       // took it (max_wait, horizon, capacity)
  kTunnelRemoved,      // queued for a tunnel that reconfigure() removed
  kCount
};
inline constexpr int kTxDropCount = static_cast<int>(TxDrop::kCount);
std::string_view to_string(TxDrop reason) noexcept;  // "unknown_tunnel", "oversize", ...

// What happens to a frame dequeued too late to end inside its window (the caller's thread woke
// up late). Either way it is never sent outside its owner's slots, and the event is counted.
enum class MissedSlot : uint8_t {
  kNextWindow = 0,  // move it to the owner's next window that fits (counted as rescheduled)
  kDrop = 1,        // drop it (counted as dropped: missed_slot)
};

struct TxCounters {
  uint64_t offered_packets = 0;  // enqueue() calls (best effort: including downgraded frames)
  uint64_t offered_bytes = 0;
  uint64_t queued_packets = 0;  // accepted into the schedule
  uint64_t queued_bytes = 0;
  uint64_t sent_packets = 0;  // handed to the sink with send == true
  uint64_t sent_bytes = 0;
  uint64_t downgraded_packets = 0;  // tunnel: policed frames moved to best effort
  uint64_t downgraded_bytes = 0;
  uint64_t held_for_slot = 0;  // frames that had to wait for a later (owned) slot
  uint64_t rescheduled = 0;    // frames that missed their window and moved to a later one
  uint64_t dropped[kTxDropCount] = {};
  // Actual - scheduled departure, from record_departure().
  common::LogLinearHistogram departure_error_ns;
  // Scheduled departure - enqueue time of each queued frame.
  common::LogLinearHistogram queue_wait_ns;
};

// TxCounters' scalar counters, one list for counters_json(), the gateway's exposition (metric
// after the owner's prefix: detwan_gw_port_tx_, detwan_gw_best_effort_tx_, detwan_gw_tunnel_tx_)
// and the sums over shards (common/counter_table.h). `dropped` and the histograms are written
// beside them.
inline constexpr common::CounterField<TxCounters> kTxCounterFields[] = {
    {&TxCounters::offered_packets, "offered_packets", "offered_packets_total",
     "Frames offered to the scheduler"},
    {&TxCounters::offered_bytes, "offered_bytes", "offered_bytes_total",
     "Bytes (on the wire) offered to the scheduler"},
    {&TxCounters::queued_packets, "queued_packets", "queued_packets_total",
     "Frames accepted into the schedule"},
    {&TxCounters::queued_bytes, "queued_bytes", "queued_bytes_total",
     "Bytes accepted into the schedule"},
    {&TxCounters::sent_packets, "sent_packets", "sent_packets_total", "Frames sent in their slots"},
    {&TxCounters::sent_bytes, "sent_bytes", "sent_bytes_total", "Bytes sent in their slots"},
    {&TxCounters::downgraded_packets, "downgraded_packets", "downgraded_packets_total",
     "Frames above the reservation sent as best effort"},
    {&TxCounters::downgraded_bytes, "downgraded_bytes", "downgraded_bytes_total",
     "Bytes above the reservation sent as best effort"},
    {&TxCounters::held_for_slot, "held_for_slot", "held_for_slot_total",
     "Frames that waited for a later window"},
    {&TxCounters::rescheduled, "rescheduled", "rescheduled_total",
     "Frames that missed their window and took a later one"},
};

struct TunnelTxPolicy {
  uint32_t tunnel_id = 0;
  uint64_t burst_bytes = 0;  // policer depth; 0 = auto: one cycle at the reserved rate,
                             // at least 8 * max_frame_bytes
  OverRateAction over_rate = OverRateAction::kDrop;
  uint64_t shaper_rate_bps = 0;     // 0 = no shaper (the slots and the policer shape)
  uint64_t shaper_burst_bytes = 0;  // 0 = max_frame_bytes
  uint32_t queue_frames = 1024;
  int64_t max_wait_ns = kNoMaxWait;
  MissedSlot missed_slot = MissedSlot::kNextWindow;
};

struct BestEffortTxPolicy {
  uint32_t queue_frames = 4096;
  int64_t max_wait_ns = kNoMaxWait;
  MissedSlot missed_slot = MissedSlot::kNextWindow;
};

struct TxSchedulerConfig {
  std::vector<TunnelTxPolicy> tunnels;  // tunnels of the list not named here get the defaults
  BestEffortTxPolicy best_effort;
  uint32_t capacity_frames = 65536;  // frames held at once, whole port
  int64_t wheel_granularity_ns = 0;  // 0 = auto: slot length / 8, at least 1 ns
  uint32_t wheel_buckets = 0;        // 0 = auto: horizon >= 4 cycles and >= max wait + 2 cycles
};

// One frame handed to the dequeue_due() sink.
struct TxFrame {
  uint64_t handle = 0;
  uint32_t bytes = 0;
  uint32_t tunnel_id = kNoTunnel;  // kNoTunnel for best-effort traffic
  OwnerIndex owner = kNoOwner;     // whose slots it leaves in (best_effort_owner() if downgraded)
  bool best_effort = false;        // leaves in unreserved slots (best effort or downgraded)
  bool send = true;                // false: not sent (counted): free it, do not send
  TxDrop drop = TxDrop::kCount;    // why, when !send: kMissedSlot, kReconfigured, kTunnelRemoved
  int64_t departure_ns = 0;        // scheduled start of serialisation
  int64_t tx_end_ns = 0;           // scheduled end of serialisation (rounded up to a ns)
  int64_t cycle_id = 0;            // of departure_ns
  uint32_t slot = 0;               // of departure_ns
  int64_t enqueue_ns = 0;
  uint64_t tag = 0;  // the caller's, as given to enqueue (opaque here; 0 = none)
};

class TxScheduler {
 public:
  class Change;

  // Setup: validates the policies against the list (ErrorCode::kConfig, naming the tunnel) and
  // allocates everything the datapath will use: the timing wheel (capacity_frames entries) and a
  // spare wheel of the same size for run-time changes, both written once so that their pages
  // are faulted in now. start_ns anchors the wheel and the buckets.
  static common::Result<TxScheduler> create(GateControlList gcl, const TxSchedulerConfig& config,
                                            int64_t start_ns);
  // Setup: exactly the checks create() makes, with the same errors, building nothing (for a
  // configuration validator).
  static common::Result<void> check(const GateControlList& gcl, const TxSchedulerConfig& config,
                                    int64_t start_ns);

  // `tag` travels with the frame to dequeue (TxFrame::tag), e.g. a sequence number the caller
  // fixed at enqueue time; the scheduler never looks at it.
  [[nodiscard]] common::Status enqueue(uint32_t tunnel_id, uint64_t handle, uint32_t bytes,
                                       int64_t now_ns, uint64_t tag = 0) noexcept;
  [[nodiscard]] common::Status enqueue_best_effort(uint64_t handle, uint32_t bytes,
                                                   int64_t now_ns) noexcept;
  // Best effort on behalf of a tunnel (e.g. traffic to its prefixes outside its UDP ports):
  // scheduled and counted exactly like enqueue_best_effort(), but the TxFrame carries tunnel_id
  // (best_effort == true) so the caller can label the frame. tunnel_id is not looked up.
  [[nodiscard]] common::Status enqueue_best_effort(uint64_t handle, uint32_t bytes, int64_t now_ns,
                                                   uint32_t tunnel_id, uint64_t tag = 0) noexcept;
  // A frame of the tunnel that bypasses its policer (the gateway's own control packets, which
  // must get through a saturated tunnel): every other step of enqueue() applies and it is
  // counted on the tunnel like any frame.
  [[nodiscard]] common::Status enqueue_unpoliced(uint32_t tunnel_id, uint64_t handle,
                                                 uint32_t bytes, int64_t now_ns) noexcept;

  // Calls sink(const TxFrame&) for each frame with departure_ns <= now_ns, in departure order,
  // at most max_frames of them. Returns how many it handed over. Must not block.
  template <typename Sink>
  uint32_t dequeue_due(int64_t now_ns, Sink&& sink,
                       uint32_t max_frames = std::numeric_limits<uint32_t>::max()) noexcept;
  // The next frame due at now_ns into *frame (false: none): dequeue_due() one at a time, for a
  // caller that reads the frame's fields directly (tx_scheduler_datapath.cc).
  bool pop_due(int64_t now_ns, TxFrame* frame) noexcept { return pop_due(now_ns, frame, now_ns); }
  // The same, but a frame departing up to release_until_ns is handed over already (early): a
  // caller that wakes once per batch (the io_uring loop) gives release_horizon_ns(). now_ns is
  // the real time: the missed-slot check and the scheduler's clock use it, never the horizon.
  bool pop_due(int64_t now_ns, TxFrame* frame, int64_t release_until_ns) noexcept;
  // How far ahead of now_ns a caller may release frames without any frame leaving outside its
  // owner's slots: now_ns + ahead_ns, but no later than the end of the window that is open at
  // now_ns (every frame departing before that end belongs to that window's owner, whose slots
  // are open now; the link serialises a burst handed over at once back to back, as the exact
  // departures would). ahead_ns <= 0: now_ns. Non-decreasing in now_ns.
  [[nodiscard]] int64_t release_horizon_ns(int64_t now_ns, int64_t ahead_ns) const noexcept;
  // Departure time of the next frame (INT64_MAX when nothing is queued); frames reconfigure()
  // hands back are due at once.
  [[nodiscard]] int64_t next_event_ns() const noexcept {
    return returned_next_ < returned_.size() ? last_now_ns_ : wheel_.next_ts_ns();
  }
  // The caller reports when a frame actually left: departure error = actual - scheduled.
  void record_departure(const TxFrame& frame, int64_t actual_ns) noexcept;

  // ---- run-time changes (setup tier: may allocate; on the port's thread between dequeues) ----
  // Replaces the gate control list and the policies at now_ns, all or nothing: on an error
  // (the same checks as create(), kConfig naming the tunnel) nothing changes. Owners are matched
  // by tunnel id, so owner indices may change. What happens to the frames already queued:
  //  * an owner whose slots are the same in both lists (tunnels: same slot set; best effort:
  //    same unreserved slots) keeps its frames at their departures, its next-free time, and
  //    its policer and shaper unless their parameters changed (rate, burst, over_rate; shaper
  //    rate and burst), which get fresh buckets (full at now_ns);
  //  * an owner whose slots changed has its frames re-placed in its new windows from now_ns, in
  //    their old order, each under the owner's max_wait (counted from its enqueue time); one
  //    that fits no window (max_wait, the wheel's horizon or capacity) is handed back;
  //  * frames of a tunnel absent from the new list (and best-effort frames queued on its
  //    behalf) are handed back.
  // Handed back = given to the next dequeue_due() sink at once with send == false and drop
  // kReconfigured / kTunnelRemoved (counted on the port, and on the owner if it remains), so the
  // caller frees them. Counters of remaining owners and of the port are kept. A list with another
  // cycle, slot count, guard, base time, line rate or max frame re-places every owner. The frames
  // go into a new wheel that starts at now_ns and always covers every frame kept at its
  // departure.
  // Cost: the wheel is double-buffered. The frames are written into the spare wheel, the two are
  // swapped and the old one is cleared (timing_wheel.h, clear()); owners keep their counters in
  // place. So a change costs O(slots + owners + frames held + buckets / 64), with no allocation
  // beyond the few small vectors of the new list, unless the wheel's size changes (capacity,
  // granularity or bucket count, e.g. with the longest max_wait): then a wheel and its spare are
  // allocated as create() does. A removed tunnel's counters are kept, cleared, for a tunnel added
  // later; only a tunnel added beyond those gets new ones.
  [[nodiscard]] common::Result<void> reconfigure(GateControlList gcl,
                                                 const TxSchedulerConfig& config, int64_t now_ns);
  // The same in two halves, for a caller that must prepare several schedulers before changing
  // any (all or nothing). prepare_reconfigure() makes every check and every allocation and does
  // not change this scheduler; dropping its result abandons the change. commit() then cannot
  // fail and allocates nothing. It must get the Change that prepare_reconfigure() of this
  // scheduler returned, with no other call on the scheduler in between.
  [[nodiscard]] common::Result<Change> prepare_reconfigure(GateControlList gcl,
                                                           const TxSchedulerConfig& config,
                                                           int64_t now_ns) const;
  void commit(Change&& change) noexcept;

  [[nodiscard]] const GateControlList& gcl() const noexcept { return gcl_; }
  [[nodiscard]] const TxCounters& port_counters() const noexcept { return port_; }
  [[nodiscard]] const TxCounters& best_effort_counters() const noexcept {
    return owners_.back().counters;
  }
  // nullptr for a tunnel this port does not carry.
  [[nodiscard]] const TxCounters* tunnel_counters(uint32_t tunnel_id) const noexcept;
  // Frames held: queued, plus handed-back frames the sink has not taken yet.
  [[nodiscard]] uint32_t held_frames() const noexcept {
    return wheel_.size() + static_cast<uint32_t>(returned_.size() - returned_next_);
  }
  [[nodiscard]] uint32_t held_frames(OwnerIndex owner) const noexcept;
  // {"port":C,"best_effort":C,"tunnels":{"7":C,...},"held_frames":N} with
  // C = {"offered_packets",...,"held_for_slot","dropped":{"unknown_tunnel",...},
  //      "departure_error_ns":H,"queue_wait_ns":H}, H = LogLinearHistogram::summary_json().
  [[nodiscard]] std::string counters_json() const;
  // The effective configuration: the list plus each owner's policy, for printing at start-up.
  [[nodiscard]] std::string describe() const;

 private:
  struct Entry {
    uint64_t handle = 0;
    int64_t enqueue_ns = 0;
    int64_t tx_end_ns = 0;
    int64_t deadline_ns = 0;  // latest whole-ns start that still ends by the usable end
    uint32_t bytes = 0;
    uint32_t tunnel_id = kNoTunnel;
    OwnerIndex owner = kNoOwner;
    uint64_t tag = 0;
  };
  // A slot slot_position() found: [start_ns, end_ns); empty (0, 0) until then.
  struct SlotCache {
    int64_t start_ns = 0;
    int64_t end_ns = 0;
    int64_t cycle_id = 0;
    uint32_t slot = 0;
  };
  // An owner's policy and state, without its counters (cheap to build for a change).
  struct OwnerRules {
    OwnerRules(const TunnelTxPolicy& policy, uint64_t reserved_rate_bps, uint64_t burst_bytes,
               uint64_t shaper_burst_bytes, int64_t start_ns);
    TunnelTxPolicy configured_policy;  // as given (burst/shaper burst 0 = auto)
    Policer policer;                   // tunnels only (best effort: never consulted)
    TokenBucket shaper;                // used when shaped
    bool shaped = false;
    uint32_t queue_frames = 0;
    int64_t max_wait_ns = kNoMaxWait;
    MissedSlot missed_slot = MissedSlot::kNextWindow;
    uint32_t held = 0;
    LinkTime next_free;  // end of the owner's last scheduled frame
    // Per-packet caches, empty in a new owner (so after every change of list): the window the
    // owner's last frame left in (departure()) and the slot of its last dequeued frame
    // (slot_position()).
    Window open_window;
    SlotCache slot_cache;
  };
  struct OwnerState : OwnerRules {
    OwnerState(OwnerRules&& rules, TxCounters&& moved_counters) noexcept
        : OwnerRules(std::move(rules)), counters(std::move(moved_counters)) {}
    TxCounters counters;  // its histograms are large (common/histogram.h): moved, never copied
  };
  using Wheel = TimingWheel<Entry>;
  // What create() and a change check and derive from a list and its policies.
  struct Plan {
    std::vector<OwnerRules> owners;  // gcl owner order, best effort last
    int64_t wheel_granularity_ns = 0;
    uint32_t wheel_buckets = 0;  // as the wheel rounds it
    uint32_t capacity_frames = 0;
  };

  TxScheduler(GateControlList gcl, Wheel wheel, Wheel spare);
  // The checks, the owners' rules at start_ns and the wheel's geometry: a horizon from start_ns
  // that reaches at least min_horizon_end_ns (when the bucket count is automatic).
  static common::Result<Plan> plan(const GateControlList& gcl, const TxSchedulerConfig& config,
                                   int64_t start_ns, int64_t min_horizon_end_ns);
  // commit()'s frames: each frame of old_wheel kept, re-placed or handed back into `into`
  // (empty, starting at now_ns), under the new list and owners already in place
  // (tx_scheduler_reconfigure.cc).
  void take_frames(const Change& change, const Wheel& old_wheel, Wheel& into) noexcept;
  void hand_back(const Entry& entry, OwnerIndex counted_owner, TxDrop reason,
                 int64_t now_ns) noexcept;
  common::Status schedule(OwnerIndex owner, uint32_t tunnel_id, uint64_t handle, uint32_t bytes,
                          int64_t now_ns, uint64_t tag = 0) noexcept;
  common::Status drop(OwnerState& state, TxDrop reason) noexcept;
  // What every enqueue does first: clamp the clock (never backwards), count the offer on the
  // port and on the owner, refuse an unknown tunnel (owner kNoOwner) or a bad size. kOk, or the
  // status to return (the reason counted).
  common::Status offer(OwnerIndex owner, uint32_t bytes, int64_t* now_ns) noexcept;
  // gcl_.position_at(t_ns) without its divisions when t_ns lies in the cached slot (an
  // owner's consecutive departures mostly do: the cache is per owner).
  SlotPosition slot_position(SlotCache& cache, int64_t t_ns) const noexcept;
  // gcl_.find_departure() for the owner, the open-window fast path first: a frame that would
  // start inside the window its owner's last frame left in, and ends by its usable end, leaves
  // at `earliest` -- what the search answers then (the window holding a time is the first
  // ending after it) -- without the search and its divisions.
  bool departure(OwnerState& state, OwnerIndex owner, uint32_t bytes, LinkTime earliest,
                 Departure* out) const noexcept;
  // A frame that missed its window: into the owner's next window if the policy allows and it
  // fits (true), else counted as dropped (false).
  bool reschedule_missed(Entry& entry, int64_t now_ns) noexcept;

  GateControlList gcl_;
  Wheel wheel_;
  Wheel spare_;                     // same geometry as wheel_, empty: what the next change fills
  std::vector<OwnerState> owners_;  // gcl owner order: tunnels, then best effort (back())
  TxCounters port_;
  int64_t last_now_ns_ = std::numeric_limits<int64_t>::min();
  int64_t last_release_until_ns_ = std::numeric_limits<int64_t>::min();  // pop_due's horizon
  // Counters of removed tunnels, kept (and cleared) for tunnels added later: their histograms
  // are the largest part of an owner. At most as many as tunnels were removed and not replaced.
  std::vector<TxCounters> spare_counters_;
  // Frames reconfigure() handed back, given to the sink (send == false) before any other.
  std::vector<TxFrame> returned_;
  std::size_t returned_next_ = 0;
};

// A change prepared by prepare_reconfigure(), for commit(): the new list, the new owners' rules,
// how old owners map to new ones, and whatever had to be allocated. Move-only; opaque.
class TxScheduler::Change {
 public:
  Change(Change&&) noexcept = default;
  Change& operator=(Change&&) noexcept = default;
  ~Change() = default;

 private:
  friend class TxScheduler;
  Change(GateControlList gcl, Plan plan) : gcl_(std::move(gcl)), plan_(std::move(plan)) {}

  GateControlList gcl_;  // the new list; after commit(), the old one
  Plan plan_;
  int64_t now_ns_ = 0;
  bool same_timeline_ = false;
  const TxScheduler* source_ = nullptr;  // the scheduler it was prepared for
  std::vector<OwnerIndex> to_new_;       // old owner -> new owner (kNoOwner: tunnel removed)
  std::vector<OwnerIndex> from_old_;     // new owner -> old owner (kNoOwner: tunnel added)
  std::vector<bool> moved_;              // new owner: its slots changed, its frames re-placed
  // Counters for the tunnels added beyond what the scheduler's spares (and the tunnels this
  // change removes) provide; the spares as they will be after the commit (reserved).
  std::vector<TxCounters> fresh_counters_;
  std::vector<TxCounters> spare_counters_;
  // Room for the new owners (committed: the old ones) and for the frames handed back (at worst
  // every frame held); reserved so that commit() does not allocate.
  std::vector<OwnerState> owners_;
  std::vector<TxFrame> returned_;
  // Only when the wheel's geometry changes: the new wheel and its spare (committed: the old
  // ones, freed with the Change).
  std::optional<Wheel> wheel_;
  std::optional<Wheel> spare_;
};

template <typename Sink>
uint32_t TxScheduler::dequeue_due(int64_t now_ns, Sink&& sink, uint32_t max_frames) noexcept {
  uint32_t count = 0;
  TxFrame frame;
  while (count < max_frames && pop_due(now_ns, &frame)) {
    sink(static_cast<const TxFrame&>(frame));
    ++count;
  }
  return count;
}

}  // namespace detwan::dataplane::sched

#pragma once
// The forwarding loop of detwan-wanem, templated on the port backend (compile-time dispatch: no
// virtual call per packet) and on the clock.
//
// One iteration, per direction (ab: A->B, ba: B->A):
//   rx burst on the ingress side -> classify -> engine offer (clone on duplicate)
// then, for both directions: release due frames -> tx queue of the egress side -> tx burst.
// Frames the device refuses stay queued and are retried (the timed drain); after
// kTxBusyLimitNs they are dropped and counted as tx_busy.
//
// Sleeping mode (default): when nothing is left to do, the loop sleeps in ppoll() on both rx
// descriptors and the post queue's eventfd, with a timeout that ends at the earliest engine
// event (absolute deadline converted just before the call; timer slack is set to 1 ns by the
// caller). Busy-poll mode (--busy-poll, or a backend without descriptors) never sleeps.
//
// Threading: run_st() and everything it calls belong to the poll thread. Other threads talk to
// it only through the PostQueue and the stop flag.
#include <algorithm>
#include <atomic>
#include <cassert>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <thread>

#include <poll.h>
#include <time.h>

#include "common/clock.h"
#include "tools/wanem/engine/emulator.h"
#include "tools/wanem/port.h"
#include "tools/wanem/post_queue.h"
#include "tools/wanem/rt_governor.h"
#include "tools/wanem/session.h"

namespace detwan::wanem {

struct ForwarderOptions {
  bool busy_poll = false;
  RtGovernor* governor = nullptr;  // ticked every iteration (sleeping mode); nullptr: none
  int64_t end_ns = std::numeric_limits<int64_t>::max();  // stop when the clock reaches it
  // Sleeping mode: while the next release is at most this far away (and no further than the
  // least delay of either direction's spec, ImpairmentSpec::min_delay_ns), the loop sleeps until
  // it without waking for arrivals: they wait in the sockets with their kernel receive time and
  // are offered, timed by it, before anything is released, so nothing leaves late and the
  // emulation is the same; the loop wakes once per release batch instead of once per frame too.
  // 0 = wake for every arrival. Ports without receive timestamps never coalesce.
  int64_t rx_coalesce_ns = 500'000;
};

template <Port P, common::ClockSource C>
class Forwarder {
 public:
  static constexpr uint32_t kBurstFrames = 64;
  // Bursts read per side before the loop moves on (bounds one side's hold on the loop).
  static constexpr int kMaxRxBurstsPerSide = 4;
  static constexpr uint32_t kTxQueueFrames = 1024;
  // Retry period and give-up limit for frames the device refused (socket buffer full).
  static constexpr int64_t kTxRetryNs = 20'000;
  static constexpr int64_t kTxBusyLimitNs = 10'000'000;

  // Must be constructed on the poll thread, which then calls every _st method.
  Forwarder(P& port, const C& clock, Session& session, PostQueue& posts,
            const std::atomic<bool>& stop, ForwarderOptions options)
      : port_(port),
        clock_(clock),
        session_(session),
        posts_(posts),
        stop_(stop),
        options_(options),
        view_{session, port.counters(), loop_stats_, 0, [this] { port_.refresh_counters_st(); }},
        owner_(std::this_thread::get_id()) {
    engine_time_ns_[0] = engine_time_ns_[1] = session.start_ns();
    if (port_.rx_fd(Side::kA) < 0 || port_.rx_fd(Side::kB) < 0) options_.busy_poll = true;
  }

  [[nodiscard]] bool busy_poll() const noexcept { return options_.busy_poll; }

  // Forwards until the stop flag is set or options.end_ns is reached. Frames still held by the
  // engines at that point stay there (they go with the port's pool); drain_st() returns the
  // ones waiting for transmission.
  void run_st() {
    assert_owner();
    posts_.set_owner(std::this_thread::get_id());
    while (!stop_.load(std::memory_order_relaxed)) {
      int64_t now_ns = clock_.now_ns();
      if (now_ns >= options_.end_ns) break;
      if (options_.governor != nullptr) {
        options_.governor->tick(now_ns);
        loop_stats_.realtime = options_.governor->realtime();
        loop_stats_.rt_demotions = options_.governor->demotions();
        loop_stats_.rt_promotions = options_.governor->promotions();
      }
      if (posts_.pending() || woken_) {
        woken_ = false;
        view_.now_ns = now_ns;
        posts_.run_pending_st(view_);
        engine_time_ns_[0] = engine_time_ns_[1] = now_ns;  // posts may have called the engines
      }
      rx_more_ = false;
      receive_st(Direction::kAb);
      receive_st(Direction::kBa);
      now_ns = clock_.now_ns();
      record_release_late_st(now_ns);
      release_st(Direction::kAb, now_ns);
      release_st(Direction::kBa, now_ns);
      flush_tx_st(Side::kA, now_ns);
      flush_tx_st(Side::kB, now_ns);
      if (!options_.busy_poll && !rx_more_) sleep_st();
    }
  }

  // Frees the frames still queued for transmission (at shutdown). Frames held by the engines
  // are not released: running an engine to "forever" would have to simulate cross traffic up
  // to then. The port frees its whole pool when it is destroyed.
  void drain_st() {
    assert_owner();
    for (Side side : {Side::kA, Side::kB}) {
      TxQueue& queue = tx_[index_of(side)];
      for (uint32_t i = 0; i < queue.count; ++i) port_.free(queue.handles[i]);
      queue.count = 0;
    }
  }

  // A view for posted closures and final statistics (poll thread only).
  [[nodiscard]] PollThreadView& view_st(int64_t now_ns) {
    assert_owner();
    view_.now_ns = now_ns;
    return view_;
  }

 private:
  struct TxQueue {
    uint64_t handles[kTxQueueFrames];
    uint32_t count = 0;
    int64_t busy_since_ns = -1;  // when the device first refused the head frame; -1: not busy
  };

  void assert_owner() const { assert(owner_ == std::this_thread::get_id()); }

  void receive_st(Direction direction) noexcept {
    const Side side = ingress_of(direction);
    Emulator& emulator = session_.emulator(direction);
    uint64_t handles[kBurstFrames];
    for (int burst = 0; burst < kMaxRxBurstsPerSide; ++burst) {
      const uint32_t received = port_.rx_burst(side, handles, kBurstFrames);
      if (received == 0) return;
      const int64_t now_ns = clock_.now_ns();
      int64_t& engine_time_ns = engine_time_ns_[index_of(direction)];
      for (uint32_t i = 0; i < received; ++i) {
        // Time the frame from its arrival, but never before what the engine has already seen
        // (its clock must not go backwards) nor after now; 0 means the port cannot tell.
        const int64_t rx_time_ns = port_.rx_time_ns(handles[i]);
        const int64_t arrival_ns =
            rx_time_ns == 0 ? now_ns : std::clamp(rx_time_ns, engine_time_ns, now_ns);
        engine_time_ns = arrival_ns;
        offer_st(emulator, handles[i], arrival_ns);
      }
      if (received < kBurstFrames) return;
    }
    rx_more_ = true;  // still frames waiting: do not sleep this round
  }

  void offer_st(Emulator& emulator, uint64_t handle, int64_t now_ns) noexcept {
    // Without priority rules every frame is best effort: skip reading its headers (a cache
    // miss per frame on DPDK, where nothing else touches the payload).
    const ImpairmentSpec& spec = emulator.spec();
    const TrafficClass traffic_class =
        spec.prio_dscp.empty() && spec.prio_ports.empty()
            ? TrafficClass::kBestEffort
            : classify(spec, port_.data(handle), port_.data_bytes(handle));
    const Frame frame{handle, port_.frame_bytes(handle), traffic_class};
    const OfferResult result = emulator.offer(frame, now_ns);
    if (result.status != common::Status::kOk) {
      port_.free(handle);  // the engine counted the reason
      return;
    }
    if (!result.duplicate) return;
    uint64_t copy = 0;
    if (port_.clone(handle, &copy) != common::Status::kOk) {
      port_.counters().count_drop(PortDrop::kCloneFailed);
      return;
    }
    const Frame duplicate{copy, frame.frame_bytes, frame.traffic_class};
    if (emulator.offer_duplicate(duplicate, now_ns) != common::Status::kOk) port_.free(copy);
  }

  // How late the earliest due frame of each direction is about to leave: the release error,
  // whatever woke the loop (timer, a frame, a request) or kept it from running.
  void record_release_late_st(int64_t now_ns) noexcept {
    for (Direction direction : {Direction::kAb, Direction::kBa}) {
      const int64_t due_ns = session_.emulator(direction).next_event_ns();
      if (due_ns <= now_ns) loop_stats_.release_late_ns.record(now_ns - due_ns);
    }
  }

  void release_st(Direction direction, int64_t now_ns) noexcept {
    const Side side = egress_of(direction);
    engine_time_ns_[index_of(direction)] = now_ns;
    (void)session_.emulator(direction).release(
        now_ns, [this, side, now_ns](uint64_t handle, uint32_t, bool deliver) {
          if (deliver) {
            enqueue_tx_st(side, handle, now_ns);
          } else {
            port_.free(handle);
            port_.counters().count_drop(PortDrop::kNotDelivered);
          }
        });
  }

  void enqueue_tx_st(Side side, uint64_t handle, int64_t now_ns) noexcept {
    TxQueue& queue = tx_[index_of(side)];
    if (queue.count == kTxQueueFrames) {
      flush_tx_st(side, now_ns);
      if (queue.count == kTxQueueFrames) {
        port_.free(handle);
        port_.counters().count_drop(PortDrop::kTxBusy);
        return;
      }
    }
    queue.handles[queue.count++] = handle;
    if (queue.count >= kBurstFrames && queue.busy_since_ns < 0) flush_tx_st(side, now_ns);
  }

  // Sends the queued frames in bursts; what the device refuses stays queued for the next round.
  void flush_tx_st(Side side, int64_t now_ns) noexcept {
    TxQueue& queue = tx_[index_of(side)];
    uint32_t done = 0;
    while (done < queue.count) {
      const uint32_t chunk = std::min(queue.count - done, kBurstFrames);
      const uint32_t sent = port_.tx_burst(side, queue.handles + done, chunk);
      done += sent;
      if (sent < chunk) break;
    }
    if (done == queue.count) {
      queue.count = 0;
      queue.busy_since_ns = -1;
      return;
    }
    if (done > 0) {
      std::memmove(queue.handles, queue.handles + done, (queue.count - done) * sizeof(uint64_t));
      queue.count -= done;
      queue.busy_since_ns = now_ns;  // progress was made: restart the give-up clock
      return;
    }
    if (queue.busy_since_ns < 0) {
      queue.busy_since_ns = now_ns;
    } else if (now_ns - queue.busy_since_ns > kTxBusyLimitNs) {
      for (uint32_t i = 0; i < queue.count; ++i) port_.free(queue.handles[i]);
      port_.counters().count_drop(PortDrop::kTxBusy, queue.count);
      queue.count = 0;
      queue.busy_since_ns = -1;
    }
  }

  // How long arrivals may wait unread (ForwarderOptions::rx_coalesce_ns), for the specs in force
  // now (a posted change may shorten a delay: it wakes the loop, which asks again).
  [[nodiscard]] int64_t coalesce_window_ns() const noexcept {
    if (!port_.rx_timestamps()) return 0;
    return std::min({options_.rx_coalesce_ns,
                     session_.emulator(Direction::kAb).spec().min_delay_ns(),
                     session_.emulator(Direction::kBa).spec().min_delay_ns()});
  }

  void sleep_st() noexcept {
    const int64_t engine_deadline_ns = std::min(session_.emulator(Direction::kAb).next_event_ns(),
                                                session_.emulator(Direction::kBa).next_event_ns());
    int64_t deadline_ns = std::min(options_.end_ns, engine_deadline_ns);
    const int64_t now_ns = clock_.now_ns();
    if (tx_[0].count != 0 || tx_[1].count != 0) {
      deadline_ns = std::min(deadline_ns, now_ns + kTxRetryNs);
    }
    if (deadline_ns <= now_ns) return;
    // A negative descriptor is ignored by ppoll: arrivals wait for the deadline.
    const bool coalesce = deadline_ns - now_ns <= coalesce_window_ns();
    pollfd fds[3] = {{coalesce ? -1 : port_.rx_fd(Side::kA), POLLIN, 0},
                     {coalesce ? -1 : port_.rx_fd(Side::kB), POLLIN, 0},
                     {posts_.wake_fd(), POLLIN, 0}};
    if (coalesce) ++loop_stats_.coalesced_sleeps;
    timespec timeout{};
    const timespec* timeout_ptr = nullptr;
    if (deadline_ns != std::numeric_limits<int64_t>::max()) {
      const int64_t wait_ns = deadline_ns - now_ns;
      timeout.tv_sec = static_cast<time_t>(wait_ns / 1'000'000'000);
      timeout.tv_nsec = static_cast<long>(wait_ns % 1'000'000'000);
      timeout_ptr = &timeout;
    }
    ++loop_stats_.sleeps;
    const int ready = ::ppoll(fds, 3, timeout_ptr, nullptr);
    if (ready > 0) {
      ++loop_stats_.io_wakeups;
      if ((fds[2].revents & POLLIN) != 0) woken_ = true;
    } else if (ready == 0) {
      ++loop_stats_.timer_wakeups;
      if (deadline_ns == engine_deadline_ns) {
        loop_stats_.timer_late_ns.record(clock_.now_ns() - deadline_ns);
      }
    }
  }

  P& port_;
  const C& clock_;
  Session& session_;
  PostQueue& posts_;
  const std::atomic<bool>& stop_;
  ForwarderOptions options_;
  LoopStats loop_stats_;
  PollThreadView view_;
  TxQueue tx_[kSideCount];
  // Latest time handed to each direction's engine (offers, releases, posted changes). It starts
  // at the session's start: a frame the device stamped before the emulators existed (it waited
  // in a receive ring or socket while detwan-wanem started) is timed from their start, not from
  // its stamp; an earlier offer would find the link busy until the start and count that wait in
  // the frame's sojourn.
  int64_t engine_time_ns_[kDirectionCount] = {};
  bool rx_more_ = false;
  bool woken_ = false;
  std::thread::id owner_;
};

}  // namespace detwan::wanem

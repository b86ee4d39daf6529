#pragma once
// The one way other threads get work done on the poll thread: post() a closure, the poll loop
// runs it between bursts (run_pending_st). The queue is common::PostQueue; an eventfd wakes a
// sleeping poll loop; a busy-polling one checks pending() (one atomic load) every iteration.
//
// Threading: post(), close() from any thread; set_owner() then run_pending_st() and wake_fd()
// readers only on the poll thread. post() allocates (it is control-plane work), the poll loop
// never does unless a closure is pending.
#include <functional>
#include <thread>
#include <vector>

#include "common/histogram.h"
#include "common/post_queue.h"
#include "tools/wanem/port.h"

namespace detwan::wanem {

class Session;

// How the poll loop slept: timer_late_ns is how long after an engine deadline the loop woke
// from a timed sleep; release_late_ns how late the first due frame of a direction was handed
// to the port, whatever woke the loop (an upper bound of the engine's release error; engine
// events without a frame, e.g. cross traffic, count too).
struct LoopStats {
  uint64_t sleeps = 0;
  uint64_t timer_wakeups = 0;     // woken by the deadline
  uint64_t io_wakeups = 0;        // woken by a frame or a control request
  uint64_t coalesced_sleeps = 0;  // slept to the next release without watching for arrivals
  common::LogLinearHistogram timer_late_ns{7};
  common::LogLinearHistogram release_late_ns{7};
  // The poll thread's class (rt_governor.h): SCHED_FIFO now, and how often it left and re-entered.
  bool realtime = false;
  uint64_t rt_demotions = 0;
  uint64_t rt_promotions = 0;
};

// What a posted closure may touch: the poll thread's state, at time now_ns.
struct PollThreadView {
  Session& session;
  PortCounters& port_counters;
  const LoopStats& loop_stats;
  int64_t now_ns = 0;
  // Folds slow counters in (kernel drop statistics) before a stats snapshot.
  std::function<void()> refresh_port_counters;
};

class PostQueue {
 public:
  using Task = std::function<void(PollThreadView&)>;

  PostQueue();  // throws common::Failure if the eventfd cannot be created
  ~PostQueue();
  PostQueue(const PostQueue&) = delete;
  PostQueue& operator=(const PostQueue&) = delete;

  // Returns false (and drops the task) once the queue is closed: the poll thread has stopped.
  [[nodiscard]] bool post(Task task) { return queue_.post(task); }
  // After close() every post() fails; tasks still queued are destroyed without running.
  void close();

  [[nodiscard]] bool pending() const noexcept { return queue_.pending(); }
  // The poll thread names itself before it runs tasks (checked in builds with assertions).
  void set_owner(std::thread::id id) noexcept { queue_.set_owner(id); }
  // Runs every queued task in posting order. Poll thread only.
  void run_pending_st(PollThreadView& view);
  // Readable while tasks are pending (or a stop was requested); cleared by run_pending_st().
  [[nodiscard]] int wake_fd() const noexcept { return event_fd_; }
  // Wakes the poll loop without a task (stop requests).
  void wake() noexcept;

 private:
  void drain_eventfd() noexcept;

  int event_fd_ = -1;
  common::PostQueue<Task> queue_{[this] { wake(); }};
  std::vector<Task> running_;  // poll thread only
};

}  // namespace detwan::wanem

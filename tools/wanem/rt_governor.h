#pragma once
// The poll thread's scheduling class, following its load (docs/wanem.md, "Timing").
//
// A sleeping detwan-wanem runs its poll thread SCHED_FIFO so that it wakes on time on a loaded
// machine. But the kernel lets real-time tasks run at most sched_rt_runtime_us of every
// sched_rt_period_us on a CPU (950 ms of 1 s by default) and then stops them until the period
// ends. An emulator forwarding near line rate uses a whole vCPU: it was stopped ~50 ms every
// second, both directions at once (a TCP flow's ACKs too), and a 1 Gbit/s TCP flow reached
// 95.5 % of the rate instead of 97.9 % (docs/benchmarks/wanem.md, 2026-12-04).
//
// The governor measures the thread's CPU share over fixed windows. Above leave_share of the
// real-time budget it moves the thread to SCHED_OTHER: a thread that busy does not sleep, so a
// prompt wake-up buys it nothing, while a stop of tens of milliseconds costs the emulated path
// its rate. Below return_share it goes back to SCHED_FIFO. With no budget (sched_rt_runtime_us
// -1) it never leaves.
//
// Threading: the poll thread's. tick() reads the thread's CPU clock once per window.
#include <cstdint>
#include <functional>

namespace detwan::wanem {

class RtGovernor {
 public:
  struct Config {
    int priority = 10;           // SCHED_FIFO priority; 0: the governor does nothing
    double budget_share = 0.95;  // sched_rt_runtime_us / sched_rt_period_us; >= 1: unlimited
    int64_t window_ns = 50'000'000;
    double leave_share = 0.85;  // of the budget: above it, SCHED_OTHER
    double return_share = 0.5;  // of the budget: below it, SCHED_FIFO again
  };
  // cpu_ns(): the thread's CPU time. set_realtime(true|false): SCHED_FIFO at the priority, or
  // SCHED_OTHER; 0, or the error number if the kernel refused (the class stays as it was).
  RtGovernor(Config config, std::function<int64_t()> cpu_ns,
             std::function<int(bool realtime)> set_realtime);

  // The real-time budget of this machine (/proc/sys/kernel/sched_rt_{runtime,period}_us); 1.0
  // when unlimited or unreadable.
  [[nodiscard]] static double system_budget_share();
  // A governor for the calling thread (pthread_setschedparam, CLOCK_THREAD_CPUTIME_ID).
  [[nodiscard]] static RtGovernor for_this_thread(int priority);

  // Enters the real-time class (call once, before the loop): 0, or the kernel's error number.
  int start(int64_t now_ns);
  // Once per loop iteration.
  void tick(int64_t now_ns) noexcept {
    if (now_ns >= window_end_ns_) end_window(now_ns);
  }

  [[nodiscard]] bool realtime() const noexcept { return realtime_; }
  [[nodiscard]] uint64_t demotions() const noexcept { return demotions_; }
  [[nodiscard]] uint64_t promotions() const noexcept { return promotions_; }

 private:
  void end_window(int64_t now_ns) noexcept;

  Config config_;
  std::function<int64_t()> cpu_ns_;
  std::function<int(bool)> set_realtime_;
  bool active_ = false;  // started, with a priority and a budget
  bool realtime_ = false;
  int64_t window_start_ns_ = 0;
  int64_t window_end_ns_ = INT64_MAX;
  int64_t window_cpu_start_ns_ = 0;
  uint64_t demotions_ = 0;
  uint64_t promotions_ = 0;
};

}  // namespace detwan::wanem

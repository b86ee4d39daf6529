#include "tools/wanem/rt_governor.h"

#include <ctime>
#include <fstream>
#include <utility>

#include <pthread.h>
#include <sched.h>

namespace detwan::wanem {
namespace {

// A /proc integer, or `fallback` when it cannot be read.
int64_t read_proc_integer(const char* path, int64_t fallback) {
  std::ifstream in(path);
  int64_t value = 0;
  return in >> value ? value : fallback;
}

}  // namespace

RtGovernor::RtGovernor(Config config, std::function<int64_t()> cpu_ns,
                       std::function<int(bool realtime)> set_realtime)
    : config_(config), cpu_ns_(std::move(cpu_ns)), set_realtime_(std::move(set_realtime)) {}

double RtGovernor::system_budget_share() {
  const int64_t runtime_us = read_proc_integer("/proc/sys/kernel/sched_rt_runtime_us", -1);
  const int64_t period_us = read_proc_integer("/proc/sys/kernel/sched_rt_period_us", 0);
  if (runtime_us < 0 || period_us <= 0) return 1.0;
  return static_cast<double>(runtime_us) / static_cast<double>(period_us);
}

RtGovernor RtGovernor::for_this_thread(int priority) {
  Config config;
  config.priority = priority;
  config.budget_share = system_budget_share();
  const pthread_t self = pthread_self();
  return RtGovernor(
      config,
      [] {
        timespec now{};
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
        return int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
      },
      [self, priority](bool realtime) {
        sched_param param{};
        param.sched_priority = realtime ? priority : 0;
        return pthread_setschedparam(self, realtime ? SCHED_FIFO : SCHED_OTHER, &param);
      });
}

int RtGovernor::start(int64_t now_ns) {
  if (config_.priority <= 0) return 0;
  const int error = set_realtime_(true);
  realtime_ = error == 0;
  // Without a budget the kernel never stops the thread: nothing to govern.
  active_ = realtime_ && config_.budget_share < 1.0;
  if (active_) {
    window_start_ns_ = now_ns;
    window_end_ns_ = now_ns + config_.window_ns;
    window_cpu_start_ns_ = cpu_ns_();
  }
  return error;
}

void RtGovernor::end_window(int64_t now_ns) noexcept {
  const int64_t cpu_ns = cpu_ns_();
  const double share = static_cast<double>(cpu_ns - window_cpu_start_ns_) /
                       static_cast<double>(now_ns - window_start_ns_);
  const double budget = config_.budget_share;
  if (realtime_ && share > config_.leave_share * budget) {
    if (set_realtime_(false) == 0) {
      realtime_ = false;
      ++demotions_;
    }
  } else if (!realtime_ && share < config_.return_share * budget) {
    if (set_realtime_(true) == 0) {
      realtime_ = true;
      ++promotions_;
    }
  }
  window_start_ns_ = now_ns;
  window_end_ns_ = now_ns + config_.window_ns;
  window_cpu_start_ns_ = cpu_ns;
}

}  // namespace detwan::wanem

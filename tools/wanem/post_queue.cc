#include "tools/wanem/post_queue.h"

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include <sys/eventfd.h>
#include <unistd.h>

#include "common/status.h"

namespace detwan::wanem {

PostQueue::PostQueue() : event_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (event_fd_ < 0) {
    throw common::Failure(
        common::Error{common::ErrorCode::kIo, std::string("eventfd: ") + std::strerror(errno)});
  }
}

PostQueue::~PostQueue() {
  if (event_fd_ >= 0) ::close(event_fd_);
}

bool PostQueue::post(Task task) {
  {
    std::lock_guard lock(mutex_);
    if (closed_) return false;
    tasks_.push_back(std::move(task));
    pending_.store(true, std::memory_order_release);
  }
  wake();
  return true;
}

void PostQueue::close() {
  std::deque<Task> dropped;
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
    dropped.swap(tasks_);
    pending_.store(false, std::memory_order_release);
  }
  // `dropped` destroys the tasks outside the lock (their destructors may break promises).
}

void PostQueue::run_pending_st(PollThreadView& view) {
  drain_eventfd();
  std::deque<Task> tasks;
  {
    std::lock_guard lock(mutex_);
    tasks.swap(tasks_);
    pending_.store(false, std::memory_order_release);
  }
  for (Task& task : tasks) task(view);
}

void PostQueue::wake() noexcept {
  const uint64_t one = 1;
  // EAGAIN means the counter is saturated: the loop is woken anyway.
  [[maybe_unused]] const ssize_t written = ::write(event_fd_, &one, sizeof one);
}

void PostQueue::drain_eventfd() noexcept {
  uint64_t value = 0;
  [[maybe_unused]] const ssize_t got = ::read(event_fd_, &value, sizeof value);
}

}  // namespace detwan::wanem

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

void PostQueue::close() {
  std::vector<Task> dropped;
  queue_.close(dropped);
  // `dropped` destroys the tasks outside the lock (their destructors may break promises).
}

void PostQueue::run_pending_st(PollThreadView& view) {
  drain_eventfd();
  queue_.drain_st(running_);
  for (Task& task : running_) task(view);
  running_.clear();
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

#include "transport/shm/progress.h"

#include <algorithm>
#include <cerrno>
#include <climits>

#include <poll.h>
#include <unistd.h>

#include "common/clock.h"

namespace detwan::transport::shm {

Progress::Progress(common::UniqueFd control_fd)
    : control_fd_(std::move(control_fd)), queue_([this] { wake(); }) {}

Progress::~Progress() { stop(); }

void Progress::wake() noexcept {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(control_fd_.get(), &one, sizeof(one));
}

bool Progress::post(Op&& op) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return false;
    if (!thread_.joinable()) {
      // shared_from_this: a progress thread asked to stop from inside a callback is detached
      // and keeps its Progress alive until it returns.
      thread_ = std::thread([self = shared_from_this()] { self->run_st(); });
      thread_id_ = thread_.get_id();
    }
  }
  // False once stop() closed the queue: `op` is untouched and the caller completes it. The
  // loop drains the queue before sleeping, so its own posts need no wake-up; other threads
  // write the eventfd once per batch.
  return queue_.post(op);
}

void Progress::stop() {
  std::thread thread;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    queue_.close();  // no more posts; the loop is woken, completes what is queued and ends
    if (!thread_.joinable()) return;
    if (std::this_thread::get_id() == thread_id_) {
      thread_.detach();  // the loop sees the queue closed when the current callback returns
      return;
    }
    thread = std::move(thread_);
  }
  thread.join();
}

void Progress::apply_st(Op& op) {
  switch (op.kind) {
    case Op::Kind::kAdd:
      channels_.push_back(std::move(op.channel));
      break;
    case Op::Kind::kSend:
      op.channel->send_st(op.message, std::move(op.send_done));
      break;
    case Op::Kind::kRecv:
      op.channel->recv_st(std::move(op.recv_done));
      break;
    case Op::Kind::kClose:
      op.channel->fail_st(Error{ErrorCode::kUnavailable, "shm: channel closed locally"});
      break;
  }
}

void Progress::run_st() {
  const common::MonotonicClock clock;
  queue_.set_owner(std::this_thread::get_id());
  for (;;) {
    const bool stop = queue_.closed();  // read before the drain: what was queued with it runs
    queue_.drain_st(batch_);
    for (auto& op : batch_) apply_st(op);
    batch_.clear();
    if (stop) break;
    const int64_t now_ns = clock.now_ns();
    bool progressed = false;
    // Completions only post, so channels_ does not change while it is iterated.
    for (auto& channel : channels_) progressed |= channel->pump_st(now_ns);
    std::erase_if(channels_, [](const auto& channel) { return channel->failed_st(); });
    if (!progressed) sleep_st();
  }
  const Error closed{ErrorCode::kUnavailable, "shm: endpoint closed"};
  for (auto& channel : channels_) channel->fail_st(closed);
  channels_.clear();
  // Nothing can be queued after the close was seen, but ops queued with it are completed too.
  queue_.close(batch_);
  for (auto& op : batch_) {
    op.channel->fail_st(closed);
    if (op.kind != Op::Kind::kAdd) apply_st(op);
  }
  batch_.clear();
}

void Progress::sleep_st() {
  bool ready = false;
  for (auto& channel : channels_) ready |= channel->prepare_sleep_st();
  ready = ready || queue_.pending() || queue_.closed();
  if (!ready) {
    std::vector<pollfd>& fds = poll_fds_;
    fds.clear();
    fds.push_back({control_fd_.get(), POLLIN, 0});
    int64_t deadline_ns = INT64_MAX;
    for (auto& channel : channels_) {
      fds.push_back({channel->doorbell_fd_st(), POLLIN, 0});
      fds.push_back({channel->socket_fd_st(), POLLIN | POLLRDHUP, 0});
      deadline_ns = std::min(deadline_ns, channel->deadline_ns_st());
    }
    timespec wait{};
    timespec* timeout = nullptr;
    if (deadline_ns != INT64_MAX) {
      const int64_t left_ns = std::max<int64_t>(deadline_ns - common::MonotonicClock().now_ns(), 0);
      wait = {static_cast<time_t>(left_ns / 1'000'000'000),
              static_cast<long>(left_ns % 1'000'000'000)};
      timeout = &wait;
    }
    const int ready_count = ::ppoll(fds.data(), fds.size(), timeout, nullptr);
    if (ready_count > 0) {
      if ((fds[0].revents & POLLIN) != 0) {
        uint64_t count = 0;
        [[maybe_unused]] const ssize_t n = ::read(control_fd_.get(), &count, sizeof(count));
      }
      for (size_t i = 0; i < channels_.size(); ++i) {
        if (fds[1 + 2 * i].revents != 0) channels_[i]->on_doorbell_st();
        if (fds[2 + 2 * i].revents != 0) channels_[i]->on_socket_ready_st(fds[2 + 2 * i].revents);
      }
    }
  }
  for (auto& channel : channels_) channel->end_sleep_st();
}

}  // namespace detwan::transport::shm

// Request: the handle of a non-blocking operation; State is shared with the executor.
#include <chrono>
#include <utility>

#include "collectives/comm/comm_impl.h"

namespace detwan::collectives {

void Request::State::complete(Result<void> result) {
  {
    std::lock_guard lock(mutex);
    if (this->result) return;  // first completion wins
    this->result = std::move(result);
  }
  done_cv.notify_all();
}

std::optional<Result<void>> Request::State::wait(int64_t timeout_ns) {
  std::unique_lock lock(mutex);
  if (timeout_ns < 0) {
    done_cv.wait(lock, [&] { return result.has_value(); });
  } else if (!done_cv.wait_for(lock, std::chrono::nanoseconds(timeout_ns),
                               [&] { return result.has_value(); })) {
    return std::nullopt;
  }
  return result;
}

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    if (state_) state_->wait(-1);
    state_ = std::move(other.state_);
  }
  return *this;
}

Request::~Request() {
  // Buffers of a pending operation belong to it until it completes: never let them go early.
  if (state_) state_->wait(-1);
}

std::optional<Result<void>> Request::wait(int64_t timeout_ns) {
  if (!state_) {
    return Result<void>(make_error(ErrorCode::kInvalidArgument, "wait on an empty Request"));
  }
  return state_->wait(timeout_ns);
}

bool Request::done() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mutex);
  return state_->result.has_value();
}

}  // namespace detwan::collectives

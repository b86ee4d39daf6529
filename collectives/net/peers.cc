#include "collectives/net/peers.h"

#include <chrono>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "common/clock.h"

namespace detwan::collectives {
namespace {

template <typename T>
bool wait_future(std::future<T>& future, Deadline deadline) {
  if (deadline.at_ns == INT64_MAX) {
    future.wait();
    return true;
  }
  // steady_clock is CLOCK_MONOTONIC on Linux, the clock Deadline is measured in.
  const auto at = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(deadline.at_ns));
  return future.wait_until(at) == std::future_status::ready;
}

}  // namespace

Peers::Peers(int rank, std::vector<std::unique_ptr<transport::Channel>> channels,
             std::vector<std::string> peer_names)
    : rank_(rank), channels_(std::move(channels)), peer_names_(std::move(peer_names)) {}

Peers::~Peers() {
  for (auto& channel : channels_) {
    if (channel) channel->close();
  }
  // Closing completes every pending operation; drain the copied sends so their buffers (owned
  // by the callbacks) are released before the channels go.
  for (auto& send : copied_sends_) {
    if (send.future_.valid()) send.future_.wait();
  }
}

std::string Peers::peer_name(int peer) const {
  if (peer >= 0 && static_cast<size_t>(peer) < peer_names_.size() && !peer_names_[peer].empty()) {
    return peer_names_[peer];
  }
  return fmt::format("rank {}", peer);
}

Result<void> Peers::check_peer(int peer) const {
  if (peer < 0 || peer >= size() || peer == rank_ || !channels_[peer]) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("rank {}: no channel to peer {} (communicator of {} ranks)",
                                  rank_, peer, size()));
  }
  return {};
}

PendingSend Peers::send(int peer, std::span<const std::byte> data) {
  PendingSend pending;
  pending.peer_ = peer;
  auto promise = std::make_shared<std::promise<Result<void>>>();
  pending.future_ = promise->get_future();
  if (auto ok = check_peer(peer); !ok) {
    promise->set_value(std::unexpected(ok.error()));
    return pending;
  }
  channels_[peer]->send_async(data, [promise](Result<void> result) {
    promise->set_value(std::move(result));
  });
  return pending;
}

void Peers::send_copy(int peer, std::span<const std::byte> data) {
  PendingSend pending;
  pending.peer_ = peer;
  auto promise = std::make_shared<std::promise<Result<void>>>();
  pending.future_ = promise->get_future();
  if (auto ok = check_peer(peer); !ok) {
    promise->set_value(std::unexpected(ok.error()));
  } else {
    auto copy = std::make_shared<std::vector<std::byte>>(data.begin(), data.end());
    const std::span<const std::byte> view(*copy);
    const auto bytes = static_cast<int64_t>(data.size());
    retained_->fetch_add(bytes);
    channels_[peer]->send_async(view, [promise, copy, retained = retained_,
                                       bytes](Result<void> result) mutable {
      copy.reset();
      retained->fetch_sub(bytes);
      promise->set_value(std::move(result));
    });
  }
  // Completed copies are dropped as new ones come, so the list stays short.
  std::erase_if(copied_sends_, [](PendingSend& s) {
    if (s.future_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
    return s.future_.get().has_value();  // a failed one stays for flush() to report
  });
  copied_sends_.push_back(std::move(pending));
}

PendingRecv Peers::recv(int peer) {
  PendingRecv pending;
  pending.peer_ = peer;
  auto promise = std::make_shared<std::promise<Result<std::vector<std::byte>>>>();
  pending.future_ = promise->get_future();
  if (auto ok = check_peer(peer); !ok) {
    promise->set_value(std::unexpected(ok.error()));
    return pending;
  }
  channels_[peer]->recv_async([promise](Result<std::vector<std::byte>> result) {
    promise->set_value(std::move(result));
  });
  return pending;
}

Result<void> Peers::wait(PendingSend& send, Deadline deadline) {
  if (!send.future_.valid()) {
    return make_error(ErrorCode::kInvalidArgument, "wait on an empty or finished send");
  }
  if (!wait_future(send.future_, deadline)) {
    auto error = Error{ErrorCode::kTimeout,
                       fmt::format("rank {}: timed out waiting for {} to acknowledge a message",
                                   rank_, peer_name(send.peer_))};
    record_failure(send.peer_, error);
    return std::unexpected(error);
  }
  auto result = send.future_.get();
  if (!result) {
    record_failure(send.peer_, result.error());
    return std::unexpected(failed_error());
  }
  return {};
}

Result<std::vector<std::byte>> Peers::wait(PendingRecv& recv, Deadline deadline) {
  if (!recv.future_.valid()) {
    return make_error(ErrorCode::kInvalidArgument, "wait on an empty or finished receive");
  }
  if (!wait_future(recv.future_, deadline)) {
    auto error = Error{ErrorCode::kTimeout,
                       fmt::format("rank {}: timed out waiting for a message from {}", rank_,
                                   peer_name(recv.peer_))};
    record_failure(recv.peer_, error);
    return std::unexpected(error);
  }
  auto result = recv.future_.get();
  if (!result) {
    record_failure(recv.peer_, result.error());
    return std::unexpected(failed_error());
  }
  return result;
}

Result<void> Peers::recv_into(int peer, std::span<std::byte> out, Deadline deadline) {
  auto pending = recv(peer);
  auto message = wait(pending, deadline);
  if (!message) return std::unexpected(message.error());
  if (message->size() != out.size()) {
    auto error = Error{ErrorCode::kInvalidArgument,
                       fmt::format("rank {}: {} sent {} bytes where {} were expected (do the "
                                   "ranks call the same operations with the same counts?)",
                                   rank_, peer_name(peer), message->size(), out.size())};
    record_failure(peer, error);
    return std::unexpected(error);
  }
  if (!out.empty()) std::memcpy(out.data(), message->data(), out.size());
  recycle(peer, std::move(*message));
  return {};
}

void Peers::recycle(int peer, std::vector<std::byte> buffer) {
  if (peer < 0 || peer >= size() || !channels_[peer]) return;
  channels_[peer]->recycle(std::move(buffer));
}

Result<void> Peers::flush(Deadline deadline) {
  Result<void> status;
  for (auto& send : copied_sends_) {
    if (!send.future_.valid()) continue;
    if (auto ok = wait(send, deadline); !ok && status) status = std::unexpected(ok.error());
  }
  copied_sends_.clear();
  return status;
}

void Peers::abort() {
  fail(-1, Error{ErrorCode::kUnavailable, fmt::format("rank {}: aborted", rank_)});
}

void Peers::fail(int peer, const Error& error) {
  record_failure(peer, error);
  for (auto& channel : channels_) {
    if (channel) channel->close();
  }
}

void Peers::record_failure(int peer, const Error& error) {
  std::lock_guard lock(failure_mutex_);
  if (failure_) return;
  Error named = error;
  if (peer >= 0 && named.message.find(peer_name(peer)) == std::string::npos) {
    named.message = fmt::format("{}: {}", peer_name(peer), named.message);
  }
  failure_ = PeerFailure{peer, std::move(named)};
  failed_.store(true, std::memory_order_release);
}

Error Peers::failed_error() const {
  std::lock_guard lock(failure_mutex_);
  return failure_ ? failure_->error : Error{ErrorCode::kInternal, "no failure recorded"};
}

std::optional<PeerFailure> Peers::failure() const {
  std::lock_guard lock(failure_mutex_);
  return failure_;
}

std::optional<transport::ChannelStats> Peers::channel_stats(int peer) const {
  if (peer < 0 || peer >= size() || !channels_[peer]) return std::nullopt;
  return channels_[peer]->stats();
}

}  // namespace detwan::collectives

#include "transport/datagram/session.h"

#include <chrono>
#include <utility>

#include <fmt/format.h>

namespace detwan::transport::datagram {
namespace {

constexpr int64_t kStatsPublishIntervalNs = 1'000'000;

Error unavailable(std::string message) {
  return Error{ErrorCode::kUnavailable, std::move(message)};
}

}  // namespace

void fail_op(Op& op, const Error& error) {
  if (op.send_done) std::exchange(op.send_done, nullptr)(std::unexpected(error));
  if (op.recv_done) std::exchange(op.recv_done, nullptr)(std::unexpected(error));
  if (op.task) std::exchange(op.task, nullptr)();  // tasks complete their own waiters
}

// ---- ChannelHandle ----

ChannelHandle::~ChannelHandle() {
  Op op;
  op.kind = Op::Kind::kRelease;
  op.channel_key = shared_->key;
  (void)queue_->post(op);  // endpoint gone: nothing left to release
}

void ChannelHandle::post(Op op) {
  if (!queue_->post(op)) fail_op(op, unavailable("endpoint destroyed: " + shared_->description));
}

void ChannelHandle::send_async(std::span<const std::byte> message, SendCallback done) {
  Op op;
  op.kind = Op::Kind::kSend;
  op.channel_key = shared_->key;
  op.message = message;
  op.send_done = std::move(done);
  post(std::move(op));
}

void ChannelHandle::recv_async(RecvCallback done) {
  Op op;
  op.kind = Op::Kind::kRecv;
  op.channel_key = shared_->key;
  op.recv_done = std::move(done);
  post(std::move(op));
}

ChannelStats ChannelHandle::stats() const {
  std::lock_guard lock(shared_->mutex);
  return shared_->stats;
}

void ChannelHandle::close() {
  Op op;
  op.kind = Op::Kind::kClose;
  op.channel_key = shared_->key;
  (void)queue_->post(op);
}

void ChannelHandle::set_reserved_rate(int64_t rate_bps, int64_t max_burst_bytes) {
  Op op;
  op.kind = Op::Kind::kPace;
  op.channel_key = shared_->key;
  op.rate_bps = rate_bps;
  op.max_burst_bytes = max_burst_bytes;
  (void)queue_->post(op);  // nothing to complete: a channel whose endpoint is gone sends nothing
}

void ChannelHandle::set_pacing_group(std::shared_ptr<PacingGroup> group) {
  Op op;
  op.kind = Op::Kind::kPace;
  op.channel_key = shared_->key;
  op.join_group = true;
  op.pacing_group = std::move(group);
  (void)queue_->post(op);
}

// ---- AcceptQueue ----

void AcceptQueue::push(std::unique_ptr<Channel> channel) {
  {
    std::lock_guard lock(mutex_);
    if (stopped_) return;  // destroyed outside the lock below
    channels_.push_back(std::move(channel));
  }
  ready_.notify_one();
}

Result<std::unique_ptr<Channel>> AcceptQueue::pop(int64_t timeout_ns) {
  std::unique_lock lock(mutex_);
  const bool ready = ready_.wait_for(lock, wait_duration(timeout_ns),
                                     [&] { return stopped_ || !channels_.empty(); });
  if (stopped_) return common::make_error(ErrorCode::kUnavailable, "endpoint is shutting down");
  if (!ready) {
    return common::make_error(
        ErrorCode::kTimeout,
        fmt::format("accept: no peer connected within {} ms", timeout_ns / 1'000'000));
  }
  std::unique_ptr<Channel> channel = std::move(channels_.front());
  channels_.pop_front();
  return channel;
}

size_t AcceptQueue::size() const {
  std::lock_guard lock(mutex_);
  return channels_.size();
}

void AcceptQueue::stop() {
  std::deque<std::unique_ptr<Channel>> dropped;
  {
    std::lock_guard lock(mutex_);
    stopped_ = true;
    dropped.swap(channels_);
  }
  ready_.notify_all();
}

// ---- Session ----

Session::Session(const proto::ConnectionConfig& config, int64_t now_ns,
                 std::shared_ptr<ChannelShared> shared)
    : connection_(std::in_place, config, now_ns), shared_(std::move(shared)) {}

void Session::send_st(std::span<const std::byte> message, SendCallback done) {
  if (error_) {
    ++callbacks_run_;
    done(std::unexpected(*error_));
    return;
  }
  const uint64_t token = next_token_++;
  const common::Status status = connection_->queue_message(message, token);
  if (status == common::Status::kOk) {
    sends_.emplace(token, std::move(done));
    return;
  }
  ++callbacks_run_;
  if (status == common::Status::kInvalidArgument) {
    done(common::make_error(ErrorCode::kInvalidArgument,
                            fmt::format("{}: message of {} bytes exceeds max_message_bytes",
                                        shared_->description, message.size())));
    return;
  }
  done(common::make_error(
      ErrorCode::kUnavailable,
      fmt::format("{}: channel is closed ({})", shared_->description, common::to_string(status))));
}

void Session::recv_st(RecvCallback done) {
  if (!buffered_.empty()) {
    std::vector<std::byte> message = std::move(buffered_.front());
    buffered_.pop_front();
    if (connection_) connection_->consumed(message.size());
    ++callbacks_run_;
    done(std::move(message));
    return;
  }
  if (error_) {
    ++callbacks_run_;
    done(std::unexpected(*error_));
    return;
  }
  recvs_.push_back(std::move(done));
}

void Session::close_st(int64_t now_ns) {
  if (closing_ || error_) return;
  closing_ = true;
  connection_->close(now_ns);
  // The connection lives on until its CLOSE is out (the driver frees it); the user's view is
  // final now.
  const Error error = unavailable(shared_->description + ": channel closed locally");
  error_ = error;
  buffered_.clear();
  auto sends = std::exchange(sends_, {});
  auto recvs = std::exchange(recvs_, {});
  callbacks_run_ += sends.size() + recvs.size() + (on_established ? 1 : 0);
  for (auto& [token, done] : sends) done(std::unexpected(error));
  for (auto& done : recvs) done(std::unexpected(error));
  if (on_established) std::exchange(on_established, nullptr)(std::unexpected(error));
}

void Session::fail_st(const Error& error) {
  publish_stats_st(0, true);
  connection_.reset();  // frees every buffer of the protocol
  if (!error_) error_ = error;
  auto sends = std::exchange(sends_, {});
  auto recvs = std::exchange(recvs_, {});
  callbacks_run_ += sends.size() + recvs.size() + (on_established ? 1 : 0);
  for (auto& [token, done] : sends) done(std::unexpected(*error_));
  for (auto& done : recvs) done(std::unexpected(*error_));
  if (on_established) std::exchange(on_established, nullptr)(std::unexpected(*error_));
}

bool Session::process_events_st() {
  bool any = false;
  while (connection_) {
    std::optional<proto::Event> event = connection_->poll_event();
    if (!event) break;
    // Callbacks may read stats(): publish before the first one runs so they see this event.
    if (!any) publish_stats_st(last_publish_ns_, true);
    any = true;
    switch (event->kind) {
      case proto::Event::Kind::kEstablished:
        if (on_established) {
          ++callbacks_run_;
          std::exchange(on_established, nullptr)({});
        }
        break;
      case proto::Event::Kind::kSendComplete: {
        auto it = sends_.find(event->token);
        if (it == sends_.end()) break;  // completed by close_st already
        SendCallback done = std::move(it->second);
        sends_.erase(it);
        ++callbacks_run_;
        done({});
        break;
      }
      case proto::Event::Kind::kMessage:
        if (error_) break;  // closed locally: nobody may receive any more
        if (!recvs_.empty()) {
          RecvCallback done = std::move(recvs_.front());
          recvs_.pop_front();
          connection_->consumed(event->message.size());
          ++callbacks_run_;
          done(std::move(event->message));
        } else {
          buffered_.push_back(std::move(event->message));
        }
        break;
      case proto::Event::Kind::kFailed:
        buffered_.clear();
        fail_st(event->error);
        break;
      case proto::Event::Kind::kClosed:
        // Messages that arrived before the peer's CLOSE stay receivable; nothing else will.
        fail_st(unavailable(shared_->description + ": peer closed the channel"));
        break;
    }
  }
  return any;
}

void Session::publish_stats_st(int64_t now_ns, bool force) {
  if (!connection_) return;
  if (!force && now_ns - last_publish_ns_ < kStatsPublishIntervalNs) return;
  last_publish_ns_ = now_ns;
  ChannelStats stats = connection_->stats();
  std::lock_guard lock(shared_->mutex);
  shared_->stats = stats;
}

}  // namespace detwan::transport::datagram

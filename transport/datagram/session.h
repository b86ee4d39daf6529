#pragma once
// Backend-independent pieces of the datagram driver (driver.h): the post queue through which
// API calls reach the progress thread, the user's Channel handle, and `Session`, the per-channel
// state on the progress thread (the proto::Connection, pending callbacks, buffered messages).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/post_queue.h"
#include "transport/buffer_pool.h"
#include "transport/proto/connection.h"
#include "transport/transport.h"

namespace detwan::transport::datagram {

// Largest number of paths of one channel.
inline constexpr size_t kMaxPaths = 16;

// Fills the defaults the protocol needs: one path to `connect_address` at options.rate_bps when
// options.paths is empty, and recv_window_bytes = max(4 MiB, 2 x sum(rate_bps)/8 x initial RTT)
// when it is 0. kInvalidArgument naming the field for values the protocol cannot run with.
Result<ChannelOptions> normalize_options(const ChannelOptions& options,
                                         const std::string& connect_address);

// Counters of one endpoint's driver: datagrams that belong to no channel. Written by the progress
// thread, read from anywhere.
struct DriverCounters {
  uint64_t datagrams_received = 0;
  uint64_t dropped_not_transport = 0;       // not a detwan transport datagram (listen socket)
  uint64_t dropped_unknown_connection = 0;  // unknown connection id and not a HELLO
  uint64_t dropped_accept_backlog = 0;      // HELLO while too many channels wait for accept()
  uint64_t dropped_id_collision = 0;        // HELLO whose id's low 32 bits a live channel has
  uint64_t connections_accepted = 0;
  // Authenticated channels (docs/transport.md "Authenticated channels"). dropped_auth: a HELLO
  // whose MAC does not verify, a half-open channel's datagram that does not open, a datagram of
  // the other protocol. dropped_mode_mismatch: HELLOs of the other protocol (answered with a
  // "security mismatch" CLOSE) or of another mode. handshakes_answered: HELLO_ACKs sent.
  // half_open_evicted: half-open entries displaced by newer HELLOs (table full).
  // dropped_answers: answers beyond the per-round queue.
  uint64_t dropped_auth = 0;
  uint64_t dropped_mode_mismatch = 0;
  uint64_t handshakes_answered = 0;
  uint64_t half_open_evicted = 0;
  uint64_t dropped_answers = 0;
  // Gauges: half-open handshakes held now; memory of the endpoint's channels for messages being
  // reassembled (sum of their ChannelStats::reassembly_bytes at the last publication).
  uint64_t half_open = 0;
  uint64_t reassembly_bytes = 0;

  DriverCounters& operator+=(const DriverCounters& o) {
    datagrams_received += o.datagrams_received;
    dropped_not_transport += o.dropped_not_transport;
    dropped_unknown_connection += o.dropped_unknown_connection;
    dropped_accept_backlog += o.dropped_accept_backlog;
    dropped_id_collision += o.dropped_id_collision;
    connections_accepted += o.connections_accepted;
    dropped_auth += o.dropped_auth;
    dropped_mode_mismatch += o.dropped_mode_mismatch;
    handshakes_answered += o.handshakes_answered;
    half_open_evicted += o.half_open_evicted;
    dropped_answers += o.dropped_answers;
    half_open += o.half_open;
    reassembly_bytes += o.reassembly_bytes;
    return *this;
  }
};

// One API call handed to the progress thread.
struct Op {
  enum class Kind : uint8_t { kSend, kRecv, kClose, kRelease, kTask, kPace };
  Kind kind = Kind::kTask;
  uint64_t channel_key = 0;
  std::span<const std::byte> message;
  SendCallback send_done;
  RecvCallback recv_done;
  std::function<void()> task;  // kTask: setup work (listen, connect) run on the progress thread
  int64_t rate_bps = 0;        // kPace: Channel::set_reserved_rate
  int64_t max_burst_bytes = 0;
  // kPace with `join_group`: Channel::set_pacing_group (rate_bps unused).
  bool join_group = false;
  std::shared_ptr<PacingGroup> pacing_group;
};

// The queue from API threads to the progress thread (common/post_queue.h), woken through the
// link. After close() a post returns false and leaves the op untouched, so the caller completes
// it itself.
using PostQueue = common::PostQueue<Op>;

// `timeout_ns` as a duration a condition variable or future can wait for without overflowing
// the clock (INT64_MAX = "forever" is common in callers).
inline std::chrono::nanoseconds wait_duration(int64_t timeout_ns) {
  return std::chrono::nanoseconds(std::clamp<int64_t>(timeout_ns, 0, int64_t{1} << 60));
}

// Completes an op that can no longer reach a progress thread, with `error`, on this thread.
void fail_op(Op& op, const Error& error);

// What a Channel handle shares with the progress thread.
struct ChannelShared {
  uint64_t key = 0;
  std::string description;
  mutable std::mutex mutex;
  ChannelStats stats;  // snapshot published by the progress thread
  // Buffers the application handed back (Channel::recycle), for the next received messages:
  // their pages are mapped already and they are not zero-filled again (BufferPool::take_sized).
  BufferPool rx_pool;
};

// The Channel a user holds. Every call posts to the progress thread; destroying it closes the
// channel. When the endpoint is already gone, callbacks run at once on the calling thread with
// kUnavailable (there is no progress thread left to run them).
class ChannelHandle final : public Channel {
 public:
  ChannelHandle(std::shared_ptr<PostQueue> queue, std::shared_ptr<ChannelShared> shared)
      : queue_(std::move(queue)), shared_(std::move(shared)) {}
  ~ChannelHandle() override;
  void send_async(std::span<const std::byte> message, SendCallback done) override;
  void recv_async(RecvCallback done) override;
  void recycle(std::vector<std::byte> buffer) override { shared_->rx_pool.put(std::move(buffer)); }
  [[nodiscard]] ChannelStats stats() const override;
  void close() override;
  void set_reserved_rate(int64_t rate_bps, int64_t max_burst_bytes) override;
  void set_pacing_group(std::shared_ptr<PacingGroup> group) override;
  [[nodiscard]] std::string describe() const override { return shared_->description; }

 private:
  void post(Op op);
  std::shared_ptr<PostQueue> queue_;
  std::shared_ptr<ChannelShared> shared_;
};

// Channels accepted by the progress thread, waiting for Endpoint::accept().
class AcceptQueue {
 public:
  void push(std::unique_ptr<Channel> channel);
  Result<std::unique_ptr<Channel>> pop(int64_t timeout_ns);
  [[nodiscard]] size_t size() const;
  void stop();  // drops waiting channels; pop() fails from now on

 private:
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::unique_ptr<Channel>> channels_;
  bool stopped_ = false;
};

// One channel's state on the progress thread. Not synchronised (progress thread only, "_st").
class Session {
 public:
  Session(const proto::ConnectionConfig& config, int64_t now_ns,
          std::shared_ptr<ChannelShared> shared);

  // The protocol connection; nullptr once the channel failed or closed (memory freed).
  [[nodiscard]] proto::Connection* connection() { return connection_ ? &*connection_ : nullptr; }
  [[nodiscard]] const ChannelShared& shared() const { return *shared_; }

  void send_st(std::span<const std::byte> message, SendCallback done);
  void recv_st(RecvCallback done);
  // Local close: the protocol emits CLOSE; pending and later operations fail with kUnavailable.
  void close_st(int64_t now_ns);
  // Pops the connection's events and runs the callbacks. Returns true if there was any.
  bool process_events_st();
  // Fails every pending and later operation with `error` and frees the connection.
  void fail_st(const Error& error);
  void publish_stats_st(int64_t now_ns, bool force);

  // connect() waits for establishment (or the failure) through this.
  std::function<void(Result<void>)> on_established;

  [[nodiscard]] bool closing() const { return closing_; }
  [[nodiscard]] bool released() const { return released_; }
  void set_released() { released_ = true; }
  [[nodiscard]] const std::optional<Error>& error() const { return error_; }
  // Completion callbacks run since the last call (inline progress returns once one ran).
  size_t take_callbacks_run() { return std::exchange(callbacks_run_, 0); }

 private:
  std::optional<proto::Connection> connection_;
  std::shared_ptr<ChannelShared> shared_;
  uint64_t next_token_ = 1;
  std::map<uint64_t, SendCallback> sends_;  // by token: completions run in send order
  std::deque<RecvCallback> recvs_;
  std::deque<std::vector<std::byte>> buffered_;
  std::optional<Error> error_;
  bool closing_ = false;
  bool released_ = false;
  int64_t last_publish_ns_ = 0;
  size_t callbacks_run_ = 0;
};

}  // namespace detwan::transport::datagram

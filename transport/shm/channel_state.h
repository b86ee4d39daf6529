#pragma once
// One shm channel as its progress thread sees it: the two rings, the pending operations, the
// peer-liveness checks. Functions ending in _st run on the endpoint's progress thread only;
// stats() and description() may be called from any thread.
//
// Send: the ring copy is the transfer. A send completes when its last byte is in the ring
// (published to the peer); large messages stream through the ring as the peer frees space.
// Receive: a message is taken out of the ring only while a receive is posted, so the ring is
// the only buffer and a slow reader back-pressures the writer (no unbounded queue).
//
// Peer liveness: the Unix socket hangs up when the peer process closes or dies ->
// kUnavailable "shm peer closed" (complete messages already in the ring are still delivered);
// while operations are pending and neither the rings nor the peer's heartbeat move for
// peer_timeout_ns -> kTimeout. Hostile ring contents (impossible index, frame longer than
// max_message_bytes) fail the channel with kIo naming the problem.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/buffer_pool.h"
#include "transport/shm/ring.h"
#include "transport/shm/session.h"
#include "transport/stream_counters.h"
#include "transport/transport.h"

namespace detwan::transport::shm {

using common::Error;
using common::ErrorCode;

class ChannelState {
 public:
  ChannelState(Session session, const ChannelOptions& options, int64_t now_ns);
  ~ChannelState();
  ChannelState(const ChannelState&) = delete;
  ChannelState& operator=(const ChannelState&) = delete;

  void send_st(std::span<const std::byte> message, SendCallback done);
  void recv_st(RecvCallback done);
  // Completes every pending operation with `error`, frees the rings and closes the fds (the
  // peer sees the hang-up). Later operations complete with the same error.
  void fail_st(const Error& error);

  // Moves bytes both ways, runs due completions and the liveness checks. True if any byte
  // moved or any operation completed.
  bool pump_st(int64_t now_ns);
  // Announces that this side is going to sleep, then rechecks: true = work is already
  // possible, do not sleep. end_sleep_st() after waking (or not sleeping).
  bool prepare_sleep_st();
  void end_sleep_st();
  // poll() results for this channel's fds.
  void on_socket_ready_st(short revents);
  void on_doorbell_st();

  [[nodiscard]] bool failed_st() const { return error_.has_value(); }
  // -1 (ignored by poll) once the peer hung up: the hang-up would stay readable forever.
  [[nodiscard]] int socket_fd_st() const { return peer_closed_ ? -1 : session_.socket.get(); }
  [[nodiscard]] int doorbell_fd_st() const { return session_.own_doorbell.get(); }
  // When pump_st must run again even if nothing wakes the thread (heartbeat, peer timeout).
  [[nodiscard]] int64_t deadline_ns_st() const;

  [[nodiscard]] ChannelStats stats() const;
  // Any thread: keeps a received message's buffer for a later message (BufferPool).
  void recycle(std::vector<std::byte> buffer) { rx_pool_.put(std::move(buffer)); }
  [[nodiscard]] const std::string& description() const { return description_; }

 private:
  struct PendingSend {
    std::span<const std::byte> message;
    SendCallback done;
    std::byte header[kFrameHeaderBytes] = {};
    size_t header_written = 0;
    size_t body_written = 0;
  };
  // Why a datapath step stopped the channel (the message is built outside the datapath).
  enum class Fault : uint8_t { kNone, kTxIndex, kRxIndex, kOversize, kNoMemory };

  // channel_datapath.cc
  [[nodiscard]] Status pump_tx_st(bool& progressed);
  [[nodiscard]] Status pump_rx_st(bool& progressed);
  void wake_peer_st();
  // channel.cc: allocation may throw, so it stays out of the datapath.
  [[nodiscard]] bool allocate_message_st(uint64_t length_bytes);
  [[nodiscard]] Error fault_error() const;
  void on_peer_closed_st();
  void check_liveness_st(int64_t now_ns, bool progressed);

  Session session_;
  SharedControl* control_ = nullptr;
  RingProducer tx_;
  RingConsumer rx_;
  const uint64_t max_message_bytes_;
  const int64_t peer_timeout_ns_;
  const int64_t keepalive_interval_ns_;
  const std::string description_;
  size_t publish_chunk_bytes_ = 0;

  std::deque<PendingSend> sends_;
  std::deque<RecvCallback> recvs_;
  bool rx_in_message_ = false;
  uint64_t rx_length_bytes_ = 0;
  uint64_t rx_done_bytes_ = 0;
  std::vector<std::byte> rx_message_;
  BufferPool rx_pool_;

  bool peer_closed_ = false;
  std::optional<Error> error_;
  Fault fault_ = Fault::kNone;
  uint64_t fault_value_ = 0;

  uint64_t heartbeat_ = 0;
  int64_t last_heartbeat_ns_ = 0;
  uint64_t peer_heartbeat_seen_ = 0;
  int64_t last_peer_life_ns_ = 0;

  StreamCounters counters_;
};

}  // namespace detwan::transport::shm

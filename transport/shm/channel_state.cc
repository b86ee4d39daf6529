// ChannelState: setup, failure, liveness and completion bookkeeping (the byte moving is in
// channel_datapath.cc).
#include "transport/shm/channel_state.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <new>
#include <stdexcept>

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/units.h"

namespace detwan::transport::shm {
namespace {

// Bytes copied between publishing the index, so that a large message streams: the peer drains
// (or refills) one chunk while the next is being copied.
inline constexpr uint64_t kMaxPublishChunkBytes = uint64_t{1} << 20;

std::string describe_session(const Session& session) {
  return fmt::format("shm {} '{}' (ring {})",
                     session.side == kClientSide ? "client ->" : "server <-", session.name,
                     common::format_size_bytes(session.ring_bytes));
}

}  // namespace

ChannelState::ChannelState(Session session, const ChannelOptions& options, int64_t now_ns)
    : session_(std::move(session)),
      control_(session_.control()),
      max_message_bytes_(static_cast<uint64_t>(std::max<int64_t>(options.max_message_bytes, 0))),
      peer_timeout_ns_(options.peer_timeout_ns),
      keepalive_interval_ns_(options.keepalive_interval_ns),
      description_(describe_session(session_)),
      last_heartbeat_ns_(now_ns),
      last_peer_life_ns_(now_ns) {
  const int side = session_.side;
  tx_ = RingProducer(&control_->rings[tx_ring(side)], session_.ring_data(tx_ring(side)),
                     session_.ring_bytes);
  rx_ = RingConsumer(&control_->rings[rx_ring(side)], session_.ring_data(rx_ring(side)),
                     session_.ring_bytes);
  publish_chunk_bytes_ =
      static_cast<size_t>(std::clamp<uint64_t>(session_.ring_bytes / 4, 1, kMaxPublishChunkBytes));
}

ChannelState::~ChannelState() {
  // The progress thread fails every channel before it exits; this covers a state that was
  // never handed to it (its callbacks would otherwise be dropped silently).
  if (!error_) fail_st(Error{ErrorCode::kUnavailable, "shm: channel destroyed"});
}

void ChannelState::send_st(std::span<const std::byte> message, SendCallback done) {
  if (error_) {
    done(std::unexpected(*error_));
    return;
  }
  if (peer_closed_) {
    done(common::make_error(ErrorCode::kUnavailable, "shm peer closed"));
    return;
  }
  const uint64_t peer_max =
      std::atomic_ref(control_->sides[peer_side(session_.side)].max_message_bytes)
          .load(std::memory_order_acquire);
  if (message.size() > max_message_bytes_ || (peer_max != 0 && message.size() > peer_max)) {
    done(common::make_error(
        ErrorCode::kInvalidArgument,
        fmt::format("shm: message of {} bytes exceeds max_message_bytes ({} here, {} at the "
                    "peer)",
                    message.size(), max_message_bytes_, peer_max)));
    return;
  }
  PendingSend send;
  send.message = message;
  send.done = std::move(done);
  const uint64_t length = message.size();
  std::memcpy(send.header, &length, sizeof(length));
  sends_.push_back(std::move(send));
}

void ChannelState::recv_st(RecvCallback done) {
  if (error_) {
    done(std::unexpected(*error_));
    return;
  }
  recvs_.push_back(std::move(done));
}

void ChannelState::fail_st(const Error& error) {
  if (error_) return;
  error_ = error;
  // Unmap and close first: the peer sees the hang-up before our callbacks run.
  tx_ = RingProducer();
  rx_ = RingConsumer();
  control_ = nullptr;
  session_ = Session{};
  rx_message_ = std::vector<std::byte>();
  std::deque<PendingSend> sends = std::move(sends_);
  std::deque<RecvCallback> recvs = std::move(recvs_);
  sends_.clear();
  recvs_.clear();
  for (auto& send : sends) send.done(std::unexpected(error));
  for (auto& recv : recvs) recv(std::unexpected(error));
}

bool ChannelState::pump_st(int64_t now_ns) {
  if (error_) return false;
  bool progressed = false;
  if (now_ns - last_heartbeat_ns_ >= keepalive_interval_ns_ / 2) {
    std::atomic_ref(control_->sides[session_.side].heartbeat)
        .store(++heartbeat_, std::memory_order_relaxed);
    last_heartbeat_ns_ = now_ns;
  }
  if (!peer_closed_ && pump_tx_st(progressed) != Status::kOk) {
    fail_st(fault_error());
    return true;
  }
  if (pump_rx_st(progressed) != Status::kOk) {
    fail_st(fault_error());
    return true;
  }
  if (peer_closed_) {
    const bool completes = !sends_.empty();
    on_peer_closed_st();
    return progressed || completes || failed_st();
  }
  check_liveness_st(now_ns, progressed);
  return progressed || failed_st();
}

void ChannelState::on_peer_closed_st() {
  // No more bytes will come: pending sends cannot be read any more; a receive still pending
  // after pump_rx_st drained the ring cannot be satisfied. Complete messages still in the ring
  // stay readable as long as nobody is waiting in vain.
  const Error closed{ErrorCode::kUnavailable, "shm peer closed"};
  std::deque<PendingSend> sends = std::move(sends_);
  sends_.clear();
  for (auto& send : sends) send.done(std::unexpected(closed));
  if (error_) return;
  uint64_t available = 0;
  if (rx_.refresh(available) != Status::kOk) {
    fault_ = Fault::kRxIndex;
    fail_st(fault_error());
    return;
  }
  if (!recvs_.empty() || available == 0) fail_st(closed);
}

void ChannelState::check_liveness_st(int64_t now_ns, bool progressed) {
  if (sends_.empty() && recvs_.empty()) {
    last_peer_life_ns_ = now_ns;
    return;
  }
  const uint64_t heartbeat = std::atomic_ref(control_->sides[peer_side(session_.side)].heartbeat)
                                 .load(std::memory_order_relaxed);
  if (progressed || heartbeat != peer_heartbeat_seen_) {
    peer_heartbeat_seen_ = heartbeat;
    last_peer_life_ns_ = now_ns;
    return;
  }
  if (now_ns - last_peer_life_ns_ >= peer_timeout_ns_) {
    fail_st(
        Error{ErrorCode::kTimeout,
              fmt::format("shm: peer made no progress for {} ({})",
                          common::format_duration_ns(now_ns - last_peer_life_ns_), description_)});
  }
}

int64_t ChannelState::deadline_ns_st() const {
  if (error_) return INT64_MAX;
  int64_t deadline = last_heartbeat_ns_ + keepalive_interval_ns_ / 2;
  if (!sends_.empty() || !recvs_.empty()) {
    deadline = std::min(deadline, last_peer_life_ns_ + peer_timeout_ns_);
  }
  return deadline;
}

void ChannelState::on_socket_ready_st(short revents) {
  if (error_) return;
  if ((revents & POLLIN) != 0) {
    // Nothing is sent on the socket after the hello; read to see EOF, discard anything else.
    std::byte scratch[256];
    const ssize_t n = ::recv(session_.socket.get(), scratch, sizeof(scratch), MSG_DONTWAIT);
    if (n == 0) peer_closed_ = true;
    if (n > 0) counters_.dropped_malformed.fetch_add(1, std::memory_order_relaxed);
    if (n < 0 && errno != EAGAIN && errno != EINTR) peer_closed_ = true;
  }
  if ((revents & (POLLHUP | POLLERR | POLLRDHUP)) != 0) peer_closed_ = true;
}

void ChannelState::on_doorbell_st() {
  if (error_) return;
  uint64_t count = 0;
  [[maybe_unused]] const ssize_t n = ::read(session_.own_doorbell.get(), &count, sizeof(count));
}

bool ChannelState::allocate_message_st(uint64_t length_bytes) {
  try {
    // Reserved, not sized: the ring appends into it without zero-filling it first; a
    // recycled buffer when one fits (its pages are mapped already).
    rx_message_ = rx_pool_.take(static_cast<size_t>(length_bytes));
    return true;
  } catch (const std::bad_alloc&) {
    return false;
  } catch (const std::length_error&) {
    return false;
  }
}

Error ChannelState::fault_error() const {
  switch (fault_) {
    case Fault::kTxIndex:
      return Error{ErrorCode::kIo,
                   fmt::format("shm: the peer corrupted the send ring: its read index {} is "
                               "outside what was written ({})",
                               fault_value_, description_)};
    case Fault::kRxIndex:
      return Error{ErrorCode::kIo,
                   fmt::format("shm: the peer corrupted the receive ring: its write index {} "
                               "is beyond the ring ({})",
                               fault_value_, description_)};
    case Fault::kOversize:
      return Error{ErrorCode::kIo, fmt::format("shm: the peer sent a message of {} bytes, above "
                                               "max_message_bytes {} ({})",
                                               fault_value_, max_message_bytes_, description_)};
    case Fault::kNoMemory:
      return Error{ErrorCode::kIo, fmt::format("shm: cannot allocate {} bytes for a received "
                                               "message ({})",
                                               fault_value_, description_)};
    case Fault::kNone:
      break;
  }
  return Error{ErrorCode::kInternal, "shm: channel failed without a recorded fault"};
}

ChannelStats ChannelState::stats() const {
  ChannelStats out = counters_.snapshot();
  out.recv_buffers_reused = rx_pool_.reused();
  return out;
}

}  // namespace detwan::transport::shm

// Per-packet path of the udp backend's io_uring link: send preparation, batch submission, the
// bounded wait and completion handling. No allocation, no exceptions, no logging; every drop is
// counted.
#include <liburing.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "common/clock.h"
#include "transport/udp/link.h"

namespace detwan::transport::udp {
namespace {

enum class Kind : uint64_t { kNone = 0, kRecv = 1, kSend = 2, kWake = 3 };

uint64_t user_data(Kind kind, SocketId socket, uint32_t index) {
  return (static_cast<uint64_t>(kind) << 56) | (uint64_t{socket & 0xFFFFFFu} << 32) | index;
}
Kind kind_of(uint64_t data) { return static_cast<Kind>(data >> 56); }
SocketId socket_of(uint64_t data) { return static_cast<SocketId>((data >> 32) & 0xFFFFFFu); }
uint32_t index_of(uint64_t data) { return static_cast<uint32_t>(data); }

}  // namespace

io_uring_sqe* UdpLink::get_sqe() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe != nullptr) return sqe;
  io_uring_submit(&ring_);  // SQ full: hand the batch to the kernel and retry once
  return io_uring_get_sqe(&ring_);
}

void UdpLink::arm_recv(SocketId id) {
  Socket& socket = *sockets_[id];
  if (socket.closing || socket.receive_armed) return;
  io_uring_sqe* sqe = get_sqe();
  if (sqe == nullptr) {
    ++counters_.dropped_no_sqe;  // retried by rearm_receives() after the next wait
    return;
  }
  // MSG_TRUNC: an oversize datagram is reported (and dropped) instead of cut short silently.
  io_uring_prep_recvmsg_multishot(sqe, socket.fd.get(), &socket.receive_template, MSG_TRUNC);
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = socket.group;
  io_uring_sqe_set_data64(sqe, user_data(Kind::kRecv, id, 0));
  socket.receive_armed = true;
  ++socket.inflight;
  ++inflight_;
}

void UdpLink::rearm_receives() {
  if (!rearm_needed_) return;
  rearm_needed_ = false;
  for (SocketId id = 0; id < sockets_.size(); ++id) {
    if (sockets_[id] && !sockets_[id]->closing && !sockets_[id]->receive_armed) {
      ++counters_.recv_rearmed;
      arm_recv(id);
      if (!sockets_[id]->receive_armed) rearm_needed_ = true;
    }
  }
}

void UdpLink::recycle(SocketId id, uint16_t buffer) {
  Socket& socket = *sockets_[id];
  io_uring_buf_ring_add(socket.buffer_ring, socket.memory.get() + size_t{buffer} * kRecvBufferBytes,
                        kRecvBufferBytes, buffer, io_uring_buf_ring_mask(kRecvBuffersPerSocket), 0);
  io_uring_buf_ring_advance(socket.buffer_ring, 1);
}

void UdpLink::on_receive(SocketId id, const io_uring_cqe& cqe) {
  Socket& socket = *sockets_[id];
  const bool more = (cqe.flags & IORING_CQE_F_MORE) != 0;
  if (!more) {
    // The multishot receive ended (cancelled, buffer ring empty, error): re-armed later.
    socket.receive_armed = false;
    --inflight_;
    if (socket.closing) {
      put_socket(id);
      return;
    }
    --socket.inflight;
    rearm_needed_ = true;
  }
  if ((cqe.flags & IORING_CQE_F_BUFFER) == 0) {
    if (cqe.res < 0 && cqe.res != -ENOBUFS && cqe.res != -ECANCELED) ++counters_.recv_errors;
    return;
  }
  const auto buffer = static_cast<uint16_t>(cqe.flags >> IORING_CQE_BUFFER_SHIFT);
  std::byte* base = socket.memory.get() + size_t{buffer} * kRecvBufferBytes;
  io_uring_recvmsg_out* out = io_uring_recvmsg_validate(base, cqe.res, &socket.receive_template);
  if (socket.closing || out == nullptr || cqe.res < 0) {
    if (out == nullptr && cqe.res >= 0) ++counters_.recv_errors;
    if (!socket.closing) recycle(id, buffer);
    return;
  }
  if ((out->flags & MSG_TRUNC) != 0) {
    ++counters_.dropped_truncated;
    recycle(id, buffer);
    return;
  }
  Received received{id, buffer, {}, {}};
  const size_t name_bytes = std::min<size_t>(out->namelen, sizeof(sockaddr_storage));
  std::memcpy(&received.source.storage, io_uring_recvmsg_name(out), name_bytes);
  received.source.length = static_cast<socklen_t>(name_bytes);
  received.payload = std::span<const std::byte>(
      static_cast<const std::byte*>(io_uring_recvmsg_payload(out, &socket.receive_template)),
      io_uring_recvmsg_payload_length(out, cqe.res, &socket.receive_template));
  ++counters_.received;
  received_.push_back(received);  // its buffer is recycled after delivery
}

void UdpLink::arm_wake() {
  io_uring_sqe* sqe = get_sqe();
  if (sqe == nullptr) return;  // the next reap re-arms (wake_armed_ stays false)
  io_uring_prep_read(sqe, wake_fd_.get(), &wake_value_, sizeof wake_value_, 0);
  io_uring_sqe_set_data64(sqe, user_data(Kind::kWake, 0, 0));
  ++inflight_;
  wake_armed_ = true;
}

std::span<std::byte> UdpLink::tx_buffer() {
  if (tx_free_.empty()) return {};
  return {tx_memory_.get() + size_t{tx_free_.back()} * kMaxDatagramBytes, kMaxDatagramBytes};
}

common::Status UdpLink::send(SocketId id, const UdpAddress& destination, size_t size_bytes) {
  ensure_started();
  if (tx_free_.empty()) return common::Status::kBusy;
  if (id >= sockets_.size() || !sockets_[id] || sockets_[id]->closing) {
    ++counters_.dropped_closed;
    return common::Status::kDropped;
  }
  if (size_bytes > kMaxDatagramBytes) return common::Status::kInvalidArgument;
  io_uring_sqe* sqe = get_sqe();
  if (sqe == nullptr) {
    ++counters_.dropped_no_sqe;
    return common::Status::kBusy;
  }
  Socket& socket = *sockets_[id];
  const uint32_t index = tx_free_.back();
  tx_free_.pop_back();
  Slot& slot = tx_slots_[index];
  slot.address = destination.storage;
  slot.vector.iov_base = tx_memory_.get() + size_t{index} * kMaxDatagramBytes;
  slot.vector.iov_len = size_bytes;
  slot.message = msghdr{};
  slot.message.msg_name = &slot.address;
  slot.message.msg_namelen = destination.length;
  slot.message.msg_iov = &slot.vector;
  slot.message.msg_iovlen = 1;
  io_uring_prep_sendmsg(sqe, socket.fd.get(), &slot.message, 0);
  io_uring_sqe_set_data64(sqe, user_data(Kind::kSend, id, index));
  tx_socket_[index] = id;
  ++socket.inflight;
  ++inflight_;
  ++counters_.sent;
  return common::Status::kOk;
}

void UdpLink::flush() {
  ensure_started();
  if (io_uring_sq_ready(&ring_) > 0) io_uring_submit(&ring_);
}

void UdpLink::put_socket(SocketId id) {
  Socket& socket = *sockets_[id];
  --socket.inflight;
  if (socket.closing && socket.inflight == 0) release_socket(id);
}

void UdpLink::complete(const io_uring_cqe& cqe) {
  const uint64_t data = io_uring_cqe_get_data64(&cqe);
  const SocketId id = socket_of(data);
  const uint32_t index = index_of(data);
  switch (kind_of(data)) {
    case Kind::kNone:
      return;  // a cancel request's own completion
    case Kind::kWake:
      --inflight_;
      wake_armed_ = false;
      if (!shutting_down_) arm_wake();
      return;
    case Kind::kSend:
      --inflight_;
      tx_free_.push_back(index);
      if (cqe.res < 0) ++counters_.send_errors;
      put_socket(tx_socket_[index]);
      return;
    case Kind::kRecv:
      on_receive(id, cqe);
      return;
  }
}

void UdpLink::reap(int64_t deadline_ns) {
  ensure_started();
  if (!wake_armed_ && !shutting_down_) arm_wake();
  // receive() flushes (DatagramLink): the waits below submit in the same system call; with
  // completions already waiting there is no wait, so submit here.
  if (io_uring_cq_ready(&ring_) > 0 && io_uring_sq_ready(&ring_) > 0) io_uring_submit(&ring_);
  if (io_uring_cq_ready(&ring_) == 0) {
    int64_t now_ns = common::MonotonicClock().now_ns();
    if (busy_poll_ns_ > 0 && deadline_ns > now_ns) {
      // Busy poll: with DEFER_TASKRUN a completion only shows in the CQ once this thread enters
      // the kernel, so each round is a non-blocking enter (it also submits queued sends).
      const int64_t spin_end_ns = std::min(deadline_ns, now_ns + busy_poll_ns_);
      while (now_ns < spin_end_ns) {
        io_uring_submit_and_get_events(&ring_);
        if (io_uring_cq_ready(&ring_) > 0) {
          ++counters_.busy_polls_found;
          break;
        }
        now_ns = common::MonotonicClock().now_ns();
      }
    }
  }
  if (io_uring_cq_ready(&ring_) == 0) {
    const int64_t now_ns = common::MonotonicClock().now_ns();
    io_uring_cqe* cqe = nullptr;
    if (deadline_ns <= now_ns) {
      io_uring_submit_and_get_events(&ring_);  // also runs the deferred completion work
    } else if (deadline_ns == INT64_MAX) {
      io_uring_submit_and_wait(&ring_, 1);
    } else {
      const int64_t wait_ns = deadline_ns - now_ns;
      __kernel_timespec timeout{wait_ns / 1'000'000'000, wait_ns % 1'000'000'000};
      (void)io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &timeout, nullptr);  // -ETIME: due
    }
  }
  unsigned head = 0;
  unsigned count = 0;
  io_uring_cqe* cqe = nullptr;
  io_uring_for_each_cqe(&ring_, head, cqe) {
    complete(*cqe);
    ++count;
  }
  io_uring_cq_advance(&ring_, count);
}

}  // namespace detwan::transport::udp

// Per-packet path of the udp backend's io_uring link: send preparation, batch submission, the
// bounded wait and completion handling. No allocation, no exceptions, no logging; every drop is
// counted.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include <liburing.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <unistd.h>

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

// CPU time this thread has had (what a spin got of the wall-clock time it took).
int64_t thread_cpu_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1'000'000'000 + t.tv_nsec;
}

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
  io_uring_buf_ring_add(socket.buffer_ring, socket.memory.get() + buffer * socket.buffer_bytes,
                        socket.buffer_bytes, buffer, io_uring_buf_ring_mask(socket.buffer_count),
                        0);
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
  std::byte* base = socket.memory.get() + buffer * socket.buffer_bytes;
  io_uring_recvmsg_out* out = io_uring_recvmsg_validate(base, cqe.res, &socket.receive_template);
  if (socket.closing || out == nullptr || cqe.res < 0) {
    if (out == nullptr && cqe.res >= 0) ++counters_.recv_errors;
    if (!socket.closing) recycle(id, buffer);
    return;
  }
  const std::span<const std::byte> payload(
      static_cast<const std::byte*>(io_uring_recvmsg_payload(out, &socket.receive_template)),
      io_uring_recvmsg_payload_length(out, cqe.res, &socket.receive_template));
  // GRO: the size of the datagrams coalesced in this buffer (0: one datagram).
  size_t segment_bytes = 0;
  if (socket.gro) {
    for (cmsghdr* c = io_uring_recvmsg_cmsg_firsthdr(out, &socket.receive_template); c != nullptr;
         c = io_uring_recvmsg_cmsg_nexthdr(out, &socket.receive_template, c)) {
      if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
        int size = 0;
        std::memcpy(&size, CMSG_DATA(c), sizeof size);
        segment_bytes = size > 0 ? static_cast<size_t>(size) : 0;
      }
    }
  }
  // Truncated, a lone datagram over the link's limit, or a coalesced buffer whose size was lost
  // (control message cut short): dropped and counted, never delivered cut.
  if ((out->flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 ||
      (segment_bytes == 0 && payload.size() > kMaxDatagramBytes) ||
      segment_bytes > kMaxDatagramBytes) {
    ++counters_.dropped_truncated;
    recycle(id, buffer);
    return;
  }
  Received received{id, buffer, false, {}, {}};
  const size_t name_bytes = std::min<size_t>(out->namelen, sizeof(sockaddr_storage));
  std::memcpy(&received.source.storage, io_uring_recvmsg_name(out), name_bytes);
  received.source.length = static_cast<socklen_t>(name_bytes);
  if (segment_bytes == 0 || segment_bytes >= payload.size()) {
    received.payload = payload;
    received.last_of_buffer = true;
    ++counters_.received;
    received_.push_back(received);  // its buffer is recycled after delivery
    return;
  }
  uint64_t datagrams = 0;
  for (size_t offset = 0; offset < payload.size(); offset += segment_bytes) {
    received.payload = payload.subspan(offset, std::min(segment_bytes, payload.size() - offset));
    received.last_of_buffer = offset + segment_bytes >= payload.size();
    received_.push_back(received);
    ++datagrams;
  }
  counters_.received += datagrams;
  ++counters_.gro_buffers;
  counters_.gro_datagrams += datagrams;
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

bool UdpLink::joins_batch(SocketId id, const UdpAddress& destination, size_t size_bytes) const {
  if (open_batch_ == kNoBatch) return false;
  const TxBatch& batch = tx_batches_[open_batch_];
  return batch.socket == id && size_bytes <= batch.segment_bytes &&
         same_address(batch.destination, destination);
}

common::Status UdpLink::send(SocketId id, const UdpAddress& destination, size_t size_bytes) {
  ensure_started();
  if (tx_free_.empty()) return common::Status::kBusy;
  if (id >= sockets_.size() || !sockets_[id] || sockets_[id]->closing) {
    ++counters_.dropped_closed;
    return common::Status::kDropped;
  }
  if (size_bytes > kMaxDatagramBytes) return common::Status::kInvalidArgument;
  if (!joins_batch(id, destination, size_bytes)) {
    close_batch();
    open_batch_ = tx_batch_free_.back();  // never empty: a batch holds at least one buffer
    tx_batch_free_.pop_back();
    TxBatch& batch = tx_batches_[open_batch_];
    batch.destination = destination;
    batch.socket = id;
    batch.count = 0;
    batch.segment_bytes = static_cast<uint32_t>(size_bytes);
    batch.total_bytes = 0;
  }
  TxBatch& batch = tx_batches_[open_batch_];
  const uint32_t buffer = tx_free_.back();
  tx_free_.pop_back();
  batch.vectors[batch.count] =
      iovec{tx_memory_.get() + size_t{buffer} * kMaxDatagramBytes, size_bytes};
  batch.buffers[batch.count] = buffer;
  ++batch.count;
  batch.total_bytes += static_cast<uint32_t>(size_bytes);
  ++counters_.sent;
  // Full, ended by a shorter datagram, or no GSO on this socket: prepare it now.
  if (!sockets_[id]->gso || batch.count == kMaxGsoSegments || size_bytes < batch.segment_bytes ||
      batch.total_bytes + batch.segment_bytes > kMaxGsoBytes) {
    close_batch();
  }
  return common::Status::kOk;
}

void UdpLink::free_batch(uint32_t index) {
  TxBatch& batch = tx_batches_[index];
  for (uint32_t i = 0; i < batch.count; ++i) tx_free_.push_back(batch.buffers[i]);
  batch.count = 0;
  tx_batch_free_.push_back(index);
}

void UdpLink::close_batch() {
  if (open_batch_ == kNoBatch) return;
  const uint32_t index = open_batch_;
  open_batch_ = kNoBatch;
  TxBatch& batch = tx_batches_[index];
  io_uring_sqe* sqe = get_sqe();
  if (sqe == nullptr) {
    counters_.dropped_no_sqe += batch.count;
    free_batch(index);
    return;
  }
  batch.message = msghdr{};
  batch.message.msg_name = &batch.destination.storage;
  batch.message.msg_namelen = batch.destination.length;
  batch.message.msg_iov = batch.vectors;
  batch.message.msg_iovlen = batch.count;
  if (batch.count > 1) {
    batch.message.msg_control = batch.control;
    batch.message.msg_controllen = sizeof batch.control;
    cmsghdr* c = CMSG_FIRSTHDR(&batch.message);
    c->cmsg_level = SOL_UDP;
    c->cmsg_type = UDP_SEGMENT;
    c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
    const auto segment = static_cast<uint16_t>(batch.segment_bytes);
    std::memcpy(CMSG_DATA(c), &segment, sizeof segment);
    ++counters_.gso_sends;
    counters_.gso_datagrams += batch.count;
  }
  io_uring_prep_sendmsg(sqe, sockets_[batch.socket]->fd.get(), &batch.message, 0);
  io_uring_sqe_set_data64(sqe, user_data(Kind::kSend, batch.socket, index));
  ++sockets_[batch.socket]->inflight;
  ++inflight_;
}

void UdpLink::resend_one_by_one(uint32_t index) {
  TxBatch& batch = tx_batches_[index];
  Socket& socket = *sockets_[batch.socket];
  socket.gso = false;
  ++counters_.gso_refused;
  close_batch();  // the batch being filled (if any) keeps its order ahead of these
  for (uint32_t i = 0; i < batch.count; ++i) {
    const uint32_t single = tx_batch_free_.back();  // the failed batch still holds its own
    tx_batch_free_.pop_back();
    TxBatch& one = tx_batches_[single];
    one.destination = batch.destination;
    one.socket = batch.socket;
    one.count = 1;
    one.segment_bytes = static_cast<uint32_t>(batch.vectors[i].iov_len);
    one.total_bytes = one.segment_bytes;
    one.vectors[0] = batch.vectors[i];
    one.buffers[0] = batch.buffers[i];
    open_batch_ = single;
    close_batch();
  }
  batch.count = 0;  // its buffers now belong to the single sends
  tx_batch_free_.push_back(index);
}

void UdpLink::flush() {
  ensure_started();
  close_batch();
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
    case Kind::kSend: {
      --inflight_;
      const TxBatch& batch = tx_batches_[index];
      const SocketId socket = batch.socket;
      // Refusals of the batch as a whole (no segmentation on the route's device, a segment
      // over the route's MTU, ...): each datagram alone may still go.
      if (batch.count > 1 && (cqe.res == -EIO || cqe.res == -EINVAL || cqe.res == -EMSGSIZE) &&
          !sockets_[socket]->closing) {
        resend_one_by_one(index);  // the route cannot segment: nothing is lost
      } else {
        if (cqe.res < 0) counters_.send_errors += batch.count;
        free_batch(index);
      }
      put_socket(socket);
      return;
    }
    case Kind::kRecv:
      on_receive(id, cqe);
      return;
  }
}

void UdpLink::sample_load(int64_t now_ns) {
  next_load_sample_ns_ = now_ns + AdaptiveBusyPoll::kSampleIntervalNs;
  // "0.50 0.40 0.30 3/250 12345": the fourth field's numerator is the threads runnable now.
  char text[128];
  const ssize_t got = ::pread(loadavg_fd_.get(), text, sizeof text - 1, 0);
  if (got <= 0) return;
  text[got] = '\0';
  const char* field = text;
  for (int spaces = 0; spaces < 3 && field != nullptr; ++spaces) {
    field = std::strchr(field, ' ');
    if (field != nullptr) ++field;
  }
  if (field == nullptr) return;
  const uint64_t stepped_aside = adaptive_->stepped_aside();
  adaptive_->on_runnable(std::strtol(field, nullptr, 10), online_cpus_);
  counters_.busy_polls_stepped_aside += adaptive_->stepped_aside() - stepped_aside;
}

void UdpLink::reap(int64_t deadline_ns) {
  ensure_started();
  close_batch();
  if (!wake_armed_ && !shutting_down_) arm_wake();
  // receive() flushes (DatagramLink): the waits below submit in the same system call; with
  // completions already waiting there is no wait, so submit here.
  if (io_uring_cq_ready(&ring_) > 0 && io_uring_sq_ready(&ring_) > 0) io_uring_submit(&ring_);
  if (io_uring_cq_ready(&ring_) == 0) {
    int64_t now_ns = common::MonotonicClock().now_ns();
    if (adaptive_ && now_ns >= next_load_sample_ns_) sample_load(now_ns);
    const int64_t budget_ns = adaptive_ ? adaptive_->next_budget_ns() : busy_poll_ns_;
    if (budget_ns > 0 && deadline_ns > now_ns) {
      // Busy poll: with DEFER_TASKRUN a completion only shows in the CQ once this thread enters
      // the kernel, so each round is a non-blocking enter (it also submits queued sends).
      const int64_t spin_start_ns = now_ns;
      const int64_t cpu_start_ns = adaptive_ ? thread_cpu_ns() : 0;
      const int64_t spin_end_ns = std::min(deadline_ns, now_ns + budget_ns);
      bool found = false;
      while (now_ns < spin_end_ns) {
        io_uring_submit_and_get_events(&ring_);
        if (io_uring_cq_ready(&ring_) > 0) {
          ++counters_.busy_polls_found;
          found = true;
          break;
        }
        now_ns = common::MonotonicClock().now_ns();
      }
      if (adaptive_) {
        const uint64_t stepped_aside = adaptive_->stepped_aside();
        adaptive_->on_spin(found, common::MonotonicClock().now_ns() - spin_start_ns,
                           thread_cpu_ns() - cpu_start_ns);
        counters_.busy_polls_stepped_aside += adaptive_->stepped_aside() - stepped_aside;
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

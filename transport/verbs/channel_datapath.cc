// The verbs channel's progress thread: chunked SENDs under credits, receive reassembly,
// completion handling. Functions ending in _st run only on the channel's progress thread.
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <new>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/byte_order.h"
#include "transport/verbs/channel.h"

namespace detwan::transport::verbs {
namespace {

using common::Error;
using common::ErrorCode;

constexpr uint64_t kRecvTag = uint64_t{1} << 63;  // wr_id bit: receive work request
constexpr uint32_t kCreditReturnThreshold = kRecvSlots / 4;

Error completion_error(const ibv_wc& wc, const std::string& description) {
  const ErrorCode code = wc.status == IBV_WC_RETRY_EXC_ERR ? ErrorCode::kTimeout : ErrorCode::kIo;
  return Error{code, fmt::format("{}: work completion failed: {} (vendor error 0x{:x})",
                                 description, ibv_wc_status_str(wc.status), wc.vendor_err)};
}

}  // namespace

void ChannelCore::run_st() {
  ops_.set_owner(std::this_thread::get_id());
  std::vector<std::function<void()>> ops;
  while (!stop_.load(std::memory_order_acquire)) {
    std::array<pollfd, 3> fds{pollfd{wake_.get(), POLLIN, 0}, pollfd{qp_.events->fd, POLLIN, 0},
                              pollfd{bootstrap_.get(), POLLIN, 0}};
    const nfds_t count = error_ ? 2 : 3;  // after failure the bootstrap socket is shut down
    // Ops posted by this thread's own callbacks wrote no wake-up: do not sleep on them.
    if (::poll(fds.data(), count, ops_.pending() ? 0 : -1) < 0 && errno != EINTR) {
      fail_st(Error{ErrorCode::kIo,
                    fmt::format("{}: poll failed: {}", description_, std::strerror(errno))},
              false);
    }
    if (fds[1].revents & POLLIN) {
      ibv_cq* cq = nullptr;
      void* context = nullptr;
      if (ibv_get_cq_event(qp_.events.get(), &cq, &context) == 0) {
        ibv_ack_cq_events(cq, 1);
        (void)ibv_req_notify_cq(cq, 0);  // re-arm before draining: nothing slips between
      }
      drain_cq_st();
    }
    if ((fds[0].revents & POLLIN) || ops_.pending()) {
      uint64_t ignored = 0;
      if (fds[0].revents & POLLIN) (void)::read(wake_.get(), &ignored, sizeof(ignored));
      ops_.drain_st(ops);
      for (auto& op : ops) op();
      ops.clear();
    }
    // The peer's completions were drained above, so messages it sent before closing the
    // bootstrap socket are already delivered or kept.
    if (count == 3 && (fds[2].revents & (POLLIN | POLLHUP | POLLERR))) {
      std::array<char, 64> sink{};
      const ssize_t n = ::recv(bootstrap_.get(), sink.data(), sink.size(), MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        const bool timed_out = n < 0 && errno == ETIMEDOUT;
        fail_st(Error{timed_out ? ErrorCode::kTimeout : ErrorCode::kUnavailable,
                      fmt::format("{}: peer {} (bootstrap connection)", description_,
                                  timed_out ? "stopped answering" : "closed the channel")},
                n == 0);
      }
    }
  }
}

void ChannelCore::drain_cq_st() {
  std::array<ibv_wc, 16> wcs{};
  while (true) {
    const int n = ibv_poll_cq(qp_.cq.get(), static_cast<int>(wcs.size()), wcs.data());
    if (n < 0) {
      return fail_st(Error{ErrorCode::kIo, fmt::format("{}: ibv_poll_cq failed", description_)},
                     false);
    }
    if (n == 0) break;
    for (int i = 0; i < n; ++i) {
      const ibv_wc& wc = wcs[static_cast<size_t>(i)];
      if (wc.status != IBV_WC_SUCCESS) {
        if (!error_) fail_st(completion_error(wc, description_), false);
        continue;  // flush errors after a failure or close
      }
      if (error_) continue;
      if (wc.wr_id & kRecvTag) {
        on_recv_st(static_cast<uint32_t>(wc.wr_id & ~kRecvTag), wc);
      } else {
        on_send_done_st();
      }
    }
  }
  pump_st();
}

void ChannelCore::on_send_done_st() {
  if (posted_.empty()) return;
  Posted posted = std::move(posted_.front());
  posted_.pop_front();
  if (posted.chunk >= 0) free_chunks_.push_back(posted.chunk);
  if (posted.done) {
    counters_.messages_sent.fetch_add(1, std::memory_order_relaxed);
    counters_.bytes_sent.fetch_add(posted.message_bytes, std::memory_order_relaxed);
    posted.done({});
  }
}

void ChannelCore::on_recv_st(uint32_t chunk, const ibv_wc& wc) {
  if (wc.wc_flags & IBV_WC_WITH_IMM) credits_ += ntohl(wc.imm_data);
  const std::byte* data = recv_pool_.chunk(chunk);
  size_t length = wc.byte_len;
  if (length > 0) {  // zero bytes: a credit-only send
    if (!assembling_) {
      if (length < 8) {
        counters_.dropped_malformed.fetch_add(1, std::memory_order_relaxed);
        return fail_st(Error{ErrorCode::kIo, fmt::format("{}: first chunk of {} bytes has no "
                                                         "length header",
                                                         description_, length)},
                       false);
      }
      const uint64_t message_bytes = common::load_be64(data);
      if (message_bytes > recv_limit_bytes_) {
        counters_.dropped_malformed.fetch_add(1, std::memory_order_relaxed);
        return fail_st(
            Error{ErrorCode::kIo, fmt::format("{}: peer sent a message of {} bytes, "
                                              "above max_message_bytes {}",
                                              description_, message_bytes, recv_limit_bytes_)},
            false);
      }
      try {
        body_.resize(message_bytes);
      } catch (const std::bad_alloc&) {
        return fail_st(Error{ErrorCode::kIo, fmt::format("{}: cannot allocate {} bytes",
                                                         description_, message_bytes)},
                       false);
      }
      body_filled_ = 0;
      assembling_ = true;
      data += 8;
      length -= 8;
    }
    if (length > body_.size() - body_filled_) {
      counters_.dropped_malformed.fetch_add(1, std::memory_order_relaxed);
      return fail_st(
          Error{ErrorCode::kIo, fmt::format("{}: chunk overruns its message", description_)},
          false);
    }
    std::memcpy(body_.data() + body_filled_, data, length);
    body_filled_ += length;
    if (body_filled_ == body_.size()) {
      assembling_ = false;
      deliver_st(std::exchange(body_, {}));
    }
  }
  if (post_recv_st(chunk)) ++owed_credits_;
}

void ChannelCore::deliver_st(std::vector<std::byte> message) {
  counters_.messages_received.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes_received.fetch_add(message.size(), std::memory_order_relaxed);
  if (recvs_.empty()) {
    ready_.push_back(std::move(message));
    return;
  }
  RecvCallback done = std::move(recvs_.front());
  recvs_.pop_front();
  done(std::move(message));
}

// Posts chunks of queued messages while credits (keeping one in reserve) and send buffers
// last, then returns owed credits on their own if no data send carried them.
void ChannelCore::pump_st() {
  while (!error_ && !outgoing_.empty() && credits_ > 1 && !free_chunks_.empty()) {
    Outgoing& message = outgoing_.front();
    const int32_t chunk = free_chunks_.back();
    free_chunks_.pop_back();
    std::byte* out = send_pool_.chunk(static_cast<size_t>(chunk));
    size_t length = 0;
    if (!message.header_sent) {
      common::store_be64(out, message.message.size());
      length = 8;
      message.header_sent = true;
    }
    const size_t n = std::min(kChunkBytes - length, message.message.size() - message.offset);
    std::memcpy(out + length, message.message.data() + message.offset, n);
    message.offset += n;
    length += n;
    const bool last = message.offset == message.message.size();
    if (!post_send_st(chunk, length)) return;
    Posted& posted = posted_.emplace_back();
    posted.chunk = chunk;
    if (last) {
      posted.done = std::move(message.done);
      posted.message_bytes = message.message.size();
      outgoing_.pop_front();
    }
  }
  if (!error_ && owed_credits_ >= kCreditReturnThreshold && credits_ >= 1) {
    if (post_send_st(-1, 0)) posted_.emplace_back();
  }
}

bool ChannelCore::post_send_st(int32_t chunk, size_t length) {
  ibv_sge sge{};
  ibv_send_wr wr{};
  if (chunk >= 0) {
    sge.addr = reinterpret_cast<uintptr_t>(send_pool_.chunk(static_cast<size_t>(chunk)));
    sge.length = static_cast<uint32_t>(length);
    sge.lkey = send_pool_.mr->lkey;
    wr.sg_list = &sge;
    wr.num_sge = 1;
  }
  wr.wr_id = static_cast<uint64_t>(static_cast<uint32_t>(chunk));
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(owed_credits_);
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(qp_.qp.get(), &wr, &bad); rc != 0) {
    fail_st(Error{ErrorCode::kIo,
                  fmt::format("{}: ibv_post_send failed: {}", description_, std::strerror(rc))},
            false);
    return false;
  }
  owed_credits_ = 0;
  --credits_;
  counters_.segments_sent.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool ChannelCore::post_recv_st(uint32_t chunk) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(recv_pool_.chunk(chunk)),
              static_cast<uint32_t>(kChunkBytes), recv_pool_.mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = kRecvTag | chunk;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (int rc = ibv_post_recv(qp_.qp.get(), &wr, &bad); rc != 0) {
    fail_st(Error{ErrorCode::kIo,
                  fmt::format("{}: ibv_post_recv failed: {}", description_, std::strerror(rc))},
            false);
    return false;
  }
  return true;
}

// Fails once: the QP goes to ERR (outstanding work requests flush), the bootstrap socket is
// shut down (the peer sees the close), pending operations complete with `error`.
void ChannelCore::fail_st(Error error, bool keep_received) {
  if (error_) return;
  error_ = std::move(error);
  to_error(qp_.qp.get());
  (void)::shutdown(bootstrap_.get(), SHUT_RDWR);
  std::deque<Outgoing> outgoing = std::exchange(outgoing_, {});
  std::deque<Posted> posted = std::exchange(posted_, {});
  std::deque<RecvCallback> recvs = std::exchange(recvs_, {});
  body_ = {};
  assembling_ = false;
  if (!keep_received) ready_.clear();
  for (Posted& p : posted) {
    if (p.done) p.done(std::unexpected(*error_));
  }
  for (Outgoing& o : outgoing) o.done(std::unexpected(*error_));
  for (RecvCallback& done : recvs) {
    if (!ready_.empty()) {
      done(std::move(ready_.front()));
      ready_.pop_front();
    } else {
      done(std::unexpected(*error_));
    }
  }
}

void ChannelCore::send_async(std::span<const std::byte> message, SendCallback done) {
  post([this, message, done = std::move(done)]() mutable {
    if (error_) return done(std::unexpected(*error_));
    if (message.size() > send_limit_bytes_) {
      return done(common::make_error(
          ErrorCode::kInvalidArgument,
          fmt::format("{}: message of {} bytes exceeds max_message_bytes {} (local or peer's)",
                      description_, message.size(), send_limit_bytes_)));
    }
    outgoing_.push_back(Outgoing{message, std::move(done)});
    pump_st();
  });
}

void ChannelCore::recv_async(RecvCallback done) {
  post([this, done = std::move(done)]() mutable {
    if (!ready_.empty()) {
      std::vector<std::byte> message = std::move(ready_.front());
      ready_.pop_front();
      return done(std::move(message));
    }
    if (error_) return done(std::unexpected(*error_));
    recvs_.push_back(std::move(done));
  });
}

void ChannelCore::close() {
  post([this] {
    if (!error_)
      fail_st(Error{ErrorCode::kUnavailable, description_ + ": channel closed locally"}, false);
  });
}

ChannelStats ChannelCore::stats() const { return counters_.snapshot(); }

}  // namespace detwan::transport::verbs

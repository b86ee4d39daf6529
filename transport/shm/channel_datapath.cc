// The shm hot path: frames in and out of the rings, wake-ups. No exceptions, no logging, no
// allocation except the per-message receive buffer (channel_state.cc); faults are counted and
// returned as Status, the caller turns them into the channel's error.
#include <algorithm>
#include <cstring>

#include <sys/eventfd.h>
#include <unistd.h>

#include "transport/shm/channel_state.h"

namespace detwan::transport::shm {

Status ChannelState::pump_tx_st(bool& progressed) {
  size_t completed = 0;  // sends_[0, completed) are fully in the ring
  bool wrote = false;
  size_t since_publish = 0;
  uint64_t free_bytes = 0;
  while (completed < sends_.size()) {
    if (tx_.refresh(free_bytes) != Status::kOk) {
      fault_ = Fault::kTxIndex;
      fault_value_ = std::atomic_ref(control_->rings[tx_ring(session_.side)].tail)
                         .load(std::memory_order_relaxed);
      counters_.dropped_malformed.fetch_add(1, std::memory_order_relaxed);
      return Status::kMalformed;
    }
    if (free_bytes == 0) break;
    PendingSend& send = sends_[completed];
    if (send.header_written < kFrameHeaderBytes) {
      send.header_written +=
          tx_.write(std::span<const std::byte>(send.header).subspan(send.header_written));
      wrote = true;
    }
    if (send.header_written == kFrameHeaderBytes && send.body_written < send.message.size()) {
      const size_t chunk = std::min(send.message.size() - send.body_written, publish_chunk_bytes_);
      const size_t n = tx_.write(send.message.subspan(send.body_written, chunk));
      send.body_written += n;
      since_publish += n;
      wrote = true;
      if (since_publish >= publish_chunk_bytes_) {
        // Let the peer start draining this chunk while the next one is copied.
        tx_.publish();
        wake_peer_st();
        since_publish = 0;
      }
    }
    if (send.header_written == kFrameHeaderBytes && send.body_written == send.message.size()) {
      ++completed;
    }
  }
  if (!wrote) return Status::kOk;
  // Published before the completions run: "complete" means the bytes are in the ring.
  tx_.publish();
  wake_peer_st();
  progressed = true;
  for (size_t i = 0; i < completed; ++i) {
    SendCallback done = std::move(sends_.front().done);
    const size_t size_bytes = sends_.front().message.size();
    sends_.pop_front();
    counters_.messages_sent.fetch_add(1, std::memory_order_relaxed);
    counters_.bytes_sent.fetch_add(size_bytes, std::memory_order_relaxed);
    done(Result<void>{});
  }
  return Status::kOk;
}

Status ChannelState::pump_rx_st(bool& progressed) {
  size_t since_publish = 0;
  bool consumed = false;
  while (!recvs_.empty()) {
    const uint64_t need =
        rx_in_message_ ? (rx_done_bytes_ < rx_length_bytes_ ? 1 : 0) : kFrameHeaderBytes;
    if (rx_.available() < need) {
      uint64_t available = 0;
      if (rx_.refresh(available) != Status::kOk) {
        fault_ = Fault::kRxIndex;
        fault_value_ = std::atomic_ref(control_->rings[rx_ring(session_.side)].head)
                           .load(std::memory_order_relaxed);
        counters_.dropped_malformed.fetch_add(1, std::memory_order_relaxed);
        return Status::kMalformed;
      }
      if (available < need) break;
    }
    if (!rx_in_message_) {
      std::byte header[kFrameHeaderBytes];
      rx_.read(header);
      consumed = true;
      uint64_t length = 0;
      std::memcpy(&length, header, sizeof(length));
      if (length > max_message_bytes_) {
        fault_ = Fault::kOversize;
        fault_value_ = length;
        counters_.dropped_malformed.fetch_add(1, std::memory_order_relaxed);
        return Status::kMalformed;
      }
      if (!allocate_message_st(length)) {
        fault_ = Fault::kNoMemory;
        fault_value_ = length;
        return Status::kMalformed;
      }
      rx_in_message_ = true;
      rx_length_bytes_ = length;
      rx_done_bytes_ = 0;
    }
    if (rx_done_bytes_ < rx_length_bytes_) {
      const auto chunk = static_cast<size_t>(
          std::min<uint64_t>(rx_length_bytes_ - rx_done_bytes_, publish_chunk_bytes_));
      const size_t n = rx_.read_append(rx_message_, chunk);  // reserved by allocate_message_st
      rx_done_bytes_ += n;
      since_publish += n;
      consumed = true;
      if (since_publish >= publish_chunk_bytes_) {
        rx_.publish();  // hand the space back while the rest is copied
        wake_peer_st();
        since_publish = 0;
      }
    }
    if (rx_done_bytes_ == rx_length_bytes_) {
      rx_.publish();
      wake_peer_st();
      since_publish = 0;
      RecvCallback done = std::move(recvs_.front());
      recvs_.pop_front();
      rx_in_message_ = false;
      counters_.messages_received.fetch_add(1, std::memory_order_relaxed);
      counters_.bytes_received.fetch_add(rx_length_bytes_, std::memory_order_relaxed);
      progressed = true;
      done(std::move(rx_message_));
      rx_message_ = std::vector<std::byte>();
    }
  }
  if (consumed) {
    rx_.publish();
    wake_peer_st();
    progressed = true;
  }
  return Status::kOk;
}

void ChannelState::wake_peer_st() {
  // Pairs with prepare_sleep_st() on the other side: index store (seq_cst, by publish()) then
  // flag load here; flag store then index load there. One of the two sees the other.
  const uint32_t sleeping = std::atomic_ref(control_->sides[peer_side(session_.side)].sleeping)
                                .load(std::memory_order_seq_cst);
  if (sleeping == 0) return;
  const uint64_t one = 1;
  // EAGAIN (counter saturated) still leaves the eventfd readable: nothing to do.
  [[maybe_unused]] const ssize_t n = ::write(session_.peer_doorbell.get(), &one, sizeof(one));
}

bool ChannelState::prepare_sleep_st() {
  if (error_) return false;
  std::atomic_ref(control_->sides[session_.side].sleeping).store(1, std::memory_order_seq_cst);
  uint64_t bytes = 0;
  if (!recvs_.empty()) {
    if (rx_.refresh(bytes) != Status::kOk) return true;  // pump_st reports it
    const uint64_t need = rx_in_message_ ? 1 : kFrameHeaderBytes;
    if (bytes >= need || (rx_in_message_ && rx_done_bytes_ == rx_length_bytes_)) return true;
  }
  if (!sends_.empty()) {
    if (tx_.refresh(bytes) != Status::kOk || bytes > 0) return true;
  }
  return false;
}

void ChannelState::end_sleep_st() {
  if (error_) return;
  std::atomic_ref(control_->sides[session_.side].sleeping).store(0, std::memory_order_relaxed);
}

}  // namespace detwan::transport::shm

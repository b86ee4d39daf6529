#pragma once
// The two ends of a single-producer single-consumer byte ring in shared memory (layout.h).
//
// Each end keeps its own index privately and only *publishes* it to shared memory; the other
// end's index is read from shared memory and validated (the peer may be hostile or corrupt):
// an impossible index returns Status::kMalformed and the caller fails the channel.
// Any capacity >= 1 works (positions are index % capacity), so tests can use odd sizes.
//
// Thread ownership: one end belongs to one thread (the progress thread of its channel).
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "common/status.h"
#include "transport/shm/layout.h"

namespace detwan::transport::shm {

using common::Status;

class RingProducer {
 public:
  RingProducer() = default;
  RingProducer(RingIndices* indices, std::byte* data, uint64_t capacity_bytes)
      : indices_(indices), data_(data), capacity_bytes_(capacity_bytes) {}

  // Reads the consumer's index; `free_bytes` = bytes that may be written now. seq_cst: see
  // SideState::sleeping.
  [[nodiscard]] Status refresh(uint64_t& free_bytes) {
    const uint64_t tail = std::atomic_ref(indices_->tail).load(std::memory_order_seq_cst);
    // Valid iff tail_seen_ <= tail <= head_ (unsigned arithmetic handles wrap of the u64).
    if (tail - tail_seen_ > head_ - tail_seen_) return Status::kMalformed;
    tail_seen_ = tail;
    free_bytes = capacity_bytes_ - (head_ - tail);
    return Status::kOk;
  }

  // Copies up to the free space known from the last refresh(); returns the bytes written.
  size_t write(std::span<const std::byte> bytes) {
    const uint64_t free_bytes = capacity_bytes_ - (head_ - tail_seen_);
    const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes.size(), free_bytes));
    const auto pos = static_cast<size_t>(head_ % capacity_bytes_);
    const size_t first = std::min(n, static_cast<size_t>(capacity_bytes_) - pos);
    if (first > 0) std::memcpy(data_ + pos, bytes.data(), first);
    if (n > first) std::memcpy(data_, bytes.data() + first, n - first);
    head_ += n;
    return n;
  }

  // Makes everything written so far visible to the consumer. seq_cst: see SideState::sleeping.
  void publish() { std::atomic_ref(indices_->head).store(head_, std::memory_order_seq_cst); }

  [[nodiscard]] uint64_t written() const { return head_; }
  [[nodiscard]] uint64_t capacity_bytes() const { return capacity_bytes_; }

 private:
  RingIndices* indices_ = nullptr;
  std::byte* data_ = nullptr;
  uint64_t capacity_bytes_ = 1;
  uint64_t head_ = 0;       // private: bytes written
  uint64_t tail_seen_ = 0;  // the consumer's index at the last refresh
};

class RingConsumer {
 public:
  RingConsumer() = default;
  RingConsumer(RingIndices* indices, const std::byte* data, uint64_t capacity_bytes)
      : indices_(indices), data_(data), capacity_bytes_(capacity_bytes) {}

  // Reads the producer's index; `available_bytes` = bytes that may be read now.
  [[nodiscard]] Status refresh(uint64_t& available_bytes) {
    const uint64_t head = std::atomic_ref(indices_->head).load(std::memory_order_seq_cst);
    // Valid iff head_seen_ <= head <= tail_ + capacity.
    if (head - head_seen_ > tail_ + capacity_bytes_ - head_seen_) return Status::kMalformed;
    head_seen_ = head;
    available_bytes = head - tail_;
    return Status::kOk;
  }

  // Copies up to the bytes known available from the last refresh(); returns the bytes read.
  size_t read(std::span<std::byte> out) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(out.size(), head_seen_ - tail_));
    const auto pos = static_cast<size_t>(tail_ % capacity_bytes_);
    const size_t first = std::min(n, static_cast<size_t>(capacity_bytes_) - pos);
    if (first > 0) std::memcpy(out.data(), data_ + pos, first);
    if (n > first) std::memcpy(out.data() + first, data_, n - first);
    tail_ += n;
    return n;
  }

  // Appends up to `max_bytes` to `out` (which the caller reserved: no reallocation, and no
  // zero-filling of a buffer that is about to be overwritten); returns the bytes appended.
  size_t read_append(std::vector<std::byte>& out, size_t max_bytes) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(max_bytes, head_seen_ - tail_));
    const auto pos = static_cast<size_t>(tail_ % capacity_bytes_);
    const size_t first = std::min(n, static_cast<size_t>(capacity_bytes_) - pos);
    out.insert(out.end(), data_ + pos, data_ + pos + first);
    out.insert(out.end(), data_, data_ + (n - first));
    tail_ += n;
    return n;
  }

  [[nodiscard]] uint64_t available() const { return head_seen_ - tail_; }

  // Hands the bytes read so far back to the producer. seq_cst: see SideState::sleeping.
  void publish() { std::atomic_ref(indices_->tail).store(tail_, std::memory_order_seq_cst); }

  [[nodiscard]] uint64_t consumed() const { return tail_; }

 private:
  RingIndices* indices_ = nullptr;
  const std::byte* data_ = nullptr;
  uint64_t capacity_bytes_ = 1;
  uint64_t tail_ = 0;       // private: bytes read
  uint64_t head_seen_ = 0;  // the producer's index at the last refresh
};

}  // namespace detwan::transport::shm

#pragma once
// The software dispatch ring of the uring backend's shards (shards.h): a bounded
// single-producer/single-consumer ring of packet copies from one shard to another, one per
// ordered pair of shards. A shard that read a packet of a tunnel another shard owns (a TUN
// packet: the device's queues are picked by flow hash; a WAN datagram the reuseport program
// could not steer, see shards.h) copies it into the owner's ring; the owner copies it into a
// buffer of its own pool and gives it to its engine.
//
// Why a copy, not a buffer index: each shard's BufferPool is single-threaded (a free list with
// no atomics, the io_uring operations of one ring point into it); handing over an index would
// need a pool shared by every shard plus a return path for the buffer. A copy of at most one
// buffer costs tens of ns and only the packets that reached the wrong shard pay it.
//
// Threading: push() on the producer's thread only, front()/pop()/empty() on the consumer's only.
// Never blocks, never allocates after construction.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>

#include "dataplane/gw/config.h"

namespace detwan::dataplane::uring {

enum class DispatchKind : uint8_t { kTun = 1, kWan = 2 };

struct DispatchHeader {
  DispatchKind kind = DispatchKind::kTun;
  uint32_t port = 0;   // kWan: the WAN port it arrived on
  uint32_t bytes = 0;  // kTun: the IP packet; kWan: the whole UDP payload (header included)
  gw::Endpoint from;   // kWan: its source
};

class DispatchRing {
 public:
  // slots: a power of two; slot_bytes: the largest copy.
  DispatchRing(uint32_t slots, uint32_t slot_bytes)
      : mask_(slots - 1),
        slot_bytes_(slot_bytes),
        stride_(static_cast<uint32_t>((kHeaderSpace + slot_bytes + 63) / 64 * 64)),
        memory_(new std::byte[std::size_t{stride_} * slots]) {}

  // Producer: copies the packet in; false (nothing copied) when the ring is full or the packet
  // larger than a slot. *woke: the consumer had taken everything before this entry, so it may
  // be asleep and must be woken (the seq_cst pair with pop()/front() loses no wake-up).
  bool push(const DispatchHeader& header, std::span<const std::byte> bytes, bool* woke) noexcept {
    const uint32_t head = head_.load(std::memory_order_relaxed);
    if (head - tail_.load(std::memory_order_acquire) > mask_ || bytes.size() > slot_bytes_) {
      return false;
    }
    std::byte* slot = memory_.get() + std::size_t{stride_} * (head & mask_);
    DispatchHeader copy = header;
    copy.bytes = static_cast<uint32_t>(bytes.size());
    std::memcpy(slot, &copy, sizeof copy);
    std::memcpy(slot + kHeaderSpace, bytes.data(), bytes.size());
    head_.store(head + 1, std::memory_order_seq_cst);
    *woke = tail_.load(std::memory_order_seq_cst) == head;
    return true;
  }

  // Consumer: the oldest entry, nullptr when empty; *bytes: its packet (valid until pop()).
  const DispatchHeader* front(std::span<const std::byte>* bytes) noexcept {
    const uint32_t tail = tail_.load(std::memory_order_relaxed);
    if (head_.load(std::memory_order_seq_cst) == tail) return nullptr;
    const std::byte* slot = memory_.get() + std::size_t{stride_} * (tail & mask_);
    std::memcpy(&current_, slot, sizeof current_);
    *bytes = {slot + kHeaderSpace, current_.bytes};
    return &current_;
  }
  void pop() noexcept {
    tail_.store(tail_.load(std::memory_order_relaxed) + 1, std::memory_order_seq_cst);
  }
  [[nodiscard]] bool empty() const noexcept {
    return head_.load(std::memory_order_seq_cst) == tail_.load(std::memory_order_relaxed);
  }

 private:
  static constexpr std::size_t kHeaderSpace = (sizeof(DispatchHeader) + 15) / 16 * 16;

  const uint32_t mask_;
  const uint32_t slot_bytes_;
  const uint32_t stride_;
  std::unique_ptr<std::byte[]> memory_;        // not zeroed: untouched slots cost no memory
  DispatchHeader current_;                     // consumer's copy of the front entry
  alignas(64) std::atomic<uint32_t> head_{0};  // next slot the producer writes
  alignas(64) std::atomic<uint32_t> tail_{0};  // next slot the consumer reads
};

}  // namespace detwan::dataplane::uring

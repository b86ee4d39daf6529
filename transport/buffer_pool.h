#pragma once
// BufferPool: the buffers of received messages that the application handed back
// (Channel::recycle), kept for the channel's next messages.
//
// Why: a received message needs a buffer of its own size. A fresh heap buffer of a few MiB is
// a fresh mmap: the kernel maps and clears every page on first touch, which costs as much as
// the copy that fills it (a 4-rank allreduce over shm spent ~25 % of its time in page faults).
// A recycled buffer's pages are already mapped.
//
// Policy: at most kMaxBuffers buffers and kMaxBytes of capacity are kept (a handed-back buffer
// beyond either is freed); take() returns the smallest kept buffer whose capacity is at least
// the length asked for (empty, capacity reserved), else a new one. A buffer much larger than
// the request is not used for it (kMaxWasteFactor), so a stream of small messages does not pin
// big buffers.
//
// Threading: put() runs on the application's threads, take() on the progress thread; one
// mutex, held for a scan of at most kMaxBuffers entries (once per message, not per byte).
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace detwan::transport {

class BufferPool {
 public:
  static constexpr size_t kMaxBuffers = 8;
  static constexpr size_t kMaxBytes = size_t{64} << 20;
  static constexpr size_t kMaxWasteFactor = 4;
  // Below this a fresh allocation comes from the allocator's free lists, not from mmap:
  // nothing to gain from recycling.
  static constexpr size_t kMinRecycledBytes = size_t{64} << 10;

  // An empty vector with capacity >= length_bytes. Throws std::bad_alloc / std::length_error
  // like std::vector::reserve (setup tier of the caller).
  std::vector<std::byte> take(size_t length_bytes) {
    std::vector<std::byte> out = take_kept(length_bytes);
    out.clear();
    out.reserve(length_bytes);  // a kept buffer has the capacity already
    return out;
  }

  // A vector of exactly length_bytes whose bytes the caller overwrites in full before reading
  // any (a datagram channel's reassembly buffer). A kept buffer is shrunk or grown to it:
  // shrinking initialises nothing and growing only the bytes beyond its previous size, where a
  // fresh vector of that size is zero-filled in full (a memset, on top of the page faults).
  // Throws like std::vector::resize.
  std::vector<std::byte> take_sized(size_t length_bytes) {
    std::vector<std::byte> out = take_kept(length_bytes);
    out.resize(length_bytes);
    return out;
  }

  // A kept buffer with capacity >= capacity_bytes (and not kMaxWasteFactor larger), contents
  // and size as handed back, counted as reused; else an empty vector. A datagram channel
  // reassembles into it, growing its size only up to the bytes that really arrived.
  std::vector<std::byte> take_recycled(size_t capacity_bytes) { return take_kept(capacity_bytes); }

  // Keeps `buffer` for a later take() if there is room; else frees it.
  void put(std::vector<std::byte> buffer) {
    const size_t cap = buffer.capacity();
    if (cap < kMinRecycledBytes) return;
    std::lock_guard lock(mutex_);
    if (kept_.size() >= kMaxBuffers || kept_bytes_ + cap > kMaxBytes) return;  // freed here
    kept_bytes_ += cap;
    kept_.push_back(std::move(buffer));
  }

  [[nodiscard]] uint64_t reused() const {
    std::lock_guard lock(mutex_);
    return reused_;
  }
  [[nodiscard]] size_t kept_bytes() const {
    std::lock_guard lock(mutex_);
    return kept_bytes_;
  }

 private:
  static constexpr size_t kNone = SIZE_MAX;

  // The smallest kept buffer with capacity >= length_bytes and not kMaxWasteFactor larger,
  // taken out of the pool and counted as reused (contents and size as handed back); else an
  // empty vector.
  std::vector<std::byte> take_kept(size_t length_bytes) {
    if (length_bytes < kMinRecycledBytes) return {};
    std::lock_guard lock(mutex_);
    size_t best = kNone;
    for (size_t i = 0; i < kept_.size(); ++i) {
      const size_t cap = kept_[i].capacity();
      if (cap < length_bytes || cap / kMaxWasteFactor > length_bytes) continue;
      if (best == kNone || cap < kept_[best].capacity()) best = i;
    }
    if (best == kNone) return {};
    std::vector<std::byte> out = std::move(kept_[best]);
    kept_[best] = std::move(kept_.back());
    kept_.pop_back();
    kept_bytes_ -= out.capacity();
    ++reused_;
    return out;
  }

  mutable std::mutex mutex_;
  std::vector<std::vector<std::byte>> kept_;
  size_t kept_bytes_ = 0;
  uint64_t reused_ = 0;
};

}  // namespace detwan::transport

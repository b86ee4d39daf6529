#pragma once
// MemoryBudget: the memory all channels of one endpoint may hold for messages being received
// and received-but-unread (EndpointOptions::max_reassembly_bytes). Each Connection takes what
// its reassembly buffers grow by before they grow (as data arrives, never as announced) and
// gives it back as messages are read or the channel goes. Any thread (the lanes of a udp
// endpoint share one); lock-free.
#include <atomic>
#include <cstdint>

namespace detwan::transport::proto {

class MemoryBudget {
 public:
  explicit MemoryBudget(uint64_t limit_bytes) : limit_bytes_(limit_bytes) {}

  // Takes `bytes` if they fit under the limit; false (nothing taken) otherwise.
  bool try_take(uint64_t bytes) {
    uint64_t used = used_bytes_.load(std::memory_order_relaxed);
    do {
      if (bytes > limit_bytes_ || used > limit_bytes_ - bytes) return false;
    } while (!used_bytes_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
    return true;
  }
  void give(uint64_t bytes) { used_bytes_.fetch_sub(bytes, std::memory_order_relaxed); }

  [[nodiscard]] uint64_t used_bytes() const { return used_bytes_.load(std::memory_order_relaxed); }
  [[nodiscard]] uint64_t limit_bytes() const { return limit_bytes_; }

 private:
  const uint64_t limit_bytes_;
  std::atomic<uint64_t> used_bytes_{0};
};

}  // namespace detwan::transport::proto

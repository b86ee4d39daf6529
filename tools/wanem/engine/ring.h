#pragma once
// Fixed-capacity FIFO ring, storage allocated once at construction. push_back() on a full ring
// returns false; nothing allocates or throws afterwards (datapath-safe).
#include <cstdint>
#include <memory>

namespace detwan::wanem {

template <typename T>
class FixedRing {
 public:
  explicit FixedRing(uint32_t capacity)
      : data_(std::make_unique<T[]>(capacity == 0 ? 1 : capacity)),
        capacity_(capacity == 0 ? 1 : capacity) {}

  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] bool full() const noexcept { return size_ == capacity_; }
  [[nodiscard]] uint32_t size() const noexcept { return size_; }
  [[nodiscard]] uint32_t capacity() const noexcept { return capacity_; }

  // i-th element from the front, i < size().
  T& at(uint32_t i) noexcept { return data_[wrap(head_ + i)]; }
  const T& at(uint32_t i) const noexcept { return data_[wrap(head_ + i)]; }
  T& front() noexcept { return data_[head_]; }
  const T& front() const noexcept { return data_[head_]; }
  T& back() noexcept { return at(size_ - 1); }

  [[nodiscard]] bool push_back(const T& value) noexcept {
    if (full()) return false;
    data_[wrap(head_ + size_)] = value;
    ++size_;
    return true;
  }
  void pop_front() noexcept {
    head_ = wrap(head_ + 1);
    --size_;
  }

 private:
  [[nodiscard]] uint32_t wrap(uint64_t i) const noexcept {
    return static_cast<uint32_t>(i >= capacity_ ? i - capacity_ : i);
  }

  std::unique_ptr<T[]> data_;
  uint32_t capacity_;
  uint32_t head_ = 0;
  uint32_t size_ = 0;
};

}  // namespace detwan::wanem

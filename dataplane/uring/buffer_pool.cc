#include "dataplane/uring/buffer_pool.h"

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include <sys/mman.h>

namespace detwan::dataplane::uring {
namespace {

constexpr size_t kAlignBytes = 64;
constexpr uint32_t kMaxBuffers = 1u << 22;

}  // namespace

common::Result<BufferPool> BufferPool::create(uint32_t buffer_count,
                                              uint32_t payload_capacity_bytes) {
  if (buffer_count == 0 || buffer_count > kMaxBuffers) {
    return common::make_error(common::ErrorCode::kConfig,
                              "buffer_count " + std::to_string(buffer_count) +
                                  " out of range [1, " + std::to_string(kMaxBuffers) + "]");
  }
  if (payload_capacity_bytes == 0 || payload_capacity_bytes > wire::kMaxPayloadBytes) {
    return common::make_error(common::ErrorCode::kConfig,
                              "buffer payload capacity " + std::to_string(payload_capacity_bytes) +
                                  " bytes out of range [1, " +
                                  std::to_string(wire::kMaxPayloadBytes) + "]");
  }
  BufferPool pool;
  pool.count_ = buffer_count;
  pool.payload_capacity_bytes_ = payload_capacity_bytes;
  pool.stride_ =
      (kHeadroomBytes + payload_capacity_bytes + kAlignBytes - 1) / kAlignBytes * kAlignBytes;
  pool.mapped_bytes_ = pool.stride_ * buffer_count;
  // MAP_POPULATE: every page is faulted in now, not on the first packet.
  void* memory = ::mmap(nullptr, pool.mapped_bytes_, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (memory == MAP_FAILED) {
    return common::make_error(common::ErrorCode::kIo,
                              "packet buffers: mmap " + std::to_string(pool.mapped_bytes_) +
                                  " bytes (" + std::to_string(buffer_count) +
                                  " buffers): " + std::strerror(errno));
  }
  pool.memory_ = static_cast<std::byte*>(memory);
  pool.info_.resize(buffer_count);
  pool.slots_.resize(buffer_count);
  pool.free_.reserve(buffer_count);
  // Highest index at the bottom: alloc() hands out 0, 1, 2, ... first.
  for (uint32_t i = buffer_count; i > 0; --i) pool.free_.push_back(i - 1);
  return pool;
}

BufferPool::BufferPool(BufferPool&& other) noexcept
    : memory_(std::exchange(other.memory_, nullptr)),
      mapped_bytes_(std::exchange(other.mapped_bytes_, 0)),
      stride_(other.stride_),
      count_(std::exchange(other.count_, 0)),
      payload_capacity_bytes_(other.payload_capacity_bytes_),
      free_(std::move(other.free_)),
      info_(std::move(other.info_)),
      slots_(std::move(other.slots_)) {}

BufferPool& BufferPool::operator=(BufferPool&& other) noexcept {
  if (this != &other) {
    if (memory_ != nullptr) ::munmap(memory_, mapped_bytes_);
    memory_ = std::exchange(other.memory_, nullptr);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
    stride_ = other.stride_;
    count_ = std::exchange(other.count_, 0);
    payload_capacity_bytes_ = other.payload_capacity_bytes_;
    free_ = std::move(other.free_);
    info_ = std::move(other.info_);
    slots_ = std::move(other.slots_);
  }
  return *this;
}

BufferPool::~BufferPool() {
  if (memory_ != nullptr) ::munmap(memory_, mapped_bytes_);
}

}  // namespace detwan::dataplane::uring

#pragma once
// Packet buffers of the io_uring backend: a fixed number of equal buffers allocated (and
// pre-faulted) at start, handed out and taken back by index. The index is the handle the engine
// holds (gw::Engine's "opaque buffer handle").
//
// Layout of one buffer: [kHeadroomBytes][payload_capacity_bytes]. A payload received from the
// TUN device or a service socket is placed at kHeadroomBytes, so encapsulation writes the tunnel
// header in front of it in place; a datagram received on a WAN port is read at offset 0 (header
// + payload), so after decapsulation its payload sits at kHeadroomBytes as well.
//
// Each buffer also carries what the kernel needs while one io_uring operation on it is in flight
// (IoSlot: msghdr, iovec, peer address, control message space), so a send or receive needs no
// other memory. A buffer has at most one operation in flight.
//
// Threading: owned by the datapath thread; alloc/release are O(1), never allocate or block.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <netinet/in.h>
#include <sys/socket.h>

#include "common/status.h"
#include "dataplane/wire/header.h"

namespace detwan::dataplane::uring {

inline constexpr uint32_t kHeadroomBytes = static_cast<uint32_t>(wire::kHeaderSize);
inline constexpr uint32_t kNoBuffer = UINT32_MAX;

struct IoSlot {
  msghdr message{};
  iovec vector{};
  sockaddr_storage address{};
  alignas(cmsghdr) unsigned char control[CMSG_SPACE(sizeof(int))] = {};
};

// What the backend knows about the packet in a buffer.
struct BufferInfo {
  uint32_t offset = kHeadroomBytes;  // where the payload starts
  uint32_t length = 0;               // payload bytes
  wire::DataType type = wire::DataType::kDatagram;
};

class BufferPool {
 public:
  // buffer_count buffers of kHeadroomBytes + payload_capacity_bytes (rounded up to 64 bytes).
  static common::Result<BufferPool> create(uint32_t buffer_count, uint32_t payload_capacity_bytes);
  BufferPool(BufferPool&& other) noexcept;
  BufferPool& operator=(BufferPool&& other) noexcept;
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;
  ~BufferPool();

  // kNoBuffer when every buffer is in use.
  [[nodiscard]] uint32_t alloc() noexcept {
    if (free_.empty()) return kNoBuffer;
    const uint32_t index = free_.back();
    free_.pop_back();
    info_[index] = BufferInfo{};
    return index;
  }
  void release(uint32_t index) noexcept { free_.push_back(index); }  // capacity reserved: no alloc

  [[nodiscard]] std::byte* data(uint32_t index) noexcept {
    return memory_ + size_t{index} * stride_;
  }
  // The whole buffer, headroom included.
  [[nodiscard]] std::span<std::byte> whole(uint32_t index) noexcept {
    return {data(index), kHeadroomBytes + payload_capacity_bytes_};
  }
  [[nodiscard]] std::byte* payload(uint32_t index) noexcept {
    return data(index) + info_[index].offset;
  }
  [[nodiscard]] BufferInfo& info(uint32_t index) noexcept { return info_[index]; }
  [[nodiscard]] IoSlot& slot(uint32_t index) noexcept { return slots_[index]; }
  [[nodiscard]] bool valid(uint64_t handle) const noexcept { return handle < count_; }

  [[nodiscard]] uint32_t count() const noexcept { return count_; }
  [[nodiscard]] uint32_t available() const noexcept { return static_cast<uint32_t>(free_.size()); }
  [[nodiscard]] uint32_t payload_capacity_bytes() const noexcept { return payload_capacity_bytes_; }

 private:
  BufferPool() = default;

  std::byte* memory_ = nullptr;  // mmap'ed count_ * stride_ bytes
  size_t mapped_bytes_ = 0;
  size_t stride_ = 0;
  uint32_t count_ = 0;
  uint32_t payload_capacity_bytes_ = 0;
  std::vector<uint32_t> free_;
  std::vector<BufferInfo> info_;
  std::vector<IoSlot> slots_;
};

}  // namespace detwan::dataplane::uring

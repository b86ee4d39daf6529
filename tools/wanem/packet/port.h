#pragma once
// AF_PACKET backend of detwan-wanem: one raw socket per interface, bound with ETH_P_ALL,
// promiscuous, PACKET_IGNORE_OUTGOING (a bound raw socket would otherwise read its own output
// back and loop it), PACKET_QDISC_BYPASS for tx.
//
// Batching: recvmmsg() straight into buffers of a fixed, preallocated pool, and sendmmsg() from
// them. A TPACKET rx ring would need a second copy here: the engine holds frames for the whole
// emulated delay (tens of ms), longer than a ring slot can be kept, and TPACKET_V3 only wakes
// poll() when a block retires (>= 1 ms), which breaks sub-millisecond release times.
//
// Pool: `pool_frames` buffers of `buffer_bytes` each (sized from the interfaces' MTU), shared by
// both sides; a handle is a buffer index. Frames that do not fit a buffer (e.g. GSO super-frames
// when offloads are on) are dropped and counted as oversize; frames arriving with the pool empty
// are read into a scratch buffer, dropped and counted as pool_empty, so a full socket never
// spins poll().
//
// Arrival time: SO_TIMESTAMPNS gives each frame its kernel receive time, which the engine uses
// instead of the time the poll thread read it.
//
// Checksums: PACKET_VNET_HDR prefixes every frame with a VnetHeader. A frame whose sender
// left the L4 checksum to offload (veth with tx checksumming on) arrives with NEEDS_CSUM and is
// completed in software before it is queued, as the kernel's skb_checksum_help() would;
// otherwise the far end would count it as a checksum error.
#include <cassert>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <sys/socket.h>
#include <sys/uio.h>

#include "common/status.h"
#include "tools/wanem/backend.h"
#include "tools/wanem/port.h"
#include "common/unique_fd.h"

namespace detwan::wanem::packet {

using common::UniqueFd;

// struct virtio_net_hdr of <linux/virtio_net.h> (that header does not compile as C++: a field
// is named `class`). Host byte order on little-endian hosts, as packet sockets use it.
struct VnetHeader {
  uint8_t flags;
  uint8_t gso_type;
  uint16_t hdr_len;
  uint16_t gso_size;
  uint16_t csum_start;
  uint16_t csum_offset;
};
static_assert(sizeof(VnetHeader) == 10);
inline constexpr uint8_t kVnetNeedsChecksum = 1;  // VIRTIO_NET_HDR_F_NEEDS_CSUM

struct PacketPortConfig {
  std::string iface[kSideCount];
  uint32_t pool_frames = 32768;
  uint32_t buffer_bytes = 0;                  // 0: from the larger MTU (at least 2048)
  int socket_buffer_bytes = 4 * 1024 * 1024;  // SO_RCVBUF/SO_SNDBUF per socket
};

class PacketPort {
 public:
  static constexpr uint32_t kMaxBurst = 64;

  // Setup (port.cc). Errors: unknown interface -> kNotFound; no permission -> kIo with a hint.
  static common::Result<std::unique_ptr<PacketPort>> open(const PacketPortConfig& config);
  ~PacketPort();
  PacketPort(const PacketPort&) = delete;
  PacketPort& operator=(const PacketPort&) = delete;

  // Datapath (port_datapath.cc); contract in tools/wanem/port.h.
  [[nodiscard]] uint32_t rx_burst(Side side, uint64_t* handles, uint32_t count) noexcept;
  [[nodiscard]] uint32_t tx_burst(Side side, const uint64_t* handles, uint32_t count) noexcept;
  [[nodiscard]] common::Status clone(uint64_t handle, uint64_t* copy) noexcept;
  void free(uint64_t handle) noexcept {
    assert(free_count_ < pool_frames_ && handle < pool_frames_);
    free_[free_count_++] = static_cast<uint32_t>(handle);
  }
  [[nodiscard]] const uint8_t* data(uint64_t handle) const noexcept { return buffer(handle); }
  [[nodiscard]] uint32_t data_bytes(uint64_t handle) const noexcept { return lengths_[handle]; }
  [[nodiscard]] uint32_t frame_bytes(uint64_t handle) const noexcept { return lengths_[handle]; }
  [[nodiscard]] int64_t rx_time_ns(uint64_t handle) const noexcept { return arrival_ns_[handle]; }
  [[nodiscard]] int rx_fd(Side side) const noexcept { return fd_[index_of(side)].get(); }
  [[nodiscard]] PortCounters& counters() noexcept { return counters_; }
  void refresh_counters_st();  // folds in PACKET_STATISTICS drops (port.cc)

  [[nodiscard]] uint32_t pool_frames() const noexcept { return pool_frames_; }
  [[nodiscard]] uint32_t buffer_bytes() const noexcept { return buffer_bytes_; }
  [[nodiscard]] uint32_t free_frames() const noexcept { return free_count_; }

 private:
  PacketPort() = default;
  [[nodiscard]] uint8_t* buffer(uint64_t handle) const noexcept {
    return pool_ + handle * buffer_bytes_;
  }
  uint32_t drain_without_buffers(Side side) noexcept;
  [[nodiscard]] int64_t realtime_to_monotonic_ns() noexcept;
  void complete_checksum(uint8_t* frame, uint32_t length, const VnetHeader& vnet) noexcept;

  UniqueFd fd_[kSideCount];
  uint8_t* pool_ = nullptr;  // mmap'd pool_frames_ * buffer_bytes_ bytes
  size_t pool_bytes_ = 0;
  uint32_t pool_frames_ = 0;
  uint32_t buffer_bytes_ = 0;
  std::vector<uint32_t> lengths_;    // per buffer: frame length
  std::vector<int64_t> arrival_ns_;  // per buffer: kernel receive time, CLOCK_MONOTONIC ns
  std::vector<uint32_t> free_;       // stack of free buffer indexes
  uint32_t free_count_ = 0;
  std::vector<uint8_t> scratch_;  // sink for frames that have no buffer

  // recvmmsg/sendmmsg descriptors, prepared once; only iov_base/iov_len change per call.
  // Each message has two iovecs: [0] the VnetHeader, [1] the frame.
  mmsghdr rx_msgs_[kMaxBurst] = {};
  iovec rx_iov_[kMaxBurst][2] = {};
  VnetHeader rx_vnet_[kMaxBurst] = {};
  uint32_t rx_index_[kMaxBurst] = {};
  // SO_TIMESTAMPNS control messages (one struct timespec each, with room to spare).
  alignas(cmsghdr) uint8_t rx_control_[kMaxBurst][64] = {};
  mmsghdr tx_msgs_[kMaxBurst] = {};
  iovec tx_iov_[kMaxBurst][2] = {};
  VnetHeader tx_vnet_ = {};  // all zero: no offload requested on transmit

  int64_t offset_ns_ = 0;       // CLOCK_MONOTONIC - CLOCK_REALTIME
  int64_t offset_read_ns_ = 0;  // when it was measured (monotonic)
  bool offset_valid_ = false;

  PortCounters counters_;
};

// Runs the forwarding loop on an open port until stop/duration (port_datapath.cc).
common::Result<RunOutcome> forward(PacketPort& port, const BackendRun& run);

}  // namespace detwan::wanem::packet

#pragma once
// AF_PACKET backend of detwan-wanem: one raw socket per interface, bound with ETH_P_ALL,
// promiscuous, PACKET_IGNORE_OUTGOING (a bound raw socket would otherwise read its own output
// back and loop it), PACKET_QDISC_BYPASS for tx.
//
// Receive, two ways (PacketPortConfig::rx_ring_frames):
//  - ring (default): a TPACKET_V2 receive ring per interface, mmap'ed; the kernel writes each
//    frame into the next slot and the engine holds the frame where it lies, so a frame is never
//    copied in user space. V2 wakes poll() per frame (V3 only when a block retires, >= 1 ms,
//    which would break sub-millisecond release times). The kernel writes the slots in order and
//    drops a frame whose slot is still held (ring full), so a frame held longer than the ring
//    takes to come round is "spilled": copied into its descriptor's pool buffer and its slot
//    released, at most kSpillAhead slots before the kernel needs it. The last frame read in each
//    burst is spilled too: poll() reports a ring readable while the slot written last is not
//    back with the kernel, so holding it would turn the sleeping loop into a spinning one. So a
//    frame is copied once in user space only when it is the last of a wake-up or outlives a lap
//    of the ring (at 1 Gbit/s, 4,096 slots of 1,514-byte frames last ~50 ms; a slot of a
//    1,500-byte MTU takes 2 KiB, so the default rings pin 16 MiB of kernel memory).
//  - recvmmsg() straight into buffers of the pool (a copy per frame, by the kernel).
// Transmit: sendmmsg() from wherever the frame lies (ring slot or pool buffer).
//
// Descriptors: a handle is a descriptor index in [0, pool_frames); each descriptor owns one pool
// buffer and, while its frame lies in a ring slot, that slot (data_ points at it). Freeing the
// handle gives the slot back to the kernel.
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
#include "common/unique_fd.h"
#include "tools/wanem/backend.h"
#include "tools/wanem/port.h"

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
  uint32_t rx_ring_frames = 4096;             // per interface; 0: recvmmsg into the pool
  uint32_t buffer_bytes = 0;                  // 0: from the larger MTU (at least 2048)
  int socket_buffer_bytes = 4 * 1024 * 1024;  // SO_RCVBUF/SO_SNDBUF per socket
};

class PacketPort {
 public:
  static constexpr uint32_t kMaxBurst = 64;
  // Slots past the kernel's next write position kept free by spilling held frames.
  static constexpr uint32_t kSpillAhead = 2 * kMaxBurst;

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
    if (ring_slot_[handle] != kNoSlot) release_slot(static_cast<uint32_t>(handle));
    free_[free_count_++] = static_cast<uint32_t>(handle);
  }
  [[nodiscard]] const uint8_t* data(uint64_t handle) const noexcept { return data_[handle]; }
  [[nodiscard]] uint32_t data_bytes(uint64_t handle) const noexcept { return lengths_[handle]; }
  [[nodiscard]] uint32_t frame_bytes(uint64_t handle) const noexcept { return lengths_[handle]; }
  [[nodiscard]] int64_t rx_time_ns(uint64_t handle) const noexcept { return arrival_ns_[handle]; }
  [[nodiscard]] int rx_fd(Side side) const noexcept { return fd_[index_of(side)].get(); }
  // Every frame carries its kernel receive time (SO_TIMESTAMPNS is required at open).
  [[nodiscard]] static constexpr bool rx_timestamps() noexcept { return true; }
  [[nodiscard]] PortCounters& counters() noexcept { return counters_; }
  void refresh_counters_st();  // folds in PACKET_STATISTICS drops (port.cc)

  [[nodiscard]] uint32_t pool_frames() const noexcept { return pool_frames_; }
  [[nodiscard]] uint32_t buffer_bytes() const noexcept { return buffer_bytes_; }
  [[nodiscard]] uint32_t free_frames() const noexcept { return free_count_; }
  [[nodiscard]] bool rx_ring() const noexcept { return ring_[0].frames != 0; }

 private:
  // A TPACKET_V2 receive ring (port.cc sets it up).
  struct RxRing {
    uint8_t* memory = nullptr;  // mmap'ed, shared with the kernel
    size_t bytes = 0;
    uint32_t frames = 0;  // 0: no ring on this side
    uint32_t frame_bytes = 0;
    uint32_t frames_per_block = 0;
    uint32_t block_bytes = 0;
    uint32_t next = 0;             // the next slot the kernel writes / we read
    std::vector<uint32_t> holder;  // per slot: the descriptor holding its frame, or kNoHolder
  };
  static constexpr uint32_t kNoSlot = UINT32_MAX;
  static constexpr uint32_t kNoHolder = UINT32_MAX;
  static constexpr uint32_t kSideShift = 31;  // ring_slot_: side << 31 | slot

  PacketPort() = default;
  [[nodiscard]] uint8_t* slot_address(const RxRing& ring, uint32_t slot) const noexcept {
    return ring.memory + size_t{slot / ring.frames_per_block} * ring.block_bytes +
           size_t{slot % ring.frames_per_block} * ring.frame_bytes;
  }
  uint32_t rx_burst_ring(Side side, uint64_t* handles, uint32_t count) noexcept;
  // Gives descriptor's slot back to the kernel (its frame is done with or copied out).
  void release_slot(uint32_t descriptor) noexcept;
  // Copies the frame held in `slot` into its descriptor's pool buffer and releases the slot.
  void spill(RxRing& ring, uint32_t slot) noexcept;
  [[nodiscard]] uint8_t* buffer(uint64_t handle) const noexcept {
    return pool_ + handle * buffer_bytes_;
  }
  uint32_t drain_without_buffers(Side side) noexcept;
  [[nodiscard]] int64_t realtime_to_monotonic_ns() noexcept;
  void complete_checksum(uint8_t* frame, uint32_t length, const VnetHeader& vnet) noexcept;

  UniqueFd fd_[kSideCount];
  RxRing ring_[kSideCount];
  uint8_t* pool_ = nullptr;  // mmap'd pool_frames_ * buffer_bytes_ bytes
  size_t pool_bytes_ = 0;
  uint32_t pool_frames_ = 0;
  uint32_t buffer_bytes_ = 0;
  std::vector<uint8_t*> data_;       // per descriptor: where its frame lies (slot or buffer)
  std::vector<uint32_t> ring_slot_;  // per descriptor: side << 31 | slot, or kNoSlot
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

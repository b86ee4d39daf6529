#pragma once
// The gateway's TUN interface: the local side of IP tunnels. Packets the host routes into the
// device are read by the backend and classified into tunnels; packets released by a tunnel are
// written back and reach the host's stack.
//
// Setup only (tier 2 in docs/errors.md). TunDevice::open() creates a non-persistent TUN device
// (IFF_TUN | IFF_NO_PI: every read/write is exactly one IPv4 or IPv6 packet), sets its MTU,
// brings the link up and installs the configured routes through rtnetlink (RTM_NEWROUTE, IPv4
// and IPv6, main table, "dev <name>"). The destructor removes those routes and closes the file
// descriptor, which deletes the device. Every error names the device and carries the errno text,
// e.g. "TUN device 'dtw0': open /dev/net/tun: Permission denied (needs CAP_NET_ADMIN)".
//
// Needs CAP_NET_ADMIN in the network namespace of the calling thread; the device, its routes
// and the netlink socket used to remove them belong to that namespace.
// The file descriptor is non-blocking (O_NONBLOCK): a read with nothing queued fails EAGAIN.
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "dataplane/gw/config.h"

namespace detwan::dataplane::gw {

// struct virtio_net_hdr (linux/virtio_net.h, which does not compile as C++): the header of every
// read and write of a TUN device with IFF_VNET_HDR, in the host's byte order.
struct VnetHeader {
  uint8_t flags = 0;     // kVnetNeedsChecksum: the checksum at csum_start + csum_offset is partial
  uint8_t gso_type = 0;  // kVnetGsoNone, kVnetGsoUdpL4, ...
  uint16_t header_bytes = 0;  // hdr_len: network + transport headers
  uint16_t gso_size = 0;      // payload bytes per segment
  uint16_t csum_start = 0;
  uint16_t csum_offset = 0;
};
inline constexpr uint32_t kVnetHeaderBytes = 10;
static_assert(sizeof(VnetHeader) == kVnetHeaderBytes);
inline constexpr uint8_t kVnetNeedsChecksum = 1;  // VIRTIO_NET_HDR_F_NEEDS_CSUM
inline constexpr uint8_t kVnetGsoNone = 0;
inline constexpr uint8_t kVnetGsoUdpL4 = 5;  // VIRTIO_NET_HDR_GSO_UDP_L4
inline constexpr uint8_t kVnetGsoEcn = 0x80;

class TunDevice {
 public:
  // Creates config.name (a "%d" in the name lets the kernel number it; name() says which),
  // mtu config.mtu_bytes, link up, config.routes installed. Errors: kInvalidArgument for a bad
  // name, kIo for everything the kernel refused. Nothing is left behind on failure.
  // offload (the uring backend, config.offload): IFF_VNET_HDR, so every read and write starts
  // with a struct virtio_net_hdr (vnet_header_bytes()), and TUNSETOFFLOAD with checksum and UDP
  // segmentation offload (TUN_F_CSUM | TUN_F_USO4 | TUN_F_USO6; Linux >= 6.2 for USO): the host
  // then hands over whole UDP GSO runs (up to 64 KiB) and packets whose checksum it left partial,
  // which the reader segments and completes (dataplane/uring/tun_offload.h). A kernel that
  // refuses USO gets checksum offload only; one that refuses both gets none (offloads() says
  // which), the header stays.
  // queues > 1 (the uring backend's shards): IFF_MULTI_QUEUE, and one file descriptor per queue
  // (queue_fd(k)), each opened and attached like the first; the kernel spreads what the host
  // routes into the device over the queues by flow hash, and a write on any queue reaches the
  // host. queues == 1: a single-queue device, as before.
  static common::Result<TunDevice> open(const TunConfig& config, bool offload = false,
                                        uint32_t queues = 1);

  TunDevice(TunDevice&& other) noexcept;
  TunDevice& operator=(TunDevice&& other) noexcept;
  TunDevice(const TunDevice&) = delete;
  TunDevice& operator=(const TunDevice&) = delete;
  ~TunDevice();  // close()

  // Removes the installed routes (best effort: a route somebody else deleted is fine) and
  // closes the device. Idempotent.
  void close() noexcept;

  [[nodiscard]] int fd() const noexcept { return fd_.get(); }
  [[nodiscard]] bool is_open() const noexcept { return fd_.valid(); }
  [[nodiscard]] uint32_t queue_count() const noexcept {
    return fd_.valid() ? static_cast<uint32_t>(queue_fds_.size()) + 1 : 0;
  }
  // Queue k's file descriptor (k < queue_count(); queue 0 is fd()).
  [[nodiscard]] int queue_fd(uint32_t k) const noexcept {
    return k == 0 ? fd_.get() : queue_fds_[k - 1].get();
  }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] int if_index() const noexcept { return if_index_; }
  [[nodiscard]] uint32_t mtu_bytes() const noexcept { return mtu_bytes_; }
  // 0 without offload, else kVnetHeaderBytes (10) in front of every packet.
  [[nodiscard]] uint32_t vnet_header_bytes() const noexcept { return vnet_header_bytes_; }
  // The TUN_F_* flags the kernel took (0 without offload).
  [[nodiscard]] unsigned offloads() const noexcept { return offloads_; }
  // The routes this device installed (and will remove).
  [[nodiscard]] const std::vector<Prefix>& routes() const noexcept { return routes_; }

 private:
  TunDevice() = default;

  common::UniqueFd fd_;
  std::vector<common::UniqueFd> queue_fds_;  // queues 1.. of a multi-queue device
  common::UniqueFd netlink_fd_;              // NETLINK_ROUTE socket of the device's namespace
  std::string name_;
  int if_index_ = 0;
  uint32_t mtu_bytes_ = 0;
  uint32_t vnet_header_bytes_ = 0;
  unsigned offloads_ = 0;
  std::vector<Prefix> routes_;
};

}  // namespace detwan::dataplane::gw

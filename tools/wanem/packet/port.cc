// Setup of the AF_PACKET backend: interfaces, sockets, buffer pool.
#include "tools/wanem/packet/port.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <utility>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/clock.h"

namespace detwan::wanem::packet {
namespace {

constexpr std::string_view kSideOption[kSideCount] = {"iface_a", "iface_b"};
// Room for two VLAN tags on top of MTU + Ethernet header.
constexpr uint32_t kL2OverheadBytes = 14 + 8;
constexpr uint32_t kMinBufferBytes = 2048;

common::Error errno_error(common::ErrorCode code, std::string message) {
  const int error = errno;
  message += ": ";
  message += std::strerror(error);
  if (error == EPERM || error == EACCES) message += " (needs CAP_NET_RAW: run as root)";
  return common::Error{code, std::move(message)};
}

struct InterfaceInfo {
  int index = 0;
  int mtu = 0;
  bool up = false;
};

common::Result<InterfaceInfo> inspect(const std::string& name, std::string_view option) {
  InterfaceInfo info;
  if (name.empty() || name.size() >= IFNAMSIZ) {
    return common::make_error(common::ErrorCode::kInvalidArgument,
                              std::string(option) + ": '" + name + "' is not an interface name");
  }
  info.index = static_cast<int>(::if_nametoindex(name.c_str()));
  if (info.index == 0) {
    return common::make_error(common::ErrorCode::kNotFound,
                              std::string(option) + ": interface '" + name +
                                  "' does not exist in this network namespace");
  }
  UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  ifreq request{};
  std::memcpy(request.ifr_name, name.data(), name.size());
  if (fd.valid() && ::ioctl(fd.get(), SIOCGIFMTU, &request) == 0) info.mtu = request.ifr_mtu;
  if (fd.valid() && ::ioctl(fd.get(), SIOCGIFFLAGS, &request) == 0) {
    info.up = (request.ifr_flags & IFF_UP) != 0;
  }
  return info;
}

// A TPACKET_V2 receive ring as mapped: `frames` slots of `frame_bytes`, whole slots per block.
struct RingLayout {
  uint8_t* memory = nullptr;
  size_t bytes = 0;
  uint32_t frames = 0;
  uint32_t frame_bytes = 0;
  uint32_t frames_per_block = 0;
  uint32_t block_bytes = 0;
};

// Asks for a receive ring of at least `frames` slots, each with room for the TPACKET header,
// the virtio-net header and a frame of `frame_limit` bytes, and maps it.
common::Result<RingLayout> map_rx_ring(int fd, const std::string& name, uint32_t frames,
                                       uint32_t frame_limit) {
  const int version = TPACKET_V2;
  if (::setsockopt(fd, SOL_PACKET, PACKET_VERSION, &version, sizeof version) != 0) {
    return std::unexpected(errno_error(common::ErrorCode::kIo, "PACKET_VERSION on " + name));
  }
  RingLayout ring;
  // The kernel puts the frame at TPACKET_ALIGN(header + 16) + the vnet header; leave room.
  const uint32_t needed = TPACKET_ALIGN(TPACKET2_HDRLEN + 16) + sizeof(VnetHeader) + frame_limit;
  ring.frame_bytes = 1;
  while (ring.frame_bytes < needed) ring.frame_bytes <<= 1;
  const auto page = static_cast<uint32_t>(::sysconf(_SC_PAGESIZE));
  ring.block_bytes = std::max({ring.frame_bytes, page, uint32_t{1} << 17});
  ring.frames_per_block = ring.block_bytes / ring.frame_bytes;
  const uint32_t blocks = (frames + ring.frames_per_block - 1) / ring.frames_per_block;
  ring.frames = blocks * ring.frames_per_block;
  tpacket_req request{};
  request.tp_block_size = ring.block_bytes;
  request.tp_block_nr = blocks;
  request.tp_frame_size = ring.frame_bytes;
  request.tp_frame_nr = ring.frames;
  if (::setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &request, sizeof request) != 0) {
    return std::unexpected(errno_error(
        common::ErrorCode::kIo,
        fmt::format("PACKET_RX_RING of {} x {} bytes on {}", ring.frames, ring.frame_bytes, name)));
  }
  ring.bytes = size_t{blocks} * ring.block_bytes;
  void* memory = ::mmap(nullptr, ring.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (memory == MAP_FAILED) {
    return std::unexpected(
        errno_error(common::ErrorCode::kIo, "mmap of the receive ring of " + name));
  }
  ring.memory = static_cast<uint8_t*>(memory);
  return ring;
}

common::Result<UniqueFd> open_socket(const std::string& name, int index, int buffer_bytes,
                                     uint32_t ring_frames, uint32_t frame_limit, RingLayout& ring) {
  UniqueFd fd(::socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return std::unexpected(errno_error(common::ErrorCode::kIo, "AF_PACKET socket"));
  const int one = 1;
  if (::setsockopt(fd.get(), SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) != 0) {
    return std::unexpected(errno_error(
        common::ErrorCode::kIo, "PACKET_IGNORE_OUTGOING on '" + name + "' (kernel >= 4.20)"));
  }
  if (::setsockopt(fd.get(), SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) != 0) {
    return std::unexpected(errno_error(common::ErrorCode::kIo, "PACKET_VNET_HDR on " + name));
  }
  if (::setsockopt(fd.get(), SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one) != 0) {
    return std::unexpected(errno_error(common::ErrorCode::kIo, "PACKET_QDISC_BYPASS on " + name));
  }
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one) != 0) {
    return std::unexpected(errno_error(common::ErrorCode::kIo, "SO_TIMESTAMPNS on " + name));
  }
  // *BUFFORCE ignores net.core.[rw]mem_max (needs CAP_NET_ADMIN); fall back to the capped form.
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUFFORCE, &buffer_bytes, sizeof buffer_bytes) != 0) {
    (void)::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof buffer_bytes);
  }
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_SNDBUFFORCE, &buffer_bytes, sizeof buffer_bytes) != 0) {
    (void)::setsockopt(fd.get(), SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof buffer_bytes);
  }
  // The ring before the bind: no frame can be queued outside it. PACKET_VNET_HDR came first
  // (the kernel refuses it once a ring exists).
  if (ring_frames != 0) {
    auto mapped = map_rx_ring(fd.get(), name, ring_frames, frame_limit);
    if (!mapped) return std::unexpected(mapped.error());
    ring = *mapped;
  }
  // Protocol 0 at socket() and ETH_P_ALL at bind(): nothing is queued from other interfaces
  // before the bind.
  sockaddr_ll address{};
  address.sll_family = AF_PACKET;
  address.sll_protocol = htons(ETH_P_ALL);
  address.sll_ifindex = index;
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    return std::unexpected(errno_error(common::ErrorCode::kIo, "bind AF_PACKET to " + name));
  }
  packet_mreq membership{};
  membership.mr_ifindex = index;
  membership.mr_type = PACKET_MR_PROMISC;
  if (::setsockopt(fd.get(), SOL_PACKET, PACKET_ADD_MEMBERSHIP, &membership, sizeof membership) !=
      0) {
    return std::unexpected(errno_error(common::ErrorCode::kIo, "promiscuous mode on " + name));
  }
  return fd;
}

}  // namespace

common::Result<std::unique_ptr<PacketPort>> PacketPort::open(const PacketPortConfig& config) {
  std::unique_ptr<PacketPort> port(new PacketPort());
  InterfaceInfo info[kSideCount];
  for (int i = 0; i < kSideCount; ++i) {
    auto inspected = inspect(config.iface[i], kSideOption[i]);
    if (!inspected) return std::unexpected(inspected.error());
    info[i] = *inspected;
  }
  if (config.pool_frames < 2 * kMaxBurst) {
    return common::make_error(common::ErrorCode::kInvalidArgument,
                              "pool_frames: at least " + std::to_string(2 * kMaxBurst));
  }
  uint32_t buffer_bytes = config.buffer_bytes;
  if (buffer_bytes == 0) {
    const auto mtu = static_cast<uint32_t>(std::max({info[0].mtu, info[1].mtu, 0}));
    buffer_bytes = std::max(kMinBufferBytes, (mtu + kL2OverheadBytes + 63) / 64 * 64);
  }
  port->pool_frames_ = config.pool_frames;
  port->buffer_bytes_ = buffer_bytes;
  port->pool_bytes_ = static_cast<size_t>(config.pool_frames) * buffer_bytes;
  // Anonymous mapping: pages are only backed once a buffer is first used.
  void* pool = ::mmap(nullptr, port->pool_bytes_, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (pool == MAP_FAILED) {
    return std::unexpected(errno_error(common::ErrorCode::kIo, "mmap of the frame pool"));
  }
  port->pool_ = static_cast<uint8_t*>(pool);
  port->data_.resize(config.pool_frames);
  for (uint32_t i = 0; i < config.pool_frames; ++i) port->data_[i] = port->buffer(i);
  port->ring_slot_.assign(config.pool_frames, kNoSlot);
  port->lengths_.assign(config.pool_frames, 0);
  port->arrival_ns_.assign(config.pool_frames, 0);
  port->free_.resize(config.pool_frames);
  // Low indexes on top of the stack: a light load keeps touching the same few pages.
  for (uint32_t i = 0; i < config.pool_frames; ++i) port->free_[i] = config.pool_frames - 1 - i;
  port->free_count_ = config.pool_frames;
  port->scratch_.assign(buffer_bytes, 0);

  // A ring slot holds the largest frame the interfaces' MTU allows (the pool buffer may be
  // larger: kMinBufferBytes); anything longer arrives truncated and is dropped as oversize.
  const auto largest_mtu = static_cast<uint32_t>(std::max({info[0].mtu, info[1].mtu, 1500}));
  const uint32_t frame_limit =
      std::min(buffer_bytes, (largest_mtu + kL2OverheadBytes + 63) / 64 * 64);
  for (int i = 0; i < kSideCount; ++i) {
    RingLayout layout;
    auto fd = open_socket(config.iface[i], info[i].index, config.socket_buffer_bytes,
                          config.rx_ring_frames, frame_limit, layout);
    if (!fd) return std::unexpected(fd.error());
    port->fd_[i] = std::move(*fd);
    RxRing& ring = port->ring_[i];
    ring.memory = layout.memory;
    ring.bytes = layout.bytes;
    ring.frames = layout.frames;
    ring.frame_bytes = layout.frame_bytes;
    ring.frames_per_block = layout.frames_per_block;
    ring.block_bytes = layout.block_bytes;
    ring.holder.assign(layout.frames, kNoHolder);
  }
  for (uint32_t i = 0; i < kMaxBurst; ++i) {
    port->rx_iov_[i][0] = {&port->rx_vnet_[i], sizeof(VnetHeader)};
    port->rx_msgs_[i].msg_hdr.msg_iov = port->rx_iov_[i];
    port->rx_msgs_[i].msg_hdr.msg_iovlen = 2;
    port->rx_msgs_[i].msg_hdr.msg_control = port->rx_control_[i];
    port->tx_iov_[i][0] = {&port->tx_vnet_, sizeof(VnetHeader)};
    port->tx_msgs_[i].msg_hdr.msg_iov = port->tx_iov_[i];
    port->tx_msgs_[i].msg_hdr.msg_iovlen = 2;
  }
  return port;
}

PacketPort::~PacketPort() {
  for (RxRing& ring : ring_) {
    if (ring.memory != nullptr) ::munmap(ring.memory, ring.bytes);
  }
  if (pool_ != nullptr) ::munmap(pool_, pool_bytes_);
}

void PacketPort::refresh_counters_st() {
  for (int i = 0; i < kSideCount; ++i) {
    tpacket_stats stats{};
    socklen_t length = sizeof stats;
    // Reading PACKET_STATISTICS resets the kernel's counters, so accumulate.
    if (::getsockopt(fd_[i].get(), SOL_PACKET, PACKET_STATISTICS, &stats, &length) == 0) {
      counters_.count_drop(PortDrop::kRxKernel, stats.tp_drops);
    }
  }
}

bool available() { return true; }

common::Result<RunOutcome> run(const BackendRun& run) {
  PacketPortConfig config;
  config.iface[0] = run.options.iface_a;
  config.iface[1] = run.options.iface_b;
  if (run.options.pool_frames != 0) config.pool_frames = run.options.pool_frames;
  config.rx_ring_frames = run.options.rx_ring_frames;
  auto port = PacketPort::open(config);
  if (!port) return std::unexpected(port.error());
  run.log->info("packet port: pool {} frames x {} bytes, socket buffers {} bytes, burst {}, {}",
                (*port)->pool_frames(), (*port)->buffer_bytes(), config.socket_buffer_bytes,
                PacketPort::kMaxBurst,
                config.rx_ring_frames == 0 ? std::string("recvmmsg into the pool")
                                           : fmt::format("receive rings of {} frames read in place",
                                                         config.rx_ring_frames));
  for (int i = 0; i < kSideCount; ++i) {
    InterfaceInfo info = inspect(config.iface[i], kSideOption[i]).value_or(InterfaceInfo{});
    if (!info.up)
      run.log->warn("{} '{}' is down: no frames will pass", kSideOption[i], config.iface[i]);
  }
  common::set_min_timer_slack();
  return forward(**port, run);
}

}  // namespace detwan::wanem::packet

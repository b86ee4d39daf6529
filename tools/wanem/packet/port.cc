// Setup of the AF_PACKET backend: interfaces, sockets, buffer pool.
#include "tools/wanem/packet/port.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <utility>

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/mman.h>

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

common::Result<UniqueFd> open_socket(const std::string& name, int index, int buffer_bytes) {
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
  port->lengths_.assign(config.pool_frames, 0);
  port->arrival_ns_.assign(config.pool_frames, 0);
  port->free_.resize(config.pool_frames);
  // Low indexes on top of the stack: a light load keeps touching the same few pages.
  for (uint32_t i = 0; i < config.pool_frames; ++i) port->free_[i] = config.pool_frames - 1 - i;
  port->free_count_ = config.pool_frames;
  port->scratch_.assign(buffer_bytes, 0);

  for (int i = 0; i < kSideCount; ++i) {
    auto fd = open_socket(config.iface[i], info[i].index, config.socket_buffer_bytes);
    if (!fd) return std::unexpected(fd.error());
    port->fd_[i] = std::move(*fd);
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
  auto port = PacketPort::open(config);
  if (!port) return std::unexpected(port.error());
  run.log->info("packet port: pool {} frames x {} bytes, socket buffers {} bytes, burst {}",
                (*port)->pool_frames(), (*port)->buffer_bytes(), config.socket_buffer_bytes,
                PacketPort::kMaxBurst);
  for (int i = 0; i < kSideCount; ++i) {
    InterfaceInfo info = inspect(config.iface[i], kSideOption[i]).value_or(InterfaceInfo{});
    if (!info.up)
      run.log->warn("{} '{}' is down: no frames will pass", kSideOption[i], config.iface[i]);
  }
  common::set_min_timer_slack();
  return forward(**port, run);
}

}  // namespace detwan::wanem::packet

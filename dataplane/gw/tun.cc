#include "dataplane/gw/tun.h"

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <utility>

#include <fcntl.h>
// <net/if.h> must come before <linux/if_tun.h>: glibc's ifreq, not the kernel's <linux/if.h>
// copy, which would conflict with it.
// clang-format off
#include <net/if.h>
#include <linux/if_tun.h>
// clang-format on
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#ifndef TUN_F_USO4  // linux/if_tun.h of Linux >= 6.2; Debian 12's headers are 6.1
#define TUN_F_USO4 0x20
#define TUN_F_USO6 0x40
#endif

namespace detwan::dataplane::gw {
namespace {

constexpr uint32_t kIpv6MinMtuBytes = 1280;
constexpr int kNetlinkTimeoutMs = 2000;

std::string errno_text(int error) {
  std::string text = std::strerror(error);
  if (error == EPERM || error == EACCES) text += " (needs CAP_NET_ADMIN)";
  return text;
}

common::Error device_error(const std::string& device, const std::string& what, int error) {
  return common::Error{common::ErrorCode::kIo,
                       "TUN device '" + device + "': " + what + ": " + errno_text(error)};
}

// The prefix with its host bits cleared (the kernel refuses an IPv4 route otherwise).
Prefix network_of(const Prefix& prefix) {
  Prefix network = prefix;
  const int bytes = prefix.ipv6 ? 16 : 4;
  for (int i = 0; i < bytes; ++i) {
    const int bits_here = static_cast<int>(prefix.length) - i * 8;
    if (bits_here >= 8) continue;
    const int keep = bits_here <= 0 ? 0 : bits_here;
    network.address[i] = static_cast<uint8_t>(network.address[i] & (0xFF00 >> keep));
  }
  return network;
}

// Appends one attribute to the message in `buffer` (capacity bytes, nlmsg_len so far).
void add_attribute(char* buffer, size_t capacity, uint16_t type, const void* data, size_t length) {
  auto* header = reinterpret_cast<nlmsghdr*>(buffer);
  const size_t offset = NLMSG_ALIGN(header->nlmsg_len);
  const size_t total = RTA_LENGTH(length);
  if (offset + RTA_ALIGN(total) > capacity) return;  // sized below: cannot happen
  rtattr attribute{};
  attribute.rta_type = type;
  attribute.rta_len = static_cast<uint16_t>(total);
  std::memcpy(buffer + offset, &attribute, sizeof attribute);
  std::memcpy(buffer + offset + RTA_LENGTH(0), data, length);
  header->nlmsg_len = static_cast<uint32_t>(offset + RTA_ALIGN(total));
}

// Sends one route request and waits for its acknowledgement. Returns 0 or a positive errno.
int route_request(int netlink_fd, uint16_t type, const Prefix& prefix, int if_index,
                  uint32_t sequence) {
  alignas(nlmsghdr) char buffer[NLMSG_SPACE(sizeof(rtmsg)) + 64] = {};
  auto* header = reinterpret_cast<nlmsghdr*>(buffer);
  auto* route = reinterpret_cast<rtmsg*>(buffer + NLMSG_HDRLEN);
  header->nlmsg_len = NLMSG_LENGTH(sizeof(rtmsg));
  header->nlmsg_type = type;
  header->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  if (type == RTM_NEWROUTE) header->nlmsg_flags |= NLM_F_CREATE | NLM_F_EXCL;
  header->nlmsg_seq = sequence;
  route->rtm_family = prefix.ipv6 ? AF_INET6 : AF_INET;
  route->rtm_dst_len = prefix.length;
  route->rtm_table = RT_TABLE_MAIN;
  route->rtm_protocol = RTPROT_STATIC;
  route->rtm_type = RTN_UNICAST;
  // As iproute2's "ip route add PREFIX dev NAME": link scope for IPv4 (no gateway), universe
  // for IPv6; a delete matches any scope.
  if (type == RTM_DELROUTE) {
    route->rtm_scope = RT_SCOPE_NOWHERE;
  } else {
    route->rtm_scope = prefix.ipv6 ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK;
  }
  const Prefix network = network_of(prefix);
  add_attribute(buffer, sizeof buffer, RTA_DST, network.address, prefix.ipv6 ? 16 : 4);
  add_attribute(buffer, sizeof buffer, RTA_OIF, &if_index, sizeof if_index);

  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(netlink_fd, buffer, header->nlmsg_len, 0, reinterpret_cast<const sockaddr*>(&kernel),
               sizeof kernel) < 0) {
    return errno;
  }
  alignas(nlmsghdr) char reply[4096];
  for (;;) {
    const ssize_t got = ::recv(netlink_fd, reply, sizeof reply, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN ? ETIMEDOUT : errno;
    }
    int remaining = static_cast<int>(got);
    for (auto* message = reinterpret_cast<nlmsghdr*>(reply); NLMSG_OK(message, remaining);
         message = NLMSG_NEXT(message, remaining)) {
      if (message->nlmsg_seq != sequence || message->nlmsg_type != NLMSG_ERROR) continue;
      if (message->nlmsg_len < NLMSG_LENGTH(sizeof(nlmsgerr))) return EPROTO;
      const auto* error = static_cast<const nlmsgerr*>(NLMSG_DATA(message));
      return -error->error;
    }
  }
}

common::Result<common::UniqueFd> open_netlink(const std::string& device) {
  common::UniqueFd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!fd.valid()) return std::unexpected(device_error(device, "netlink socket", errno));
  timeval timeout{kNetlinkTimeoutMs / 1000, (kNetlinkTimeoutMs % 1000) * 1000};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&local), sizeof local) != 0) {
    return std::unexpected(device_error(device, "bind netlink socket", errno));
  }
  return fd;
}

}  // namespace

namespace {

// Attaches `fd` (an open /dev/net/tun) to the device `name` with `flags`, and with offload sets
// the virtio-net header size and the offloads (both per device; repeating them per queue is
// harmless). The TUN_F_* flags taken, or an error naming the step.
common::Result<unsigned> attach_queue(int fd, const std::string& name, short flags, bool offload,
                                      ifreq* request) {
  *request = ifreq{};
  request->ifr_flags = flags;
  std::memcpy(request->ifr_name, name.data(), name.size());
  if (::ioctl(fd, TUNSETIFF, request) != 0) {
    return std::unexpected(device_error(name, "TUNSETIFF", errno));
  }
  unsigned offloads = 0;
  if (offload) {
    int header_bytes = kVnetHeaderBytes;
    if (::ioctl(fd, TUNSETVNETHDRSZ, &header_bytes) != 0) {
      return std::unexpected(device_error(name, "TUNSETVNETHDRSZ", errno));
    }
    for (const unsigned candidate :
         {unsigned{TUN_F_CSUM | TUN_F_USO4 | TUN_F_USO6}, unsigned{TUN_F_CSUM}, 0u}) {
      if (::ioctl(fd, TUNSETOFFLOAD, candidate) == 0) {
        offloads = candidate;
        break;
      }
    }
  }
  return offloads;
}

}  // namespace

common::Result<TunDevice> TunDevice::open(const TunConfig& config, bool offload, uint32_t queues) {
  const std::string& requested = config.name;
  if (requested.empty() || requested.size() >= IFNAMSIZ) {
    return common::make_error(common::ErrorCode::kInvalidArgument,
                              "TUN device '" + requested + "': name must be 1.." +
                                  std::to_string(IFNAMSIZ - 1) + " characters");
  }
  TunDevice device;
  device.name_ = requested;
  device.fd_.reset(::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC));
  if (!device.fd_.valid()) {
    return std::unexpected(device_error(requested, "open /dev/net/tun", errno));
  }
  const auto flags = static_cast<short>(IFF_TUN | IFF_NO_PI | (offload ? IFF_VNET_HDR : 0) |
                                        (queues > 1 ? IFF_MULTI_QUEUE : 0));
  ifreq request{};
  auto first = attach_queue(device.fd_.get(), requested, flags, offload, &request);
  if (!first) return std::unexpected(first.error());
  device.offloads_ = *first;
  if (offload) device.vnet_header_bytes_ = kVnetHeaderBytes;
  device.name_.assign(request.ifr_name, strnlen(request.ifr_name, IFNAMSIZ));
  for (uint32_t k = 1; k < queues; ++k) {  // the same device by its name as created
    common::UniqueFd queue(::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC));
    if (!queue.valid()) {
      return std::unexpected(device_error(device.name_, "open /dev/net/tun (queue)", errno));
    }
    ifreq queue_request{};
    auto attached = attach_queue(queue.get(), device.name_, flags, offload, &queue_request);
    if (!attached) return std::unexpected(attached.error());
    device.queue_fds_.push_back(std::move(queue));
  }
  device.if_index_ = static_cast<int>(::if_nametoindex(device.name_.c_str()));
  if (device.if_index_ == 0) {
    return std::unexpected(device_error(device.name_, "if_nametoindex", errno));
  }

  // MTU and link state go through an ordinary socket's interface ioctls.
  common::UniqueFd ioctl_socket(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!ioctl_socket.valid()) {
    return std::unexpected(device_error(device.name_, "socket for interface ioctls", errno));
  }
  ifreq settings{};
  std::memcpy(settings.ifr_name, device.name_.data(), device.name_.size());
  settings.ifr_mtu = static_cast<int>(config.mtu_bytes);
  if (::ioctl(ioctl_socket.get(), SIOCSIFMTU, &settings) != 0) {
    return std::unexpected(
        device_error(device.name_, "set MTU " + std::to_string(config.mtu_bytes), errno));
  }
  device.mtu_bytes_ = config.mtu_bytes;
  settings.ifr_qlen = static_cast<int>(config.queue_packets);
  if (::ioctl(ioctl_socket.get(), SIOCSIFTXQLEN, &settings) != 0) {
    return std::unexpected(device_error(
        device.name_, "set transmit queue " + std::to_string(config.queue_packets), errno));
  }
  if (::ioctl(ioctl_socket.get(), SIOCGIFFLAGS, &settings) != 0) {
    return std::unexpected(device_error(device.name_, "get interface flags", errno));
  }
  settings.ifr_flags = static_cast<short>(settings.ifr_flags | IFF_UP | IFF_RUNNING);
  if (::ioctl(ioctl_socket.get(), SIOCSIFFLAGS, &settings) != 0) {
    return std::unexpected(device_error(device.name_, "set link up", errno));
  }

  if (!config.routes.empty()) {
    auto netlink = open_netlink(device.name_);
    if (!netlink) return std::unexpected(netlink.error());
    device.netlink_fd_ = std::move(*netlink);
  }
  uint32_t sequence = 1;
  for (const Prefix& route : config.routes) {
    const int error =
        route_request(device.netlink_fd_.get(), RTM_NEWROUTE, route, device.if_index_, sequence++);
    if (error != 0) {
      std::string what = "add route " + format_prefix(route);
      if (route.ipv6 && config.mtu_bytes < kIpv6MinMtuBytes) {
        what += " (IPv6 needs an MTU of at least 1280, the device has " +
                std::to_string(config.mtu_bytes) + ")";
      }
      return std::unexpected(device_error(device.name_, what, error));  // ~TunDevice cleans up
    }
    device.routes_.push_back(route);
  }
  return device;
}

TunDevice::TunDevice(TunDevice&& other) noexcept
    : fd_(std::move(other.fd_)),
      queue_fds_(std::move(other.queue_fds_)),
      netlink_fd_(std::move(other.netlink_fd_)),
      name_(std::move(other.name_)),
      if_index_(std::exchange(other.if_index_, 0)),
      mtu_bytes_(std::exchange(other.mtu_bytes_, 0)),
      vnet_header_bytes_(std::exchange(other.vnet_header_bytes_, 0)),
      offloads_(std::exchange(other.offloads_, 0)),
      routes_(std::exchange(other.routes_, {})) {}

TunDevice& TunDevice::operator=(TunDevice&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::move(other.fd_);
    queue_fds_ = std::move(other.queue_fds_);
    netlink_fd_ = std::move(other.netlink_fd_);
    name_ = std::move(other.name_);
    if_index_ = std::exchange(other.if_index_, 0);
    mtu_bytes_ = std::exchange(other.mtu_bytes_, 0);
    vnet_header_bytes_ = std::exchange(other.vnet_header_bytes_, 0);
    offloads_ = std::exchange(other.offloads_, 0);
    routes_ = std::exchange(other.routes_, {});
  }
  return *this;
}

TunDevice::~TunDevice() { close(); }

void TunDevice::close() noexcept {
  uint32_t sequence = 1u << 20;
  for (const Prefix& route : routes_) {
    // ESRCH: already gone (deleted by hand, or with the device). Nothing to report at teardown.
    (void)route_request(netlink_fd_.get(), RTM_DELROUTE, route, if_index_, sequence++);
  }
  routes_.clear();
  netlink_fd_.reset();
  queue_fds_.clear();
  fd_.reset();
}

}  // namespace detwan::dataplane::gw

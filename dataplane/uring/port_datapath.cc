// Per-packet helpers of the UDP sockets: address conversion and SQE preparation. No allocation,
// no syscalls, no logging.
#include <cstring>

#include <liburing.h>
#include <netinet/in.h>

#include "dataplane/uring/port.h"

namespace detwan::dataplane::uring {
namespace {

constexpr uint8_t kV4MappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};

}  // namespace

bool to_sockaddr(const gw::Endpoint& endpoint, bool socket_ipv6, sockaddr_storage* address,
                 socklen_t* length) noexcept {
  if (!socket_ipv6) {
    if (endpoint.ipv6) return false;
    auto* v4 = reinterpret_cast<sockaddr_in*>(address);
    *v4 = sockaddr_in{};
    v4->sin_family = AF_INET;
    v4->sin_port = htons(endpoint.port);
    std::memcpy(&v4->sin_addr, endpoint.address, 4);
    *length = sizeof(sockaddr_in);
    return true;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(address);
  *v6 = sockaddr_in6{};
  v6->sin6_family = AF_INET6;
  v6->sin6_port = htons(endpoint.port);
  if (endpoint.ipv6) {
    std::memcpy(&v6->sin6_addr, endpoint.address, 16);
  } else {
    std::memcpy(&v6->sin6_addr, kV4MappedPrefix, 12);
    std::memcpy(reinterpret_cast<uint8_t*>(&v6->sin6_addr) + 12, endpoint.address, 4);
  }
  *length = sizeof(sockaddr_in6);
  return true;
}

gw::Endpoint from_sockaddr(const sockaddr_storage& address) noexcept {
  gw::Endpoint endpoint;
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    std::memcpy(endpoint.address, &v4.sin_addr, 4);
    endpoint.port = ntohs(v4.sin_port);
    return endpoint;
  }
  if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    const auto* bytes = reinterpret_cast<const uint8_t*>(&v6.sin6_addr);
    endpoint.port = ntohs(v6.sin6_port);
    if (std::memcmp(bytes, kV4MappedPrefix, 12) == 0) {
      std::memcpy(endpoint.address, bytes + 12, 4);
    } else {
      endpoint.ipv6 = true;
      std::memcpy(endpoint.address, bytes, 16);
    }
  }
  return endpoint;
}

void prep_recv(io_uring_sqe* sqe, const UdpSocket& socket, IoSlot& slot,
               std::span<std::byte> into) noexcept {
  slot.vector.iov_base = into.data();
  slot.vector.iov_len = into.size();
  slot.message = msghdr{};
  slot.message.msg_name = &slot.address;
  slot.message.msg_namelen = sizeof slot.address;
  slot.message.msg_iov = &slot.vector;
  slot.message.msg_iovlen = 1;
  io_uring_prep_recvmsg(sqe, socket.fd(), &slot.message, MSG_TRUNC);
}

bool prep_send(io_uring_sqe* sqe, const UdpSocket& socket, IoSlot& slot,
               std::span<const std::byte> bytes, const gw::Endpoint& destination,
               int dscp) noexcept {
  socklen_t address_length = 0;
  if (!to_sockaddr(destination, socket.ipv6(), &slot.address, &address_length)) return false;
  slot.vector.iov_base = const_cast<std::byte*>(bytes.data());
  slot.vector.iov_len = bytes.size();
  slot.message = msghdr{};
  slot.message.msg_name = &slot.address;
  slot.message.msg_namelen = address_length;
  slot.message.msg_iov = &slot.vector;
  slot.message.msg_iovlen = 1;
  if (dscp >= 0) {
    // An IPv4 destination (even v4-mapped on an IPv6 socket) takes IP_TOS; IPv6 takes TCLASS.
    const int traffic_class = (dscp & 0x3F) << 2;
    slot.message.msg_control = slot.control;
    slot.message.msg_controllen = sizeof slot.control;
    cmsghdr* header = CMSG_FIRSTHDR(&slot.message);
    header->cmsg_level = destination.ipv6 ? IPPROTO_IPV6 : IPPROTO_IP;
    header->cmsg_type = destination.ipv6 ? IPV6_TCLASS : IP_TOS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(header), &traffic_class, sizeof traffic_class);
  }
  io_uring_prep_sendmsg(sqe, socket.fd(), &slot.message, 0);
  return true;
}

}  // namespace detwan::dataplane::uring

#include "tools/probe/udp_socket.h"

#include <cerrno>
#include <cstring>

#include <arpa/inet.h>
#include <unistd.h>

#include "common/status.h"

namespace detwan::probe {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw common::Failure(common::Error{common::ErrorCode::kIo, what + ": " + std::strerror(errno)});
}

}  // namespace

SocketAddress parse_address(const std::string& address, uint16_t port) {
  SocketAddress out;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out.storage);
  if (inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    out.length = sizeof(sockaddr_in);
    return out;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out.storage);
  if (inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    out.length = sizeof(sockaddr_in6);
    return out;
  }
  throw common::Failure(common::Error{common::ErrorCode::kInvalidArgument,
                                      "'" + address + "': not a numeric IPv4 or IPv6 address"});
}

UdpSocket::UdpSocket(int family) : fd_(::socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {
  if (fd_ < 0) fail("socket(UDP)");
}

UdpSocket::~UdpSocket() {
  if (fd_ >= 0) ::close(fd_);
}

void UdpSocket::bind_to(const SocketAddress& address) {
  if (::bind(fd_, reinterpret_cast<const sockaddr*>(&address.storage), address.length) != 0) {
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw =
        address.storage.ss_family == AF_INET
            ? static_cast<const void*>(
                  &reinterpret_cast<const sockaddr_in*>(&address.storage)->sin_addr)
            : static_cast<const void*>(
                  &reinterpret_cast<const sockaddr_in6*>(&address.storage)->sin6_addr);
    inet_ntop(address.storage.ss_family, raw, text, sizeof(text));
    fail(std::string("bind to ") + text);
  }
}

void UdpSocket::set_receive_buffer(int bytes) noexcept {
  if (::setsockopt(fd_, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0) {
    (void)::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
  }
}

void UdpSocket::enable_timestamps() {
  const int on = 1;
  if (::setsockopt(fd_, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on)) != 0) {
    fail("setsockopt(SO_TIMESTAMPNS)");
  }
}

void UdpSocket::set_dscp(int dscp, int family) {
  const int tos = dscp << 2;
  const int rc = family == AF_INET6
                     ? ::setsockopt(fd_, IPPROTO_IPV6, IPV6_TCLASS, &tos, sizeof(tos))
                     : ::setsockopt(fd_, IPPROTO_IP, IP_TOS, &tos, sizeof(tos));
  if (rc != 0) fail("setting DSCP");
}

}  // namespace detwan::probe

#include "dataplane/uring/port.h"

#include <cerrno>
#include <cstring>
#include <string>

#include <netinet/in.h>
#include <netinet/ip.h>
#include <sys/socket.h>

namespace detwan::dataplane::uring {
namespace {

common::Error socket_error(std::string_view what, const std::string& step, int error) {
  std::string message = std::string(what) + ": " + step + ": " + std::strerror(error);
  if (error == EADDRNOTAVAIL) message += " (no interface has this address)";
  if (error == EADDRINUSE) message += " (another socket is bound to it)";
  if (error == EACCES) message += " (ports below 1024 need CAP_NET_BIND_SERVICE)";
  return common::Error{common::ErrorCode::kIo, message};
}

bool is_unspecified(const gw::Endpoint& endpoint) {
  for (int i = 0; i < (endpoint.ipv6 ? 16 : 4); ++i) {
    if (endpoint.address[i] != 0) return false;
  }
  return true;
}

// Asks for `bytes` of socket buffer; the privileged variant passes net.core.*mem_max.
void set_buffer(int fd, int option, int force_option, int bytes) {
  if (::setsockopt(fd, SOL_SOCKET, force_option, &bytes, sizeof bytes) == 0) return;
  (void)::setsockopt(fd, SOL_SOCKET, option, &bytes, sizeof bytes);
}

}  // namespace

common::Result<UdpSocket> UdpSocket::unbound(bool ipv6, std::string_view what) {
  UdpSocket socket;
  socket.ipv6_ = ipv6;
  socket.local_.ipv6 = ipv6;
  socket.fd_.reset(::socket(ipv6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!socket.fd_.valid()) return std::unexpected(socket_error(what, "socket", errno));
  if (ipv6) {
    const int off = 0;  // may send to IPv4 (v4-mapped) destinations too
    (void)::setsockopt(socket.fd_.get(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
  }
  set_buffer(socket.fd_.get(), SO_SNDBUF, SO_SNDBUFFORCE, kServiceSocketBufferBytes);
  return socket;
}

common::Result<UdpSocket> UdpSocket::bind(const gw::Endpoint& local, bool wan,
                                          std::string_view what, bool reuse_port) {
  const std::string where = std::string(what) + " (" + gw::format_endpoint(local) + ")";
  UdpSocket socket;
  socket.ipv6_ = local.ipv6;
  // Blocking mode on purpose: io_uring waits for readiness itself and never blocks the loop.
  socket.fd_.reset(::socket(local.ipv6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  const int fd = socket.fd_.get();
  if (fd < 0) return std::unexpected(socket_error(where, "socket", errno));
  if (local.ipv6) {
    const int v6only = is_unspecified(local) ? 0 : 1;
    if (::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only) != 0) {
      return std::unexpected(socket_error(where, "IPV6_V6ONLY", errno));
    }
  }
  const int on = 1;
  if (reuse_port && ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on) != 0) {
    return std::unexpected(socket_error(where, "SO_REUSEPORT", errno));
  }
  const int bytes = wan ? kWanSocketBufferBytes : kServiceSocketBufferBytes;
  set_buffer(fd, SO_RCVBUF, SO_RCVBUFFORCE, bytes);
  set_buffer(fd, SO_SNDBUF, SO_SNDBUFFORCE, bytes);
  if (wan) {
    // DF set, no fragmentation by this host: payloads are sized to the WAN MTU instead.
    const int discover = IP_PMTUDISC_DO;
    if (::setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &discover, sizeof discover) != 0 &&
        !local.ipv6) {
      return std::unexpected(socket_error(where, "IP_MTU_DISCOVER", errno));
    }
    if (local.ipv6) {
      const int discover6 = IPV6_PMTUDISC_DO;
      if (::setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &discover6, sizeof discover6) != 0) {
        return std::unexpected(socket_error(where, "IPV6_MTU_DISCOVER", errno));
      }
    }
  }
  sockaddr_storage address{};
  socklen_t length = 0;
  if (!to_sockaddr(local, local.ipv6, &address, &length)) {
    return common::make_error(common::ErrorCode::kInvalidArgument,
                              where + ": not a usable address");
  }
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    return std::unexpected(socket_error(where, "bind", errno));
  }
  sockaddr_storage bound{};
  socklen_t bound_length = sizeof bound;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_length) != 0) {
    return std::unexpected(socket_error(where, "getsockname", errno));
  }
  socket.local_ = local;
  socket.local_.port = from_sockaddr(bound).port;
  return socket;
}

}  // namespace detwan::dataplane::uring

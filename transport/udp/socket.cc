#include "transport/udp/socket.h"

#include <cerrno>
#include <cstring>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>

#include "common/net_address.h"

namespace detwan::transport::udp {
namespace {

// Socket buffers asked for (the privileged variant ignores net.core.*mem_max).
constexpr int kSocketBufferBytes = 4 << 20;

common::Result<UdpAddress> bad(std::string_view text, const std::string& why) {
  return common::make_error(common::ErrorCode::kInvalidArgument,
                            fmt::format("udp address '{}': {}", text, why));
}

void set_buffer(int fd, int option, int force_option) {
  const int bytes = kSocketBufferBytes;
  if (::setsockopt(fd, SOL_SOCKET, force_option, &bytes, sizeof bytes) == 0) return;
  (void)::setsockopt(fd, SOL_SOCKET, option, &bytes, sizeof bytes);
}

}  // namespace

common::Result<UdpAddress> parse_address(std::string_view text) {
  common::EndpointRules rules;
  rules.allow_zero_port = true;
  auto endpoint = common::parse_endpoint(text, rules);
  if (!endpoint) {
    return common::make_error(common::ErrorCode::kInvalidArgument,
                              fmt::format("udp: {}", endpoint.error().message));
  }
  const uint16_t port = endpoint->port;
  const std::string& host_string = endpoint->host;
  UdpAddress address;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&address.storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&address.storage);
  if (endpoint->literal && !endpoint->literal->ipv6) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    std::memcpy(&v4->sin_addr, endpoint->literal->bytes, 4);
    address.length = sizeof(sockaddr_in);
    return address;
  }
  if (endpoint->literal) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    std::memcpy(&v6->sin6_addr, endpoint->literal->bytes, 16);
    address.length = sizeof(sockaddr_in6);
    return address;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const int status = ::getaddrinfo(host_string.c_str(), nullptr, &hints, &found);
  if (status != 0 || found == nullptr) {
    return bad(text,
               fmt::format("host '{}' does not resolve: {}", host_string, ::gai_strerror(status)));
  }
  const addrinfo* pick = found;
  for (const addrinfo* it = found; it != nullptr; it = it->ai_next) {
    if (it->ai_family == AF_INET) {
      pick = it;
      break;
    }
  }
  std::memcpy(&address.storage, pick->ai_addr, pick->ai_addrlen);
  address.length = static_cast<socklen_t>(pick->ai_addrlen);
  ::freeaddrinfo(found);
  if (address.ipv6()) {
    v6->sin6_port = htons(port);
  } else {
    v4->sin_port = htons(port);
  }
  return address;
}

std::string format_address(const UdpAddress& address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.storage.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address.storage);
    ::inet_ntop(AF_INET, &v4.sin_addr, text, sizeof text);
    return fmt::format("{}:{}", text, ntohs(v4.sin_port));
  }
  if (address.storage.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address.storage);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof text);
    return fmt::format("[{}]:{}", text, ntohs(v6.sin6_port));
  }
  return "?";
}

bool same_address(const UdpAddress& a, const UdpAddress& b) noexcept {
  if (a.storage.ss_family != b.storage.ss_family) return false;
  if (a.storage.ss_family == AF_INET) {
    const auto& x = reinterpret_cast<const sockaddr_in&>(a.storage);
    const auto& y = reinterpret_cast<const sockaddr_in&>(b.storage);
    return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
  }
  if (a.storage.ss_family == AF_INET6) {
    const auto& x = reinterpret_cast<const sockaddr_in6&>(a.storage);
    const auto& y = reinterpret_cast<const sockaddr_in6&>(b.storage);
    return x.sin6_port == y.sin6_port &&
           std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof x.sin6_addr) == 0;
  }
  return false;
}

UdpAddress any_address(const UdpAddress& like) {
  UdpAddress address;
  address.storage.ss_family = like.storage.ss_family;
  address.length = like.ipv6() ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  return address;  // zeroed: INADDR_ANY / in6addr_any, port 0
}

common::Result<BoundSocket> open_socket(const UdpAddress& local, std::string_view what,
                                        bool reuse_port) {
  const std::string where = fmt::format("udp {} ({})", what, format_address(local));
  auto fail = [&](const char* step) {
    return common::make_error(common::ErrorCode::kIo,
                              fmt::format("{}: {}: {}", where, step, std::strerror(errno)));
  };
  BoundSocket socket;
  socket.fd.reset(::socket(local.storage.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!socket.fd.valid()) return fail("socket");
  // Blocking mode on purpose: io_uring waits for readiness itself and never blocks the loop.
  set_buffer(socket.fd.get(), SO_RCVBUF, SO_RCVBUFFORCE);
  set_buffer(socket.fd.get(), SO_SNDBUF, SO_SNDBUFFORCE);
  const int one = 1;
  if (reuse_port &&
      ::setsockopt(socket.fd.get(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) {
    return fail("SO_REUSEPORT");
  }
  if (::bind(socket.fd.get(), reinterpret_cast<const sockaddr*>(&local.storage), local.length) !=
      0) {
    return fail("bind");
  }
  socket.local.length = sizeof socket.local.storage;
  if (::getsockname(socket.fd.get(), reinterpret_cast<sockaddr*>(&socket.local.storage),
                    &socket.local.length) != 0) {
    return fail("getsockname");
  }
  return socket;
}

}  // namespace detwan::transport::udp

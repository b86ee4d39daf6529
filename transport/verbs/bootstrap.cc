#include "transport/verbs/bootstrap.h"

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include "common/byte_order.h"
#include "common/net_address.h"

namespace detwan::transport::verbs {
namespace {

using common::ErrorCode;
using common::UniqueFd;
using Clock = std::chrono::steady_clock;

constexpr std::array<std::byte, 4> kMagic{std::byte{'D'}, std::byte{'W'}, std::byte{'V'},
                                          std::byte{'1'}};
constexpr size_t kInfoBytes = 4 + 4 + 4 + 2 + 16 + 8 + 4;

std::unexpected<common::Error> sys_error(const std::string& what, int error) {
  const ErrorCode code = error == ECONNREFUSED ? ErrorCode::kUnavailable : ErrorCode::kIo;
  return common::make_error(code,
                            fmt::format("verbs bootstrap: {}: {}", what, std::strerror(error)));
}

struct AddrInfoDeleter {
  void operator()(addrinfo* info) const { freeaddrinfo(info); }
};

Result<std::unique_ptr<addrinfo, AddrInfoDeleter>> resolve(const std::string& address,
                                                           bool passive) {
  auto parts = common::parse_socket_endpoint(address, passive, "verbs");
  if (!parts) return std::unexpected(parts.error());
  const std::string& host = parts->host;
  const std::string port = std::to_string(parts->port);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* out = nullptr;
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &out);
      rc != 0) {
    return common::make_error(ErrorCode::kInvalidArgument,
                              fmt::format("verbs: address '{}': {}", address, gai_strerror(rc)));
  }
  return std::unique_ptr<addrinfo, AddrInfoDeleter>(out);
}

// Waits until `fd` is ready for `events` or the deadline passes.
Result<void> wait_fd(int fd, short events, Clock::time_point deadline, const char* what) {
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      return common::make_error(ErrorCode::kTimeout,
                                fmt::format("verbs bootstrap: {}: timed out", what));
    }
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(left.count()));
    if (rc > 0) return {};
    if (rc < 0 && errno != EINTR) return sys_error(fmt::format("poll ({})", what), errno);
  }
}

Result<void> transfer(int fd, std::byte* data, size_t size, bool sending,
                      Clock::time_point deadline) {
  size_t done = 0;
  while (done < size) {
    if (auto ready = wait_fd(fd, sending ? POLLOUT : POLLIN, deadline,
                             sending ? "send QP info" : "receive QP info");
        !ready) {
      return ready;
    }
    const ssize_t n = sending ? ::send(fd, data + done, size - done, MSG_NOSIGNAL)
                              : ::recv(fd, data + done, size - done, 0);
    if (n == 0) {
      return common::make_error(ErrorCode::kUnavailable,
                                "verbs bootstrap: peer closed during the QP info exchange");
    }
    if (n < 0 && errno != EINTR && errno != EAGAIN) {
      return sys_error(sending ? "send" : "recv", errno);
    }
    if (n > 0) done += static_cast<size_t>(n);
  }
  return {};
}

}  // namespace

Result<UniqueFd> listen_tcp(const std::string& address, std::string& bound) {
  auto info = resolve(address, true);
  if (!info) return std::unexpected(info.error());
  const addrinfo* ai = info->get();
  UniqueFd fd(::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return sys_error("socket", errno);
  const int one = 1;
  (void)::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
    return sys_error(fmt::format("bind {}", address), errno);
  }
  if (::listen(fd.get(), 64) != 0) return sys_error("listen", errno);
  sockaddr_storage local{};
  socklen_t size = sizeof(local);
  (void)::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &size);
  std::array<char, NI_MAXHOST> host{};
  std::array<char, NI_MAXSERV> port{};
  (void)getnameinfo(reinterpret_cast<sockaddr*>(&local), size, host.data(), host.size(),
                    port.data(), port.size(), NI_NUMERICHOST | NI_NUMERICSERV);
  bound = local.ss_family == AF_INET6 ? fmt::format("[{}]:{}", host.data(), port.data())
                                      : fmt::format("{}:{}", host.data(), port.data());
  return fd;
}

Result<UniqueFd> accept_tcp(int listen_fd, int64_t timeout_ns) {
  const auto deadline = Clock::now() + std::chrono::nanoseconds(timeout_ns);
  if (auto ready = wait_fd(listen_fd, POLLIN, deadline, "accept"); !ready) {
    return std::unexpected(ready.error());
  }
  UniqueFd fd(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC));
  if (!fd.valid()) return sys_error("accept", errno);
  return fd;
}

Result<UniqueFd> connect_tcp(const std::string& address, int64_t timeout_ns) {
  auto info = resolve(address, false);
  if (!info) return std::unexpected(info.error());
  const addrinfo* ai = info->get();
  UniqueFd fd(::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return sys_error("socket", errno);
  if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
    return sys_error(fmt::format("connect {}", address), errno);
  }
  const auto deadline = Clock::now() + std::chrono::nanoseconds(timeout_ns);
  if (auto ready = wait_fd(fd.get(), POLLOUT, deadline, "connect"); !ready) {
    return std::unexpected(ready.error());
  }
  int error = 0;
  socklen_t size = sizeof(error);
  (void)::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &size);
  if (error != 0) return sys_error(fmt::format("connect {}", address), error);
  return fd;
}

Result<QpInfo> exchange_qp_info(int fd, const QpInfo& local, int64_t timeout_ns) {
  const int flags = ::fcntl(fd, F_GETFL);
  (void)::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  const auto deadline = Clock::now() + std::chrono::nanoseconds(timeout_ns);
  std::array<std::byte, kInfoBytes> out{};
  std::memcpy(out.data(), kMagic.data(), kMagic.size());
  common::store_be32(out.data() + 4, local.qpn);
  common::store_be32(out.data() + 8, local.psn);
  common::store_be16(out.data() + 12, local.lid);
  std::memcpy(out.data() + 14, local.gid.data(), local.gid.size());
  common::store_be64(out.data() + 30, local.max_message_bytes);
  common::store_be32(out.data() + 38, local.recv_slots);
  if (auto sent = transfer(fd, out.data(), out.size(), true, deadline); !sent) {
    return std::unexpected(sent.error());
  }
  std::array<std::byte, kInfoBytes> in{};
  if (auto got = transfer(fd, in.data(), in.size(), false, deadline); !got) {
    return std::unexpected(got.error());
  }
  if (std::memcmp(in.data(), kMagic.data(), kMagic.size()) != 0) {
    return common::make_error(ErrorCode::kInvalidArgument,
                              fmt::format("verbs bootstrap: bad magic 0x{:08x}, expected 'DWV1'",
                                          common::load_be32(in.data())));
  }
  QpInfo peer;
  peer.qpn = common::load_be32(in.data() + 4);
  peer.psn = common::load_be32(in.data() + 8);
  peer.lid = common::load_be16(in.data() + 12);
  std::memcpy(peer.gid.data(), in.data() + 14, peer.gid.size());
  peer.max_message_bytes = common::load_be64(in.data() + 30);
  peer.recv_slots = common::load_be32(in.data() + 38);
  if (peer.recv_slots < 2) {
    return common::make_error(
        ErrorCode::kInvalidArgument,
        fmt::format("verbs bootstrap: peer offers {} receive slots (< 2)", peer.recv_slots));
  }
  return peer;
}

}  // namespace detwan::transport::verbs

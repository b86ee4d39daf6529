#include "transport/tcp/socket_options.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

namespace detwan::transport::tcp {
namespace {

common::Result<void> set_int(int fd, int level, int name, int value, const char* what) {
  if (::setsockopt(fd, level, name, &value, sizeof(value)) != 0) {
    return common::make_error(common::ErrorCode::kIo,
                              fmt::format("tcp: setsockopt({}, {}): {}", what, value,
                                          std::strerror(errno)));
  }
  return {};
}

int ceil_seconds(int64_t ns) {
  constexpr int64_t kNsPerSecond = 1'000'000'000;
  return static_cast<int>(std::clamp<int64_t>((ns + kNsPerSecond - 1) / kNsPerSecond, 1, 32767));
}

}  // namespace

common::Result<void> apply_socket_options(boost::asio::ip::tcp::socket& socket,
                                          const ChannelOptions& options) {
  if (options.peer_timeout_ns <= 0 || options.keepalive_interval_ns <= 0) {
    return common::make_error(
        common::ErrorCode::kInvalidArgument,
        fmt::format("tcp: peer_timeout_ns ({}) and keepalive_interval_ns ({}) must be > 0",
                    options.peer_timeout_ns, options.keepalive_interval_ns));
  }
  const int fd = socket.native_handle();
  const int interval_s = ceil_seconds(options.keepalive_interval_ns);
  const int timeout_ms = static_cast<int>(
      std::clamp<int64_t>(options.peer_timeout_ns / 1'000'000, 1, INT32_MAX));
  // Enough probes to span the timeout; TCP_USER_TIMEOUT is what actually ends the connection.
  const int probes = std::clamp(ceil_seconds(options.peer_timeout_ns) / interval_s + 1, 1, 127);
  for (auto step : {set_int(fd, IPPROTO_TCP, TCP_NODELAY, 1, "TCP_NODELAY"),
                    set_int(fd, SOL_SOCKET, SO_KEEPALIVE, 1, "SO_KEEPALIVE"),
                    set_int(fd, IPPROTO_TCP, TCP_KEEPIDLE, interval_s, "TCP_KEEPIDLE"),
                    set_int(fd, IPPROTO_TCP, TCP_KEEPINTVL, interval_s, "TCP_KEEPINTVL"),
                    set_int(fd, IPPROTO_TCP, TCP_KEEPCNT, probes, "TCP_KEEPCNT"),
                    set_int(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, timeout_ms, "TCP_USER_TIMEOUT")}) {
    if (!step) return step;
  }
  return {};
}

}  // namespace detwan::transport::tcp

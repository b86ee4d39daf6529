#include "tools/perf/control.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <span>

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/crypto.h"
#include "tools/perf/perf_wire.h"

namespace detwan::perf {
namespace json = boost::json;
using common::ErrorCode;
using common::make_error;

namespace {

constexpr int64_t kNsPerSec = 1'000'000'000;
constexpr int64_t kMaxDurationNs = 24 * 3600 * kNsPerSec;
constexpr uint64_t kMaxPps = 10'000'000;

int64_t mono_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * kNsPerSec + ts.tv_nsec;
}

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

common::Result<void> invalid(std::string message) {
  return make_error(ErrorCode::kInvalidArgument, std::move(message));
}

}  // namespace

common::Result<void> validate_spec(const TestSpec& s) {
  if (s.size_bytes < kHeaderBytes) {
    return invalid(
        fmt::format("spec.size_bytes: {} is below the {}-byte header", s.size_bytes, kHeaderBytes));
  }
  if (s.size_bytes > kMaxPacketBytes) {
    return invalid(fmt::format("spec.size_bytes: {} is above the largest UDP payload ({})",
                               s.size_bytes, kMaxPacketBytes));
  }
  if (s.pps < 1 || s.pps > kMaxPps) {
    return invalid(fmt::format("spec.pps: {} is outside 1..{}", s.pps, kMaxPps));
  }
  if (s.duration_ns < 1'000'000 || s.duration_ns > kMaxDurationNs) {
    return invalid(fmt::format("spec.duration_ns: {} is outside 1 ms..24 h", s.duration_ns));
  }
  if (s.burst_packets < 1 || s.burst_packets > 100'000) {
    return invalid(fmt::format("spec.burst_packets: {} is outside 1..100000", s.burst_packets));
  }
  if (s.interval_ns != 0 && (s.interval_ns < 10'000'000 || s.interval_ns > 3600 * kNsPerSec)) {
    return invalid(
        fmt::format("spec.interval_ns: {} is outside 10 ms..1 h (or 0: none)", s.interval_ns));
  }
  if (s.bound_ns < 0) return invalid(fmt::format("spec.bound_ns: {} is negative", s.bound_ns));
  if (s.dscp < -1 || s.dscp > 63) {
    return invalid(fmt::format("spec.dscp: {} is outside 0..63 (or -1: default)", s.dscp));
  }
  const bool unpaced = s.mode == Mode::kThroughput && s.bitrate_bps == 0;
  if (!unpaced) {
    // In double: pps x duration overflows 64 bits at the extremes of the ranges.
    const double packets = static_cast<double>(s.pps) * static_cast<double>(s.duration_ns) / 1e9;
    const double tracked = packets * 1.1 + 1000;
    if (tracked > static_cast<double>(kMaxPacketsPerDirection)) {
      return invalid(fmt::format(
          "spec: pps x duration = {:.0f} packets is above the {} a receiver tracks; lower "
          "--pps or --time",
          packets, static_cast<uint64_t>(kMaxPacketsPerDirection / 1.1 - 1000)));
    }
  }
  return {};
}

common::Result<void> check_server_limits(const TestSpec& s, const ServerLimits& limits) {
  if (s.duration_ns > limits.max_duration_ns) {
    return invalid(fmt::format(
        "spec.duration_ns: {} ({:g} s) is above this server's limit of {:g} s (detwan-perf "
        "server --max-time); ask -t {:g} or less",
        s.duration_ns, s.duration_ns / 1e9, limits.max_duration_ns / 1e9,
        limits.max_duration_ns / 1e9));
  }
  if (!sends_reverse(s)) return {};  // the server only receives: the client pays for the rate
  if (s.mode == Mode::kThroughput && s.bitrate_bps == 0) {
    return invalid(fmt::format(
        "spec.bitrate_bps: 0 asks the server to send unpaced; it sends at most {} bit/s "
        "(detwan-perf server --max-rate): ask -b {} or less",
        limits.max_send_bps, limits.max_send_bps));
  }
  if (s.pps > limits.max_send_pps) {
    return invalid(fmt::format(
        "spec.pps: the server would send {} packets/s; its limit is {} (detwan-perf server "
        "--max-pps)",
        s.pps, limits.max_send_pps));
  }
  // Both at most 10^7 and 65507: the product fits in 64 bits.
  const uint64_t send_bps = s.pps * uint64_t{s.size_bytes} * 8;
  if (send_bps > limits.max_send_bps) {
    return invalid(fmt::format(
        "spec: the server would send {} bit/s ({} packets/s of {} bytes); its limit is {} bit/s "
        "(detwan-perf server --max-rate)",
        send_bps, s.pps, s.size_bytes, limits.max_send_bps));
  }
  const uint64_t burst_bytes = uint64_t{s.burst_packets} * s.size_bytes;
  if (s.schedule == ScheduleKind::kBurst && s.mode == Mode::kStream &&
      burst_bytes > limits.max_burst_bytes) {
    return invalid(fmt::format(
        "spec.burst_packets: bursts of {} packets of {} bytes ({} bytes) are above the {} "
        "bytes the server sends back to back",
        s.burst_packets, s.size_bytes, burst_bytes, limits.max_burst_bytes));
  }
  return {};
}

common::Result<HelloToken> new_hello_token() {
  auto high = common::crypto::random_u64();
  auto low = common::crypto::random_u64();
  if (!high || !low) {
    return make_error(ErrorCode::kInternal,
                      "cannot draw a session token: " + (!high ? high : low).error().message);
  }
  return HelloToken{*high, *low};
}

std::string format_token(const HelloToken& token) {
  return fmt::format("{:016x}{:016x}", token.high, token.low);
}

std::optional<HelloToken> parse_token(std::string_view text) {
  if (text.size() != 32) return std::nullopt;
  HelloToken token;
  for (size_t i = 0; i < 32; ++i) {
    const char c = text[i];
    uint64_t digit = 0;
    if (c >= '0' && c <= '9') {
      digit = static_cast<uint64_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<uint64_t>(c - 'a' + 10);
    } else {
      return std::nullopt;
    }
    uint64_t& half = i < 16 ? token.high : token.low;
    half = (half << 4) | digit;
  }
  return token;
}

bool tokens_equal(const HelloToken& a, const HelloToken& b) noexcept {
  const uint64_t x[2] = {a.high, a.low};
  const uint64_t y[2] = {b.high, b.low};
  return common::crypto::equal_ct(std::as_bytes(std::span(x)), std::as_bytes(std::span(y)));
}

uint64_t max_packets_for(const TestSpec& s) {
  if (s.mode == Mode::kThroughput && s.bitrate_bps == 0) return kMaxPacketsPerDirection;
  const double tracked =
      static_cast<double>(s.pps) * static_cast<double>(s.duration_ns) / 1e9 * 1.1 + 1000;
  return std::min<uint64_t>(kMaxPacketsPerDirection, static_cast<uint64_t>(tracked));
}

std::string format_address(const probe::SocketAddress& a) {
  char text[INET6_ADDRSTRLEN] = {};
  if (a.storage.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a.storage);
    inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
    return fmt::format("{}:{}", text, ntohs(v4->sin_port));
  }
  if (a.storage.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a.storage);
    inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text));
    return fmt::format("[{}]:{}", text, ntohs(v6->sin6_port));
  }
  return "?";
}

namespace {

// The 16-byte form of an address (IPv4 as IPv4-mapped IPv6); false for other families.
bool ip_bytes(const sockaddr_storage& a, in6_addr* out) noexcept {
  if (a.ss_family == AF_INET) {
    *out = in6_addr{};
    out->s6_addr[10] = 0xff;
    out->s6_addr[11] = 0xff;
    std::memcpy(&out->s6_addr[12], &reinterpret_cast<const sockaddr_in*>(&a)->sin_addr, 4);
    return true;
  }
  if (a.ss_family == AF_INET6) {
    *out = reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr;
    return true;
  }
  return false;
}

}  // namespace

std::string format_ip(const sockaddr_storage& a) {
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&a)->sin_addr, text, sizeof(text));
  } else if (a.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr, text,
              sizeof(text));
  } else {
    return "?";
  }
  return text;
}

bool same_ip(const sockaddr_storage& a, const sockaddr_storage& b) noexcept {
  in6_addr x{}, y{};
  return ip_bytes(a, &x) && ip_bytes(b, &y) && std::memcmp(&x, &y, sizeof(x)) == 0;
}

bool same_address(const sockaddr_storage& a, socklen_t a_len, const sockaddr_storage& b,
                  socklen_t b_len) noexcept {
  if (a.ss_family != b.ss_family || a_len != b_len) return false;
  if (a.ss_family == AF_INET) {
    const auto* x = reinterpret_cast<const sockaddr_in*>(&a);
    const auto* y = reinterpret_cast<const sockaddr_in*>(&b);
    return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
  }
  if (a.ss_family == AF_INET6) {
    const auto* x = reinterpret_cast<const sockaddr_in6*>(&a);
    const auto* y = reinterpret_cast<const sockaddr_in6*>(&b);
    return x->sin6_port == y->sin6_port &&
           std::memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(in6_addr)) == 0;
  }
  return false;
}

common::Result<probe::SocketAddress> local_address(int fd) {
  probe::SocketAddress a;
  a.length = sizeof(a.storage);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.length) != 0) {
    return make_error(ErrorCode::kIo, errno_text("getsockname"));
  }
  return a;
}

common::Result<probe::SocketAddress> peer_address(int fd) {
  probe::SocketAddress a;
  a.length = sizeof(a.storage);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.length) != 0) {
    return make_error(ErrorCode::kIo, errno_text("getpeername"));
  }
  return a;
}

common::Result<common::UniqueFd> connect_tcp(const std::string& host, uint16_t port,
                                             int64_t timeout_ns, const std::string& bind) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &list); rc != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("'{}': cannot resolve: {}", host, gai_strerror(rc)));
  }
  std::string last_error = "no address";
  common::UniqueFd result;
  for (addrinfo* ai = list; ai != nullptr && !result.valid(); ai = ai->ai_next) {
    common::UniqueFd fd(::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) {
      last_error = errno_text("socket");
      continue;
    }
    if (!bind.empty()) {
      probe::SocketAddress local;
      try {
        local = probe::parse_address(bind, 0);
      } catch (const common::Failure& e) {
        last_error = e.error().message;
        continue;
      }
      if (local.storage.ss_family != ai->ai_family) {
        last_error = "--bind " + bind + ": not the address family of " + host;
        continue;
      }
      if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&local.storage), local.length) != 0) {
        last_error = errno_text(("bind to " + bind).c_str());
        continue;
      }
    }
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        last_error = errno_text("connect");
        continue;
      }
      pollfd p{fd.get(), POLLOUT, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(timeout_ns / 1'000'000));
      int so_error = 0;
      socklen_t len = sizeof(so_error);
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so_error, &len);
      if (ready <= 0 || so_error != 0) {
        last_error = ready <= 0 ? std::string("connect: timed out")
                                : std::string("connect: ") + std::strerror(so_error);
        continue;
      }
    }
    const int flags = ::fcntl(fd.get(), F_GETFL);
    ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
    const int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, 1 /* TCP_NODELAY */, &one, sizeof(one));
    result = std::move(fd);
  }
  ::freeaddrinfo(list);
  if (!result.valid()) {
    return make_error(ErrorCode::kUnavailable, last_error);
  }
  return result;
}

common::Result<common::UniqueFd> listen_tcp(const std::string& bind, uint16_t port) {
  probe::SocketAddress local;
  bool dual_stack = false;
  if (bind.empty()) {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&local.storage);
    v6->sin6_family = AF_INET6;
    v6->sin6_addr = in6addr_any;
    v6->sin6_port = htons(port);
    local.length = sizeof(sockaddr_in6);
    dual_stack = true;
  } else {
    try {
      local = probe::parse_address(bind, port);
    } catch (const common::Failure& e) {
      return std::unexpected(e.error());
    }
  }
  common::UniqueFd fd(::socket(local.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid() && dual_stack) {
    // No IPv6 on this host: all IPv4 addresses instead.
    local = probe::parse_address("0.0.0.0", port);
    dual_stack = false;
    fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  }
  if (!fd.valid()) return make_error(ErrorCode::kIo, errno_text("socket(TCP)"));
  const int one = 1, zero = 0;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (dual_stack) ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&local.storage), local.length) != 0) {
    return make_error(ErrorCode::kIo,
                      errno_text(fmt::format("bind to {}", format_address(local)).c_str()));
  }
  if (::listen(fd.get(), 64) != 0) return make_error(ErrorCode::kIo, errno_text("listen"));
  return fd;
}

common::Result<void> ControlChannel::send(const json::object& message, int64_t timeout_ns) {
  std::string line = json::serialize(message);
  line.push_back('\n');
  const int64_t deadline = mono_ns() + timeout_ns;
  size_t done = 0;
  while (done < line.size()) {
    if (!fd_.valid()) return make_error(ErrorCode::kIo, "control connection closed");
    const ssize_t n =
        ::send(fd_.get(), line.data() + done, line.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return make_error(ErrorCode::kIo, errno_text("control send"));
    }
    const int64_t left = deadline - mono_ns();
    if (left <= 0) return make_error(ErrorCode::kTimeout, "control send: peer does not read");
    pollfd p{fd_.get(), POLLOUT, 0};
    ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left / 1'000'000 + 1, 100)));
  }
  return {};
}

common::Result<void> ControlChannel::read_available() {
  char buf[65536];
  for (;;) {
    if (!fd_.valid()) return make_error(ErrorCode::kUnavailable, "closed the control connection");
    const ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0) return make_error(ErrorCode::kUnavailable, "closed the control connection");
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return {};
      if (errno == EINTR) continue;
      return make_error(ErrorCode::kUnavailable, std::string("closed the control connection (") +
                                                     std::strerror(errno) + ")");
    }
    size_t begin = 0;
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
      if (buf[i] != '\n') continue;
      partial_.append(buf + begin, i - begin);
      begin = i + 1;
      if (partial_.size() > kMaxControlLineBytes) {
        return make_error(ErrorCode::kInvalidArgument, "control line longer than 1 MiB");
      }
      boost::system::error_code ec;
      json::value v = json::parse(partial_, ec);
      partial_.clear();
      if (ec || !v.is_object()) {
        return make_error(ErrorCode::kInvalidArgument,
                          ec ? "control line is not JSON: " + ec.message()
                             : std::string("control line is not a JSON object"));
      }
      queue_.push_back(std::move(v.get_object()));
    }
    partial_.append(buf + begin, static_cast<size_t>(n) - begin);
    if (partial_.size() > kMaxControlLineBytes) {
      return make_error(ErrorCode::kInvalidArgument, "control line longer than 1 MiB");
    }
  }
}

std::optional<json::object> ControlChannel::next() {
  if (queue_.empty()) return std::nullopt;
  json::object o = std::move(queue_.front());
  queue_.pop_front();
  return o;
}

common::Result<json::object> ControlChannel::receive(int64_t timeout_ns) {
  const int64_t deadline = mono_ns() + timeout_ns;
  for (;;) {
    if (auto m = next()) return std::move(*m);
    const int64_t left = deadline - mono_ns();
    if (left <= 0) return make_error(ErrorCode::kTimeout, "no control message in time");
    pollfd p{fd_.get(), POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left / 1'000'000 + 1, 100)));
    if (ready < 0 && errno != EINTR) return make_error(ErrorCode::kIo, errno_text("poll"));
    if (ready > 0) {
      // A peer may send its last line and close at once: deliver the line first.
      if (auto r = read_available(); !r) {
        if (auto m = next()) return std::move(*m);
        return std::unexpected(r.error());
      }
    }
  }
}

}  // namespace detwan::perf

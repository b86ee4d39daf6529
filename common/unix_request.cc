#include "common/unix_request.h"

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>

#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include "common/unique_fd.h"

namespace detwan::common {
namespace {

int64_t monotonic_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Result<UnixAddress> unix_address(std::string_view name) {
  UnixAddress result;
  result.address.sun_family = AF_UNIX;
  result.abstract = !name.empty() && name.front() == '@';
  const std::string_view bytes = result.abstract ? name.substr(1) : name;
  // sun_path holds the path plus its NUL, or the abstract name after its leading NUL.
  const size_t limit = sizeof(result.address.sun_path) - 1;
  if (bytes.empty() || bytes.size() > limit) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("socket '{}': the {} must be 1..{} characters", name,
                                  result.abstract ? "abstract name after '@'" : "path", limit));
  }
  const size_t offset = result.abstract ? 1 : 0;
  std::memcpy(result.address.sun_path + offset, bytes.data(), bytes.size());
  result.length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + offset + bytes.size() +
                                         (result.abstract ? 0 : 1));
  return result;
}

Result<std::string> unix_request(std::string_view socket, std::string_view request, int timeout_ms,
                                 size_t max_answer_bytes, std::string_view server) {
  const std::string name(socket);
  // What the errors call the other end: "/run/x.sock", or "detwan-gw on /run/x.sock".
  const std::string who = server.empty() ? name : fmt::format("{} on {}", server, name);
  auto address = unix_address(name);
  if (!address) return std::unexpected(address.error());
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) {
    return make_error(ErrorCode::kIo, fmt::format("socket '{}': {}", name, std::strerror(errno)));
  }
  if (::connect(fd.get(), address->get(), address->length) != 0) {
    const int error = errno;
    if (error == EAGAIN) {
      return make_error(ErrorCode::kUnavailable,
                        fmt::format("{} is busy (its connection backlog is full)", who));
    }
    return make_error(
        ErrorCode::kUnavailable,
        server.empty()
            ? fmt::format("nothing listens on {}: {}", name, std::strerror(error))
            : fmt::format("no {} listening on {}: {}", server, name, std::strerror(error)));
  }
  const int64_t deadline_ms = monotonic_ms() + timeout_ms;
  auto timed_out = [&] {
    return make_error(ErrorCode::kTimeout,
                      fmt::format("no answer from {} within {} ms", who, timeout_ms));
  };
  // Waits until fd is ready for `events`; false on timeout.
  auto wait_for = [&](short events) {
    for (;;) {
      const int64_t left_ms = deadline_ms - monotonic_ms();
      if (left_ms <= 0) return false;
      pollfd descriptor{fd.get(), events, 0};
      const int ready = ::poll(&descriptor, 1, static_cast<int>(left_ms));
      if (ready > 0) return true;
      if (ready < 0 && errno != EINTR) return false;
    }
  };
  std::string line(request);
  line += '\n';
  size_t written = 0;
  while (written < line.size()) {
    const ssize_t sent =
        ::send(fd.get(), line.data() + written, line.size() - written, MSG_NOSIGNAL);
    if (sent > 0) {
      written += static_cast<size_t>(sent);
    } else if (sent < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_for(POLLOUT)) return timed_out();
    } else if (sent < 0 && (errno == EPIPE || errno == ECONNRESET)) {
      break;  // the server answered without reading (a refused peer): read that answer
    } else {
      return make_error(ErrorCode::kIo,
                        fmt::format("sending to {}: {}", who, std::strerror(errno)));
    }
  }
  std::string answer;
  char buffer[16384];
  for (;;) {
    const ssize_t got = ::recv(fd.get(), buffer, sizeof buffer, 0);
    if (got > 0) {
      answer.append(buffer, static_cast<size_t>(got));
      if (answer.size() > max_answer_bytes) {
        return make_error(ErrorCode::kIo,
                          fmt::format("answer from {} exceeds {} bytes", who, max_answer_bytes));
      }
      continue;
    }
    if (got == 0) break;  // the server closes after answering
    if (errno == EINTR) continue;
    // Closed with our request unread (a refused peer): Linux resets after the answer.
    if (errno == ECONNRESET && !answer.empty()) break;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_for(POLLIN)) return timed_out();
      continue;
    }
    return make_error(ErrorCode::kIo,
                      fmt::format("reading from {}: {}", who, std::strerror(errno)));
  }
  if (answer.empty()) {
    return make_error(ErrorCode::kUnavailable,
                      fmt::format("{} closed the connection without answering", who));
  }
  if (answer.back() == '\n') answer.pop_back();
  return answer;
}

}  // namespace detwan::common

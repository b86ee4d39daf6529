#include "common/unix_request.h"

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
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

Result<std::string> unix_request(std::string_view socket, std::string_view request, int timeout_ms,
                                 size_t max_answer_bytes) {
  const std::string name(socket);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const bool abstract = !name.empty() && name.front() == '@';
  const std::string_view bytes =
      abstract ? std::string_view(name).substr(1) : std::string_view(name);
  if (bytes.empty() || bytes.size() > sizeof(address.sun_path) - 1) {
    return make_error(
        ErrorCode::kInvalidArgument,
        fmt::format("socket '{}': must be 1..{} characters", name, sizeof(address.sun_path) - 1));
  }
  const size_t offset = abstract ? 1 : 0;
  std::memcpy(address.sun_path + offset, bytes.data(), bytes.size());
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + offset +
                                             bytes.size() + (abstract ? 0 : 1));
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) {
    return make_error(ErrorCode::kIo, fmt::format("socket '{}': {}", name, std::strerror(errno)));
  }
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    const int error = errno;
    return make_error(ErrorCode::kUnavailable,
                      error == EAGAIN
                          ? fmt::format("{} is busy (its connection backlog is full)", name)
                          : fmt::format("nothing listens on {}: {}", name, std::strerror(error)));
  }
  const int64_t deadline_ms = monotonic_ms() + timeout_ms;
  auto timed_out = [&] {
    return make_error(ErrorCode::kTimeout,
                      fmt::format("no answer on {} within {} ms", name, timeout_ms));
  };
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
    } else {
      return make_error(ErrorCode::kIo,
                        fmt::format("sending to {}: {}", name, std::strerror(errno)));
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
                          fmt::format("answer from {} exceeds {} bytes", name, max_answer_bytes));
      }
      continue;
    }
    if (got == 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_for(POLLIN)) return timed_out();
      continue;
    }
    return make_error(ErrorCode::kIo,
                      fmt::format("reading from {}: {}", name, std::strerror(errno)));
  }
  if (answer.empty()) {
    return make_error(ErrorCode::kUnavailable,
                      fmt::format("{} closed the connection without answering", name));
  }
  if (answer.back() == '\n') answer.pop_back();
  return answer;
}

}  // namespace detwan::common

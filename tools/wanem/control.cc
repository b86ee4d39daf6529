#include "tools/wanem/control.h"

#include <cerrno>
#include <cstring>
#include <future>
#include <utility>

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/unix_request.h"
#include "tools/wanem/session.h"

namespace detwan::wanem {
namespace {

std::string errno_text(std::string_view what, const std::string& path) {
  return std::string(what) + " '" + path + "': " + std::strerror(errno);
}

// Reads until '\n' or EOF, at most max_bytes, waiting at most timeout_ms in total per poll.
bool read_line(int fd, std::string& out, size_t max_bytes, int timeout_ms) {
  char buffer[4096];
  while (out.size() < max_bytes) {
    pollfd pfd{fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, timeout_ms);
    if (ready <= 0) return false;
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return !out.empty();
    out.append(buffer, static_cast<size_t>(got));
    if (const size_t newline = out.find('\n'); newline != std::string::npos) {
      out.resize(newline);
      return true;
    }
  }
  return false;
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t sent = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return false;
    data.remove_prefix(static_cast<size_t>(sent));
  }
  return true;
}

}  // namespace

common::Result<std::unique_ptr<ControlServer>> ControlServer::start(const std::string& path,
                                                                    PostQueue& posts) {
  auto address = common::unix_address(path);
  if (!address) return std::unexpected(address.error());
  if (address->abstract) {
    return common::make_error(common::ErrorCode::kInvalidArgument,
                              "control socket '" + path + "': must be a filesystem path");
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return common::make_error(common::ErrorCode::kIo, errno_text("socket", path));

  struct stat info {};
  if (::lstat(path.c_str(), &info) == 0) {
    if (!S_ISSOCK(info.st_mode)) {
      return common::make_error(common::ErrorCode::kAlreadyExists,
                                "control socket path '" + path + "' exists and is not a socket");
    }
    // A socket file: live if somebody accepts on it, stale otherwise.
    UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (::connect(probe.get(), address->get(), address->length) == 0) {
      return common::make_error(common::ErrorCode::kAlreadyExists,
                                "control socket '" + path + "' is in use by another instance");
    }
    ::unlink(path.c_str());
  }
  if (::bind(fd.get(), address->get(), address->length) != 0) {
    return common::make_error(common::ErrorCode::kIo, errno_text("bind", path));
  }
  if (::listen(fd.get(), 8) != 0) {
    return common::make_error(common::ErrorCode::kIo, errno_text("listen", path));
  }
  UniqueFd stop(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop.valid()) return common::make_error(common::ErrorCode::kIo, errno_text("eventfd", path));
  return std::unique_ptr<ControlServer>(
      new ControlServer(path, std::move(fd), std::move(stop), posts));
}

ControlServer::ControlServer(std::string path, UniqueFd listen_fd, UniqueFd stop_fd,
                             PostQueue& posts)
    : path_(std::move(path)),
      listen_fd_(std::move(listen_fd)),
      stop_fd_(std::move(stop_fd)),
      posts_(posts),
      thread_([this] { serve_ct(); }) {}

ControlServer::~ControlServer() {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t written = ::write(stop_fd_.get(), &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  ::unlink(path_.c_str());
}

void ControlServer::serve_ct() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_.get(), POLLIN, 0}, {stop_fd_.get(), POLLIN, 0}};
    const int ready = ::poll(fds, 2, -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if ((fds[1].revents & POLLIN) != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    UniqueFd connection(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (connection.valid()) handle_connection_ct(connection.get());
  }
}

void ControlServer::handle_connection_ct(int fd) {
  std::string request;
  if (!read_line(fd, request, kMaxRequestBytes, kRequestTimeoutMs)) {
    (void)write_all(fd, "{\"ok\":false,\"error\":\"no request line received\"}\n");
    return;
  }
  auto promise = std::make_shared<std::promise<std::string>>();
  std::future<std::string> reply = promise->get_future();
  const bool posted = posts_.post([promise, request](PollThreadView& view) {
    promise->set_value(view.session.handle_request_st(request, view));
  });
  std::string response;
  if (!posted) {
    response = "{\"ok\":false,\"error\":\"emulator is shutting down\"}";
  } else if (reply.wait_for(std::chrono::milliseconds(kReplyTimeoutMs)) !=
             std::future_status::ready) {
    response = "{\"ok\":false,\"error\":\"poll thread did not answer in time\"}";
  } else {
    try {
      response = reply.get();
    } catch (const std::future_error&) {
      response = "{\"ok\":false,\"error\":\"emulator is shutting down\"}";
    }
  }
  response += '\n';
  (void)write_all(fd, response);
}

common::Result<std::string> control_request(const std::string& path, std::string_view request,
                                            int timeout_ms) {
  return common::unix_request(path, request, timeout_ms, ControlServer::kMaxAnswerBytes,
                              "detwan-wanem");
}

}  // namespace detwan::wanem

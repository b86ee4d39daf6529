#include "dataplane/gw/control_server.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <utility>

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/json.hpp>

#include "dataplane/gw/config.h"
#include "dataplane/gw/engine.h"

namespace detwan::dataplane::gw {
namespace {

// A sockaddr_un for a path or an "@abstract" name, with its exact length.
struct UnixAddress {
  sockaddr_un address{};
  socklen_t length = 0;
  bool abstract = false;
};

common::Result<UnixAddress> make_address(const std::string& name) {
  UnixAddress result;
  result.address.sun_family = AF_UNIX;
  result.abstract = !name.empty() && name.front() == '@';
  const std::string_view bytes =
      result.abstract ? std::string_view(name).substr(1) : std::string_view(name);
  // sun_path holds the path plus its NUL, or the abstract name after its leading NUL.
  const size_t limit = sizeof(result.address.sun_path) - 1;
  if (bytes.empty() || bytes.size() > limit) {
    return common::make_error(common::ErrorCode::kInvalidArgument,
                              "control socket '" + name + "': the " +
                                  (result.abstract ? "abstract name after '@'" : "path") +
                                  " must be 1.." + std::to_string(limit) + " characters");
  }
  const size_t offset = result.abstract ? 1 : 0;
  std::memcpy(result.address.sun_path + offset, bytes.data(), bytes.size());
  result.length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + offset + bytes.size() +
                                         (result.abstract ? 0 : 1));
  return result;
}

const sockaddr* as_sockaddr(const UnixAddress& address) {
  return reinterpret_cast<const sockaddr*>(&address.address);
}

std::string error_json(std::string_view message) {
  boost::json::object object;
  object["error"] = message;
  return boost::json::serialize(object);
}

bool someone_listens(const UnixAddress& address) {
  common::UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!probe.valid()) return false;
  // A full backlog (EAGAIN) also means a live listener.
  return ::connect(probe.get(), as_sockaddr(address), address.length) == 0 || errno == EAGAIN;
}

int64_t monotonic_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string control_socket_name(std::string_view configured) {
  return configured.empty() ? std::string(kDefaultControlSocket) : std::string(configured);
}

std::string answer_control_request(Engine& engine, std::string_view request, int64_t now_ns) {
  boost::json::error_code parse_error;
  const boost::json::value parsed = boost::json::parse(request, parse_error);
  if (parse_error) {
    return error_json("request is not JSON (" + parse_error.message() +
                      "); send one line like {\"cmd\":\"stats\"}");
  }
  if (!parsed.is_object())
    return error_json("request must be a JSON object like {\"cmd\":\"stats\"}");
  const boost::json::object& object = parsed.as_object();
  const boost::json::value* command = object.if_contains("cmd");
  if (command == nullptr) {
    return error_json("request has no \"cmd\" (use stats, prometheus or config)");
  }
  if (!command->is_string())
    return error_json("\"cmd\" must be a string (stats, prometheus or config)");
  const std::string_view name = command->as_string();
  for (const auto& field : object) {
    if (field.key() != "cmd") {
      return error_json("unknown field \"" + std::string(field.key()) + "\" (only \"cmd\")");
    }
  }
  if (name == "stats") return engine.stats_json(now_ns);
  if (name == "prometheus") return engine.prometheus_text(now_ns);
  if (name == "config") return describe(engine.config());
  return error_json("unknown cmd \"" + std::string(name) + "\" (use stats, prometheus or config)");
}

common::Result<std::unique_ptr<ControlServer>> ControlServer::start(std::string_view configured) {
  const std::string name = control_socket_name(configured);
  auto address = make_address(name);
  if (!address) return std::unexpected(address.error());
  if (!address->abstract) {
    struct stat info {};
    if (::lstat(name.c_str(), &info) == 0) {
      if (!S_ISSOCK(info.st_mode)) {
        return common::make_error(common::ErrorCode::kAlreadyExists,
                                  "control socket '" + name + "' exists and is not a socket");
      }
      if (someone_listens(*address)) {
        return common::make_error(
            common::ErrorCode::kAlreadyExists,
            "control socket '" + name + "' is in use: another detwan-gw listens on it");
      }
      ::unlink(name.c_str());  // stale: its gateway is gone
    }
  }
  common::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) {
    return common::make_error(common::ErrorCode::kIo,
                              "control socket '" + name + "': socket: " + std::strerror(errno));
  }
  if (::bind(fd.get(), as_sockaddr(*address), address->length) != 0) {
    const int error = errno;
    if (error == EADDRINUSE) {
      return common::make_error(
          common::ErrorCode::kAlreadyExists,
          "control socket '" + name + "' is in use: another detwan-gw listens on it");
    }
    return common::make_error(common::ErrorCode::kIo,
                              "control socket '" + name + "': bind: " + std::strerror(error));
  }
  if (::listen(fd.get(), 16) != 0) {
    const int error = errno;
    if (!address->abstract) ::unlink(name.c_str());
    return common::make_error(common::ErrorCode::kIo,
                              "control socket '" + name + "': listen: " + std::strerror(error));
  }
  return std::unique_ptr<ControlServer>(new ControlServer(name, std::move(fd)));
}

ControlServer::ControlServer(std::string name, common::UniqueFd listen_fd)
    : name_(std::move(name)), listen_fd_(std::move(listen_fd)) {
  connections_.reserve(kMaxConnections);
}

ControlServer::~ControlServer() {
  connections_.clear();
  listen_fd_.reset();
  if (!name_.empty() && name_.front() != '@') ::unlink(name_.c_str());
}

void ControlServer::poll_st(Engine& engine, int64_t now_ns) {
  poll_st(now_ns, [&engine, now_ns](std::string_view request) {
    return answer_control_request(engine, request, now_ns);
  });
}

void ControlServer::poll_st(int64_t now_ns, const Responder& respond) {
  accept_pending(now_ns);
  std::erase_if(connections_,
                [&](Connection& connection) { return !serve(connection, now_ns, respond); });
}

void ControlServer::accept_pending(int64_t now_ns) {
  while (connections_.size() < kMaxConnections) {
    common::UniqueFd fd(
        ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd.valid()) return;  // EAGAIN (nothing pending) or a transient error: next poll
    Connection connection;
    connection.fd = std::move(fd);
    connection.deadline_ns = now_ns + kRequestTimeoutNs;
    connections_.push_back(std::move(connection));
  }
}

bool ControlServer::serve(Connection& connection, int64_t now_ns, const Responder& respond) {
  if (!connection.answering) {
    char buffer[1024];
    bool eof = false;
    for (;;) {
      const ssize_t got = ::recv(connection.fd.get(), buffer, sizeof buffer, MSG_DONTWAIT);
      if (got > 0) {
        connection.input.append(buffer, static_cast<size_t>(got));
        if (connection.input.find('\n') != std::string::npos ||
            connection.input.size() > kMaxRequestBytes) {
          break;
        }
        continue;
      }
      if (got == 0) {
        eof = true;
        break;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return false;  // connection reset: nobody to answer
    }
    const size_t newline = connection.input.find('\n');
    std::string answer;
    if (newline != std::string::npos && newline <= kMaxRequestBytes) {
      connection.input.resize(newline);
      if (!connection.input.empty() && connection.input.back() == '\r') connection.input.pop_back();
      answer = respond(connection.input);
    } else if (connection.input.size() > kMaxRequestBytes) {
      answer = error_json("request longer than " + std::to_string(kMaxRequestBytes) + " bytes");
    } else if (eof) {
      if (connection.input.empty()) return false;  // connected and left without asking
      answer = respond(connection.input);          // last line without '\n'
    } else if (now_ns >= connection.deadline_ns) {
      answer = error_json("no complete request line within " +
                          std::to_string(kRequestTimeoutNs / 1'000'000) + " ms");
    } else {
      return true;  // wait for more
    }
    connection.output = std::move(answer);
    if (connection.output.empty() || connection.output.back() != '\n') connection.output += '\n';
    connection.answering = true;
    connection.deadline_ns = now_ns + kRequestTimeoutNs;
  }
  if (flush(connection)) return false;     // all written: close
  return now_ns < connection.deadline_ns;  // a reader that stopped reading is dropped
}

// Writes what the socket takes; true when everything is written or the peer is gone.
bool ControlServer::flush(Connection& connection) {
  while (connection.written < connection.output.size()) {
    const ssize_t sent =
        ::send(connection.fd.get(), connection.output.data() + connection.written,
               connection.output.size() - connection.written, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent > 0) {
      connection.written += static_cast<size_t>(sent);
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    return true;  // EPIPE/ECONNRESET: the client left
  }
  return true;
}

common::Result<std::string> control_request(std::string_view configured, std::string_view request,
                                            int timeout_ms) {
  const std::string name = control_socket_name(configured);
  auto address = make_address(name);
  if (!address) return std::unexpected(address.error());
  common::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) {
    return common::make_error(common::ErrorCode::kIo,
                              "control socket '" + name + "': socket: " + std::strerror(errno));
  }
  if (::connect(fd.get(), as_sockaddr(*address), address->length) != 0) {
    const int error = errno;
    if (error == EAGAIN) {
      return common::make_error(
          common::ErrorCode::kUnavailable,
          "detwan-gw on " + name + " is busy (its connection backlog is full)");
    }
    return common::make_error(common::ErrorCode::kUnavailable,
                              "no detwan-gw listening on " + name + ": " + std::strerror(error));
  }
  const int64_t deadline_ms = monotonic_ms() + timeout_ms;
  auto timed_out = [&] {
    return common::make_error(
        common::ErrorCode::kTimeout,
        "no answer from detwan-gw on " + name + " within " + std::to_string(timeout_ms) + " ms");
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
    } else {
      return common::make_error(common::ErrorCode::kIo,
                                "sending to detwan-gw on " + name + ": " + std::strerror(errno));
    }
  }
  std::string answer;
  char buffer[16384];
  for (;;) {
    const ssize_t got = ::recv(fd.get(), buffer, sizeof buffer, 0);
    if (got > 0) {
      answer.append(buffer, static_cast<size_t>(got));
      continue;
    }
    if (got == 0) break;  // the gateway closes after answering
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_for(POLLIN)) return timed_out();
      continue;
    }
    return common::make_error(common::ErrorCode::kIo,
                              "reading from detwan-gw on " + name + ": " + std::strerror(errno));
  }
  if (answer.empty()) {
    return common::make_error(common::ErrorCode::kUnavailable,
                              "detwan-gw on " + name + " closed the connection without answering");
  }
  if (answer.back() == '\n') answer.pop_back();
  return answer;
}

}  // namespace detwan::dataplane::gw

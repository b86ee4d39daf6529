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


std::string uid_list(std::vector<uint32_t> uids) {
  std::sort(uids.begin(), uids.end());
  uids.erase(std::unique(uids.begin(), uids.end()), uids.end());
  std::string out;
  for (const uint32_t uid : uids) out += (out.empty() ? "" : ", ") + std::to_string(uid);
  return out;
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

common::Result<std::unique_ptr<ControlServer>> ControlServer::start(
    std::string_view configured, const ControlServerOptions& options) {
  const std::string name = control_socket_name(configured);
  if (options.admin) {
    if (auto ok = check_admin_socket(name); !ok) return std::unexpected(ok.error());
    if ((options.mode & ~07777u) != 0) {
      return common::make_error(common::ErrorCode::kInvalidArgument,
                                "admin socket '" + name + "': mode " +
                                    std::to_string(options.mode) + " has bits beyond 07777");
    }
  }
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
  // The admin socket's permissions are set before anyone can connect (nothing listens yet).
  if (options.admin && ::chmod(name.c_str(), static_cast<mode_t>(options.mode)) != 0) {
    const int error = errno;
    ::unlink(name.c_str());
    return common::make_error(common::ErrorCode::kIo,
                              "admin socket '" + name + "': chmod: " + std::strerror(error));
  }
  if (::listen(fd.get(), 16) != 0) {
    const int error = errno;
    if (!address->abstract) ::unlink(name.c_str());
    return common::make_error(common::ErrorCode::kIo,
                              "control socket '" + name + "': listen: " + std::strerror(error));
  }
  return std::unique_ptr<ControlServer>(new ControlServer(name, std::move(fd), options));
}

ControlServer::ControlServer(std::string name, common::UniqueFd listen_fd,
                             ControlServerOptions options)
    : name_(std::move(name)), listen_fd_(std::move(listen_fd)), options_(std::move(options)) {
  connections_.reserve(kMaxConnections);
}

ControlServer::~ControlServer() {
  connections_.clear();
  listen_fd_.reset();
  if (!name_.empty() && name_.front() != '@') ::unlink(name_.c_str());
}

ControlChannel ControlServer::channel() const {
  return ControlChannel{options_.admin, name_, options_.admin ? name_ : options_.admin_socket_hint};
}

void ControlServer::report_refused_peers(Engine& engine) noexcept {
  engine.control_io().refused_peers += refused_peers_ - refused_peers_reported_;
  refused_peers_reported_ = refused_peers_;
}

void ControlServer::poll_st(Engine& engine, int64_t now_ns) {
  const ControlChannel answering = channel();
  poll_st(now_ns, [&engine, &answering, now_ns](std::string_view request) {
    return answer_control_request(engine, request, now_ns, answering);
  });
  report_refused_peers(engine);
}

std::string ControlServer::check_peer(int fd) const {
  ucred credentials{};
  socklen_t length = sizeof credentials;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
    return "cannot read the peer's credentials on the admin socket " + name_ + ": " +
           std::strerror(errno);
  }
  const uint32_t uid = credentials.uid;
  const uint32_t own = ::geteuid();
  if (uid == 0 || uid == own) return "";
  for (const uint32_t allowed : options_.allowed_uids) {
    if (uid == allowed) return "";
  }
  std::vector<uint32_t> allowed{0, own};
  allowed.insert(allowed.end(), options_.allowed_uids.begin(), options_.allowed_uids.end());
  return "uid " + std::to_string(uid) + " may not use the admin socket " + name_ +
         " (allowed: " + uid_list(allowed) + ")";
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
    if (options_.admin) {
      // Refused before its request is read: the answer goes out, then the connection closes.
      std::string refusal = check_peer(connection.fd.get());
      if (!refusal.empty()) {
        ++refused_peers_;
        connection.answering = true;
        connection.refused = true;
        connection.output = control_error_json(refusal) + "\n";
      }
    }
    connections_.push_back(std::move(connection));
  }
}

bool ControlServer::serve(Connection& connection, int64_t now_ns, const Responder& respond) {
  if (!connection.answering) {
    char buffer[16384];
    bool eof = false;
    for (;;) {
      const ssize_t got = ::recv(connection.fd.get(), buffer, sizeof buffer, MSG_DONTWAIT);
      if (got > 0) {
        connection.input.append(buffer, static_cast<size_t>(got));
        if (connection.input.find('\n') != std::string::npos ||
            connection.input.size() > options_.max_request_bytes) {
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
    const size_t limit = options_.max_request_bytes;
    if (newline != std::string::npos && newline <= limit) {
      connection.input.resize(newline);
      if (!connection.input.empty() && connection.input.back() == '\r') connection.input.pop_back();
      answer = respond(connection.input);
    } else if (connection.input.size() > limit) {
      answer = control_error_json("request longer than " + std::to_string(limit) + " bytes");
    } else if (eof) {
      if (connection.input.empty()) return false;  // connected and left without asking
      answer = respond(connection.input);          // last line without '\n'
    } else if (now_ns >= connection.deadline_ns) {
      answer = control_error_json("no complete request line within " +
                          std::to_string(kRequestTimeoutNs / 1'000'000) + " ms");
    } else {
      return true;  // wait for more
    }
    connection.output = std::move(answer);
    if (connection.output.empty() || connection.output.back() != '\n') connection.output += '\n';
    connection.answering = true;
    connection.deadline_ns = now_ns + kRequestTimeoutNs;
  }
  if (flush(connection)) {  // all written: close
    if (connection.refused) {
      // Its request was never read; take it off the socket (unparsed) so that closing does not
      // reset the connection before the client has read the refusal.
      char scratch[4096];
      for (int i = 0;
           i < 64 && ::recv(connection.fd.get(), scratch, sizeof scratch, MSG_DONTWAIT) > 0; ++i) {
      }
    }
    return false;
  }
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
    } else if (sent < 0 && (errno == EPIPE || errno == ECONNRESET)) {
      break;  // the gateway answered without reading (a refused peer): read that answer
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
    // Closed with our request unread (a refused peer): Linux resets after the answer.
    if (errno == ECONNRESET && !answer.empty()) break;
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

#include "dataplane/gw/control_server.h"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <utility>

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <fmt/format.h>

#include "common/unix_request.h"
#include "dataplane/gw/config.h"
#include "dataplane/gw/engine.h"

namespace detwan::dataplane::gw {
namespace {

std::string uid_list(std::vector<uint32_t> uids) {
  std::sort(uids.begin(), uids.end());
  uids.erase(std::unique(uids.begin(), uids.end()), uids.end());
  std::string out;
  for (const uint32_t uid : uids) out += (out.empty() ? "" : ", ") + std::to_string(uid);
  return out;
}

bool someone_listens(const common::UnixAddress& address) {
  common::UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!probe.valid()) return false;
  // A full backlog (EAGAIN) also means a live listener.
  return ::connect(probe.get(), address.get(), address.length) == 0 || errno == EAGAIN;
}

common::Error admin_error(common::ErrorCode code, const std::string& path, const std::string& what,
                          int error) {
  return common::Error{code, "admin socket '" + path + "': " + what + ": " + std::strerror(error)};
}

// Binds `fd` to the filesystem path `path` so that the socket file has exactly `mode` from the
// instant it can be reached, without chmod() on the final path. chmod(path) after bind() acts on
// whatever the path names by then (a symlink someone who may write the directory swapped in)
// and is a second step after the file exists. Instead:
//  1. fchmod(fd, mode) on the unbound socket: Linux creates the file with the socket inode's
//     mode minus the umask (unix_bind), so it is never wider than asked, not even for an instant
//     (AdminSocket.ModeIsSetOnTheDescriptorAndTheFileIsNeverWider checks it);
//  2. the bind happens inside a fresh 0700 directory of ours beside the final path (mkdtemp):
//     nobody else can reach the file there, so the bits the umask removed are restored there
//     by name safely (nobody else can swap that entry), and the result is checked with lstat;
//  3. rename() puts the finished socket at its path in one step; then the caller listens
//     (connecting needs a listener anyway). The temporary directory goes.
// Not umask(): it is process-wide, and the gateway may have other threads by now.
common::Result<void> bind_admin_socket(int fd, const std::string& path, mode_t mode) {
  if (::fchmod(fd, mode) != 0) {
    return std::unexpected(admin_error(common::ErrorCode::kIo, path, "fchmod", errno));
  }
  const size_t slash = path.rfind('/');
  std::string directory = path.substr(0, slash + 1) + ".detwan-gw.XXXXXX";
  if (::mkdtemp(directory.data()) == nullptr) {
    return std::unexpected(admin_error(common::ErrorCode::kIo, path,
                                       "cannot create a private directory beside it", errno));
  }
  const std::string staging = directory + "/s";
  const auto fail = [&](common::Error error) -> common::Result<void> {
    ::unlink(staging.c_str());
    ::rmdir(directory.c_str());
    return std::unexpected(std::move(error));
  };
  auto address = common::unix_address(staging);
  if (!address) {
    return fail(common::Error{common::ErrorCode::kInvalidArgument,
                              "admin socket '" + path +
                                  "': the path is too long to bind it in a private directory "
                                  "first (" + address.error().message + ")"});
  }
  if (::bind(fd, address->get(), address->length) != 0) {
    return fail(admin_error(common::ErrorCode::kIo, path, "bind", errno));
  }
  if (::chmod(staging.c_str(), mode) != 0) {
    return fail(admin_error(common::ErrorCode::kIo, path, "chmod in the private directory", errno));
  }
  struct stat info {};
  if (::lstat(staging.c_str(), &info) != 0 || !S_ISSOCK(info.st_mode) ||
      (info.st_mode & 07777) != mode) {
    return fail(common::Error{common::ErrorCode::kIo,
                              "admin socket '" + path + "': its file did not get mode " +
                                  fmt::format("{:04o}", mode)});
  }
  if (::rename(staging.c_str(), path.c_str()) != 0) {
    return fail(admin_error(common::ErrorCode::kIo, path, "rename into place", errno));
  }
  ::rmdir(directory.c_str());
  return {};
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
  auto address = common::unix_address(name);
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
  if (options.admin) {
    if (auto bound = bind_admin_socket(fd.get(), name, static_cast<mode_t>(options.mode));
        !bound) {
      return std::unexpected(bound.error());
    }
  } else if (::bind(fd.get(), address->get(), address->length) != 0) {
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
  return std::unique_ptr<ControlServer>(new ControlServer(name, std::move(fd), options));
}

ControlServer::ControlServer(std::string name, common::UniqueFd listen_fd,
                             ControlServerOptions options)
    : name_(std::move(name)), listen_fd_(std::move(listen_fd)), options_(std::move(options)) {
  connections_.reserve(kMaxConnections);
}

ControlServer::~ControlServer() {
  std::vector<LocalRequest> waiting;
  {
    std::lock_guard lock(local_mutex_);
    waiting.swap(local_);
  }
  for (LocalRequest& r : waiting) {
    r.done(control_error_json("stopping: the gateway's loop has ended"));
  }
  connections_.clear();
  listen_fd_.reset();
  if (!name_.empty() && name_.front() != '@') ::unlink(name_.c_str());
}

ControlChannel ControlServer::channel() const {
  if (serving_local_admin_) return ControlChannel{true, name_ + " (local)", name_};
  return ControlChannel{options_.admin, name_, options_.admin ? name_ : options_.admin_socket_hint};
}

void ControlServer::report_counters(Engine& engine) noexcept {
  ControlIo& io = engine.control_io();
  io.refused_peers += refused_peers_ - refused_peers_reported_;
  io.deferred += deferred_ - deferred_reported_;
  io.rate_limited += rate_limited_ - rate_limited_reported_;
  refused_peers_reported_ = refused_peers_;
  deferred_reported_ = deferred_;
  rate_limited_reported_ = rate_limited_;
}

void ControlServer::poll_st(Engine& engine, int64_t now_ns) {
  if (heartbeat_) heartbeat_(now_ns);
  poll_st(now_ns, [this, &engine, now_ns](std::string_view request) {
    return answer_control_request(engine, request, now_ns, channel());
  });
  report_counters(engine);
}

bool ControlServer::client_admits(uint32_t uid, int64_t now_ns) noexcept {
  if (options_.admin || options_.client_requests_per_s == 0) return true;
  ClientRate* entry = nullptr;
  for (ClientRate& c : clients_) {
    if (c.used && c.uid == uid) {
      entry = &c;
      break;
    }
  }
  if (entry == nullptr) {
    // A new uid takes a free entry or the least recently seen one (which then starts afresh:
    // at most kRatedClients uids are tracked, each still bounded by the per-poll budget).
    entry = &clients_[0];
    for (ClientRate& c : clients_) {
      if (!c.used) {
        entry = &c;
        break;
      }
      if (c.last_ns < entry->last_ns) entry = &c;
    }
    *entry = ClientRate{uid, true, now_ns, now_ns};
  }
  entry->last_ns = now_ns;
  // GCRA: one answer every `interval`, up to `burst` back to back.
  const int64_t interval_ns = 1'000'000'000 / options_.client_requests_per_s;
  const int64_t tolerance_ns =
      interval_ns * static_cast<int64_t>(std::max<uint32_t>(options_.client_burst, 1) - 1);
  const int64_t tat_ns = std::max(entry->tat_ns, now_ns);
  if (tat_ns - now_ns > tolerance_ns) return false;
  entry->tat_ns = tat_ns + interval_ns;
  return true;
}

std::string ControlServer::check_peer(int fd, uint32_t* uid_out) const {
  ucred credentials{};
  socklen_t length = sizeof credentials;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
    return "cannot read the peer's credentials on the control socket " + name_ + ": " +
           std::strerror(errno);
  }
  const uint32_t uid = credentials.uid;
  *uid_out = uid;
  if (!options_.admin) return "";
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
  answers_left_ = options_.max_answers_per_poll;
  write_bytes_left_ = options_.max_write_bytes_per_poll;
  accept_pending(now_ns);
  // In accept order: the oldest waiting request is answered first.
  std::erase_if(connections_,
                [&](Connection& connection) { return !serve(connection, now_ns, respond); });
  if (local_pending_.load(std::memory_order_acquire)) serve_local(respond);
}

bool ControlServer::submit(std::string request, Done done, bool admin) {
  std::lock_guard lock(local_mutex_);
  if (local_.size() >= kMaxLocalRequests) return false;
  local_.push_back({std::move(request), std::move(done), admin});
  local_pending_.store(true, std::memory_order_release);
  return true;
}

void ControlServer::serve_local(const Responder& respond) {
  std::vector<LocalRequest> taken;
  {
    std::lock_guard lock(local_mutex_);
    const size_t n = std::min(local_.size(), answers_left_);
    if (n < local_.size()) ++deferred_;  // the rest waits for the next poll's budget
    taken.assign(std::make_move_iterator(local_.begin()),
                 std::make_move_iterator(local_.begin() + static_cast<std::ptrdiff_t>(n)));
    local_.erase(local_.begin(), local_.begin() + static_cast<std::ptrdiff_t>(n));
    local_pending_.store(!local_.empty(), std::memory_order_release);
  }
  answers_left_ -= taken.size();
  for (LocalRequest& r : taken) {
    serving_local_admin_ = r.admin;
    std::string answer = respond(r.request);
    serving_local_admin_ = false;
    r.done(std::move(answer));
  }
}

void ControlServer::accept_pending(int64_t now_ns) {
  while (connections_.size() < kMaxConnections) {
    common::UniqueFd fd(
        ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd.valid()) return;  // EAGAIN (nothing pending) or a transient error: next poll
    Connection connection;
    connection.fd = std::move(fd);
    connection.deadline_ns = now_ns + kRequestTimeoutNs;
    // Admin: a uid that may not write is refused before its request is read (the answer goes
    // out, then the connection closes). Both: the uid is the client its rate is counted for.
    std::string refusal = check_peer(connection.fd.get(), &connection.uid);
    if (!refusal.empty()) {
      if (options_.admin) ++refused_peers_;
      connection.answering = true;
      connection.refused = true;
      connection.output = control_error_json(refusal) + "\n";
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
    const bool complete_line = newline != std::string::npos && newline <= limit;
    const bool last_line = !complete_line && connection.input.size() <= limit && eof &&
                           !connection.input.empty();
    if (complete_line || last_line) {
      // The budget: an answer is the costly part (docs/gateway.md).
      if (answers_left_ == 0 || !client_admits(connection.uid, now_ns)) {
        const bool over_rate = answers_left_ != 0;
        bool& counted = over_rate ? connection.rate_limited : connection.deferred;
        if (!counted) {
          counted = true;
          ++(over_rate ? rate_limited_ : deferred_);
        }
        if (now_ns < connection.deadline_ns) return true;  // its turn comes at a later poll
        answer = control_error_json(
            "busy: the control socket's budget is spent (" +
            std::to_string(options_.client_requests_per_s) +
            " requests/s per uid, one answer per poll); try again");
      } else {
        --answers_left_;
        if (complete_line) {
          connection.input.resize(newline);
          if (!connection.input.empty() && connection.input.back() == '\r') {
            connection.input.pop_back();
          }
        }
        answer = respond(connection.input);  // a last line may come without '\n'
      }
    } else if (connection.input.size() > limit) {
      answer = control_error_json("request longer than " + std::to_string(limit) + " bytes");
    } else if (eof) {
      return false;  // connected and left without asking
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

bool ControlServer::flush(Connection& connection) {
  while (connection.written < connection.output.size()) {
    if (write_bytes_left_ == 0) return false;  // the rest at the next poll
    const size_t chunk =
        std::min(connection.output.size() - connection.written, write_bytes_left_);
    const ssize_t sent = ::send(connection.fd.get(), connection.output.data() + connection.written,
                                chunk, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent > 0) {
      connection.written += static_cast<size_t>(sent);
      write_bytes_left_ -= static_cast<size_t>(sent);
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
  return common::unix_request(control_socket_name(configured), request, timeout_ms,
                              common::kUnixAnswerLimitBytes, "detwan-gw");
}

}  // namespace detwan::dataplane::gw

// The TCP bootstrap root: one thread, one poll() loop, one exchange.
// It reports problems only to the ranks (error frames), never through the process's logger:
// being detached, it may still run while the process exits and tears the logger down.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "collectives/comm/bootstrap_tcp.h"

namespace detwan::collectives::bootstrap {
namespace {

// A join frame is a blob plus a few dozen bytes of header.
constexpr uint32_t kMaxJoinFrameBytes = kMaxBlobBytes + 1024;
constexpr long kMaxUnauthenticatedClients = 1024;
// Error answers are small; a client that does not read them is not waited for long.
constexpr int64_t kErrorSendNs = 1'000'000'000;
// The answer may be large (nranks x blob): give it this much past the deadline at least.
constexpr int64_t kMinAnswerSendNs = 10'000'000'000;

class RootServer {
 public:
  RootServer(Listener listener, std::string name, std::string nonce, int64_t timeout_ns)
      : listener_(std::move(listener)),
        name_(std::move(name)),
        nonce_(std::move(nonce)),
        timeout_ns_(timeout_ns),
        deadline_ns_(now_ns() + timeout_ns) {}

  void run() {
    ::fcntl(listener_.fd.get(), F_SETFL, ::fcntl(listener_.fd.get(), F_GETFL) | O_NONBLOCK);
    while (true) {
      std::vector<pollfd> fds;
      fds.push_back({listener_.fd.get(), POLLIN, 0});
      for (const auto& client : clients_) fds.push_back({client->fd.get(), POLLIN, 0});
      const int64_t left_ns = deadline_ns_ - now_ns();
      if (left_ns <= 0) {
        fail_unjoined();
        return;
      }
      const int timeout_ms = static_cast<int>(std::min<int64_t>(left_ns / 1'000'000 + 1, 60'000));
      if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
        fail_all(Error{ErrorCode::kIo, fmt::format("{}: root poll failed", name_)});
        return;
      }
      if (fds[0].revents != 0) accept_all();
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents != 0) read_from(*clients_[i - 1]);
      }
      drop_closed();
      if (nranks_ > 0 && joined_ == nranks_) {
        answer_all();
        return;
      }
    }
  }

 private:
  struct Client {
    common::UniqueFd fd;
    std::string in;
    int rank = -1;        // >= 0 once joined
    bool closed = false;
    bool authenticated = false;  // its join carried the secret (nonce): the rest may be read
  };

  void accept_all() {
    while (true) {
      const int fd = ::accept4(listener_.fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or a connection that vanished before accept
      // Connections that have not shown the secret yet are bounded: beyond the limit a new
      // one is closed at once (a rank retries), so strangers cannot exhaust descriptors.
      const auto pending = std::count_if(clients_.begin(), clients_.end(), [](const auto& c) {
        return !c->authenticated && !c->closed;
      });
      if (pending >= kMaxUnauthenticatedClients) {
        ::close(fd);
        ++refused_connections_;
        continue;
      }
      auto client = std::make_unique<Client>();
      client->fd.reset(fd);
      clients_.push_back(std::move(client));
    }
  }

  void read_from(Client& client) {
    char chunk[65536];
    while (!client.closed) {
      const ssize_t n = ::recv(client.fd.get(), chunk, sizeof(chunk), 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        client.closed = true;  // a rank that gave up (or died) may join again later
        return;
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (client.rank >= 0) continue;  // nothing is expected after the join frame
      client.in.append(chunk, static_cast<size_t>(n));
      if (client.in.size() < 4) continue;
      const uint32_t length = (static_cast<uint32_t>(static_cast<uint8_t>(client.in[0])) << 24) |
                              (static_cast<uint32_t>(static_cast<uint8_t>(client.in[1])) << 16) |
                              (static_cast<uint32_t>(static_cast<uint8_t>(client.in[2])) << 8) |
                              static_cast<uint32_t>(static_cast<uint8_t>(client.in[3]));
      // The secret first: nothing beyond the join's first bytes is buffered for a stranger.
      if (!client.authenticated) {
        const std::string_view prefix = std::string_view(client.in).substr(4);
        auto nonce = peek_join_nonce(prefix.substr(0, std::min(prefix.size(),
                                                                kJoinNoncePrefixBytes)));
        if (!nonce) {
          reject(client,
                 Error{nonce.error().code, fmt::format("{}: {}", name_, nonce.error().message)});
          return;
        }
        if (!nonce->has_value()) continue;  // more bytes to come
        if (!equal_secret(**nonce, nonce_)) {
          reject(client, Error{ErrorCode::kInvalidArgument,
                               fmt::format("{}: a join with a wrong secret (nonce): a stale or "
                                           "foreign unique id, or another "
                                           "DETWAN_BOOTSTRAP_SECRET",
                                           name_)});
          return;
        }
        client.authenticated = true;
      }
      if (length > kMaxJoinFrameBytes) {
        reject(client, Error{ErrorCode::kInvalidArgument,
                             fmt::format("{}: join frame of {} bytes exceeds the limit of {}",
                                         name_, length, kMaxJoinFrameBytes)});
        return;
      }
      if (client.in.size() < 4 + static_cast<size_t>(length)) continue;
      auto join = decode_join(std::string_view(client.in).substr(4, length));
      client.in.clear();
      if (!join) {
        reject(client,
               Error{join.error().code, fmt::format("{}: {}", name_, join.error().message)});
        return;
      }
      accept_join(client, *join);
    }
  }

  void accept_join(Client& client, const Join& join) {
    const auto bad = [&](std::string why) {
      reject(client, Error{ErrorCode::kInvalidArgument, fmt::format("{}: {}", name_, why)});
    };
    if (!equal_secret(join.nonce, nonce_)) {
      return bad(fmt::format("rank {} joined with a wrong nonce (a stale or foreign unique id?)",
                             join.rank));
    }
    if (join.nranks <= 0) return bad(fmt::format("rank {} joined with nranks {}", join.rank,
                                                 join.nranks));
    if (nranks_ > 0 && join.nranks != nranks_) {
      return bad(fmt::format("rank {} joined with nranks {}, expected {}", join.rank, join.nranks,
                             nranks_));
    }
    if (join.rank < 0 || join.rank >= join.nranks) {
      return bad(fmt::format("rank {} is out of range for nranks {}", join.rank, join.nranks));
    }
    if (nranks_ < 0) {
      nranks_ = join.nranks;  // the first good join fixes the communicator size
      by_rank_.assign(static_cast<size_t>(nranks_), nullptr);
      blobs_.assign(static_cast<size_t>(nranks_), {});
    }
    if (by_rank_[join.rank] != nullptr) {
      return bad(fmt::format("rank {} joined twice", join.rank));
    }
    client.rank = join.rank;
    by_rank_[join.rank] = &client;
    blobs_[join.rank] = join.blob;
    ++joined_;
  }

  void reject(Client& client, Error error) {
    ++rejected_;
    if (first_rejection_.empty()) first_rejection_ = error.message;
    (void)send_all(client.fd.get(), frame(encode_answer_error(error)), now_ns() + kErrorSendNs);
    client.closed = true;
  }

  void drop_closed() {
    for (auto& client : clients_) {
      if (client->closed && client->rank >= 0) {
        by_rank_[client->rank] = nullptr;
        blobs_[client->rank].clear();
        --joined_;
      }
    }
    std::erase_if(clients_, [](const auto& client) { return client->closed; });
  }

  void answer_all() {
    const std::string answer = frame(encode_answer_ok(blobs_));
    blobs_.clear();
    const int64_t send_deadline_ns = std::max(deadline_ns_, now_ns() + kMinAnswerSendNs);
    for (Client* client : by_rank_) {
      // A rank that cannot be answered sees its own error (closed connection or timeout).
      (void)send_all(client->fd.get(), answer, send_deadline_ns);
    }
  }

  void fail_unjoined() {
    std::string message;
    if (nranks_ < 0) {
      message = fmt::format("{}: no rank joined within {}", name_, format_seconds(timeout_ns_));
    } else {
      std::vector<int> missing;
      for (int rank = 0; rank < nranks_; ++rank) {
        if (by_rank_[rank] == nullptr) missing.push_back(rank);
      }
      message = fmt::format("{}: rank{} {} never joined within {}", name_,
                            missing.size() == 1 ? "" : "s", join_ranks(missing),
                            format_seconds(timeout_ns_));
    }
    if (rejected_ > 0) {
      message += fmt::format(" ({} join{} rejected, first: {})", rejected_,
                             rejected_ == 1 ? "" : "s", first_rejection_);
    }
    if (refused_connections_ > 0) {
      message += fmt::format(" ({} connection{} refused: more than {} had not shown the secret)",
                             refused_connections_, refused_connections_ == 1 ? "" : "s",
                             kMaxUnauthenticatedClients);
    }
    fail_all(Error{ErrorCode::kTimeout, std::move(message)});
  }

  void fail_all(const Error& error) {
    const std::string answer = frame(encode_answer_error(error));
    for (auto& client : clients_) {
      if (client->rank >= 0) (void)send_all(client->fd.get(), answer, now_ns() + kErrorSendNs);
    }
  }

  Listener listener_;
  const std::string name_;
  const std::string nonce_;
  const int64_t timeout_ns_;
  const int64_t deadline_ns_;
  std::vector<std::unique_ptr<Client>> clients_;
  uint64_t refused_connections_ = 0;
  std::vector<Client*> by_rank_;  // index = rank; null = not joined
  std::vector<std::string> blobs_;
  int nranks_ = -1;
  int joined_ = 0;
  int rejected_ = 0;
  std::string first_rejection_;
};

}  // namespace

void start_root_thread(Listener listener, std::string name, std::string nonce,
                       int64_t timeout_ns) {
  auto server = std::make_unique<RootServer>(std::move(listener), std::move(name),
                                             std::move(nonce), timeout_ns);
  std::thread([server = std::move(server)] { server->run(); }).detach();
}

}  // namespace detwan::collectives::bootstrap

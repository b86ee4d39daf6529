// The TCP bootstrap root: one thread, one poll() loop, one exchange.
//
// Each connection goes hello -> challenge sent -> proof checked -> sealed join -> joined. Until
// its proof verifies, a connection gets a fixed buffer of kChallengeBytes and a deadline
// (RootLimits), and the root answers nothing but its challenge; nothing a stranger sends makes
// it allocate. It reports problems to the ranks (sealed error answers) and, once, as a line on
// stderr when it exits: it may still run while the process exits and tears the logger down, so
// it never uses the process's logger. Root threads are joined at exit (RootThreads), before
// OpenSSL's own atexit clean-up frees what they use.
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "collectives/comm/bootstrap_keys.h"
#include "collectives/comm/bootstrap_tcp.h"

namespace detwan::collectives::bootstrap {
namespace {

constexpr size_t kMaxJoinFrameBytes = kMaxJoinPayloadBytes + crypto::kTagBytes;
// Error answers and challenges are small; a client that does not read them is not waited for.
constexpr int64_t kSmallSendNs = 1'000'000'000;
// The answer may be large (nranks x blob): give it this much past the deadline at least.
constexpr int64_t kMinAnswerSendNs = 10'000'000'000;
// When accept() fails for want of descriptors and nothing can be closed: pause the listener.
constexpr int64_t kListenerPauseNs = 20'000'000;

class RootServer {
 public:
  RootServer(Listener listener, std::string name, RendezvousKeys keys, Salt salt,
             int64_t timeout_ns, RootLimits limits, std::shared_ptr<RootStats> stats, int stop_fd)
      : stop_fd_(stop_fd),
        listener_(std::move(listener)),
        name_(std::move(name)),
        keys_(std::move(keys)),
        salt_(salt),
        timeout_ns_(timeout_ns),
        deadline_ns_(now_ns() + timeout_ns),
        limits_(limits),
        stats_(std::move(stats)) {}

  ~RootServer() {
    report();
    stats_->done.store(true);
  }

  void run() {
    ::fcntl(listener_.fd.get(), F_SETFL, ::fcntl(listener_.fd.get(), F_GETFL) | O_NONBLOCK);
    while (true) {
      const int64_t now = now_ns();
      if (now >= deadline_ns_) {
        fail_unjoined();
        return;
      }
      std::vector<pollfd> fds;
      const bool listening = now >= listener_paused_until_ns_;
      fds.push_back({stop_fd_, POLLIN, 0});
      fds.push_back({listener_.fd.get(), static_cast<short>(listening ? POLLIN : 0), 0});
      for (const auto& client : clients_) fds.push_back({client->fd.get(), POLLIN, 0});
      if (::poll(fds.data(), fds.size(), poll_timeout_ms(now)) < 0 && errno != EINTR) {
        fail_all(Error{ErrorCode::kIo, fmt::format("bootstrap {}: root poll failed", name_)});
        return;
      }
      if (fds[0].revents != 0) return;  // the process is exiting
      if (fds[1].revents != 0) accept_all();
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents != 0 && !clients_[i - 2]->closed) read_from(*clients_[i - 2]);
      }
      expire_handshakes();
      drop_closed();
      if (nranks_ > 0 && joined_ == nranks_) {
        answer_all();
        return;
      }
    }
  }

 private:
  enum class State : uint8_t { kHello, kProof, kJoin, kJoined };

  struct Client {
    common::UniqueFd fd;
    State state = State::kHello;
    int64_t accepted_ns = 0;
    // Before the proof: the hello or the proof being read, in a fixed buffer.
    std::array<char, std::max(kHelloBytes, kProofBytes)> small{};
    size_t small_have = 0;
    Nonce joiner_nonce{};
    Nonce root_nonce{};
    SessionKeys keys;
    std::string in;  // the sealed join frame; only once authenticated
    int rank = -1;   // >= 0 once joined
    bool closed = false;
    [[nodiscard]] bool authenticated() const { return state >= State::kJoin; }
  };

  int poll_timeout_ms(int64_t now) const {
    int64_t wake_ns = deadline_ns_;
    if (now < listener_paused_until_ns_) wake_ns = std::min(wake_ns, listener_paused_until_ns_);
    for (const auto& client : clients_) {
      if (!client->authenticated() && !client->closed) {
        wake_ns = std::min(wake_ns, client->accepted_ns + limits_.handshake_timeout_ns);
      }
    }
    return static_cast<int>(std::clamp<int64_t>((wake_ns - now) / 1'000'000 + 1, 0, 60'000));
  }

  [[nodiscard]] size_t unauthenticated() const {
    return static_cast<size_t>(std::count_if(clients_.begin(), clients_.end(), [](const auto& c) {
      return !c->authenticated() && !c->closed;
    }));
  }

  // Closes one connection that has not proven the secret, to make room: the oldest that has
  // not even said hello, else the oldest waiting for its proof. A genuine rank says hello at
  // once and proves itself one round trip later, so a flood only pushes it out by opening (and
  // saying hello on) more than max_unauthenticated connections within that round trip, and a
  // rank pushed out before its challenge connects again. False if none is left to close.
  bool evict_oldest() {
    for (const State state : {State::kHello, State::kProof}) {
      for (auto& client : clients_) {
        if (client->state == state && !client->closed) {
          stats_->evicted.fetch_add(1);  // before the close, as every count here
          close_now(*client);
          return true;
        }
      }
    }
    return false;
  }

  static void close_now(Client& client) {
    client.closed = true;
    client.fd.reset();  // the descriptor is free at once (a flood may be at the fd limit)
  }

  void accept_all() {
    while (true) {
      const int fd = ::accept4(listener_.fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if ((errno == EMFILE || errno == ENFILE) && evict_oldest()) continue;
        if (errno == EMFILE || errno == ENFILE) {
          listener_paused_until_ns_ = now_ns() + kListenerPauseNs;  // no busy loop on a full table
        }
        return;  // EAGAIN: nothing more to accept
      }
      stats_->accepted.fetch_add(1);
      if (unauthenticated() >= static_cast<size_t>(std::max(1, limits_.max_unauthenticated))) {
        evict_oldest();
      }
      auto client = std::make_unique<Client>();
      client->fd.reset(fd);
      client->accepted_ns = now_ns();
      clients_.push_back(std::move(client));
    }
  }

  void expire_handshakes() {
    const int64_t now = now_ns();
    for (auto& client : clients_) {
      if (!client->authenticated() && !client->closed &&
          now - client->accepted_ns >= limits_.handshake_timeout_ns) {
        // Counted before the close, so whoever sees the close sees the count.
        stats_->handshake_timeouts.fetch_add(1);
        close_now(*client);
      }
    }
  }

  // Reads what the client's state expects; for the handshake, never more than its fixed size.
  void read_from(Client& client) {
    while (!client.closed) {
      char chunk[4096];
      size_t room = sizeof(chunk);
      char* into = chunk;
      if (client.state == State::kHello || client.state == State::kProof) {
        const size_t want = client.state == State::kHello ? kHelloBytes : kProofBytes;
        into = client.small.data() + client.small_have;
        room = want - client.small_have;
      } else if (client.state == State::kJoin) {
        room = std::min(room, frame_bytes_wanted(client) - client.in.size());
      }
      const ssize_t n = ::recv(client.fd.get(), into, room, 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        client.closed = true;  // a rank that gave up (or died) may join again later
        return;
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        return;
      }
      switch (client.state) {
        case State::kHello:
        case State::kProof:
          client.small_have += static_cast<size_t>(n);
          on_handshake_bytes(client);
          break;
        case State::kJoin:
          client.in.append(chunk, static_cast<size_t>(n));
          on_join_bytes(client);
          break;
        case State::kJoined:
          break;  // nothing is expected after the join frame
      }
    }
  }

  void on_handshake_bytes(Client& client) {
    const std::string_view got(client.small.data(), client.small_have);
    if (client.state == State::kHello) {
      if (got.size() < kHelloBytes) return;
      auto nonce = decode_hello(got);
      if (!nonce) return refuse_stranger(client, stats_->malformed);
      client.joiner_nonce = *nonce;
      Challenge challenge;
      challenge.salt = salt_;
      if (!crypto::random_bytes(challenge.nonce)) return refuse_stranger(client, stats_->malformed);
      auto proof =
          keys_.proof(RendezvousKeys::Prover::kRoot, client.joiner_nonce, challenge.nonce, salt_);
      if (!proof) return refuse_stranger(client, stats_->malformed);
      challenge.proof = *proof;
      client.root_nonce = challenge.nonce;
      if (!send_all(client.fd.get(), encode_challenge(challenge), now_ns() + kSmallSendNs)) {
        client.closed = true;
        return;
      }
      client.state = State::kProof;
      client.small_have = 0;
      return;
    }
    if (got.size() < kProofBytes) return;
    auto proof = decode_proof(got);
    if (!proof) return refuse_stranger(client, stats_->malformed);
    auto expected =
        keys_.proof(RendezvousKeys::Prover::kJoiner, client.joiner_nonce, client.root_nonce, salt_);
    if (!expected || !crypto::equal(crypto::view(*expected), crypto::view(*proof))) {
      return refuse_stranger(client, stats_->wrong_proof);
    }
    auto keys = keys_.session(client.joiner_nonce, client.root_nonce);
    if (!keys) return refuse_stranger(client, stats_->malformed);
    client.keys = *keys;
    client.state = State::kJoin;
    stats_->authenticated.fetch_add(1);
  }

  // A connection that did not prove the secret: closed without a word (it may be a squatter's
  // probe or a scan; telling it why helps nobody genuine).
  static void refuse_stranger(Client& client, std::atomic<uint64_t>& counter) {
    counter.fetch_add(1);
    close_now(client);
  }

  [[nodiscard]] static size_t frame_bytes_wanted(const Client& client) {
    if (client.in.size() < 4) return 4;
    return 4 + static_cast<size_t>(read_length_prefix(client.in));
  }

  void on_join_bytes(Client& client) {
    if (client.in.size() < 4) return;
    const uint32_t length = read_length_prefix(client.in);
    if (length > kMaxJoinFrameBytes) {
      return reject(client, fmt::format("a join frame of {} bytes exceeds the limit of {}", length,
                                        kMaxJoinFrameBytes));
    }
    if (client.in.size() < frame_bytes_wanted(client)) return;
    auto payload = open_frame(client.keys.to_root, 0, std::string_view(client.in).substr(4));
    client.in.clear();
    client.in.shrink_to_fit();
    if (!payload) return reject(client, "a join that does not authenticate (altered on the way?)");
    auto join = decode_join(*payload);
    if (!join) return reject(client, join.error().message);
    accept_join(client, *join);
  }

  void accept_join(Client& client, const Join& join) {
    if (join.nranks <= 0 || join.nranks > kMaxRanks) {
      return reject(client, fmt::format("rank {} joined with nranks {} (1..{})", join.rank,
                                        join.nranks, kMaxRanks));
    }
    if (nranks_ > 0 && join.nranks != nranks_) {
      return reject(client, fmt::format("rank {} joined with nranks {}, expected {}", join.rank,
                                        join.nranks, nranks_));
    }
    if (join.rank < 0 || join.rank >= join.nranks) {
      return reject(client,
                    fmt::format("rank {} is out of range for nranks {}", join.rank, join.nranks));
    }
    if (nranks_ < 0) {
      nranks_ = join.nranks;  // the first good join fixes the communicator size
      by_rank_.assign(static_cast<size_t>(nranks_), nullptr);
      blobs_.assign(static_cast<size_t>(nranks_), {});
    }
    if (by_rank_[join.rank] != nullptr) {
      return reject(client, fmt::format("rank {} joined twice", join.rank));
    }
    client.rank = join.rank;
    client.state = State::kJoined;
    by_rank_[join.rank] = &client;
    blobs_[join.rank] = join.blob;
    ++joined_;
  }

  // An authenticated client's join is refused: a sealed error answer naming why.
  void reject(Client& client, const std::string& why) {
    Error error{ErrorCode::kInvalidArgument, fmt::format("bootstrap {}: {}", name_, why)};
    ++rejected_;
    if (first_rejection_.empty()) first_rejection_ = error.message;
    send_sealed(client, encode_answer_error(error), now_ns() + kSmallSendNs);
    client.closed = true;
  }

  // Each connection gets one sealed answer, so the counter is always 0.
  static void send_sealed(const Client& client, const std::string& payload, int64_t deadline_ns) {
    auto sealed = seal_frame(client.keys.to_joiner, 0, payload);
    if (sealed) (void)send_all(client.fd.get(), *sealed, deadline_ns);
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
    const std::string answer = encode_answer_ok(blobs_);
    blobs_.clear();
    const int64_t send_deadline_ns = std::max(deadline_ns_, now_ns() + kMinAnswerSendNs);
    for (Client* client : by_rank_) {
      // A rank that cannot be answered sees its own error (closed connection or timeout).
      send_sealed(*client, answer, send_deadline_ns);
    }
  }

  [[nodiscard]] std::string refused_summary() const {
    const uint64_t malformed = stats_->malformed.load();
    const uint64_t wrong = stats_->wrong_proof.load();
    const uint64_t timeouts = stats_->handshake_timeouts.load();
    const uint64_t evicted = stats_->evicted.load();
    const uint64_t total = malformed + wrong + timeouts + evicted;
    if (total == 0) return "";
    return fmt::format(
        "{} connection{} closed without proving the job's secret ({} wrong proof{}, {} "
        "malformed, {} silent for {}, {} closed to make room: more than {} at once)",
        total, total == 1 ? "" : "s", wrong, wrong == 1 ? "" : "s", malformed, timeouts,
        format_seconds(limits_.handshake_timeout_ns), evicted, limits_.max_unauthenticated);
  }

  void fail_unjoined() {
    std::string message;
    if (nranks_ < 0) {
      message =
          fmt::format("bootstrap {}: no rank joined within {}", name_, format_seconds(timeout_ns_));
    } else {
      std::vector<int> missing;
      for (int rank = 0; rank < nranks_; ++rank) {
        if (by_rank_[rank] == nullptr) missing.push_back(rank);
      }
      message = fmt::format("bootstrap {}: rank{} {} never joined within {}", name_,
                            missing.size() == 1 ? "" : "s", join_ranks(missing),
                            format_seconds(timeout_ns_));
    }
    if (rejected_ > 0) {
      message += fmt::format(" ({} join{} rejected, first: {})", rejected_,
                             rejected_ == 1 ? "" : "s", first_rejection_);
    }
    if (const std::string refused = refused_summary(); !refused.empty()) {
      message += " (" + refused + ")";
    }
    fail_all(Error{ErrorCode::kTimeout, std::move(message)});
  }

  void fail_all(const Error& error) {
    const std::string answer = encode_answer_error(error);
    for (auto& client : clients_) {
      if (client->rank >= 0) send_sealed(*client, answer, now_ns() + kSmallSendNs);
    }
  }

  // One line on stderr (a raw write: safe while the process exits) if strangers were refused.
  void report() const {
    const std::string refused = refused_summary();
    if (refused.empty()) return;
    const std::string line = fmt::format("detwan bootstrap {}: {}\n", name_, refused);
    (void)!::write(STDERR_FILENO, line.data(), line.size());
  }

  const int stop_fd_;  // readable once the process exits (RootThreads)
  Listener listener_;
  const std::string name_;
  const RendezvousKeys keys_;
  const Salt salt_;
  const int64_t timeout_ns_;
  const int64_t deadline_ns_;
  const RootLimits limits_;
  std::shared_ptr<RootStats> stats_;
  int64_t listener_paused_until_ns_ = 0;
  std::vector<std::unique_ptr<Client>> clients_;  // in order of arrival
  std::vector<Client*> by_rank_;  // index = rank; null = not joined
  std::vector<std::string> blobs_;
  int nranks_ = -1;
  int joined_ = 0;
  int rejected_ = 0;
  std::string first_rejection_;
};

// Every root thread of the process. A root may outlive the code that started it (the process
// that made the id does not wait for the ranks), so at exit the threads still running are told
// to stop and joined: this object is made after OpenSSL initialised itself (a root needs its
// keys first), so its destructor runs before OpenSSL's atexit clean-up, which would free what
// a running root uses.
class RootThreads {
 public:
  static RootThreads& instance() {
    static RootThreads threads;
    return threads;
  }

  void start(std::unique_ptr<RootServer> server) {
    std::lock_guard lock(mutex_);
    std::erase_if(running_, [](Running& r) {
      if (!r.done->load()) return false;
      r.thread.join();
      return true;
    });
    auto done = std::make_shared<std::atomic<bool>>(false);
    std::thread thread([server = std::move(server), done]() mutable {
      server->run();
      server.reset();  // reports, then marks the stats done
      done->store(true);
    });
    running_.push_back(Running{std::move(thread), std::move(done)});
  }

  [[nodiscard]] int stop_fd() const { return stop_.get(); }

  ~RootThreads() {
    const uint64_t one = 1;
    (void)!::write(stop_.get(), &one, sizeof(one));
    std::lock_guard lock(mutex_);
    for (Running& r : running_) r.thread.join();
  }

 private:
  struct Running {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  RootThreads() : stop_(::eventfd(0, EFD_CLOEXEC)) {}

  std::mutex mutex_;
  std::vector<Running> running_;
  common::UniqueFd stop_;
};

}  // namespace

Result<std::shared_ptr<const RootStats>> start_root_thread(Listener listener, std::string name,
                                                           const std::string& secret,
                                                           int64_t timeout_ns, RootLimits limits) {
  auto keys = RendezvousKeys::make(secret, name);
  if (!keys) return std::unexpected(keys.error());
  Salt salt{};
  if (auto ok = crypto::random_bytes(salt); !ok) return std::unexpected(ok.error());
  auto stats = std::make_shared<RootStats>();
  RootThreads& threads = RootThreads::instance();
  if (threads.stop_fd() < 0) {
    return make_error(ErrorCode::kInternal,
                      fmt::format("bootstrap {}: eventfd: {}", name, std::strerror(errno)));
  }
  threads.start(std::make_unique<RootServer>(std::move(listener), std::move(name),
                                             std::move(*keys), salt, timeout_ns, limits, stats,
                                             threads.stop_fd()));
  return std::shared_ptr<const RootStats>(std::move(stats));
}

}  // namespace detwan::collectives::bootstrap

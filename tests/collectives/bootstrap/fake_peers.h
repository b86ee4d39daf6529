#pragma once
// Peers of the bootstrap that misbehave, for the tcp tests: a fake root (a squatter on the
// root's port, or a root that knows the secret but answers what no genuine root would) that
// records every byte it is sent, and a raw joiner that speaks the protocol by hand (to send
// joins join_bootstrap would refuse to make).
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "collectives/comm/bootstrap_codec.h"
#include "collectives/comm/bootstrap_io.h"
#include "collectives/comm/bootstrap_keys.h"

namespace detwan::collectives::testing {

// Speaks the joining side by hand: handshake, one sealed join, one sealed answer.
inline Result<std::vector<std::string>> raw_join(const bootstrap::Spec& spec,
                                                 const bootstrap::Join& join, int64_t timeout_ns) {
  namespace b = bootstrap;
  const int64_t deadline = b::now_ns() + timeout_ns;
  auto keys = b::RendezvousKeys::make(*spec.secret, spec.name());
  if (!keys) return std::unexpected(keys.error());
  auto fd = b::connect_tcp(spec.host, spec.port, deadline, "raw joiner");
  if (!fd) return std::unexpected(fd.error());
  b::Nonce mine{};
  (void)crypto::random_bytes(mine);
  if (auto ok = b::send_all(fd->get(), b::encode_hello(mine), deadline); !ok) {
    return std::unexpected(ok.error());
  }
  auto bytes = b::recv_exact(fd->get(), b::kChallengeBytes, deadline);
  if (!bytes) return std::unexpected(bytes.error());
  auto challenge = b::decode_challenge(*bytes);
  if (!challenge) return std::unexpected(challenge.error());
  auto proof =
      keys->proof(b::RendezvousKeys::Prover::kJoiner, mine, challenge->nonce, challenge->salt);
  auto session = keys->session(mine, challenge->nonce);
  auto sealed = b::seal_frame(session->to_root, 0, b::encode_join(join));
  if (auto ok = b::send_all(fd->get(), b::encode_proof(*proof) + *sealed, deadline); !ok) {
    return std::unexpected(ok.error());
  }
  auto body = b::recv_frame(fd->get(), b::max_answer_payload_bytes(b::kMaxRanks), deadline);
  if (!body) return std::unexpected(body.error());
  auto payload = b::open_frame(session->to_joiner, 0, *body);
  if (!payload) return std::unexpected(payload.error());
  return b::decode_answer(*payload, join.nranks);
}

// A process listening on 127.0.0.1:port() in place of the root.
class FakeRoot {
 public:
  enum class Behaviour : uint8_t {
    kSilent,           // accepts and never answers
    kGarbage,          // answers the hello with 85 bytes of garbage
    kRandomProof,      // a well-formed challenge whose proof is random bytes
    kReplayChallenge,  // a genuine root's challenge, obtained for another hello
    kRelayToGenuine,   // forwards the hello to a genuine root (of another address), and back
    kOversizedAnswer,  // knows the secret; answers the join with a huge length prefix
    kAlteredAnswer,    // knows the secret; answers a sealed answer with one byte flipped
  };
  static constexpr uint32_t kOversizedLength = 0x7fff'fff0;

  // genuine: the genuine root (kReplayChallenge, kRelayToGenuine); secret: what the root
  // knows (kOversizedAnswer, kAlteredAnswer).
  FakeRoot(Behaviour behaviour, bootstrap::Spec genuine, std::string secret = "")
      : behaviour_(behaviour), genuine_(std::move(genuine)), secret_(std::move(secret)) {
    auto listener = bootstrap::listen_tcp("127.0.0.1", 0, false);
    if (listener) {
      port_ = listener->port;
      listener_ = std::move(listener->fd);
    }
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeRoot() {
    stop_.store(true);
    thread_.join();
  }
  FakeRoot(const FakeRoot&) = delete;
  FakeRoot& operator=(const FakeRoot&) = delete;

  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] std::string spec(const std::string& secret) const {
    return fmt::format("tcp://127.0.0.1:{}#{}", port_, secret);
  }
  // Every byte received, once the last connection accepted has closed (hang guard: 20 s).
  std::string captured() {
    std::unique_lock lock(mutex_);
    done_cv_.wait_for(lock, std::chrono::seconds(20),
                      [&] { return connections_ > 0 && finished_ == connections_; });
    return captured_;
  }
  int connections() {
    std::lock_guard lock(mutex_);
    return connections_;
  }

 private:
  static int64_t guard() { return bootstrap::now_ns() + 10'000'000'000; }

  void serve() {
    while (!stop_.load()) {
      pollfd pfd{listener_.get(), POLLIN, 0};
      if (::poll(&pfd, 1, 20) <= 0) continue;
      common::UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!fd.valid()) continue;
      {
        std::lock_guard lock(mutex_);
        ++connections_;
      }
      play(fd.get());
      drain(fd.get());
      std::lock_guard lock(mutex_);
      ++finished_;
      done_cv_.notify_all();
    }
  }

  // Reads exactly n bytes (recording them), or fewer if the peer closes.
  std::string take(int fd, size_t n) {
    std::string got;
    while (got.size() < n && !stop_.load()) {
      pollfd pfd{fd, POLLIN, 0};
      if (::poll(&pfd, 1, 20) <= 0) continue;
      char buffer[4096];
      const ssize_t r = ::recv(fd, buffer, std::min(sizeof(buffer), n - got.size()), 0);
      if (r <= 0) break;
      got.append(buffer, static_cast<size_t>(r));
    }
    std::lock_guard lock(mutex_);
    captured_ += got;
    return got;
  }
  void drain(int fd) {
    while (!stop_.load() && take(fd, 4096).size() > 0) {
    }
  }

  // A genuine root's challenge for a hello of our own.
  std::string genuine_challenge(const std::string& hello) {
    auto fd = bootstrap::connect_tcp(genuine_.host, genuine_.port, guard(), "fake root");
    if (!fd) return "";
    (void)bootstrap::send_all(fd->get(), hello, guard());
    auto challenge = bootstrap::recv_exact(fd->get(), bootstrap::kChallengeBytes, guard());
    return challenge ? *challenge : "";
  }

  void play(int fd) {
    namespace b = bootstrap;
    const std::string hello = take(fd, b::kHelloBytes);
    switch (behaviour_) {
      case Behaviour::kSilent:
        return;
      case Behaviour::kGarbage:
        (void)b::send_all(fd, std::string(b::kChallengeBytes, 'x'), guard());
        return;
      case Behaviour::kRandomProof: {
        b::Challenge challenge;
        (void)crypto::random_bytes(challenge.nonce);
        (void)crypto::random_bytes(challenge.proof);
        (void)b::send_all(fd, b::encode_challenge(challenge), guard());
        return;
      }
      case Behaviour::kReplayChallenge: {
        b::Nonce other{};
        (void)crypto::random_bytes(other);
        (void)b::send_all(fd, genuine_challenge(b::encode_hello(other)), guard());
        return;
      }
      case Behaviour::kRelayToGenuine:
        (void)b::send_all(fd, genuine_challenge(hello), guard());
        return;
      case Behaviour::kOversizedAnswer:
      case Behaviour::kAlteredAnswer:
        return answer_as_root(fd, hello);
    }
  }

  void answer_as_root(int fd, const std::string& hello) {
    namespace b = bootstrap;
    auto keys = b::RendezvousKeys::make(secret_, fmt::format("tcp://127.0.0.1:{}", port_));
    auto joiner_nonce = b::decode_hello(hello);
    if (!keys || !joiner_nonce) return;
    b::Challenge challenge;
    (void)crypto::random_bytes(challenge.nonce);
    challenge.proof = *keys->proof(b::RendezvousKeys::Prover::kRoot, *joiner_nonce, challenge.nonce,
                                   challenge.salt);
    (void)b::send_all(fd, b::encode_challenge(challenge), guard());
    (void)take(fd, b::kProofBytes);
    const std::string length = take(fd, 4);
    if (length.size() < 4) return;
    (void)take(fd, b::read_length_prefix(length));  // the sealed join
    if (behaviour_ == Behaviour::kOversizedAnswer) {
      (void)b::send_all(fd, b::length_prefix(kOversizedLength), guard());
      return;
    }
    auto session = keys->session(*joiner_nonce, challenge.nonce);
    auto sealed = b::seal_frame(session->to_joiner, 0, b::encode_answer_ok({"a", "b"}));
    (*sealed)[sealed->size() / 2] ^= 1;
    (void)b::send_all(fd, *sealed, guard());
  }

  Behaviour behaviour_;
  bootstrap::Spec genuine_;
  std::string secret_;
  common::UniqueFd listener_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable done_cv_;
  std::string captured_;
  int connections_ = 0;
  int finished_ = 0;
  std::thread thread_;
};

}  // namespace detwan::collectives::testing

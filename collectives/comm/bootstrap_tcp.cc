// The TCP rendezvous, joining side: connect, prove the root knows the secret before telling it
// anything, prove it back, then one sealed join and one sealed answer. Starting a root is here
// too; the root's loop is in bootstrap_root.cc.
#include "collectives/comm/bootstrap_tcp.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "collectives/comm/bootstrap_keys.h"

namespace detwan::collectives {
namespace bootstrap {
namespace {

// The joining side's view of a connection that passed the handshake.
struct Session {
  common::UniqueFd fd;
  SessionKeys keys;
  crypto::Key communicator_key{};
};

class TcpBootstrap final : public Bootstrap {
 public:
  TcpBootstrap(Spec spec, int rank, int nranks, Session session, std::string local_host)
      : spec_(std::move(spec)),
        rank_(rank),
        nranks_(nranks),
        session_(std::move(session)),
        local_host_(std::move(local_host)) {}

  [[nodiscard]] std::string local_host() const override { return local_host_; }
  [[nodiscard]] CommKey communicator_key() const override { return session_.communicator_key; }

  Result<std::vector<std::string>> exchange(const std::string& mine,
                                            int64_t timeout_ns) override {
    const std::string where = fmt::format("bootstrap {} (rank {})", spec_.name(), rank_);
    if (!session_.fd.valid()) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("{}: exchange() may be called only once", where));
    }
    if (mine.size() > kMaxBlobBytes) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("{}: blob of {} bytes exceeds the limit of {}", where,
                                    mine.size(), kMaxBlobBytes));
    }
    const common::UniqueFd fd = std::move(session_.fd);  // closed on return: one exchange only
    const int64_t deadline_ns = now_ns() + timeout_ns;
    auto sealed = seal_frame(session_.keys.to_root, 0, encode_join({rank_, nranks_, mine}));
    if (!sealed) return std::unexpected(sealed.error());
    if (auto sent = send_all(fd.get(), *sealed, deadline_ns); !sent) {
      return make_error(sent.error().code,
                        fmt::format("{}: sending the join: {}", where, sent.error().message));
    }
    // The answer's size is bounded by what this job can need: nranks blobs at their bound.
    auto body =
        recv_frame(fd.get(), max_answer_payload_bytes(nranks_) + crypto::kTagBytes, deadline_ns);
    if (!body) {
      if (body.error().code == ErrorCode::kTimeout) {
        return make_error(ErrorCode::kTimeout,
                          fmt::format("{}: no answer from the root within {}", where,
                                      format_seconds(timeout_ns)));
      }
      if (body.error().code == ErrorCode::kInvalidArgument) {
        return make_error(ErrorCode::kInvalidArgument,
                          fmt::format("{}: the root's answer: {} (for {} ranks)", where,
                                      body.error().message, nranks_));
      }
      return make_error(body.error().code, fmt::format("{}: {} (did the root time out or exit?)",
                                                       where, body.error().message));
    }
    auto payload = open_frame(session_.keys.to_joiner, 0, *body);
    if (!payload) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("{}: the root's answer does not authenticate (altered on "
                                    "the way?)",
                                    where));
    }
    auto blobs = decode_answer(*payload, nranks_);
    if (!blobs) {
      // The root's own errors already name the rendezvous; codec errors do not.
      if (blobs.error().message.starts_with("malformed")) {
        return make_error(blobs.error().code,
                          fmt::format("{}: {}", where, blobs.error().message));
      }
      return std::unexpected(blobs.error());
    }
    return blobs;
  }

 private:
  Spec spec_;
  int rank_;
  int nranks_;
  Session session_;
  std::string local_host_;
};

// The one error a joiner gives when the other end cannot prove the secret: it was told nothing.
std::unexpected<Error> root_unproven(const std::string& where, std::string_view what) {
  return make_error(ErrorCode::kInvalidArgument,
                    fmt::format("{}: the process at this address does not know the job's "
                                "secret ({}); this rank sent it nothing but a random nonce. "
                                "A squatter on the port, or this rank's secret (unique id, "
                                "DETWAN_BOOTSTRAP_SECRET) or spec is not the job's: every rank "
                                "must name the rendezvous by the same spec",
                                where, what));
}

// One attempt on a connected socket. nullopt: the other end closed before its challenge (the
// root may have dropped the connection to make room, or be restarting): connect again.
Result<std::optional<Session>> handshake(int fd, const RendezvousKeys& keys, int64_t deadline_ns,
                                         const std::string& where) {
  Nonce mine{};
  if (auto ok = crypto::random_bytes(mine); !ok) return std::unexpected(ok.error());
  if (auto sent = send_all(fd, encode_hello(mine), deadline_ns); !sent) {
    if (sent.error().code == ErrorCode::kUnavailable) return std::optional<Session>();
    return make_error(sent.error().code, fmt::format("{}: {}", where, sent.error().message));
  }
  auto bytes = recv_exact(fd, kChallengeBytes, deadline_ns);
  if (!bytes) {
    if (bytes.error().code == ErrorCode::kUnavailable) return std::optional<Session>();
    return make_error(bytes.error().code,
                      fmt::format("{}: no challenge from the process at this address ({}): is "
                                  "it a detwan bootstrap root?",
                                  where, bytes.error().message));
  }
  auto challenge = decode_challenge(*bytes);
  if (!challenge) {
    return root_unproven(where, fmt::format("it answered {} bytes that are not a challenge: {}",
                                            bytes->size(), challenge.error().message));
  }
  auto expected =
      keys.proof(RendezvousKeys::Prover::kRoot, mine, challenge->nonce, challenge->salt);
  if (!expected) return std::unexpected(expected.error());
  if (!crypto::equal(crypto::view(*expected), crypto::view(challenge->proof))) {
    return root_unproven(where, "its proof does not verify");
  }
  auto proof = keys.proof(RendezvousKeys::Prover::kJoiner, mine, challenge->nonce, challenge->salt);
  if (!proof) return std::unexpected(proof.error());
  if (auto sent = send_all(fd, encode_proof(*proof), deadline_ns); !sent) {
    return make_error(sent.error().code,
                      fmt::format("{}: sending the proof: {}", where, sent.error().message));
  }
  auto session_keys = keys.session(mine, challenge->nonce);
  if (!session_keys) return std::unexpected(session_keys.error());
  auto comm_key = keys.communicator_key(crypto::view(challenge->salt));
  if (!comm_key) return std::unexpected(comm_key.error());
  return std::optional<Session>(Session{common::UniqueFd(), *session_keys, *comm_key});
}

}  // namespace

Result<std::unique_ptr<Bootstrap>> join_tcp(const Spec& spec, int rank, int nranks,
                                            int64_t timeout_ns) {
  const int64_t deadline_ns = now_ns() + timeout_ns;
  std::string secret;
  if (spec.secret) {
    secret = *spec.secret;
  } else {
    // Fixed-address mode (MASTER_ADDR:PORT style): the secret comes from the environment,
    // the same on every rank; nobody created a root, so rank 0 hosts it.
    auto from_env = environment_secret(spec);
    if (!from_env) return std::unexpected(from_env.error());
    secret = *from_env;
    if (rank == 0) {
      auto listener = listen_tcp(spec.host, spec.port, /*reuse_address=*/true);
      if (!listener) {
        return make_error(listener.error().code,
                          fmt::format("bootstrap {} (rank 0 starting the root): {}", spec.name(),
                                      listener.error().message));
      }
      auto started = start_root_thread(std::move(*listener), spec.name(), secret, timeout_ns);
      if (!started) return std::unexpected(started.error());
    }
  }
  auto keys = RendezvousKeys::make(secret, spec.name());
  if (!keys) return std::unexpected(keys.error());
  const std::string where = fmt::format("bootstrap {} (rank {})", spec.name(), rank);
  int closed_early = 0;
  while (true) {
    auto fd = connect_tcp(spec.host, spec.port, deadline_ns, where);
    if (!fd) {
      if (fd.error().code != ErrorCode::kTimeout) return std::unexpected(fd.error());
      return make_error(
          ErrorCode::kTimeout,
          fmt::format("{} within {}{}", fd.error().message, format_seconds(timeout_ns),
                      closed_early == 0 ? ""
                                        : fmt::format(" ({} connection{} closed before the "
                                                      "root's challenge)",
                                                      closed_early, closed_early == 1 ? "" : "s")));
    }
    auto session = handshake(fd->get(), *keys, deadline_ns, where);
    if (!session) return std::unexpected(session.error());
    if (!session->has_value()) {
      ++closed_early;
      if (now_ns() >= deadline_ns) {
        return make_error(ErrorCode::kTimeout,
                          fmt::format("{}: the process at this address closed {} connection{} "
                                      "before its challenge within {}",
                                      where, closed_early, closed_early == 1 ? "" : "s",
                                      format_seconds(timeout_ns)));
      }
      // Setup code: a short pause before connecting again.
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(closed_early, 50)));
      continue;
    }
    auto host = local_address(fd->get());
    if (!host) {
      return make_error(host.error().code, fmt::format("{}: {}", where, host.error().message));
    }
    (*session)->fd = std::move(*fd);
    return std::make_unique<TcpBootstrap>(spec, rank, nranks, std::move(**session),
                                          std::move(*host));
  }
}

}  // namespace bootstrap

Result<std::string> start_bootstrap_root(const std::string& host, int64_t timeout_ns) {
  auto secret = bootstrap::make_secret();
  if (!secret) return std::unexpected(secret.error());
  return start_bootstrap_root(host, timeout_ns, *secret);
}

Result<std::string> start_bootstrap_root(const std::string& host, int64_t timeout_ns,
                                         const std::string& secret) {
  if (host.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "bootstrap root: empty host (name the address other ranks reach)");
  }
  if (timeout_ns <= 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("bootstrap root: timeout_ns must be > 0, got {}", timeout_ns));
  }
  // The secret as a spec would carry it: checked (and lower-cased) by the spec parser.
  auto checked =
      bootstrap::parse_spec("tcp://" + bootstrap::join_host_port(host, 1) + "#" + secret);
  if (!checked) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("bootstrap root: {}", checked.error().message));
  }
  auto listener = bootstrap::listen_tcp(host, 0, /*reuse_address=*/false);
  if (!listener) {
    return make_error(listener.error().code,
                      fmt::format("bootstrap root: {}", listener.error().message));
  }
  bootstrap::Spec spec = *checked;
  spec.port = listener->port;
  auto started =
      bootstrap::start_root_thread(std::move(*listener), spec.name(), *spec.secret, timeout_ns);
  if (!started) return std::unexpected(started.error());
  return spec.to_string();
}

}  // namespace detwan::collectives

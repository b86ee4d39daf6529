// The TCP rendezvous, client side, and starting a root (the root's loop: bootstrap_root.cc).
#include "collectives/comm/bootstrap_tcp.h"

#include <utility>

#include <fmt/format.h>

namespace detwan::collectives {
namespace bootstrap {
namespace {

class TcpBootstrap final : public Bootstrap {
 public:
  TcpBootstrap(Spec spec, int rank, int nranks, common::UniqueFd fd, std::string local_host)
      : spec_(std::move(spec)),
        rank_(rank),
        nranks_(nranks),
        fd_(std::move(fd)),
        local_host_(std::move(local_host)) {}

  [[nodiscard]] std::string local_host() const override { return local_host_; }

  Result<std::vector<std::string>> exchange(const std::string& mine,
                                            int64_t timeout_ns) override {
    const std::string where = fmt::format("bootstrap {} (rank {})", spec_.name(), rank_);
    if (!fd_.valid()) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("{}: exchange() may be called only once", where));
    }
    if (mine.size() > kMaxBlobBytes) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("{}: blob of {} bytes exceeds the limit of {}", where,
                                    mine.size(), kMaxBlobBytes));
    }
    const common::UniqueFd fd = std::move(fd_);  // closed on return: one exchange only
    const int64_t deadline_ns = now_ns() + timeout_ns;
    const Join join{spec_.nonce.value_or(""), rank_, nranks_, mine};
    if (auto sent = send_all(fd.get(), frame(encode_join(join)), deadline_ns); !sent) {
      return make_error(sent.error().code,
                        fmt::format("{}: sending the join: {}", where, sent.error().message));
    }
    auto answer = recv_frame(fd.get(), kMaxFrameBytes, deadline_ns);
    if (!answer) {
      if (answer.error().code == ErrorCode::kTimeout) {
        return make_error(ErrorCode::kTimeout,
                          fmt::format("{}: no answer from the root within {}", where,
                                      format_seconds(timeout_ns)));
      }
      return make_error(answer.error().code,
                        fmt::format("{}: {} (did the root time out or exit?)", where,
                                    answer.error().message));
    }
    auto blobs = decode_answer(*answer);
    if (!blobs) {
      // The root's own errors already name the rendezvous; codec errors do not.
      if (blobs.error().message.starts_with("malformed")) {
        return make_error(blobs.error().code,
                          fmt::format("{}: {}", where, blobs.error().message));
      }
      return std::unexpected(blobs.error());
    }
    if (blobs->size() != static_cast<size_t>(nranks_)) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("{}: the root answered {} blobs, expected {}", where,
                                    blobs->size(), nranks_));
    }
    return blobs;
  }

 private:
  Spec spec_;
  int rank_;
  int nranks_;
  common::UniqueFd fd_;
  std::string local_host_;
};

}  // namespace

Result<std::unique_ptr<Bootstrap>> join_tcp(const Spec& spec, int rank, int nranks,
                                            int64_t timeout_ns) {
  const int64_t deadline_ns = now_ns() + timeout_ns;
  Spec joined = spec;
  if (!spec.nonce) {
    // Fixed-address mode (MASTER_ADDR:PORT style): the secret comes from the environment,
    // the same on every rank; nobody created a root, so rank 0 hosts it.
    auto secret = fixed_address_secret(spec);
    if (!secret) return std::unexpected(secret.error());
    joined.nonce = *secret;
    if (rank == 0) {
      auto listener = listen_tcp(spec.host, spec.port, /*reuse_address=*/true);
      if (!listener) {
        return make_error(listener.error().code,
                          fmt::format("bootstrap {} (rank 0 starting the root): {}", spec.name(),
                                      listener.error().message));
      }
      start_root_thread(std::move(*listener), "bootstrap " + spec.name(), *secret, timeout_ns);
    }
  }
  const std::string where = fmt::format("bootstrap {} (rank {})", spec.name(), rank);
  auto fd = connect_tcp(spec.host, spec.port, deadline_ns, where);
  if (!fd) {
    if (fd.error().code != ErrorCode::kTimeout) return std::unexpected(fd.error());
    return make_error(ErrorCode::kTimeout, fmt::format("{} within {}", fd.error().message,
                                                       format_seconds(timeout_ns)));
  }
  auto host = local_address(fd->get());
  if (!host) {
    return make_error(host.error().code, fmt::format("{}: {}", where, host.error().message));
  }
  return std::make_unique<TcpBootstrap>(joined, rank, nranks, std::move(*fd), std::move(*host));
}

}  // namespace bootstrap

Result<std::string> start_bootstrap_root(const std::string& host, int64_t timeout_ns) {
  if (host.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "bootstrap root: empty host (name the address other ranks reach)");
  }
  if (timeout_ns <= 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("bootstrap root: timeout_ns must be > 0, got {}", timeout_ns));
  }
  auto listener = bootstrap::listen_tcp(host, 0, /*reuse_address=*/false);
  if (!listener) {
    return make_error(listener.error().code,
                      fmt::format("bootstrap root: {}", listener.error().message));
  }
  bootstrap::Spec spec;
  spec.kind = bootstrap::Spec::Kind::kTcp;
  spec.host = host;
  spec.port = listener->port;
  spec.nonce = bootstrap::make_nonce();
  bootstrap::start_root_thread(std::move(*listener), "bootstrap " + spec.name(), *spec.nonce,
                               timeout_ns);
  return spec.to_string();
}

}  // namespace detwan::collectives

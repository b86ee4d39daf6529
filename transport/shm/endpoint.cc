// The shm backend: endpoint setup (listen, accept, connect), backend_config, registry entry.
#include "transport/shm/endpoint.h"

#include <cerrno>
#include <cstring>
#include <atomic>
#include <mutex>

#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "common/strings.h"
#include "common/units.h"
#include "transport/shm/channel.h"
#include "transport/shm/progress.h"
#include "transport/shm/session.h"

namespace detwan::transport::shm {
namespace {

using common::make_error;

struct ShmConfig {
  uint64_t ring_bytes = kDefaultRingBytes;  // per direction, chosen by the connecting side
};

// "ring_bytes=8mb" (comma-separated key=value; sizes as common::parse_size_bytes).
Result<ShmConfig> parse_config(std::string_view text) {
  ShmConfig config;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view token = common::trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (token.empty()) continue;
    const size_t equals = token.find('=');
    const std::string_view key = common::trim(token.substr(0, equals));
    if (equals == std::string_view::npos || key != "ring_bytes") {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("shm: backend_config '{}': unknown key '{}' (allowed: "
                                    "ring_bytes)",
                                    token, key));
    }
    auto bytes = common::parse_size_bytes(common::trim(token.substr(equals + 1)));
    if (!bytes) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("shm: backend_config '{}': {}", token, bytes.error().message));
    }
    if (*bytes < kMinRingBytes || *bytes > kMaxRingBytes) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("shm: backend_config '{}': ring_bytes must be in [{}, {}]",
                                    token, kMinRingBytes, kMaxRingBytes));
    }
    config.ring_bytes = *bytes;
  }
  return config;
}

Result<void> validate_options(const ChannelOptions& options, std::string_view what) {
  const auto bad = [&](std::string_view field, int64_t value, std::string_view rule) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("shm: {}.{} = {}: {}", what, field, value, rule));
  };
  if (options.max_message_bytes < 0)
    return bad("max_message_bytes", options.max_message_bytes, "must be >= 0");
  if (options.peer_timeout_ns <= 0)
    return bad("peer_timeout_ns", options.peer_timeout_ns, "must be > 0");
  if (options.keepalive_interval_ns <= 0) {
    return bad("keepalive_interval_ns", options.keepalive_interval_ns, "must be > 0");
  }
  return {};
}

class ShmEndpoint final : public ShmEndpointBase {
 public:
  ShmEndpoint(EndpointOptions options, ShmConfig config, std::shared_ptr<Progress> progress)
      : options_(std::move(options)), config_(config), progress_(std::move(progress)) {}
  ~ShmEndpoint() override { progress_->stop(); }

  Result<std::string> listen(const std::string& address) override {
    std::lock_guard lock(mutex_);
    if (listener_.valid()) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("shm: already listening on '{}'", name_));
    }
    std::string name = address;
    auto fd = listen_socket(name);
    if (!fd) return std::unexpected(fd.error());
    listener_ = std::move(*fd);
    name_ = name;
    return name;
  }

  Result<std::unique_ptr<Channel>> accept(int64_t timeout_ns) override {
    std::lock_guard lock(mutex_);
    if (!listener_.valid()) {
      return make_error(ErrorCode::kInvalidArgument, "shm: accept() before listen()");
    }
    const common::MonotonicClock clock;
    const int64_t deadline_ns = clock.now_ns() + std::max<int64_t>(timeout_ns, 0);
    for (;;) {
      common::UniqueFd socket(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (socket.valid()) {
        // Only this job's uid shares memory with us (whatever the Security mode).
        if (auto ok = check_peer_uid(socket.get(), name_, "a peer of"); !ok) {
          refused_peers_.fetch_add(1, std::memory_order_relaxed);
          spdlog::warn("{}", ok.error().message);
          return std::unexpected(ok.error());
        }
        auto session = server_handshake(
            std::move(socket), name_,
            static_cast<uint64_t>(options_.accept_options.max_message_bytes), deadline_ns);
        if (!session) return std::unexpected(session.error());
        return start_channel(std::move(*session), options_.accept_options);
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
        return make_error(ErrorCode::kIo,
                          fmt::format("shm: accept on '{}': {}", name_, std::strerror(errno)));
      }
      const int64_t left_ns = deadline_ns - clock.now_ns();
      if (left_ns <= 0) {
        return make_error(
            ErrorCode::kTimeout,
            fmt::format("shm: no peer connected to '{}' within {}", name_,
                        common::format_duration_ns(std::max<int64_t>(timeout_ns, 0))));
      }
      pollfd waiter{listener_.get(), POLLIN, 0};
      const timespec wait{static_cast<time_t>(left_ns / 1'000'000'000),
                          static_cast<long>(left_ns % 1'000'000'000)};
      if (::ppoll(&waiter, 1, &wait, nullptr) < 0 && errno != EINTR) {
        return make_error(ErrorCode::kIo,
                          fmt::format("shm: poll on '{}': {}", name_, std::strerror(errno)));
      }
    }
  }

  Result<std::unique_ptr<Channel>> connect(const std::string& address,
                                           const ChannelOptions& options,
                                           int64_t timeout_ns) override {
    if (auto ok = validate_options(options, "options"); !ok) return std::unexpected(ok.error());
    auto session = client_handshake(address, config_.ring_bytes,
                                    static_cast<uint64_t>(options.max_message_bytes), timeout_ns);
    if (!session) return std::unexpected(session.error());
    return start_channel(std::move(*session), options);
  }

  [[nodiscard]] std::string backend_name() const override { return "shm"; }
  [[nodiscard]] uint64_t refused_peers() const override {
    return refused_peers_.load(std::memory_order_relaxed);
  }

 private:
  Result<std::unique_ptr<Channel>> start_channel(Session session, const ChannelOptions& options) {
    auto state = std::make_shared<ChannelState>(std::move(session), options,
                                                common::MonotonicClock().now_ns());
    if (!progress_->post(Op{Op::Kind::kAdd, state, {}, {}, {}})) {
      return make_error(ErrorCode::kUnavailable, "shm: endpoint closed");
    }
    return std::make_unique<ShmChannel>(std::move(state), progress_);
  }

  const EndpointOptions options_;
  const ShmConfig config_;
  std::shared_ptr<Progress> progress_;
  std::mutex mutex_;           // serialises listen/accept
  common::UniqueFd listener_;  // guarded by mutex_
  std::string name_;           // guarded by mutex_
  std::atomic<uint64_t> refused_peers_{0};
};

}  // namespace

BackendInfo backend_info() {
  // memfd, eventfd and abstract Unix sockets are always there on Linux.
  return {"shm", true, true, ""};
}

Result<std::unique_ptr<Endpoint>> make_endpoint(const EndpointOptions& options) {
  auto config = parse_config(options.backend_config);
  if (!config) return std::unexpected(config.error());
  if (auto ok = validate_options(options.accept_options, "accept_options"); !ok) {
    return std::unexpected(ok.error());
  }
  common::UniqueFd control(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!control.valid()) {
    return make_error(ErrorCode::kIo, fmt::format("shm: eventfd: {}", std::strerror(errno)));
  }
  return std::make_unique<ShmEndpoint>(options, *config,
                                       std::make_shared<Progress>(std::move(control)));
}

}  // namespace detwan::transport::shm

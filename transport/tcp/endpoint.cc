// The tcp backend: endpoint setup (listen, accept, connect) and its registry entry.
#include "transport/tcp/endpoint.h"

#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>

#include <fmt/format.h>

#include <boost/asio/post.hpp>

#include "common/logging.h"
#include "common/net_address.h"
#include "transport/tcp/channel.h"
#include "transport/tcp/handshake.h"
#include "transport/tcp/sealed_handshake.h"
#include "transport/tcp/socket_options.h"
#include "transport/tcp/tcp_endpoint.h"

namespace detwan::transport::tcp {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {

std::string format_endpoint(const tcp::endpoint& endpoint) {
  return common::join_host_port(endpoint.address().to_string(), endpoint.port());
}

Result<tcp::resolver::results_type> resolve(asio::io_context& io, const std::string& address,
                                            bool passive) {
  // ":port" listens on every interface; port 0 picks one (listen only).
  auto parts = common::parse_socket_endpoint(address, passive, "tcp");
  if (!parts) return std::unexpected(parts.error());
  tcp::resolver resolver(io);
  error_code ec;
  auto flags = tcp::resolver::numeric_service;
  if (passive) flags |= tcp::resolver::passive;
  auto results = resolver.resolve(parts->host, std::to_string(parts->port), flags, ec);
  if (ec || results.empty()) {
    return common::make_error(
        ErrorCode::kInvalidArgument,
        fmt::format("tcp: cannot resolve '{}': {}", address, ec ? ec.message() : "no addresses"));
  }
  return results;
}

struct Accepted {
  tcp::socket socket;
  Hello hello;  // the peer's limit; the mode and keys of an authenticated channel
};

}  // namespace

// The listening socket, its accept loop and the queue of handshaken connections. Handlers run
// on the progress thread; the queue and counters are shared with accept() under mutex_.
class Listener : public std::enable_shared_from_this<Listener> {
 public:
  Listener(asio::io_context& io, ChannelOptions options, std::shared_ptr<TcpKeyring> keyring)
      : acceptor_(io), options_(std::move(options)), keyring_(std::move(keyring)) {}

  tcp::acceptor& acceptor() { return acceptor_; }

  void accept_next_st() {
    acceptor_.async_accept([self = shared_from_this()](error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !self->acceptor_.is_open()) return;
      if (!ec) self->handshake_st(std::move(socket));
      // Other accept errors (ECONNABORTED, EMFILE) concern one connection: keep listening.
      else
        common::logger("transport.tcp")->warn("tcp: accept: {}", ec.message());
      self->accept_next_st();
    });
  }

  void close_st() {
    error_code ignored;
    acceptor_.close(ignored);
    std::lock_guard lock(mutex_);
    closed_ = true;
    ready_.clear();
    ready_cv_.notify_all();
  }

  void count_rejection(const Error& error) {
    std::lock_guard lock(mutex_);
    ++rejected_;
    last_error_ = error.message;
  }

  Result<Accepted> wait(int64_t timeout_ns) {
    std::unique_lock lock(mutex_);
    const bool ready = ready_cv_.wait_for(lock, std::chrono::nanoseconds(timeout_ns),
                                          [&] { return !ready_.empty() || closed_; });
    if (closed_) return common::make_error(ErrorCode::kUnavailable, "tcp: endpoint closed");
    if (!ready) {
      return common::make_error(
          ErrorCode::kTimeout,
          fmt::format("tcp: no peer connected within {} ms", timeout_ns / 1'000'000));
    }
    Accepted accepted = std::move(ready_.front());
    ready_.pop_front();
    return accepted;
  }

  uint64_t rejected() const {
    std::lock_guard lock(mutex_);
    return rejected_;
  }
  std::string last_error() const {
    std::lock_guard lock(mutex_);
    return last_error_;
  }

 private:
  void handshake_st(tcp::socket socket) {
    if (auto applied = apply_socket_options(socket, options_); !applied) {
      common::logger("transport.tcp")->warn("{}", applied.error().message);
      return;
    }
    auto done = [self = shared_from_this()](Result<Hello> hello, tcp::socket socket) {
      if (!hello) {
        common::logger("transport.tcp")->warn("{} (connection dropped)", hello.error().message);
        if (hello.error().code == ErrorCode::kInvalidArgument) {
          self->count_rejection(hello.error());
        }
        return;
      }
      std::lock_guard lock(self->mutex_);
      if (self->closed_) return;
      self->ready_.push_back(Accepted{std::move(socket), *hello});
      self->ready_cv_.notify_one();
    };
    if (keyring_) {
      start_sealed_server_handshake(std::move(socket), options_, options_.peer_timeout_ns, keyring_,
                                    std::move(done));
    } else {
      start_server_handshake(std::move(socket), options_, options_.peer_timeout_ns,
                             std::move(done));
    }
  }

  tcp::acceptor acceptor_;
  const ChannelOptions options_;
  const std::shared_ptr<TcpKeyring> keyring_;

  mutable std::mutex mutex_;
  std::condition_variable ready_cv_;
  std::deque<Accepted> ready_;
  bool closed_ = false;
  uint64_t rejected_ = 0;
  std::string last_error_;
};

namespace {
std::shared_ptr<TcpKeyring> keyring_for(const Security& security, std::optional<Error>& error) {
  if (security.mode == SecurityMode::kNone) return nullptr;
  auto keyring = TcpKeyring::create(security);
  if (!keyring) {
    error = keyring.error();
    return nullptr;
  }
  return *keyring;
}
}  // namespace

TcpEndpoint::TcpEndpoint(const EndpointOptions& options)
    : options_(options),
      security_error_(),
      keyring_(keyring_for(options.security, security_error_)),
      io_(std::make_shared<IoThread>()),
      listener_(std::make_shared<Listener>(io_->context(), options.accept_options, keyring_)) {}

TcpEndpoint::~TcpEndpoint() {
  // Queued behind earlier posts; ~IoThread (maybe now, maybe with the last channel) stops after.
  asio::post(io_->context(), [listener = listener_] { listener->close_st(); });
}

Result<std::string> TcpEndpoint::listen(const std::string& address) {
  if (security_error_) return std::unexpected(*security_error_);
  auto targets = resolve(io_->context(), address, /*passive=*/true);
  if (!targets) return std::unexpected(targets.error());
  const tcp::endpoint local = targets->begin()->endpoint();
  // Set up synchronously on the caller's thread: the progress thread does not touch the
  // acceptor until accept_next_st is posted below.
  tcp::acceptor& acceptor = listener_->acceptor();
  if (!listen_address_.empty()) {
    return common::make_error(ErrorCode::kAlreadyExists,
                              fmt::format("tcp: listen('{}'): this endpoint already listens on {}",
                                          address, listen_address_));
  }
  error_code ec;
  if (acceptor.open(local.protocol(), ec); !ec) {
    acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  }
  if (!ec) acceptor.bind(local, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  tcp::endpoint bound;
  if (!ec) bound = acceptor.local_endpoint(ec);
  if (ec) {
    error_code ignored;
    acceptor.close(ignored);
    return common::make_error(
        ec == asio::error::address_in_use ? ErrorCode::kAlreadyExists : ErrorCode::kIo,
        fmt::format("tcp: listen on '{}': {}", address, ec.message()));
  }
  listen_address_ = format_endpoint(bound);
  asio::post(io_->context(), [listener = listener_] { listener->accept_next_st(); });
  return listen_address_;
}

Result<std::unique_ptr<Channel>> TcpEndpoint::accept(int64_t timeout_ns) {
  if (io_->on_progress_thread()) {
    return common::make_error(ErrorCode::kInvalidArgument,
                              "tcp: accept() called on the progress thread (from a callback)");
  }
  if (listen_address_.empty()) {
    return common::make_error(ErrorCode::kInvalidArgument, "tcp: accept() before listen()");
  }
  auto accepted = listener_->wait(timeout_ns);
  if (!accepted) return std::unexpected(accepted.error());
  return std::make_unique<TcpChannel>(io_, std::move(accepted->socket), options_.accept_options,
                                      accepted->hello);
}

Result<std::unique_ptr<Channel>> TcpEndpoint::connect(const std::string& address,
                                                      const ChannelOptions& options,
                                                      int64_t timeout_ns) {
  if (io_->on_progress_thread()) {
    return common::make_error(ErrorCode::kInvalidArgument,
                              "tcp: connect() called on the progress thread (from a callback)");
  }
  if (security_error_) return std::unexpected(*security_error_);
  if (options.peer_timeout_ns <= 0 || options.keepalive_interval_ns <= 0) {
    return common::make_error(
        ErrorCode::kInvalidArgument,
        "tcp: connect: peer_timeout_ns and keepalive_interval_ns must be > 0");
  }
  auto targets = resolve(io_->context(), address, /*passive=*/false);
  if (!targets) return std::unexpected(targets.error());

  struct Outcome {
    Result<Hello> hello;
    tcp::socket socket;
  };
  std::promise<Outcome> promise;
  auto future = promise.get_future();
  // The handshake's own deadline guarantees the promise is fulfilled.
  asio::post(io_->context(), [&, targets = *targets] {
    auto done = [&promise](Result<Hello> hello, tcp::socket socket) {
      error_code ignored;
      if (!hello) socket.close(ignored);
      promise.set_value(Outcome{std::move(hello), std::move(socket)});
    };
    if (keyring_) {
      start_sealed_client_handshake(tcp::socket(io_->context()), targets, options, timeout_ns,
                                    address, keyring_, std::move(done));
    } else {
      start_client_handshake(tcp::socket(io_->context()), targets, options, timeout_ns, address,
                             std::move(done));
    }
  });
  Outcome outcome = future.get();
  if (!outcome.hello) {
    if (outcome.hello.error().code == ErrorCode::kInvalidArgument) {
      listener_->count_rejection(outcome.hello.error());
    }
    return std::unexpected(outcome.hello.error());
  }
  return std::make_unique<TcpChannel>(io_, std::move(outcome.socket), options, *outcome.hello);
}

uint64_t TcpEndpoint::handshakes_rejected() const { return listener_->rejected(); }
std::string TcpEndpoint::last_handshake_error() const { return listener_->last_error(); }

BackendInfo backend_info() { return {"tcp", true, true, ""}; }

Result<std::unique_ptr<Endpoint>> make_endpoint(const EndpointOptions& options) {
  if (!options.backend_config.empty()) {
    return common::make_error(ErrorCode::kInvalidArgument,
                              fmt::format("tcp: backend_config '{}': the tcp backend has no "
                                          "settings",
                                          options.backend_config));
  }
  return std::make_unique<TcpEndpoint>(options);
}

}  // namespace detwan::transport::tcp

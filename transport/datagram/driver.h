#pragma once
// The datagram driver: runs proto::Connections behind the Channel / Endpoint API over any packet
// I/O that satisfies `DatagramLink` (transport/datagram/link.h): the udp and loopback backends.
//
// One progress thread per endpoint drives all its channels. It waits for whichever comes first:
// received datagrams, a posted API call (PostQueue + link.wake()), or the earliest
// next_wakeup_ns() of its connections; then it feeds datagrams to their connections, applies the
// posted calls, drains every connection's poll_transmit into the link (one batch per loop), and
// runs the completion callbacks of the events the connections emitted.
//
// Server side: the listen socket's datagrams are demultiplexed by connection id. Plain protocol
// (Security::none()): an unknown id carried by a HELLO creates a Connection(Role::kServer, id)
// queued for accept(). Authenticated channels: a HELLO whose MAC verifies gets a HELLO_ACK and
// a half-open entry (half_open.h); the Connection is created when the client's first sealed
// datagram opens. A HELLO of the other protocol is answered with the plain protocol's CLOSE
// "security mismatch" (no bigger than the HELLO). Any other unknown datagram is dropped and
// counted (counters()). The server answers each path of a
// channel on the address that path's datagrams came from: the driver numbers the sources of a
// channel in order of appearance (path 0 = the HELLO's source) up to the server's path count.
//
// Endpoint destruction closes every channel (CLOSE is sent once, best effort), fails pending
// operations with kUnavailable, and joins the progress thread.
//
// Inline progress (EndpointOptions::inline_progress): no thread. The first thread that calls
// listen, accept, connect or progress owns the endpoint (and its link: the udp ring accepts
// submissions from one thread); those calls run the event loop on it (pass_st: a round, a wait
// bounded by the caller's timeout, a round) and fail with kInvalidArgument on any other thread.
// Posts from the owner need no wake-up; posts from other threads wake its wait. The endpoint
// should be destroyed on the owner's thread, which then runs the shutdown.
//
// The event loop itself is in driver_datapath.h.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/clock.h"
#include "transport/crypto/crypto.h"
#include "transport/datagram/half_open.h"
#include "transport/datagram/link.h"
#include "transport/datagram/session.h"

namespace detwan::transport::datagram {

// Endpoint base for datagram backends; tests read the driver's counters through it.
class DatagramEndpointBase : public Endpoint {
 public:
  [[nodiscard]] virtual DriverCounters counters() const = 0;
};

// Channels queued for accept() beyond this are refused (their HELLO is dropped and counted).
inline constexpr size_t kMaxAcceptBacklog = 1024;
inline constexpr size_t kIpUdpHeaderBytes = 28;  // mtu_bytes - this = max_datagram_bytes()
// A locally closed channel keeps its connection at most this long to get its CLOSE out (pacing).
inline constexpr int64_t kCloseLingerNs = 100'000'000;

template <DatagramLink Link>
class DatagramEndpoint final : public DatagramEndpointBase {
 public:
  using Address = typename Link::Address;

  // `accepted`: the queue accepted channels go to; endpoints that share one (the udp backend's
  // lanes, transport/udp/lanes.h) serve one accept(). Default: a queue of this endpoint's own.
  // From `options`: accept_options, inline_progress, max_reassembly_bytes (`budget`: one that
  // endpoints sharing `accepted` share too; default: this endpoint's own) and security, the
  // endpoint's key and mode (transport/security.h): without a key a mode other than kNone
  // makes listen() and connect() fail with a message saying how to give one.
  DatagramEndpoint(std::unique_ptr<Link> link, std::string backend, const EndpointOptions& options,
                   std::shared_ptr<AcceptQueue> accepted = nullptr,
                   std::shared_ptr<proto::MemoryBudget> budget = nullptr)
      : link_(std::move(link)),
        backend_(std::move(backend)),
        accept_options_(options.accept_options),
        queue_(std::make_shared<PostQueue>([link = link_.get()] { link->wake(); })),
        accepted_(accepted ? std::move(accepted) : std::make_shared<AcceptQueue>()),
        budget_(budget ? std::move(budget)
                       : std::make_shared<proto::MemoryBudget>(static_cast<uint64_t>(
                             std::max<int64_t>(options.max_reassembly_bytes, 0)))),
        inline_(options.inline_progress) {
    auto keyring = proto::Keyring::create(options.security);
    if (keyring) {
      keyring_ = std::move(*keyring);
    } else {
      security_error_ = keyring.error();
      security_error_->message = backend_ + ": " + security_error_->message;
    }
    if (inline_) return;
    thread_ = std::thread([this] { run(); });
  }

  ~DatagramEndpoint() override {
    stop_.store(true, std::memory_order_release);
    if (inline_) {
      shutdown_st();
    } else {
      link_->wake();
      thread_.join();
    }
    accepted_->stop();
  }

  Result<size_t> progress(int64_t timeout_ns) override {
    if (!inline_) return Endpoint::progress(timeout_ns);
    if (auto owner = claim_owner(); !owner) return std::unexpected(owner.error());
    const int64_t end_ns = deadline_after(timeout_ns);
    while (true) {
      const size_t callbacks = pass_st(end_ns);
      if (callbacks > 0 || clock_.now_ns() >= end_ns) return callbacks;
    }
  }

  Result<std::string> listen(const std::string& address) override {
    if (security_error_) return std::unexpected(*security_error_);
    return run_task<std::string>([this, address]() -> Result<std::string> {
      if (listen_socket_) {
        return common::make_error(
            ErrorCode::kAlreadyExists,
            fmt::format("{}: already listening on {}", backend_, listen_name_));
      }
      auto opened = link_->open_listen(address);
      if (!opened) return std::unexpected(opened.error());
      listen_socket_ = opened->first;
      listen_name_ = opened->second;
      // What this side's HELLO_ACKs announce: exactly what its accepted channels will use.
      if (auto normalized = normalize_options(accept_options_, listen_name_)) {
        own_hello_.recv_window_bytes =
            static_cast<uint64_t>(proto::receive_window_bytes(*normalized));
        own_hello_.segment_bytes =
            static_cast<uint16_t>(proto::segment_payload_bytes(*normalized, keyring_->mode()));
      }
      listening_.store(true, std::memory_order_release);
      return listen_name_;
    });
  }

  Result<std::unique_ptr<Channel>> accept(int64_t timeout_ns) override {
    if (!listening_.load(std::memory_order_acquire)) {
      return common::make_error(ErrorCode::kInvalidArgument,
                                backend_ + ": accept() before a successful listen()");
    }
    if (!inline_) return accepted_->pop(timeout_ns);
    if (auto owner = claim_owner(); !owner) return std::unexpected(owner.error());
    const int64_t end_ns = deadline_after(timeout_ns);
    while (accepted_->size() == 0 && clock_.now_ns() < end_ns) (void)pass_st(end_ns);
    if (accepted_->size() == 0) {
      return common::make_error(
          ErrorCode::kTimeout,
          fmt::format("accept: no peer connected within {} ms", timeout_ns / 1'000'000));
    }
    return accepted_->pop(0);
  }

  Result<std::unique_ptr<Channel>> connect(const std::string& address,
                                           const ChannelOptions& options,
                                           int64_t timeout_ns) override {
    if (security_error_) return std::unexpected(*security_error_);
    auto normalized = normalize_options(options, address);
    if (!normalized) return std::unexpected(normalized.error());
    if (auto fits = check_mtu(*normalized); !fits) return std::unexpected(fits.error());
    auto shared = std::make_shared<ChannelShared>();
    auto established = std::make_shared<std::promise<Result<void>>>();
    auto future = established->get_future();
    auto opened = run_task<bool>([&, established]() -> Result<bool> {
      auto key = open_client_st(address, *normalized, shared);
      if (!key) return std::unexpected(key.error());
      conns_.at(*key).session.on_established = [established](Result<void> result) {
        established->set_value(std::move(result));
      };
      return true;
    });
    if (!opened) return std::unexpected(opened.error());
    auto channel = std::make_unique<ChannelHandle>(queue_, shared);
    if (inline_) {
      const int64_t end_ns = deadline_after(timeout_ns);
      while (future.wait_for(std::chrono::seconds(0)) != std::future_status::ready &&
             clock_.now_ns() < end_ns) {
        (void)pass_st(end_ns);
      }
    }
    if (future.wait_for(wait_duration(inline_ ? 0 : timeout_ns)) != std::future_status::ready) {
      return common::make_error(ErrorCode::kTimeout,
                                fmt::format("{}: connect to {}: no answer within {} ms", backend_,
                                            address, timeout_ns / 1'000'000));
    }
    Result<void> result = future.get();
    if (!result) return std::unexpected(result.error());
    return channel;
  }

  [[nodiscard]] std::string backend_name() const override { return backend_; }

  // kInvalidArgument when options.mtu_bytes needs datagrams larger than the link carries.
  Result<void> check_mtu(const ChannelOptions& options) const {
    const size_t max_bytes = link_->max_datagram_bytes();
    if (static_cast<size_t>(options.mtu_bytes) > max_bytes + kIpUdpHeaderBytes) {
      return common::make_error(
          ErrorCode::kInvalidArgument,
          fmt::format("channel options: mtu_bytes: {} exceeds the {} backend's limit of {}",
                      options.mtu_bytes, backend_, max_bytes + kIpUdpHeaderBytes));
    }
    return {};
  }

  [[nodiscard]] DriverCounters counters() const override {
    std::lock_guard lock(counters_mutex_);
    return counters_published_;
  }

 private:
  struct Path {
    SocketId socket = 0;
    Address remote{};
    bool known = false;
  };
  struct Conn {
    Session session;
    std::vector<Path> paths;
    bool server = false;
    bool close_sent = false;
    int64_t linger_deadline_ns = 0;
    uint64_t connection_id = 0;
  };

  // Inline progress: the calling thread owns the endpoint from its first call on; any other
  // thread gets kInvalidArgument.
  Result<void> claim_owner() {
    const std::thread::id self = std::this_thread::get_id();
    std::thread::id owner{};
    if (owner_.compare_exchange_strong(owner, self, std::memory_order_acq_rel)) {
      queue_->set_owner(self);        // its own posts need no wake-up
      common::set_min_timer_slack();  // timers as precise as the progress thread's
      return {};
    }
    if (owner == self) {
      if (!in_pass_) return {};
      return common::make_error(
          ErrorCode::kInvalidArgument,
          fmt::format("{}: listen, accept, connect and progress may not be called from a "
                      "completion callback of an inline endpoint (the loop is running)",
                      backend_));
    }
    return common::make_error(
        ErrorCode::kInvalidArgument,
        fmt::format("{}: this endpoint runs inline progress on the thread that first used it; "
                    "listen, accept, connect and progress must be called from that thread",
                    backend_));
  }

  int64_t deadline_after(int64_t timeout_ns) const {
    const int64_t now_ns = clock_.now_ns();
    return timeout_ns >= INT64_MAX - now_ns ? INT64_MAX : now_ns + std::max<int64_t>(timeout_ns, 0);
  }

  // Runs `task` on the progress thread and waits for its result (setup tier: may block). Inline:
  // runs it here, on the owner's thread.
  template <typename T>
  Result<T> run_task(std::function<Result<T>()> task) {
    if (inline_) {
      if (auto owner = claim_owner(); !owner) return std::unexpected(owner.error());
      if (stopped_) {
        return common::make_error(ErrorCode::kUnavailable, backend_ + ": endpoint stopped");
      }
      return task();
    }
    std::promise<Result<T>> promise;
    auto future = promise.get_future();
    Op op;
    op.kind = Op::Kind::kTask;
    op.task = [&promise, &task, this] {
      if (stop_.load(std::memory_order_acquire) || stopped_) {
        promise.set_value(
            common::make_error(ErrorCode::kUnavailable, backend_ + ": endpoint stopped"));
      } else {
        promise.set_value(task());
      }
    };
    if (!queue_->post(op)) {
      return common::make_error(ErrorCode::kUnavailable, backend_ + ": endpoint stopped");
    }
    return future.get();
  }

  Result<uint64_t> open_client_st(const std::string& address, const ChannelOptions& options,
                                  const std::shared_ptr<ChannelShared>& shared) {
    std::vector<Path> paths;
    for (const PathSpec& spec : options.paths) {
      auto opened = link_->open_path(spec, address);
      if (!opened) {
        for (const Path& path : paths) link_->close_socket(path.socket);
        return std::unexpected(opened.error());
      }
      paths.push_back(Path{opened->first, opened->second, true});
    }
    const uint64_t key = next_key_++;
    shared->key = key;
    shared->description =
        fmt::format("{} {} -> {}{}", backend_, link_->local_name(paths[0].socket),
                    link_->format(paths[0].remote),
                    paths.size() > 1 ? fmt::format(" ({} paths)", paths.size()) : "");
    proto::ConnectionConfig config;
    config.role = proto::Role::kClient;
    // From the CSPRNG, random in every bit, and never 0 in its low 32 bits (the short form's
    // id): the receiving endpoint's lanes steer by id mod N (transport/udp/lane_steering.h). An
    // id forced odd used only the odd lanes: with threads=2 every connection landed on lane 1.
    auto id = crypto::random_u64();
    while (id && static_cast<uint32_t>(*id) == 0) id = crypto::random_u64();
    if (!id) {
      for (const Path& path : paths) link_->close_socket(path.socket);
      return std::unexpected(id.error());
    }
    config.connection_id = *id;
    config.options = options;
    config.rx_pool = &shared->rx_pool;
    config.endpoint_budget = budget_.get();
    config.keyring = keyring_.get();
    auto [it, inserted] =
        conns_.emplace(key, Conn{Session(config, clock_.now_ns(), shared), std::move(paths), false,
                                 false, 0, config.connection_id});
    for (const Path& path : it->second.paths) socket_owner_[path.socket] = key;
    return key;
  }

  // `accepted`: an authenticated channel's handshake (nullptr: the plain protocol).
  void create_server_st(uint64_t connection_id, SocketId socket, const Address& source,
                        int64_t now_ns, const proto::AcceptedHandshake* accepted = nullptr) {
    if (accepted_->size() >= kMaxAcceptBacklog) {
      ++counters_.dropped_accept_backlog;
      return;
    }
    // DATA names a connection by the low 32 bits of its id: a second live connection with the
    // same low bits (odds 2^-32 per pair of random ids) is refused; its client times out.
    if (server_by_short_id_.count(static_cast<uint32_t>(connection_id)) != 0) {
      ++counters_.dropped_id_collision;
      return;
    }
    auto options = normalize_options(accept_options_, link_->format(source));
    if (!options || !check_mtu(*options)) {
      ++counters_.dropped_accept_backlog;  // accept_options invalid: nobody can be accepted
      return;
    }
    const uint64_t key = next_key_++;
    auto shared = std::make_shared<ChannelShared>();
    shared->key = key;
    shared->description = fmt::format("{} {} <- {}", backend_, listen_name_, link_->format(source));
    proto::ConnectionConfig config;
    config.role = proto::Role::kServer;
    config.connection_id = connection_id;
    config.options = *options;
    config.rx_pool = &shared->rx_pool;
    config.endpoint_budget = budget_.get();
    config.keyring = keyring_.get();
    config.accepted = accepted;
    std::vector<Path> paths(options->paths.size());
    paths[0] = Path{socket, source, true};
    conns_.emplace(key, Conn{Session(config, now_ns, shared), std::move(paths), true, false, 0,
                             connection_id});
    server_by_id_[connection_id] = key;
    server_by_short_id_[static_cast<uint32_t>(connection_id)] = key;
    ++counters_.connections_accepted;
    publish_counters_st();  // whoever accept()s the channel sees it counted
    accepted_->push(std::make_unique<ChannelHandle>(queue_, std::move(shared)));
  }

  // ---- the event loop (driver_datapath.h) ----

  void run();                             // the progress thread
  int64_t round_st();                     // posted calls, transmits, callbacks; next wakeup
  size_t pass_st(int64_t wait_until_ns);  // inline: one round, a bounded wait, one round
  void receive_st(int64_t deadline_ns);
  void apply_st(Op& op, int64_t now_ns);
  void close_conn_st(Conn& conn, int64_t now_ns);
  int64_t service_st(Conn& conn, int64_t now_ns);
  const Path& route_st(const Conn& conn, uint32_t path) const;
  bool finished_st(Conn& conn, int64_t now_ns);
  void release_sockets_st(Conn& conn);
  void on_datagram_st(SocketId socket, const Address& source, std::span<const std::byte> bytes,
                      int64_t now_ns);
  void on_listen_datagram_st(SocketId socket, const Address& source,
                             std::span<const std::byte> bytes, int64_t now_ns);
  // Authenticated channels' handshakes (driver_handshake.h).
  void on_hello_st(SocketId socket, const Address& source, std::span<const std::byte> bytes,
                   uint8_t version, uint64_t connection_id, int64_t now_ns);
  void on_half_open_st(const proto::PeekedId& id, std::span<const std::byte> bytes, int64_t now_ns);
  Answer<Address>* queue_answer_st(SocketId socket, const Address& destination);
  void send_answers_st();
  uint32_t learn_path_st(Conn& conn, SocketId socket, const Address& source);

  void publish_counters_st() {
    std::lock_guard lock(counters_mutex_);
    counters_published_ = counters_;
  }

  void shutdown_st() {
    const int64_t now_ns = clock_.now_ns();
    const Error error{ErrorCode::kUnavailable, backend_ + ": endpoint destroyed"};
    for (auto& [key, conn] : conns_) {
      close_conn_st(conn, now_ns);
      (void)service_st(conn, now_ns);  // best effort: one CLOSE per channel
    }
    link_->flush();
    for (auto& [key, conn] : conns_) conn.session.fail_st(error);
    std::vector<Op> ops;
    queue_->close(ops);
    stopped_ = true;
    for (Op& op : ops) fail_op(op, error);
    for (auto& [key, conn] : conns_) release_sockets_st(conn);
    conns_.clear();
    link_->shutdown();
  }

  std::unique_ptr<Link> link_;
  std::string backend_;
  ChannelOptions accept_options_;
  std::shared_ptr<PostQueue> queue_;
  std::shared_ptr<AcceptQueue> accepted_;
  std::shared_ptr<proto::MemoryBudget> budget_;  // outlives the connections (declared first)
  common::MonotonicClock clock_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> listening_{false};
  const bool inline_;
  std::atomic<std::thread::id> owner_{};  // inline progress: the thread that drives the loop
  std::thread thread_;

  // Progress thread only.
  static constexpr int kMaxChainedRounds = 8;
  static constexpr int64_t kMinTimerSleepNs = 100'000;
  int chained_rounds_ = 0;    // loop rounds in a row that skipped the link for posted calls
  size_t callbacks_run_ = 0;  // completion callbacks run since pass_st() began
  bool in_pass_ = false;      // inline: pass_st() is running (a callback may not re-enter)
  std::vector<Op> ops_;       // posted calls being applied (capacity reused)
  bool stopped_ = false;
  uint64_t next_key_ = 1;
  std::unique_ptr<proto::Keyring> keyring_;  // nullptr when security_error_ says why
  std::optional<Error> security_error_;
  HalfOpenTable<Address> half_open_;
  proto::wire::HelloBody own_hello_;  // what HELLO_ACKs announce (listen())
  std::array<Answer<Address>, kMaxAnswers> answers_{};
  size_t answer_count_ = 0;
  std::optional<SocketId> listen_socket_;
  std::string listen_name_;
  std::unordered_map<uint64_t, Conn> conns_;                   // by channel key
  std::unordered_map<SocketId, uint64_t> socket_owner_;        // client socket -> channel key
  std::unordered_map<uint64_t, uint64_t> server_by_id_;        // connection id -> channel key
  std::unordered_map<uint32_t, uint64_t> server_by_short_id_;  // its low 32 bits -> key
  DriverCounters counters_;

  mutable std::mutex counters_mutex_;
  DriverCounters counters_published_;
};

}  // namespace detwan::transport::datagram

#include "transport/datagram/driver_datapath.h"   // IWYU pragma: export
#include "transport/datagram/driver_handshake.h"  // IWYU pragma: export

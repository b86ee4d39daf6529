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
// Server side: the listen socket's datagrams are demultiplexed by connection id. An unknown id
// carried by a HELLO creates a Connection(Role::kServer, id) queued for accept(); any other
// unknown datagram is dropped and counted (counters()). The server answers each path of a
// channel on the address that path's datagrams came from: the driver numbers the sources of a
// channel in order of appearance (path 0 = the HELLO's source) up to the server's path count.
//
// Endpoint destruction closes every channel (CLOSE is sent once, best effort), fails pending
// operations with kUnavailable, and joins the progress thread.
#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <cstdint>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/clock.h"
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

  DatagramEndpoint(std::unique_ptr<Link> link, std::string backend, ChannelOptions accept_options)
      : link_(std::move(link)),
        backend_(std::move(backend)),
        accept_options_(std::move(accept_options)),
        queue_(std::make_shared<PostQueue>([link = link_.get()] { link->wake(); })),
        random_(std::random_device{}()) {
    thread_ = std::thread([this] { run(); });
    queue_->set_progress_thread(thread_.get_id());
  }

  ~DatagramEndpoint() override {
    stop_.store(true, std::memory_order_release);
    link_->wake();
    thread_.join();
    accepted_.stop();
  }

  Result<std::string> listen(const std::string& address) override {
    return run_task<std::string>([this, address]() -> Result<std::string> {
      if (listen_socket_) {
        return common::make_error(ErrorCode::kAlreadyExists,
                                  fmt::format("{}: already listening on {}", backend_, listen_name_));
      }
      auto opened = link_->open_listen(address);
      if (!opened) return std::unexpected(opened.error());
      listen_socket_ = opened->first;
      listen_name_ = opened->second;
      listening_.store(true, std::memory_order_release);
      return listen_name_;
    });
  }

  Result<std::unique_ptr<Channel>> accept(int64_t timeout_ns) override {
    if (!listening_.load(std::memory_order_acquire)) {
      return common::make_error(ErrorCode::kInvalidArgument,
                                backend_ + ": accept() before a successful listen()");
    }
    return accepted_.pop(timeout_ns);
  }

  Result<std::unique_ptr<Channel>> connect(const std::string& address,
                                           const ChannelOptions& options,
                                           int64_t timeout_ns) override {
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
    if (future.wait_for(wait_duration(timeout_ns)) != std::future_status::ready) {
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

  // Runs `task` on the progress thread and waits for its result (setup tier: may block).
  template <typename T>
  Result<T> run_task(std::function<Result<T>()> task) {
    std::promise<Result<T>> promise;
    auto future = promise.get_future();
    Op op;
    op.kind = Op::Kind::kTask;
    op.task = [&promise, &task, this] {
      if (stop_.load(std::memory_order_acquire) || stopped_) {
        promise.set_value(common::make_error(ErrorCode::kUnavailable, backend_ + ": endpoint stopped"));
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
    shared->description = fmt::format("{} {} -> {}{}", backend_, link_->local_name(paths[0].socket),
                                      link_->format(paths[0].remote),
                                      paths.size() > 1 ? fmt::format(" ({} paths)", paths.size()) : "");
    proto::ConnectionConfig config;
    config.role = proto::Role::kClient;
    config.connection_id = random_() | 1;  // never 0
    config.options = options;
    auto [it, inserted] = conns_.emplace(
        key, Conn{Session(config, clock_.now_ns(), shared), std::move(paths), false, false, 0,
                  config.connection_id});
    for (const Path& path : it->second.paths) socket_owner_[path.socket] = key;
    return key;
  }

  void create_server_st(uint64_t connection_id, SocketId socket, const Address& source,
                        int64_t now_ns) {
    if (accepted_.size() >= kMaxAcceptBacklog) {
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
    std::vector<Path> paths(options->paths.size());
    paths[0] = Path{socket, source, true};
    conns_.emplace(key, Conn{Session(config, now_ns, shared), std::move(paths), true, false, 0,
                             connection_id});
    server_by_id_[connection_id] = key;
    server_by_short_id_[static_cast<uint32_t>(connection_id)] = key;
    ++counters_.connections_accepted;
    accepted_.push(std::make_unique<ChannelHandle>(queue_, std::move(shared)));
  }

  // ---- the progress thread ----

  void run() {
    common::set_min_timer_slack();
    std::vector<Op> ops;
    while (!stop_.load(std::memory_order_acquire)) {
      queue_->drain(ops);
      int64_t now_ns = clock_.now_ns();
      for (Op& op : ops) apply_st(op, now_ns);
      ops.clear();
      now_ns = clock_.now_ns();
      int64_t deadline_ns = INT64_MAX;
      for (auto it = conns_.begin(); it != conns_.end();) {
        deadline_ns = std::min(deadline_ns, service_st(it->second, now_ns));
        if (finished_st(it->second, now_ns)) {
          it = erase_st(it);
        } else {
          ++it;
        }
      }
      publish_counters_st();
      // Calls posted by this loop's callbacks (a reply chained from a receive callback): apply
      // them at once instead of first polling the link, which would cost a syscall per hop of a
      // ping-pong. Bounded, so a chain of callbacks cannot starve received datagrams.
      if (!queue_->empty() && ++chained_rounds_ <= kMaxChainedRounds) continue;
      chained_rounds_ = 0;
      if (!queue_->empty()) {
        deadline_ns = 0;  // they did not write the wakeup
      } else if (deadline_ns > now_ns) {
        // Timers (pacing, delayed ACK, RTO) may run up to kMinTimerSleepNs late: a reserved
        // path's pacer catches up (proto::kPacerCatchUpNs), so one wake-up sends a few
        // datagrams instead of one. Received datagrams and posted calls still wake at once.
        deadline_ns = std::max(deadline_ns, now_ns + kMinTimerSleepNs);
      }
      // receive() first hands this round's sends to the network (DatagramLink), in the same
      // system call as the wait where the link allows it.
      link_->receive(deadline_ns, [this](SocketId socket, const Address& source,
                                         std::span<const std::byte> bytes) {
        on_datagram_st(socket, source, bytes, clock_.now_ns());
      });
    }
    shutdown_st();
  }

  void apply_st(Op& op, int64_t now_ns) {
    if (op.kind == Op::Kind::kTask) {
      op.task();
      return;
    }
    auto it = conns_.find(op.channel_key);
    if (it == conns_.end()) {
      fail_op(op, Error{ErrorCode::kUnavailable, backend_ + ": channel already closed"});
      return;
    }
    Session& session = it->second.session;
    switch (op.kind) {
      case Op::Kind::kSend: session.send_st(op.message, std::move(op.send_done)); break;
      case Op::Kind::kRecv: session.recv_st(std::move(op.recv_done)); break;
      case Op::Kind::kClose: close_conn_st(it->second, now_ns); break;
      case Op::Kind::kRelease:
        session.set_released();
        close_conn_st(it->second, now_ns);
        break;
      case Op::Kind::kTask: break;
    }
  }

  void close_conn_st(Conn& conn, int64_t now_ns) {
    if (conn.session.connection() == nullptr || conn.session.closing()) return;
    conn.session.close_st(now_ns);
    // The CLOSE goes out with the next transmit batch; give pacing a moment, not forever.
    conn.linger_deadline_ns = now_ns + kCloseLingerNs;
  }

  // Transmits what the connection has, runs its callbacks; returns its next wakeup.
  int64_t service_st(Conn& conn, int64_t now_ns) {
    proto::Connection* connection = conn.session.connection();
    if (connection == nullptr) return INT64_MAX;
    const size_t max_bytes = connection->max_datagram_bytes();
    while (true) {
      std::span<std::byte> buffer = link_->tx_buffer();
      if (buffer.size() < max_bytes) break;  // busy: the link wakes us when buffers return
      const proto::Transmit transmit = connection->poll_transmit(now_ns, buffer);
      if (transmit.size_bytes == 0) break;
      const Path& path = route_st(conn, transmit.path);
      (void)link_->send(path.socket, path.remote, transmit.size_bytes);  // the link counts drops
      if (conn.session.closing()) conn.close_sent = true;
    }
    const bool events = conn.session.process_events_st();
    conn.session.publish_stats_st(now_ns, events);
    connection = conn.session.connection();
    if (connection == nullptr) return INT64_MAX;
    if (conn.session.closing()) return conn.linger_deadline_ns;
    return connection->next_wakeup_ns();
  }

  // The path a transmit goes out on; a server path not learned yet falls back to path 0.
  const Path& route_st(const Conn& conn, uint32_t path) const {
    if (path < conn.paths.size() && conn.paths[path].known) return conn.paths[path];
    return conn.paths[0];
  }

  bool finished_st(Conn& conn, int64_t now_ns) {
    if (conn.session.connection() != nullptr && conn.session.closing() &&
        (conn.close_sent || now_ns >= conn.linger_deadline_ns)) {
      conn.session.fail_st(*conn.session.error());  // CLOSE is out: free the protocol state
    }
    if (conn.session.connection() == nullptr && !conn.paths.empty()) release_sockets_st(conn);
    return conn.session.connection() == nullptr && conn.session.released();
  }

  // Frees what the connection held in the link (client sockets, server demux entry); the
  // Session stays until the user's handle is gone, to answer later calls with the error.
  void release_sockets_st(Conn& conn) {
    if (conn.server) {
      auto it = server_by_id_.find(conn.connection_id);
      if (it != server_by_id_.end() && conns_.count(it->second) &&
          &conns_.at(it->second) == &conn) {
        server_by_short_id_.erase(static_cast<uint32_t>(conn.connection_id));
        server_by_id_.erase(it);
      }
    } else {
      for (const Path& path : conn.paths) {
        socket_owner_.erase(path.socket);
        link_->close_socket(path.socket);
      }
    }
    conn.paths.clear();
  }

  typename std::unordered_map<uint64_t, Conn>::iterator erase_st(
      typename std::unordered_map<uint64_t, Conn>::iterator it) {
    return conns_.erase(it);
  }

  void on_datagram_st(SocketId socket, const Address& source, std::span<const std::byte> bytes,
                      int64_t now_ns) {
    ++counters_.datagrams_received;
    if (listen_socket_ && socket == *listen_socket_) {
      on_listen_datagram_st(socket, source, bytes, now_ns);
      return;
    }
    auto owner = socket_owner_.find(socket);
    if (owner == socket_owner_.end()) return;  // socket closing; its datagrams are stale
    Conn& conn = conns_.at(owner->second);
    proto::Connection* connection = conn.session.connection();
    if (connection == nullptr) return;
    uint32_t path = 0;
    while (path < conn.paths.size() && conn.paths[path].socket != socket) ++path;
    (void)connection->on_datagram(path, bytes, now_ns);  // bad input is counted by the protocol
  }

  void on_listen_datagram_st(SocketId socket, const Address& source,
                             std::span<const std::byte> bytes, int64_t now_ns) {
    const std::optional<proto::PeekedId> id = proto::peek_connection_id(bytes);
    if (!id) {
      ++counters_.dropped_not_transport;
      return;
    }
    uint64_t key = 0;
    if (id->short_form) {  // DATA: the low 32 bits of the id
      auto found = server_by_short_id_.find(static_cast<uint32_t>(id->id));
      if (found == server_by_short_id_.end()) {
        ++counters_.dropped_unknown_connection;
        return;
      }
      key = found->second;
    } else {
      auto found = server_by_id_.find(id->id);
      if (found == server_by_id_.end()) {
        if (!proto::is_hello(bytes)) {
          ++counters_.dropped_unknown_connection;
          return;
        }
        create_server_st(id->id, socket, source, now_ns);
        found = server_by_id_.find(id->id);
        if (found == server_by_id_.end()) return;
      }
      key = found->second;
    }
    Conn& conn = conns_.at(key);
    proto::Connection* connection = conn.session.connection();
    if (connection == nullptr) return;
    (void)connection->on_datagram(learn_path_st(conn, socket, source), bytes, now_ns);
  }

  // Path index of a datagram from `source`: sources are numbered in order of appearance up to
  // the channel's path count; further sources share the last path.
  uint32_t learn_path_st(Conn& conn, SocketId socket, const Address& source) {
    uint32_t index = 0;
    for (; index < conn.paths.size() && conn.paths[index].known; ++index) {
      if (conn.paths[index].socket == socket && Link::same(conn.paths[index].remote, source)) {
        return index;
      }
    }
    if (index < conn.paths.size()) {
      conn.paths[index] = Path{socket, source, true};
      return index;
    }
    return static_cast<uint32_t>(conn.paths.size() - 1);
  }

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
    queue_->drain(ops);
    queue_->stop(ops);
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
  AcceptQueue accepted_;
  common::MonotonicClock clock_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> listening_{false};
  std::thread thread_;

  // Progress thread only.
  static constexpr int kMaxChainedRounds = 8;
  static constexpr int64_t kMinTimerSleepNs = 100'000;
  int chained_rounds_ = 0;  // loop rounds in a row that skipped the link for posted calls
  bool stopped_ = false;
  std::mt19937_64 random_;
  uint64_t next_key_ = 1;
  std::optional<SocketId> listen_socket_;
  std::string listen_name_;
  std::unordered_map<uint64_t, Conn> conns_;               // by channel key
  std::unordered_map<SocketId, uint64_t> socket_owner_;    // client socket -> channel key
  std::unordered_map<uint64_t, uint64_t> server_by_id_;    // connection id -> channel key
  std::unordered_map<uint32_t, uint64_t> server_by_short_id_;  // its low 32 bits -> key
  DriverCounters counters_;

  mutable std::mutex counters_mutex_;
  DriverCounters counters_published_;
};

}  // namespace detwan::transport::datagram

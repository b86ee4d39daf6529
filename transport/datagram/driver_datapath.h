#pragma once
// The datagram driver's event loop (driver.h declares the class): one round applies the posted
// API calls, drains every connection's transmits into the link and runs the callbacks of the
// events the connections emitted; then the link sends what was queued and waits for datagrams,
// a posted call or the earliest timer. The progress thread runs rounds forever (run()); an
// inline endpoint runs them inside Endpoint::progress() on its owner's thread (pass_st()).
// Hot path: no exceptions, no allocation per datagram (the maps change only when channels come
// and go).
#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>

#include "transport/datagram/driver.h"

namespace detwan::transport::datagram {

template <DatagramLink Link>
void DatagramEndpoint<Link>::run() {
  queue_->set_owner(std::this_thread::get_id());  // its own posts need no wake-up
  common::set_min_timer_slack();
  while (!stop_.load(std::memory_order_acquire)) {
    int64_t deadline_ns = round_st();
    // Calls posted by this round's callbacks (a reply chained from a receive callback): apply
    // them at once instead of first polling the link, which would cost a syscall per hop of a
    // ping-pong. Bounded, so a chain of callbacks cannot starve received datagrams.
    if (queue_->pending() && ++chained_rounds_ <= kMaxChainedRounds) continue;
    chained_rounds_ = 0;
    const int64_t now_ns = clock_.now_ns();
    if (queue_->pending()) {
      deadline_ns = 0;  // they did not write the wakeup
    } else if (deadline_ns > now_ns) {
      // Timers (pacing, delayed ACK, RTO) may run up to kMinTimerSleepNs late: a reserved
      // path's pacer catches up (proto::kPacerCatchUpNs), so one wake-up sends a few
      // datagrams instead of one. Received datagrams and posted calls still wake at once.
      deadline_ns = std::max(deadline_ns, now_ns + kMinTimerSleepNs);
    }
    receive_st(deadline_ns);
  }
  shutdown_st();
}

template <DatagramLink Link>
int64_t DatagramEndpoint<Link>::round_st() {
  queue_->drain_st(ops_);
  int64_t now_ns = clock_.now_ns();
  for (Op& op : ops_) apply_st(op, now_ns);
  ops_.clear();
  send_answers_st();
  now_ns = clock_.now_ns();
  int64_t deadline_ns = INT64_MAX;
  uint64_t reassembly_bytes = 0;
  for (auto it = conns_.begin(); it != conns_.end();) {
    deadline_ns = std::min(deadline_ns, service_st(it->second, now_ns));
    callbacks_run_ += it->second.session.take_callbacks_run();
    if (const proto::Connection* c = it->second.session.connection()) {
      reassembly_bytes += c->reassembly_bytes();
    }
    if (finished_st(it->second, now_ns)) {
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
  counters_.reassembly_bytes = reassembly_bytes;
  counters_.half_open = half_open_.size();
  publish_counters_st();
  return deadline_ns;
}

// Inline progress: a round; if it ran no callback and nothing more was posted, the link sends
// what the round queued and waits for datagrams until the earliest timer or `wait_until_ns`,
// and a second round handles what arrived. What that round queued goes out before returning,
// so nothing waits in the link while the owner does other work. Returns the callbacks run.
template <DatagramLink Link>
size_t DatagramEndpoint<Link>::pass_st(int64_t wait_until_ns) {
  callbacks_run_ = 0;
  in_pass_ = true;
  int64_t deadline_ns = round_st();
  if (callbacks_run_ == 0 && !queue_->pending()) {
    const int64_t now_ns = clock_.now_ns();
    if (deadline_ns > now_ns) deadline_ns = std::max(deadline_ns, now_ns + kMinTimerSleepNs);
    receive_st(std::min(deadline_ns, wait_until_ns));
    (void)round_st();
  }
  link_->flush();
  in_pass_ = false;
  return std::exchange(callbacks_run_, 0);
}

template <DatagramLink Link>
void DatagramEndpoint<Link>::receive_st(int64_t deadline_ns) {
  // receive() first hands this round's sends to the network (DatagramLink), in the same system
  // call as the wait where the link allows it.
  link_->receive(deadline_ns,
                 [this](SocketId socket, const Address& source, std::span<const std::byte> bytes) {
                   on_datagram_st(socket, source, bytes, clock_.now_ns());
                 });
}

template <DatagramLink Link>
void DatagramEndpoint<Link>::apply_st(Op& op, int64_t now_ns) {
  if (op.kind == Op::Kind::kTask) {
    op.task();
    return;
  }
  auto it = conns_.find(op.channel_key);
  if (it == conns_.end()) {
    if (op.send_done || op.recv_done) ++callbacks_run_;
    fail_op(op, Error{ErrorCode::kUnavailable, backend_ + ": channel already closed"});
    return;
  }
  Conn& conn = it->second;
  Session& session = conn.session;
  switch (op.kind) {
    case Op::Kind::kSend:
      session.send_st(op.message, std::move(op.send_done));
      break;
    case Op::Kind::kRecv:
      session.recv_st(std::move(op.recv_done));
      break;
    case Op::Kind::kClose:
      close_conn_st(conn, now_ns);
      break;
    case Op::Kind::kRelease:
      session.set_released();
      close_conn_st(conn, now_ns);
      break;
    case Op::Kind::kPace:
      if (proto::Connection* connection = session.connection();
          connection != nullptr && conn.paths.size() == 1) {
        if (op.join_group) {
          (void)connection->set_pacing_group(0, std::move(op.pacing_group));
        } else {
          (void)connection->set_reserved_rate(0, op.rate_bps, op.max_burst_bytes);
        }
      }
      break;
    case Op::Kind::kTask:
      break;
  }
}

template <DatagramLink Link>
void DatagramEndpoint<Link>::close_conn_st(Conn& conn, int64_t now_ns) {
  if (conn.session.connection() == nullptr || conn.session.closing()) return;
  conn.session.close_st(now_ns);
  // The CLOSE goes out with the next transmit batch; give pacing a moment, not forever.
  conn.linger_deadline_ns = now_ns + kCloseLingerNs;
}

// Transmits what the connection has, runs its callbacks; returns its next wakeup.
template <DatagramLink Link>
int64_t DatagramEndpoint<Link>::service_st(Conn& conn, int64_t now_ns) {
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
template <DatagramLink Link>
auto DatagramEndpoint<Link>::route_st(const Conn& conn, uint32_t path) const -> const Path& {
  if (path < conn.paths.size() && conn.paths[path].known) return conn.paths[path];
  return conn.paths[0];
}

template <DatagramLink Link>
bool DatagramEndpoint<Link>::finished_st(Conn& conn, int64_t now_ns) {
  if (conn.session.connection() != nullptr && conn.session.closing() &&
      (conn.close_sent || now_ns >= conn.linger_deadline_ns)) {
    conn.session.fail_st(*conn.session.error());  // CLOSE is out: free the protocol state
  }
  if (conn.session.connection() == nullptr && !conn.paths.empty()) release_sockets_st(conn);
  return conn.session.connection() == nullptr && conn.session.released();
}

// Frees what the connection held in the link (client sockets, server demux entry); the
// Session stays until the user's handle is gone, to answer later calls with the error.
template <DatagramLink Link>
void DatagramEndpoint<Link>::release_sockets_st(Conn& conn) {
  if (conn.server) {
    auto it = server_by_id_.find(conn.connection_id);
    if (it != server_by_id_.end() && conns_.count(it->second) && &conns_.at(it->second) == &conn) {
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

template <DatagramLink Link>
void DatagramEndpoint<Link>::on_datagram_st(SocketId socket, const Address& source,
                                            std::span<const std::byte> bytes, int64_t now_ns) {
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

template <DatagramLink Link>
void DatagramEndpoint<Link>::on_listen_datagram_st(SocketId socket, const Address& source,
                                                   std::span<const std::byte> bytes,
                                                   int64_t now_ns) {
  const std::optional<proto::PeekedId> id = proto::peek_connection_id(bytes);
  if (!id) {
    ++counters_.dropped_not_transport;
    return;
  }
  uint64_t key = 0;
  // The channel's key; 0 if none (yet).
  auto lookup = [&]() -> uint64_t {
    if (id->short_form) {  // DATA: the low 32 bits of the id
      auto found = server_by_short_id_.find(static_cast<uint32_t>(id->id));
      return found == server_by_short_id_.end() ? 0 : found->second;
    }
    auto found = server_by_id_.find(id->id);
    return found == server_by_id_.end() ? 0 : found->second;
  };
  key = lookup();
  if (key == 0) {
    uint8_t version = 0;
    if (!id->short_form && proto::is_hello(bytes, &version)) {
      on_hello_st(socket, source, bytes, version, id->id, now_ns);  // plain: creates the channel
    } else if (keyring_->sealed()) {
      on_half_open_st(*id, bytes, now_ns);  // creates the channel when the datagram opens
    } else {
      ++counters_.dropped_unknown_connection;
    }
    key = lookup();
    if (key == 0) return;
  }
  Conn& conn = conns_.at(key);
  proto::Connection* connection = conn.session.connection();
  if (connection == nullptr) return;
  (void)connection->on_datagram(learn_path_st(conn, socket, source), bytes, now_ns);
}

// Path index of a datagram from `source`: sources are numbered in order of appearance up to
// the channel's path count; further sources share the last path.
template <DatagramLink Link>
uint32_t DatagramEndpoint<Link>::learn_path_st(Conn& conn, SocketId socket, const Address& source) {
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

}  // namespace detwan::transport::datagram

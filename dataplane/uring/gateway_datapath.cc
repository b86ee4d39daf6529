// The io_uring backend's loop: completions in, engine polled, sends out, wait for the next event.
// Per packet: no allocation, no exception, no logging; every failure is counted in the engine's
// PortIo / LocalIo.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include <poll.h>
#include <unistd.h>

#include "dataplane/gw/control_server.h"
#include "dataplane/gw/engine.h"
#include "dataplane/uring/datapath.h"

namespace detwan::dataplane::uring {

bool Datapath::submit_receive(uint32_t source_id, uint32_t buffer) noexcept {
  Source& source = sources_[source_id];
  if (source.large) return submit_large_receive(source_id, buffer);
  io_uring_sqe* sqe = get_sqe();
  if (sqe == nullptr) return false;
  if (source.kind == SourceKind::kWan) {
    pool_.info(buffer).offset = 0;  // header + payload; decapsulation moves the offset
    prep_recv(sqe, *source.socket, pool_.slot(buffer), pool_.whole(buffer));
  } else {
    pool_.info(buffer).offset = kHeadroomBytes;
    const std::span<std::byte> payload = pool_.whole(buffer).subspan(kHeadroomBytes);
    if (source.kind == SourceKind::kService) {
      prep_recv(sqe, *source.socket, pool_.slot(buffer), payload);
    } else {
      io_uring_prep_read(sqe, source.fd, payload.data(), static_cast<unsigned>(payload.size()), 0);
    }
  }
  io_uring_sqe_set_data64(sqe, pack(Op::kReceive, source_id, buffer));
  return true;
}

void Datapath::arm(uint32_t source_id) noexcept {
  Source& source = sources_[source_id];
  if (source.large) {
    arm_large(source_id);
    return;
  }
  while (source.armed < source.depth) {
    const uint32_t buffer = pool_.alloc();
    if (buffer == kNoBuffer) {
      if (source.kind == SourceKind::kWan) ++engine_.port_io(source.index).no_buffer;
      starved_ = true;
      return;
    }
    if (!submit_receive(source_id, buffer)) {
      pool_.release(buffer);
      starved_ = true;
      return;
    }
    ++source.armed;
  }
}

void Datapath::arm_starved() noexcept {
  if (!starved_ || pool_.available() == 0) return;
  starved_ = false;
  for (uint32_t i = 0; i < sources_.size(); ++i) arm(i);
}

void Datapath::arm_control() noexcept {
  for (uint32_t i = 0; i < 2; ++i) {
    // While a client is connected the loop polls the server every millisecond anyway; watching
    // the listening socket then would only spin on a backlog the server is not accepting yet.
    gw::ControlServer* server = controls_[i];
    if (server == nullptr || control_armed_[i] || server->has_connections()) continue;
    io_uring_sqe* sqe = get_sqe();
    if (sqe == nullptr) return;  // the periodic poll still serves it
    io_uring_prep_poll_add(sqe, server->fd(), POLLIN);
    io_uring_sqe_set_data64(sqe, pack(Op::kControlReady, i, 0));
    control_armed_[i] = true;
  }
}

void Datapath::reap(int64_t now_ns) noexcept {
  io_uring_cqe* cqes[kCqeBatch];
  unsigned handled = 0;
  while (handled < kMaxCqesPerTurn) {
    const unsigned count = io_uring_peek_batch_cqe(ring_, cqes, kCqeBatch);
    if (count == 0) return;
    for (unsigned i = 0; i < count; ++i) {
      on_completion(io_uring_cqe_get_data64(cqes[i]), cqes[i]->res, now_ns);
    }
    io_uring_cq_advance(ring_, count);
    handled += count;
  }
}

void Datapath::on_completion(uint64_t data, int32_t result, int64_t now_ns) noexcept {
  const Op op = op_of(data);
  const uint32_t object = object_of(data);
  const uint32_t buffer = buffer_of(data);
  switch (op) {
    case Op::kReceive:
      if (sources_[object].large && sources_[object].kind == SourceKind::kTun) {
        on_tun_read(object, buffer, result, now_ns);
      } else if (sources_[object].large) {
        on_gro_receive(object, buffer, result, now_ns);
      } else {
        on_receive(object, buffer, result, now_ns);
      }
      return;
    case Op::kReadiness:
      if (sources_[object].large) {
        if (result == -ECANCELED || !submit_large_receive(object, buffer)) {
          state_.large_receives[buffer].in_flight = false;
          --sources_[object].armed;
          starved_ = true;
        }
        return;
      }
      // Readable now (or the poll failed): receive again into the same buffer.
      if (result == -ECANCELED || !submit_receive(object, buffer)) {
        pool_.release(buffer);
        --sources_[object].armed;
        starved_ = true;
      }
      return;
    case Op::kWanSend:
    case Op::kTunWrite:
    case Op::kServiceSend:
      on_send(op, object, buffer, result);
      return;
    case Op::kControlReady:
      if (object < 2) control_armed_[object] = false;
      control_ready_ = true;
      return;
    case Op::kWanGsoSend:
      on_gso_send(object, buffer, result);
      return;
    case Op::kTunRunWrite:
      on_tun_run_write(buffer, result);
      return;
    case Op::kWake:
      on_wake();
      return;
  }
}

void Datapath::count_receive_error(const Source& source) noexcept {
  switch (source.kind) {
    case SourceKind::kWan:
      ++engine_.port_io(source.index).rx_errors;
      return;
    case SourceKind::kTun:
      ++engine_.local_io().tun_rx_errors;
      return;
    case SourceKind::kService:
      ++engine_.local_io().service_rx_errors;
      return;
  }
}

void Datapath::on_receive(uint32_t source_id, uint32_t buffer, int32_t result,
                          int64_t now_ns) noexcept {
  Source& source = sources_[source_id];
  if (result == -EAGAIN || result == -EINTR) {
    // A non-blocking file the kernel would not wait on: wait for readiness, then read again.
    io_uring_sqe* sqe = get_sqe();
    if (sqe != nullptr) {
      io_uring_prep_poll_add(sqe, source.fd, POLLIN);
      io_uring_sqe_set_data64(sqe, pack(Op::kReadiness, source_id, buffer));
      return;
    }
  }
  if (result == -ECANCELED || result == -EAGAIN || result == -EINTR) {
    pool_.release(buffer);
    --source.armed;
    starved_ = true;
    return;
  }
  common::Status status = common::Status::kDropped;
  if (result < 0) {
    count_receive_error(source);
  } else {
    const auto length = static_cast<uint32_t>(result);
    BufferInfo& info = pool_.info(buffer);
    switch (source.kind) {
      case SourceKind::kWan:
        status = wan_datagram(source.index, pool_.slot(buffer).address, buffer, length, now_ns);
        break;
      case SourceKind::kTun:
        status = tun_packet(buffer, length, now_ns);
        break;
      case SourceKind::kService: {
        ++engine_.local_io().service_rx_packets;
        // A datagram larger than the buffer is larger than every port's max payload: the
        // engine drops it (too_big) on its real length, and never reads past the buffer.
        info.length = std::min(length, pool_.payload_capacity_bytes());
        info.type = wire::DataType::kDatagram;
        gw::SubmitInfo submit;
        status = engine_.submit_service_st(source.index, buffer, length, now_ns, &submit);
        if (submit.wants_replica()) submit_replica(submit, buffer, info.length, now_ns);
        break;
      }
    }
  }
  if (status == common::Status::kOk) {
    --source.armed;  // the engine holds this buffer now
    arm(source_id);
    return;
  }
  if (!submit_receive(source_id, buffer)) {  // reuse the buffer for the next receive
    pool_.release(buffer);
    --source.armed;
    starved_ = true;
  }
}

common::Status Datapath::tun_packet(uint32_t buffer, uint32_t length, int64_t now_ns) noexcept {
  ++engine_.local_io().tun_rx_packets;
  if (group_ != nullptr && dispatch_tun_st(buffer, length)) return common::Status::kDropped;
  return submit_tun(buffer, length, now_ns);
}

common::Status Datapath::submit_tun(uint32_t buffer, uint32_t length, int64_t now_ns) noexcept {
  BufferInfo& info = pool_.info(buffer);
  info.length = length;
  const auto version = length > 0 ? std::to_integer<uint8_t>(pool_.payload(buffer)[0]) >> 4 : 0;
  info.type = version == 6 ? wire::DataType::kIpv6 : wire::DataType::kIpv4;
  gw::SubmitInfo submit;
  const common::Status status =
      engine_.submit_tun_st(buffer, {pool_.payload(buffer), length}, now_ns, &submit);
  if (submit.wants_replica()) submit_replica(submit, buffer, length, now_ns);
  return status;
}

common::Status Datapath::wan_datagram(uint32_t port, const sockaddr_storage& from, uint32_t buffer,
                                      uint32_t length, int64_t now_ns) noexcept {
  if (group_ != nullptr && dispatch_wan_st(port, from, buffer, length)) {
    return common::Status::kDropped;  // a copy went to the owner: this buffer is free again
  }
  return owned_wan_datagram(port, from_sockaddr(from), buffer, length, now_ns);
}

common::Status Datapath::owned_wan_datagram(uint32_t port, const gw::Endpoint& from,
                                            uint32_t buffer, uint32_t length,
                                            int64_t now_ns) noexcept {
  gw::PortIo& io = engine_.port_io(port);
  if (length > pool_.whole(buffer).size()) {
    ++io.rx_errors;  // truncated: larger than any port's MTU allows
    return common::Status::kDropped;
  }
  ++io.rx_packets;
  io.rx_bytes += length;
  gw::RxInfo rx;
  const common::Status status = engine_.on_wan_datagram_st(
      port, from, buffer, pool_.whole(buffer).first(length), now_ns, &rx);
  if (status == common::Status::kOk) {
    BufferInfo& info = pool_.info(buffer);
    info.offset = rx.payload_offset;
    info.length = rx.payload_bytes;
    info.type = rx.type;
  }
  return status;
}

void Datapath::submit_replica(const gw::SubmitInfo& submit, uint32_t buffer, uint32_t length,
                              int64_t now_ns) noexcept {
  const uint32_t copy = pool_.alloc();
  if (copy == kNoBuffer) {
    engine_.replica_not_made_st(submit);
    return;
  }
  pool_.info(copy) = pool_.info(buffer);
  std::memcpy(pool_.payload(copy), pool_.payload(buffer), length);
  if (engine_.submit_replica_st(submit, copy, length, now_ns) != common::Status::kOk) {
    pool_.release(copy);  // refused (counted by the engine)
  }
}

void Datapath::on_send(Op op, uint32_t object, uint32_t buffer, int32_t result) noexcept {
  const bool ok = result >= 0;
  switch (op) {
    case Op::kWanSend: {
      gw::PortIo& io = engine_.port_io(object);
      if (ok) {
        ++io.tx_packets;
        io.tx_bytes += static_cast<uint64_t>(result);
      } else {
        ++io.tx_errors;
      }
      break;
    }
    case Op::kTunWrite:
      ++(ok && static_cast<uint32_t>(result) == pool_.info(buffer).length + tun_header_bytes_
             ? engine_.local_io().tun_tx_packets
             : engine_.local_io().tun_tx_errors);
      break;
    default:
      ++(ok ? engine_.local_io().service_tx_packets : engine_.local_io().service_tx_errors);
      break;
  }
  pool_.release(buffer);
}

void Datapath::transmit_control(const gw::TxEmit& emit) noexcept {
  gw::PortIo& io = engine_.port_io(emit.port_index);
  const UdpSocket& socket = state_.wan[emit.port_index];
  const uint32_t buffer = pool_.alloc();
  if (buffer == kNoBuffer || emit.bytes.size() > pool_.whole(buffer).size() ||
      !reaches(socket, *emit.destination)) {
    ++io.tx_errors;  // the control packet is lost; the exchange repeats it
    if (buffer != kNoBuffer) pool_.release(buffer);
    return;
  }
  std::copy(emit.bytes.begin(), emit.bytes.end(), pool_.data(buffer));
  flush_wan_batch();  // frames leave in the order the engine emitted them
  send_wan(emit.port_index, buffer, {pool_.data(buffer), emit.bytes.size()}, *emit.destination,
           emit.dscp);
}

void Datapath::transmit(const gw::TxEmit& emit) noexcept {
  if (emit.port_index >= state_.wan.size() || emit.destination == nullptr) {
    if (!emit.control && pool_.valid(emit.handle))
      pool_.release(static_cast<uint32_t>(emit.handle));
    return;  // the engine named no usable port or peer: nothing to send on
  }
  if (emit.control) {
    transmit_control(emit);
    return;
  }
  if (!pool_.valid(emit.handle)) return;
  const auto buffer = static_cast<uint32_t>(emit.handle);
  if (!emit.send) {  // missed its slot: counted by the engine
    pool_.release(buffer);
    return;
  }
  const BufferInfo& info = pool_.info(buffer);
  if (info.offset < kHeadroomBytes || !reaches(state_.wan[emit.port_index], *emit.destination)) {
    ++engine_.port_io(emit.port_index).tx_errors;
    pool_.release(buffer);
    return;
  }
  // Header in the headroom; on an authenticated tunnel the payload is sealed in place and the
  // tag goes after it (the engine admitted only payloads that leave room for it).
  const std::span<std::byte> frame = pool_.whole(buffer).subspan(info.offset - kHeadroomBytes);
  const std::size_t size = engine_.encode_frame_st(emit, info.type, frame, info.length);
  if (size == 0) {
    ++engine_.port_io(emit.port_index).tx_errors;
    pool_.release(buffer);
    return;
  }
  queue_wan(emit.port_index, buffer, frame.first(size), *emit.destination, emit.dscp);
}

void Datapath::send_wan(uint32_t port, uint32_t buffer, std::span<const std::byte> bytes,
                        const gw::Endpoint& destination, uint8_t dscp) noexcept {
  io_uring_sqe* sqe = get_sqe();
  if (sqe == nullptr) {
    ++engine_.port_io(port).tx_errors;
    pool_.release(buffer);
    return;
  }
  // Cannot fail: the caller checked reaches().
  (void)prep_send(sqe, state_.wan[port], pool_.slot(buffer), bytes, destination, dscp);
  io_uring_sqe_set_data64(sqe, pack(Op::kWanSend, port, buffer));
}

void Datapath::deliver(const gw::RxEmit& emit) noexcept {
  if (!pool_.valid(emit.handle)) return;
  const auto buffer = static_cast<uint32_t>(emit.handle);
  const BufferInfo& info = pool_.info(buffer);
  gw::LocalIo& io = engine_.local_io();
  io_uring_sqe* sqe = nullptr;
  if (info.type == wire::DataType::kDatagram) {
    const ServiceSockets* sockets =
        emit.tunnel_index < services_.size() ? services_[emit.tunnel_index] : nullptr;
    const UdpSocket* socket = sockets != nullptr ? sockets->deliver_socket() : nullptr;
    if (socket == nullptr || emit.service_deliver == nullptr ||
        !reaches(*socket, *emit.service_deliver) || (sqe = get_sqe()) == nullptr) {
      ++io.service_tx_errors;
      pool_.release(buffer);
      return;
    }
    (void)prep_send(sqe, *socket, pool_.slot(buffer), {pool_.payload(buffer), info.length},
                    *emit.service_deliver, -1);
    io_uring_sqe_set_data64(sqe, pack(Op::kServiceSend, 0, buffer));
    return;
  }
  // TUN writes are synchronous: the TUN file does not support io_uring's non-blocking path, so
  // a queued write would be punted to an io-wq worker thread, which adds a wake-up delay to the
  // on-time release and lets concurrent workers reorder packets. A TUN write never blocks (the
  // kernel queues or drops the packet), so doing it here keeps release time and order exact.
  queue_tun(buffer);
}

template <typename Timing>
void Datapath::loop(Timing& timing) {
  for (uint32_t i = 0; i < sources_.size(); ++i) arm(i);
  arm_control();
  arm_wake();
  const bool has_control = controls_[0] != nullptr || controls_[1] != nullptr;
  int64_t next_control_ns = timing.now_ns();
  auto transmit_sink = [this](const gw::TxEmit& emit) { transmit(emit); };
  auto deliver_sink = [this](const gw::RxEmit& emit) { deliver(emit); };

  while (!context_.stop.load(std::memory_order_relaxed)) {
    if (group_ != nullptr && wait_if_paused_st()) continue;  // shard 0 answered a request
    // Frames already due leave before new ones are submitted: after a stall of the thread the
    // schedulers' wheels move up to now first, so a new departure is never beyond their horizon.
    const int64_t reap_ns = timing.now_ns();
    engine_.poll_tx_st(reap_ns, transmit_sink);
    flush_wan_batch();
    reap(reap_ns);
    const int64_t now_ns = timing.now_ns();
    if (group_ != nullptr) shard_turn_st(now_ns);
    engine_.poll_control_st(now_ns);
    engine_.poll_rx_st(now_ns, deliver_sink);
    flush_tun_run();
    engine_.poll_tx_st(now_ns, transmit_sink);
    flush_wan_batch();
    if (has_control && (control_ready_ || now_ns >= next_control_ns)) {
      bool connected = false;
      for (gw::ControlServer* server : controls_) {
        if (server == nullptr) continue;
        serve_control_st(*server, now_ns);  // a write may change the tunnels here
        connected = connected || server->has_connections();
      }
      control_ready_ = false;
      arm_control();
      next_control_ns = now_ns + (connected ? kControlBusyPeriodNs : kControlPeriodNs);
    } else if (!has_control && now_ns >= next_control_ns) {
      next_control_ns = now_ns + kControlPeriodNs;  // bounds the wait: the stop flag is seen
    }
    arm_starved();
    int64_t deadline_ns = std::min(engine_.next_event_ns(), next_control_ns);
    if (starved_) deadline_ns = std::min(deadline_ns, now_ns + kStarvedRetryNs);
    if (group_ != nullptr && end_turn_st()) deadline_ns = now_ns;  // rings still hold packets
    // An on-time tunnel's packets are stamped when read from the TUN device: no coalescing of
    // arrivals while one is carried (timing.h).
    timing.wait(ring_, deadline_ns, !engine_.carries_on_time(), engine_.local_io());
  }
}

template void Datapath::loop<LowCpuTiming>(LowCpuTiming&);
template void Datapath::loop<BusyTiming>(BusyTiming&);

}  // namespace detwan::dataplane::uring

// Per-packet work of the engine: classify and queue local packets, emit due frames with their
// tunnel header, check and decapsulate WAN datagrams, release them on time. No allocation, no
// exceptions, no logging: every outcome is a Status plus a counter.
#include <algorithm>
#include <cstdint>

#include "dataplane/gw/classify.h"
#include "dataplane/gw/engine.h"
#include "dataplane/gw/engine_impl.h"
#include "dataplane/wire/byte_order.h"

namespace detwan::dataplane::gw {

using common::Status;

namespace {

// A protected tunnel's packet gets its sequence number now, so that both copies carry it; the
// scheduler hands it back with the frame (tag = sequence + 1; 0 = give one at departure). Fills
// *info with what the backend needs to make the copy.
uint64_t fix_sequence(TunnelState& tunnel, uint32_t index, bool best_effort,
                      SubmitInfo* info) noexcept {
  if (!tunnel.protected_path()) return 0;
  const uint64_t sequence = tunnel.next_sequence++;
  if (info == nullptr) {
    ++tunnel.counters.replicas_not_made;
  } else {
    *info = SubmitInfo{index, sequence, best_effort};
  }
  return sequence + 1;
}

}  // namespace

Status Engine::submit_tun_st(uint64_t handle, std::span<const std::byte> ip_packet, int64_t now_ns,
                             SubmitInfo* info) noexcept {
  Impl& m = *impl_;
  if (info != nullptr) *info = SubmitInfo{};
  if ((handle & kControlHandleTag) != 0) return Status::kInvalidArgument;
  IpInfo ip;
  if (!parse_ip(ip_packet, &ip)) {
    m.count(EngineDrop::kNotIp);
    return Status::kMalformed;
  }
  const Route route = m.classifier.classify(ip);
  if (route.kind == RouteKind::kNoRoute) {
    m.count(EngineDrop::kNoRoute);
    return Status::kDropped;
  }
  TunnelState& tunnel = m.tunnels[route.tunnel_index];
  const bool foreign = route.kind == RouteKind::kForeignSource;
  if (foreign && m.tunnel_config(tunnel).foreign_source == ForeignSource::kDrop) {
    ++tunnel.counters.foreign_source_dropped_packets;
    m.count(EngineDrop::kForeignSource);
    return Status::kDropped;
  }
  PortState& port = m.ports[tunnel.port];
  if (!m.can_seal(tunnel)) return Status::kDropped;  // counted
  if (ip_packet.size() + tunnel.trailer_bytes() > port.max_payload_bytes) {
    m.count(EngineDrop::kTooBig);
    return Status::kDropped;
  }
  const auto bytes =
      static_cast<uint32_t>(ip_packet.size()) + port.frame_overhead_bytes + tunnel.trailer_bytes();
  const bool best_effort = route.kind != RouteKind::kTunnel;
  const uint64_t tag = fix_sequence(tunnel, route.tunnel_index, best_effort, info);
  if (!best_effort) return port.scheduler.enqueue(tunnel.id, handle, bytes, now_ns, tag);
  if (foreign) {
    ++tunnel.counters.foreign_source_best_effort_packets;
  } else {
    ++tunnel.counters.best_effort_offered_packets;
    tunnel.counters.best_effort_offered_bytes += ip_packet.size();
  }
  return port.scheduler.enqueue_best_effort(handle, bytes, now_ns, tunnel.id, tag);
}

uint32_t Engine::route_st(std::span<const std::byte> ip_packet) const noexcept {
  IpInfo ip;
  if (!parse_ip(ip_packet, &ip)) return kNoTunnel;
  const Route route = impl_->classifier.classify(ip);
  return route.kind == RouteKind::kNoRoute ? kNoTunnel : route.tunnel_index;
}

uint32_t Engine::peek_tunnel_id(std::span<const std::byte> udp_payload) noexcept {
  if (udp_payload.size() < wire::kTunnelIdOffset + 4) return 0;
  return wire::load_be32(udp_payload.data() + wire::kTunnelIdOffset);
}

Status Engine::submit_service_st(uint32_t tunnel_index, uint64_t handle, uint32_t payload_bytes,
                                 int64_t now_ns, SubmitInfo* info) noexcept {
  Impl& m = *impl_;
  if (info != nullptr) *info = SubmitInfo{};
  if ((handle & kControlHandleTag) != 0 || tunnel_index >= m.tunnels.size()) {
    return Status::kInvalidArgument;
  }
  TunnelState& tunnel = m.tunnels[tunnel_index];
  if (!tunnel.active) {  // removed at run time; its service socket still receives
    m.count(EngineDrop::kNoRoute);
    return Status::kDropped;
  }
  PortState& port = m.ports[tunnel.port];
  if (!m.can_seal(tunnel)) return Status::kDropped;  // counted
  if (payload_bytes + tunnel.trailer_bytes() > port.max_payload_bytes) {
    m.count(EngineDrop::kTooBig);
    return Status::kDropped;
  }
  const uint64_t tag = fix_sequence(tunnel, tunnel_index, false, info);
  return port.scheduler.enqueue(tunnel.id, handle,
                                payload_bytes + port.frame_overhead_bytes + tunnel.trailer_bytes(),
                                now_ns, tag);
}

Status Engine::submit_replica_st(const SubmitInfo& info, uint64_t handle, uint32_t payload_bytes,
                                 int64_t now_ns) noexcept {
  Impl& m = *impl_;
  if ((handle & kControlHandleTag) != 0 || info.replica_tunnel >= m.tunnels.size()) {
    return Status::kInvalidArgument;
  }
  TunnelState& tunnel = m.tunnels[info.replica_tunnel];
  if (!tunnel.active || !tunnel.protected_path()) return Status::kInvalidArgument;
  PortState& port = m.ports[tunnel.protect_port];
  if (payload_bytes + tunnel.trailer_bytes() > port.max_payload_bytes) {
    m.count(EngineDrop::kTooBig);
    return Status::kDropped;
  }
  const uint32_t bytes = payload_bytes + port.frame_overhead_bytes + tunnel.trailer_bytes();
  const uint64_t tag = info.replica_sequence + 1;
  if (info.replica_best_effort) {
    return port.scheduler.enqueue_best_effort(handle, bytes, now_ns, tunnel.id, tag);
  }
  return port.scheduler.enqueue(tunnel.id, handle, bytes, now_ns, tag);
}

void Engine::replica_not_made_st(const SubmitInfo& info) noexcept {
  Impl& m = *impl_;
  if (info.replica_tunnel < m.tunnels.size()) {
    ++m.tunnels[info.replica_tunnel].counters.replicas_not_made;
  }
}

bool Engine::next_tx_st(int64_t now_ns, TxEmit* emit) noexcept {
  Impl& m = *impl_;
  for (;;) {
    uint32_t best = kNoIndex;
    int64_t best_ns = kNoEventNs;
    int64_t best_until_ns = now_ns;
    for (uint32_t i = 0; i < m.ports.size(); ++i) {
      const sched::TxScheduler& scheduler = m.ports[i].scheduler;
      const int64_t t = scheduler.next_event_ns();
      if (t >= best_ns) continue;
      const int64_t until_ns =
          t <= now_ns ? now_ns : scheduler.release_horizon_ns(now_ns, m.tx_ahead_ns);
      if (t <= until_ns) {
        best = i;
        best_ns = t;
        best_until_ns = until_ns;
      }
    }
    if (best == kNoIndex) return false;
    PortState& port = m.ports[best];
    sched::TxFrame frame;
    if (!port.scheduler.pop_due(now_ns, &frame, best_until_ns)) return false;

    // Every field assigned (no TxEmit{} first: a block clear plus narrow stores costs more than
    // the frame's own work).
    emit->handle = 0;
    emit->control = false;
    emit->send = frame.send;
    emit->best_effort = frame.best_effort;
    emit->port_index = best;
    emit->tunnel_index = 0;
    emit->destination = nullptr;
    emit->dscp = 0;
    emit->wire_bytes = frame.bytes;
    emit->departure_ns = frame.departure_ns;
    emit->tx_end_ns = frame.tx_end_ns;
    emit->header = wire::TunnelHeader{};
    emit->bytes = {};
    if ((frame.handle & kControlHandleTag) != 0) {
      const auto slot = static_cast<uint32_t>(frame.handle & ~kControlHandleTag);
      if (m.emit_control(slot, frame, now_ns, emit)) return true;
      continue;  // a control packet that missed its slot: nothing for the backend to do
    }

    emit->handle = frame.handle;
    const uint32_t index = m.find_tunnel(frame.tunnel_id);
    if (index == kNoIndex) {  // handed back: its tunnel was removed (counted tunnel_removed)
      emit->send = false;
      emit->tunnel_index = kNoTunnel;
      return true;
    }
    TunnelState& tunnel = m.tunnels[index];
    const TunnelConfig& config = m.tunnel_config(tunnel);
    emit->tunnel_index = index;
    // On a protected tunnel's protection port the frame is the copy (path 1).
    const bool replica = tunnel.protected_path() && best == tunnel.protect_port;
    emit->destination =
        &m.peer_config(m.peers[replica ? tunnel.protect_peer : tunnel.peer]).endpoint;
    emit->dscp = frame.best_effort ? m.port_config(port).best_effort_dscp : config.dscp;
    wire::TunnelHeader& h = emit->header;
    h.flags = frame.best_effort ? wire::kFlagData | wire::kFlagBestEffort : wire::kFlagData;
    h.type = static_cast<uint8_t>(wire::DataType::kDatagram);  // the backend sets the real type
    h.tunnel_id = tunnel.id;
    h.path_id = replica ? kProtectionPathId : kPrimaryPathId;
    if (tunnel.protected_path()) h.flags |= wire::kFlagReplica;  // both copies
    if (tunnel.auth) {
      h.flags |= wire::kFlagAuth;
      h.session = tunnel.auth->tx_session;
    }
    h.payload_length = static_cast<uint16_t>(frame.bytes - port.frame_overhead_bytes);
    h.cycle_id = static_cast<uint64_t>(frame.cycle_id);
    // When the packet entered the tunnel (docs/wire-format.md, tx_time_ns): the far end releases
    // it at this + bound, which absorbs the wait for the slot as well as the WAN's jitter.
    h.tx_time_ns = frame.enqueue_ns;
    if (!frame.send) {  // missed its slot, or handed back by a run-time change (counted)
      if (frame.drop == sched::TxDrop::kMissedSlot) ++tunnel.counters.missed_slot_packets;
      return true;
    }
    // Sequence numbers are given in departure order, to sent frames only, on-time and best
    // effort alike: one space per tunnel, covered by the receiver's one replay window. A
    // protected tunnel's were fixed at submit (both copies carry the same one).
    h.sequence = frame.tag != 0 ? frame.tag - 1 : tunnel.next_sequence++;
    if (replica) ++tunnel.counters.replicas_sent;
    if (frame.best_effort) {
      ++tunnel.counters.sent_best_effort_packets;
    } else {
      ++tunnel.counters.sent_on_time_packets;
    }
    port.scheduler.record_departure(frame, now_ns);
    return true;
  }
}

std::size_t Engine::encode_frame_st(const TxEmit& emit, wire::DataType type,
                                    std::span<std::byte> frame,
                                    std::size_t payload_bytes) noexcept {
  Impl& m = *impl_;
  wire::TunnelHeader header = emit.header;
  header.type = static_cast<uint8_t>(type);
  TunnelAuthState* auth = nullptr;
  if (header.is_auth()) {
    if (emit.tunnel_index >= m.tunnels.size() || !m.tunnels[emit.tunnel_index].auth) return 0;
    auth = m.tunnels[emit.tunnel_index].auth.get();
  }
  const std::size_t trailer = auth != nullptr ? aead::kTagBytes : 0;
  if (payload_bytes + trailer > wire::kMaxPayloadBytes ||
      frame.size() < wire::kHeaderSize + payload_bytes) {
    return 0;
  }
  header.payload_length = static_cast<uint16_t>(payload_bytes + trailer);
  if (wire::encode(header, frame).status != wire::EncodeStatus::kOk) return 0;
  if (auth == nullptr) return wire::kHeaderSize + payload_bytes;
  return seal_frame(*auth, frame, payload_bytes, false);  // 0 (counted): no key, or no room
}

Status Engine::on_wan_datagram_st(uint32_t port_index, const Endpoint& source, uint64_t handle,
                                  std::span<std::byte> udp_payload, int64_t now_ns,
                                  RxInfo* info) noexcept {
  Impl& m = *impl_;
  if (port_index >= m.ports.size() || info == nullptr) return Status::kInvalidArgument;
  PortState& port = m.ports[port_index];
  auto decoded = wire::decode(udp_payload, port.max_payload_bytes);
  if (!decoded) {
    port.rx_drops.add(decoded.error());
    return Status::kMalformed;
  }
  // Used in place: a copy right after decode's narrow stores would stall on store forwarding.
  wire::PacketView& packet = *decoded;
  const uint32_t index = m.find_tunnel(packet.header.tunnel_id);
  if (index == kNoIndex) {
    m.count(EngineDrop::kUnknownTunnel);
    return Status::kDropped;
  }
  TunnelState& tunnel = m.tunnels[index];
  const uint8_t path = packet.header.path_id;
  // Path 1 of a protected tunnel comes from its protection peer, through that peer's port.
  const bool replica = path == kProtectionPathId && tunnel.protected_path();
  const uint32_t peer_index = replica ? tunnel.protect_peer : tunnel.peer;
  PeerState& peer = m.peers[peer_index];
  if (!(source == m.peer_config(peer).endpoint)) {
    m.count(EngineDrop::kWrongPeer);
    return Status::kDropped;
  }
  if ((replica ? tunnel.protect_port : tunnel.port) != port_index) {
    m.count(EngineDrop::kWrongPort);
    return Status::kDropped;
  }
  if (path != kPrimaryPathId && !replica) {
    m.count(EngineDrop::kUnknownPath);
    return Status::kDropped;
  }
  // A control packet names its sender's epoch: ours is our own packet sent back (refused before
  // any work, authenticated tunnel or not).
  if (packet.header.is_control() && packet.header.cycle_id == m.epoch) {
    ++peer.counters.control_reflected;
    if (tunnel.auth) ++tunnel.auth->counters.drops[static_cast<int>(AuthDrop::kReflected)];
    m.count(EngineDrop::kReflected);
    return Status::kDropped;
  }
  // Authentication, before the packet touches any state (replay window, playout, clock).
  if (tunnel.auth || packet.header.is_auth()) {
    if (!m.open(tunnel, peer_index, udp_payload, &packet, now_ns)) return Status::kDropped;
  }
  if (packet.header.is_control()) {
    const auto body = wire::decode_control(packet);
    if (!body) {
      port.rx_drops.add(body.error());
      return Status::kMalformed;
    }
    if (!m.on_control(peer_index, *body, packet.header.cycle_id, packet.header.sequence,
                      now_ns)) {
      return Status::kDropped;  // refused and counted: moves no state, not even liveness
    }
    m.mark_alive(peer, now_ns);
    return Status::kBusy;  // consumed: the caller frees the buffer
  }
  // A tunnel carries only its tenant: a decapsulated packet from a host the far side's tenant
  // does not own, or to one this side's does not, is dropped before any state moves.
  const TunnelConfig& config = m.tunnel_config(tunnel);
  const bool best_effort = packet.header.is_best_effort();
  if (inner_verdict(config, packet.header.data_type(), packet.payload,
                    best_effort && config.foreign_source == ForeignSource::kBestEffort) !=
      InnerVerdict::kAllowed) {
    ++tunnel.counters.rx_foreign_inner_packets;
    m.count(EngineDrop::kForeignInner);
    return Status::kDropped;
  }
  ++tunnel.counters.path_rx_packets[path];
  const wire::ReplayVerdict verdict = tunnel.replay.check_and_update(packet.header.sequence);
  if (const auto reason = wire::drop_reason(verdict)) {
    if (tunnel.protected_path() && *reason == wire::DropReason::kDuplicate) {
      // The other path's copy arrived first: elimination (PREOF), not a fault.
      ++tunnel.counters.path_eliminated_packets[path];
      m.mark_alive(peer, now_ns);
      return Status::kDropped;
    }
    port.rx_drops.add(*reason);
    tunnel.replay_drops.add(*reason);
    return Status::kDropped;
  }
  m.mark_alive(peer, now_ns);
  const auto bytes = static_cast<uint32_t>(packet.payload.size());
  sched::Playout& playout = best_effort ? tunnel.best_effort : tunnel.on_time;
  const Status status = playout.push(handle, bytes, packet.header.tx_time_ns, now_ns);
  ++tunnel.counters.path_first_packets[path];
  if (status != Status::kOk) return status;  // kDropped: late/too_early/buffer_full, counted
  m.mark_held(index * 2 + (best_effort ? 1 : 0));
  if (best_effort) {
    ++tunnel.counters.rx_best_effort_packets;
  } else {
    ++tunnel.counters.rx_on_time_packets;
  }
  tunnel.counters.rx_bytes += bytes;
  info->tunnel_index = index;
  info->type = packet.header.data_type();
  info->payload_offset = static_cast<uint32_t>(wire::kHeaderSize);
  info->payload_bytes = bytes;
  return Status::kOk;
}

bool Engine::next_rx_st(int64_t now_ns, RxEmit* emit) noexcept {
  Impl& m = *impl_;
  const auto playouts = static_cast<uint32_t>(m.tunnels.size() * 2);
  if (playouts == 0) return false;
  if (m.rx_cursor >= playouts) m.rx_cursor = 0;  // tunnels are never removed from the vector
  const int64_t rx_until_ns =
      m.rx_ahead_ns > 0 && now_ns <= INT64_MAX - m.rx_ahead_ns ? now_ns + m.rx_ahead_ns : now_ns;
  sched::PlayoutFrame frame;
  sched::Playout* best = nullptr;
  uint32_t best_tunnel = kNoIndex;
  // The current playout first, then each other one that may hold packets, once around: the
  // words of the held bitmap from the cursor's, wrapping to the cursor's word again (its bits
  // below the cursor come last).
  const auto words = static_cast<uint32_t>(m.held_playouts.size());
  const uint32_t first_word = m.rx_cursor / 64;
  for (uint32_t step = 0; step <= words && best == nullptr; ++step) {
    const uint32_t w = (first_word + step) % words;
    uint64_t bits = m.held_playouts[w];
    if (step == 0) bits &= ~uint64_t{0} << (m.rx_cursor % 64);           // from the cursor on
    if (step == words) bits &= (uint64_t{1} << (m.rx_cursor % 64)) - 1;  // before it
    while (bits != 0) {
      const uint32_t at = w * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
      bits &= bits - 1;
      if (at >= playouts) break;
      TunnelState& tunnel = m.tunnels[at / 2];
      sched::Playout& playout = (at & 1) == 0 ? tunnel.on_time : tunnel.best_effort;
      if (playout.pop_due(now_ns, &frame, rx_until_ns)) {
        best = &playout;
        best_tunnel = at / 2;
        m.rx_cursor = at;
        break;
      }
      if (playout.held_frames() == 0) m.held_playouts[w] &= ~(uint64_t{1} << (at % 64));
    }
  }
  if (best == nullptr) return false;
  best->record_release(frame, now_ns);
  const TunnelState& tunnel = m.tunnels[best_tunnel];
  const TunnelConfig& config = m.tunnel_config(tunnel);
  *emit = RxEmit{};
  emit->handle = frame.handle;
  emit->tunnel_index = best_tunnel;
  emit->late = frame.late;
  emit->best_effort = best == &tunnel.best_effort;
  emit->tx_timestamp_ns = frame.tx_timestamp_ns;
  emit->target_ns = frame.target_ns;
  emit->service_deliver = config.service_deliver ? &*config.service_deliver : nullptr;
  return true;
}

void Engine::rx_budget_spent_st() noexcept {
  Impl& m = *impl_;
  const auto playouts = static_cast<uint32_t>(m.tunnels.size() * 2);
  m.rx_cursor = m.rx_cursor + 1 >= playouts ? 0 : m.rx_cursor + 1;
}

uint32_t Engine::next_tx_burst_st(int64_t now_ns, std::span<TxEmit> out) noexcept {
  uint32_t count = 0;
  while (count < out.size() && next_tx_st(now_ns, &out[count])) {
    if (out[count++].control) break;
  }
  return count;
}

uint32_t Engine::next_rx_burst_st(int64_t now_ns, std::span<RxEmit> out) noexcept {
  uint32_t count = 0;
  while (count < out.size() && next_rx_st(now_ns, &out[count])) ++count;
  if (count == out.size() && count > 0) rx_budget_spent_st();
  return count;
}

void Engine::set_release_ahead_st(int64_t tx_ahead_ns, int64_t rx_ahead_ns) noexcept {
  impl_->tx_ahead_ns = std::max<int64_t>(tx_ahead_ns, 0);
  impl_->rx_ahead_ns = std::max<int64_t>(rx_ahead_ns, 0);
}

bool Engine::carries_on_time() const noexcept {
  for (const TunnelState& tunnel : impl_->tunnels) {
    if (tunnel.active && tunnel.config.bound_ns > 0) return true;
  }
  return false;
}

int64_t Engine::next_event_ns() const noexcept {
  const Impl& m = *impl_;
  int64_t t = m.next_control_event_ns();
  for (const PortState& port : m.ports) t = std::min(t, port.scheduler.next_event_ns());
  for (const TunnelState& tunnel : m.tunnels) {
    t = std::min({t, tunnel.on_time.next_event_ns(), tunnel.best_effort.next_event_ns()});
  }
  return t;
}

}  // namespace detwan::dataplane::gw

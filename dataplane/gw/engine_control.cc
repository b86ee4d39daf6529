// The engine's control exchange with each peer gateway: two-way time exchanges (clock offset),
// keepalives and liveness. Runs on the datapath thread between packets: no allocation, no
// exceptions, no logging. Control packets travel in the slots of the peer's first tunnel (its
// "control tunnel", chosen again when tunnels change at run time), past the tunnel's policer,
// from a fixed outbox allocated at create().
#include <openssl/rand.h>

#include <algorithm>
#include <new>
#include <utility>
#include <variant>

#include "dataplane/gw/engine.h"
#include "dataplane/gw/engine_impl.h"

namespace detwan::dataplane::gw {
namespace {

// The next instant of a periodic timer: one interval after the last, or after now if the
// poll loop fell more than an interval behind (no burst of catch-up packets).
int64_t saturating_add(int64_t a, int64_t b) noexcept {
  int64_t out = 0;
  return __builtin_add_overflow(a, b, &out) ? kNoEventNs : out;
}

int64_t advance(int64_t next_ns, int64_t interval_ns, int64_t now_ns) noexcept {
  const int64_t next = saturating_add(next_ns, interval_ns);
  return next > now_ns ? next : saturating_add(now_ns, interval_ns);
}

}  // namespace

void Engine::Impl::queue_control(uint32_t peer_index, const wire::ControlBody& body,
                                 int64_t now_ns) noexcept {
  const PeerState& peer = peers[peer_index];
  if (peer.control_tunnel == kNoIndex) return;
  uint32_t slot = 0;
  while (slot < outbox.size() && outbox[slot].used) ++slot;
  if (slot == outbox.size()) {
    count(EngineDrop::kControlBacklog);
    return;
  }
  const TunnelState& tunnel = tunnels[peer.control_tunnel];
  PortState& port = ports[port_to(tunnel, peer_index)];
  const auto bytes =
      static_cast<uint32_t>(wire::body_size(wire::type_of(body))) + port.frame_overhead_bytes;
  // A refusal (queue full, no slot, ...) is counted by the scheduler; the slot stays free.
  if (port.scheduler.enqueue_unpoliced(tunnel.id, Engine::kControlHandleTag | slot, bytes,
                                       now_ns) != common::Status::kOk) {
    return;
  }
  outbox[slot].used = true;
  outbox[slot].peer = peer_index;
  outbox[slot].body = body;
}

bool Engine::Impl::emit_control(uint32_t slot, const sched::TxFrame& frame, int64_t now_ns,
                                TxEmit* emit) noexcept {
  if (slot >= outbox.size() || !outbox[slot].used) return false;
  ControlSlot& entry = outbox[slot];
  entry.used = false;
  if (!frame.send) return false;  // missed its slot: counted by the scheduler
  PeerState& peer = peers[entry.peer];
  const PeerConfig& peer_cfg = peer_config(peer);
  const uint32_t tunnel_index = peer.control_tunnel;
  const TunnelState& tunnel = tunnels[tunnel_index];
  PortState& port = ports[port_to(tunnel, entry.peer)];

  wire::ControlBody body = entry.body;
  if (auto* request = std::get_if<wire::TimeRequest>(&body)) {
    // An unpredictable exchange id (CSPRNG): a response is matched to an outstanding request by
    // it, so an off-path sender cannot guess one (unauthenticated tunnels) and a response of an
    // earlier exchange is never taken for this one.
    uint64_t id = 0;
    while (id == 0) {
      if (RAND_bytes(reinterpret_cast<unsigned char*>(&id), sizeof id) != 1) return false;
    }
    request->exchange_id = id;
    request->t1_ns = now_ns;
    peer.outstanding[peer.outstanding_next] = request->exchange_id;
    peer.outstanding_next = (peer.outstanding_next + 1) % kOutstandingExchanges;
  } else if (auto* response = std::get_if<wire::TimeResponse>(&body)) {
    response->t3_ns = std::max(now_ns, response->t2_ns);
  } else if (auto* keepalive = std::get_if<wire::Keepalive>(&body)) {
    keepalive->counter = peer.keepalive_counter + 1;
    keepalive->interval_ns = peer_cfg.keepalive_interval_ns;
    // What we last heard on this path (its epoch accepted or not): the answer a restarted peer
    // needs to prove its new epoch is live (on_control).
    keepalive->last_rx_counter = peer.heard_counter;
    keepalive->epoch = epoch;
    keepalive->echo_epoch = peer.heard_epoch;
  }
  wire::TunnelHeader header;
  header.tunnel_id = tunnel.id;
  header.path_id = path_to(tunnel, entry.peer);
  header.sequence = peer.control_sequence;
  header.cycle_id = epoch;  // a control packet's cycle_id is its sender's epoch
  header.tx_time_ns = now_ns;
  TunnelAuthState* auth = tunnels[tunnel_index].auth.get();
  if (auth != nullptr) {
    header.flags = wire::kFlagControl | wire::kFlagAuth;
    header.session = auth->tx_session;
  }
  const wire::EncodeResult encoded = wire::encode_control(header, body, control_scratch);
  if (encoded.status != wire::EncodeStatus::kOk) return false;  // only with now_ns < 0
  std::size_t size = encoded.size;
  if (auth != nullptr) {  // sealed like data (counted seal_failed if that ever fails)
    size = seal_frame(*auth, control_scratch, encoded.size - wire::kHeaderSize, true);
    if (size == 0) return false;
  }

  ++peer.control_sequence;
  if (std::holds_alternative<wire::TimeRequest>(body)) {
    ++peer.counters.time_requests_sent;
  } else if (std::holds_alternative<wire::TimeResponse>(body)) {
    ++peer.counters.time_responses_sent;
  } else {
    ++peer.keepalive_counter;
    ++peer.counters.keepalives_sent;
    peer.last_keepalive_sent_ns = now_ns;
  }
  header.flags = auth != nullptr ? wire::kFlagControl | wire::kFlagAuth : wire::kFlagControl;
  header.type = static_cast<uint8_t>(wire::type_of(body));
  header.payload_length = static_cast<uint16_t>(size - wire::kHeaderSize);
  emit->control = true;
  emit->tunnel_index = tunnel_index;
  emit->destination = &peer_cfg.endpoint;
  emit->dscp = frame.best_effort ? port_config(port).best_effort_dscp : tunnel_config(tunnel).dscp;
  emit->header = header;
  emit->bytes = std::span<const std::byte>(control_scratch.data(), size);
  port.scheduler.record_departure(frame, now_ns);
  return true;
}

void Engine::Impl::mark_alive(PeerState& peer, int64_t now_ns) noexcept {
  peer.last_rx_ns = now_ns;
  if (!peer.up) {
    peer.up = true;
    ++peer.counters.up_transitions;
  }
}

void Engine::Impl::apply_offset(PeerState& peer) noexcept {
  if (peer_config(peer).clock_offset_ns.has_value() || !peer.clock.has_estimate()) return;
  // clock_sample's offset is peer - local; the playout wants receiver (local) - sender (peer).
  set_playout_offset(peer, -peer.clock.best().offset_ns);
}

void Engine::Impl::set_playout_offset(PeerState& peer, int64_t offset_ns) noexcept {
  if (offset_ns == peer.playout_offset_ns) return;
  peer.playout_offset_ns = offset_ns;
  const auto peer_index = static_cast<uint32_t>(&peer - peers.data());
  for (TunnelState& tunnel : tunnels) {
    // A protected tunnel's playouts follow its primary peer (both paths end at one gateway).
    if (tunnel.peer != peer_index) continue;
    tunnel.on_time.set_clock_offset_ns(offset_ns);
    tunnel.best_effort.set_clock_offset_ns(offset_ns);
  }
}

bool Engine::Impl::fresh_answer(const PeerState& peer, const wire::Keepalive& k) const noexcept {
  // It answers our keepalives of this boot, and one of the last few: at least
  // kMinFreshKeepalives, and as many as fit in the peer's dead_after (a path slow enough to
  // need more is dead anyway). A keepalive the peer sent before it restarted answers one of ours
  // from back then: by the time it could be replayed, we have sent more than that since.
  if (k.echo_epoch != epoch || k.last_rx_counter == 0 ||
      k.last_rx_counter > peer.keepalive_counter) {
    return false;
  }
  const PeerConfig& config = peer_config(peer);
  const auto lag = std::max<uint64_t>(
      kMinFreshKeepalives,
      static_cast<uint64_t>(config.dead_after_ns / config.keepalive_interval_ns) + 2);
  return peer.keepalive_counter - k.last_rx_counter <= lag;
}

void Engine::Impl::hurry_keepalive(PeerState& peer, int64_t now_ns) noexcept {
  const int64_t interval = peer_config(peer).keepalive_interval_ns;
  const int64_t soonest = peer.last_keepalive_sent_ns == kNeverNs
                              ? now_ns
                              : std::max(now_ns, peer.last_keepalive_sent_ns + interval / 8);
  if (soonest < peer.next_keepalive_ns) {
    peer.next_keepalive_ns = soonest;
    ++peer.counters.early_keepalives;
  }
}

bool Engine::Impl::on_control(uint32_t peer_index, const wire::ControlBody& body,
                              uint64_t sender_epoch, uint64_t sequence, int64_t now_ns) noexcept {
  PeerState& peer = peers[peer_index];
  const auto refuse = [&](uint64_t& counter, EngineDrop reason) {
    ++counter;
    count(reason);
    return false;
  };
  // Rules of docs/wire-format.md ("Keepalive"). Packets of the peer's current epoch pass the
  // control replay window; another epoch is only ever accepted from a keepalive.
  const bool current = peer.epoch != 0 && sender_epoch == peer.epoch;
  if (current) {
    if (wire::drop_reason(peer.control_replay->check_and_update(sequence))) {
      return refuse(peer.counters.control_replayed, EngineDrop::kControlReplayed);
    }
  } else if (!std::holds_alternative<wire::Keepalive>(body)) {
    return refuse(peer.counters.control_stale, EngineDrop::kControlStale);
  }

  if (const auto* request = std::get_if<wire::TimeRequest>(&body)) {
    ++peer.counters.time_requests_received;
    // t3 is filled in when the response leaves (emit_control).
    queue_control(peer_index,
                  wire::TimeResponse{request->exchange_id, request->t1_ns, now_ns, now_ns}, now_ns);
  } else if (const auto* response = std::get_if<wire::TimeResponse>(&body)) {
    ++peer.counters.time_responses_received;
    auto* match =
        std::find(peer.outstanding.begin(), peer.outstanding.end(), response->exchange_id);
    const auto sample = wire::clock_sample(*response, now_ns);
    if (response->exchange_id == 0 || match == peer.outstanding.end() || !sample) {
      ++peer.counters.time_responses_ignored;
      return false;
    }
    *match = 0;
    peer.clock.add(*sample, now_ns);
    apply_offset(peer);
  } else if (const auto* keepalive = std::get_if<wire::Keepalive>(&body)) {
    if (keepalive->epoch != peer.heard_epoch) peer.heard_counter = 0;
    peer.heard_epoch = keepalive->epoch;
    peer.heard_counter = std::max(peer.heard_counter, keepalive->counter);
    if (!current) {
      // A first epoch is taken as it comes (nothing of the peer's is held yet: if it was an
      // earlier boot's keepalive replayed, the peer's next keepalive replaces it, below). A
      // change of epoch only from a keepalive that answers one of our recent ones: a
      // keepalive of the peer's earlier boot, replayed, answers none of them.
      if (peer.epoch != 0 && !fresh_answer(peer, *keepalive)) {
        hurry_keepalive(peer, now_ns);  // our challenge, for a peer that really restarted
        return refuse(peer.counters.control_stale, EngineDrop::kControlStale);
      }
      on_peer_epoch(peer_index, keepalive->epoch, keepalive->counter);
      (void)peer.control_replay->check_and_update(sequence);
    }
    ++peer.counters.keepalives_received;
    peer.last_rx_keepalive = std::max(peer.last_rx_keepalive, keepalive->counter);
    peer.peer_last_rx_counter = keepalive->last_rx_counter;
    if (keepalive->echo_epoch != epoch) hurry_keepalive(peer, now_ns);  // it does not know us
  }
  return true;
}

void Engine::Impl::on_peer_epoch(uint32_t peer_index, uint64_t epoch,
                                 uint64_t counter) noexcept {
  PeerState& peer = peers[peer_index];
  if (peer.epoch == epoch) return;
  if (peer.epoch != 0) {  // restarted: its counters and exchange ids start again too
    ++peer.counters.restarts;
    peer.outstanding = {};
  }
  peer.last_rx_keepalive = counter;
  peer.epoch = epoch;
  peer.control_replay->reset();
  for (TunnelState& tunnel : tunnels) {
    if (tunnel.peer != peer_index && tunnel.protect_peer != peer_index) continue;
    if (tunnel.peer_epoch == epoch) continue;  // its other path said so already
    if (tunnel.peer_epoch != 0) {
      tunnel.replay.reset();
      ++tunnel.counters.peer_restarts;
    }
    tunnel.peer_epoch = epoch;
    // New data keys and the peer's control key for its new epoch; on an OpenSSL failure the
    // tunnel has no data keys (its packets are refused, counted), never the old ones.
    if (tunnel.auth) (void)set_peer_epoch(*tunnel.auth, epoch, *deriver);
  }
}

bool Engine::Impl::leads(const PeerState& peer) const noexcept {
  return shard.count <= 1 ||
         (peer.control_tunnel != kNoIndex &&
          shard_of_tunnel(tunnels[peer.control_tunnel].id, shard.count) == shard.index);
}

int64_t Engine::Impl::next_control_event_ns() const noexcept {
  int64_t t = kNoEventNs;
  for (const PeerState& peer : peers) {
    // A peer whose last tunnel was removed still goes down when it falls silent.
    if (peer.up) t = std::min(t, saturating_add(peer.last_rx_ns, peer_config(peer).dead_after_ns));
    if (peer.control_tunnel == kNoIndex || !leads(peer)) continue;
    t = std::min(t, peer.next_keepalive_ns);
    if (peer.epoch != 0) t = std::min(t, peer.next_time_request_ns);  // none before (poll)
  }
  return t;
}

void Engine::Impl::record_windows(int64_t now_ns) noexcept {
  if (now_ns < next_windows_ns || tunnels.empty()) return;
  next_windows_ns = now_ns + kWindowsLookNs;
  uint32_t copies = 0;
  const auto n = static_cast<uint32_t>(tunnels.size());
  for (uint32_t visited = 0; visited < n && copies < kWindowsCopiesPerLook; ++visited) {
    windows_cursor = windows_cursor < n ? windows_cursor : 0;
    TunnelState& t = tunnels[windows_cursor];
    const std::pair<common::HistogramHistory*, const common::LogLinearHistogram*> due[] = {
        {&t.windows.on_time_wan_delay, &t.on_time.counters().wan_delay_ns},
        {&t.windows.on_time_lateness, &t.on_time.counters().lateness_ns},
        {&t.windows.best_effort_wan_delay, &t.best_effort.counters().wan_delay_ns}};
    for (const auto& [history, histogram] : due) {
      if (!t.active || !history->due(now_ns)) continue;
      try {
        history->snapshot(*histogram, now_ns);
      } catch (const std::bad_alloc&) {
        ++windows_skipped;
      }
      ++copies;
    }
    ++windows_cursor;
  }
}

void Engine::poll_control_st(int64_t now_ns) noexcept {
  Impl& m = *impl_;
  m.record_windows(now_ns);
  for (uint32_t i = 0; i < m.peers.size(); ++i) {
    PeerState& peer = m.peers[i];
    const PeerConfig& config = m.peer_config(peer);
    if (peer.up && now_ns - peer.last_rx_ns >= config.dead_after_ns) {
      peer.up = false;
      ++peer.counters.down_transitions;
    }
    if (peer.control_tunnel == kNoIndex) continue;  // no tunnel: nothing to exchange on
    if (!m.leads(peer)) continue;                   // another shard exchanges with it
    if (now_ns >= peer.next_keepalive_ns) {
      // Counter, interval, echo and last_rx_counter are filled in when it leaves (emit_control).
      m.queue_control(i, wire::Keepalive{1, config.keepalive_interval_ns, 0, m.epoch, 0}, now_ns);
      peer.next_keepalive_ns =
          advance(peer.next_keepalive_ns, config.keepalive_interval_ns, now_ns);
    }
    // A time request is answered within the peer's epoch only: none before its epoch is known
    // (the first leaves right after the first keepalive that brings it).
    if (now_ns >= peer.next_time_request_ns && peer.epoch != 0) {
      // Exchange id and t1 are filled in when it leaves (emit_control).
      m.queue_control(i, wire::TimeRequest{1, 0}, now_ns);
      peer.next_time_request_ns =
          advance(peer.next_time_request_ns, config.time_exchange_interval_ns, now_ns);
    }
  }
}

bool Engine::leads_peer(uint32_t peer_index) const noexcept {
  return peer_index < impl_->peers.size() && impl_->leads(impl_->peers[peer_index]);
}

PeerSync Engine::peer_sync_st(uint32_t peer_index) const noexcept {
  const Impl& m = *impl_;
  if (peer_index >= m.peers.size()) return {};
  const PeerState& peer = m.peers[peer_index];
  return PeerSync{
      .up = peer.up,
      .last_rx_ns = peer.last_rx_ns,
      .has_offset = m.peer_config(peer).clock_offset_ns.has_value() || peer.clock.has_estimate(),
      .playout_offset_ns = peer.playout_offset_ns,
      .epoch = peer.epoch,
      .last_rx_keepalive = peer.last_rx_keepalive,
  };
}

void Engine::adopt_peer_st(uint32_t peer_index, const PeerSync& sync) noexcept {
  Impl& m = *impl_;
  if (peer_index >= m.peers.size() || m.leads(m.peers[peer_index])) return;
  PeerState& peer = m.peers[peer_index];
  // Liveness: what the lead heard, or what this shard heard itself (its tunnels' packets).
  if (sync.up && sync.last_rx_ns > peer.last_rx_ns) m.mark_alive(peer, sync.last_rx_ns);
  if (sync.has_offset && !m.peer_config(peer).clock_offset_ns.has_value()) {
    m.set_playout_offset(peer, sync.playout_offset_ns);
  }
  if (sync.epoch != 0) m.on_peer_epoch(peer_index, sync.epoch, sync.last_rx_keepalive);
}

}  // namespace detwan::dataplane::gw

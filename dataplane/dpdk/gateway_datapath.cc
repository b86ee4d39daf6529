// The gateway's poll loop, WAN side: no exceptions, no allocation, no logging per packet.
#include <algorithm>
#include <span>

#include <rte_cycles.h>
#include <rte_mbuf.h>
#include <time.h>

#include "common/clock.h"
#include "dataplane/dpdk/gateway_impl.h"
#include "dataplane/gw/control_server.h"
#include "dataplane/wire/byte_order.h"
#include "dataplane/wire/header.h"

namespace detwan::dataplane::dpdk {

namespace {

// The tunnel id a WAN frame carries, read at the offsets an untagged or single-tagged
// Ethernet + IPv4/IPv6 + UDP frame has, without checking anything (the owner does); 0 if the
// frame is too short or not IP (tunnel id 0 is shard 0's: it counts the drop).
uint32_t peek_frame_tunnel_id(const rte_mbuf* m) noexcept {
  const auto* frame = rte_pktmbuf_mtod(m, const std::byte*);
  const uint32_t bytes = m->data_len;
  uint32_t offset = 12;
  if (bytes < offset + 2) return 0;
  uint16_t ether_type = wire::load_be16(frame + offset);
  if (ether_type == 0x8100) {
    offset += 4;
    if (bytes < offset + 2) return 0;
    ether_type = wire::load_be16(frame + offset);
  }
  offset += 2;
  if (ether_type == kEtherTypeIpv4) {
    if (bytes < offset + 1) return 0;
    offset += (std::to_integer<uint32_t>(frame[offset]) & 0x0f) * 4;
  } else if (ether_type == kEtherTypeIpv6) {
    offset += kIpv6HeaderBytes;
  } else {
    return 0;
  }
  offset += 8;  // UDP
  if (bytes <= offset) return 0;
  return gw::Engine::peek_tunnel_id(std::span<const std::byte>(frame + offset, bytes - offset));
}

}  // namespace

void Gateway::Impl::dispatch_st(rte_ring* ring, rte_mbuf* m) noexcept {
  if (rte_ring_mp_enqueue(ring, m) == 0) {
    ++counters.dispatched;
  } else {
    ++counters.dispatch_dropped;
    rte_pktmbuf_free(m);
  }
}

bool Gateway::Impl::wan_frame_st(uint32_t index, rte_mbuf* m, int64_t now_ns) noexcept {
  WanPortState& state = wan[index];
  EthCounters& eth = state.port->counters(queue());
  state.io->rx_bytes += m->pkt_len;
  FrameDrop drop = FrameDrop::kMultiSegment;
  ParsedFrame parsed;
  if (m->nb_segs == 1) {
    const std::span<const std::byte> frame(rte_pktmbuf_mtod(m, const std::byte*), m->data_len);
    drop = parse_wan_frame(frame, state.address, rx_ip_checksum_state(m), rx_udp_checksum_state(m),
                           &parsed);
  }
  if (drop != FrameDrop::kNone) {
    ++eth.frame_drops[static_cast<int>(drop)];
    ++counters.wan_frame_drops_total;
    ++state.io->rx_errors;
    rte_pktmbuf_free(m);
    return false;
  }
  // Keep only the UDP payload in the mbuf (drops Ethernet padding too); the bytes do not
  // move, so the headroom in front stays available for nothing else.
  (void)rte_pktmbuf_adj(m, static_cast<uint16_t>(parsed.udp_payload_offset));
  (void)rte_pktmbuf_trim(m, static_cast<uint16_t>(m->data_len - parsed.udp_payload_bytes));
  gw::RxInfo info;
  const std::span<std::byte> payload(rte_pktmbuf_mtod(m, std::byte*), parsed.udp_payload_bytes);
  const common::Status status =
      engine.on_wan_datagram_st(index, parsed.source, handle_of(m), payload, now_ns, &info);
  if (status != common::Status::kOk) {
    rte_pktmbuf_free(m);  // counted by the engine (or a consumed control packet)
    return false;
  }
  // Keep header + plaintext: an authenticated packet's tag goes (opened in place).
  (void)rte_pktmbuf_trim(
      m, static_cast<uint16_t>(m->pkt_len - wire::kHeaderSize - info.payload_bytes));
  set_data_type(m, info.type);
  return true;
}

uint32_t Gateway::Impl::wan_rx_st(int64_t now_ns) noexcept {
  uint32_t handled = 0;
  rte_mbuf* mbufs[EthPort::kMaxBurst];
  const auto burst = static_cast<uint16_t>(batch);
  const uint32_t shards = shared->shard_count;
  if (shards > 1) {
    // Frames of this shard's tunnels that reached another shard's queue first.
    const unsigned got = rte_ring_sc_dequeue_burst(shared->wan_in[shard],
                                                   reinterpret_cast<void**>(mbufs), burst, nullptr);
    for (unsigned i = 0; i < got; ++i) {
      const uint32_t index = mbufs[i]->hash.usr;
      ++wan[index].io->rx_packets;
      if (wan_frame_st(index, mbufs[i], now_ns)) ++handled;
    }
  }
  for (uint32_t index = 0; index < wan.size(); ++index) {
    WanPortState& state = wan[index];
    if (queue() >= state.port->rx_queue_count()) continue;
    const uint16_t got = state.port->rx_burst_st(queue(), mbufs, burst);
    for (uint16_t i = 0; i < got && i < kPrefetchAhead; ++i) prefetch_data(mbufs[i]);
    for (uint16_t i = 0; i < got; ++i) {
      if (i + kPrefetchAhead < got) prefetch_data(mbufs[i + kPrefetchAhead]);
      rte_mbuf* m = mbufs[i];
      if (shards > 1) {
        const uint32_t owner = gw::shard_of_tunnel(peek_frame_tunnel_id(m), shards);
        if (owner != shard) {
          m->hash.usr = index;
          dispatch_st(shared->wan_in[owner], m);
          continue;
        }
      }
      ++state.io->rx_packets;
      if (wan_frame_st(index, m, now_ns)) ++handled;
    }
  }
  return handled;
}

void Gateway::Impl::send_data_st(const gw::TxEmit& emit) noexcept {
  rte_mbuf* m = mbuf_of(emit.handle);
  if (!emit.send || emit.port_index >= wan.size() || emit.destination == nullptr) {
    if (emit.send) ++counters.encap_failed;
    rte_pktmbuf_free(m);  // a missed slot: counted by the engine
    return;
  }
  WanPortState& state = wan[emit.port_index];
  const bool ipv6 = state.address.local.ipv6;
  const uint32_t payload_bytes = m->pkt_len;
  const uint32_t outer = outer_header_bytes(ipv6);
  // Room for the AEAD tag after the payload on an authenticated tunnel.
  const auto trailer = static_cast<uint16_t>(emit.header.is_auth() ? aead::kTagBytes : 0);
  std::byte* frame = nullptr;
  if (payload_bytes + trailer <= wire::kMaxPayloadBytes && m->nb_segs == 1 &&
      (trailer == 0 || rte_pktmbuf_append(m, trailer) != nullptr)) {
    frame = reinterpret_cast<std::byte*>(
        rte_pktmbuf_prepend(m, static_cast<uint16_t>(outer + wire::kHeaderSize)));
  }
  if (frame == nullptr) {
    ++counters.encap_failed;
    ++state.port->counters(queue()).encap_failed;
    rte_pktmbuf_free(m);
    return;
  }
  const OuterSpec spec{state.address.mac, state.next_hop_mac, &state.address.local,
                       emit.destination, emit.dscp};
  const std::size_t encoded = engine.encode_frame_st(
      emit, data_type_of(m), std::span<std::byte>(frame + outer, m->data_len - outer),
      payload_bytes);
  if (encoded == 0 || !build_outer_headers(std::span<std::byte>(frame, m->data_len), spec,
                                           state.port->tx_ip_checksum_offload(),
                                           state.port->tx_udp_checksum_offload())) {
    ++counters.encap_failed;
    ++state.port->counters(queue()).encap_failed;
    rte_pktmbuf_free(m);
    return;
  }
  if (state.port->tx_udp_checksum_offload()) {
    m->l2_len = kEtherHeaderBytes;
    m->l3_len = ipv6 ? kIpv6HeaderBytes : kIpv4HeaderBytes;
    m->ol_flags |= RTE_MBUF_F_TX_UDP_CKSUM | (ipv6 ? RTE_MBUF_F_TX_IPV6 : RTE_MBUF_F_TX_IPV4);
    if (!ipv6 && state.port->tx_ip_checksum_offload()) m->ol_flags |= RTE_MBUF_F_TX_IP_CKSUM;
  }
  state.port->send_st(queue(), m);
}

void Gateway::Impl::send_control_st(const gw::TxEmit& emit) noexcept {
  if (emit.port_index >= wan.size() || emit.destination == nullptr) {
    ++counters.encap_failed;
    return;
  }
  WanPortState& state = wan[emit.port_index];
  rte_mbuf* m = rte_pktmbuf_alloc(pool);
  if (m == nullptr) {
    ++counters.no_buffer;
    ++state.io->tx_errors;
    return;
  }
  const uint32_t outer = outer_header_bytes(state.address.local.ipv6);
  auto* frame = reinterpret_cast<std::byte*>(
      rte_pktmbuf_append(m, static_cast<uint16_t>(outer + emit.bytes.size())));
  const OuterSpec spec{state.address.mac, state.next_hop_mac, &state.address.local,
                       emit.destination, emit.dscp};
  if (frame == nullptr || emit.bytes.size() > wire::kHeaderSize + wire::kMaxPayloadBytes) {
    ++counters.encap_failed;
    rte_pktmbuf_free(m);
    return;
  }
  std::copy(emit.bytes.begin(), emit.bytes.end(), frame + outer);
  // Control frames are small and rare: checksums in software, no offload flags.
  if (!build_outer_headers(std::span<std::byte>(frame, m->data_len), spec, false, false)) {
    ++counters.encap_failed;
    rte_pktmbuf_free(m);
    return;
  }
  state.port->send_st(queue(), m);
}

uint32_t Gateway::Impl::transmit_st(int64_t now_ns, uint32_t max_frames) noexcept {
  uint32_t sent = 0;
  while (sent < max_frames) {
    const uint32_t wanted = std::min(kEmitBurst, max_frames - sent);
    const uint32_t got = engine.next_tx_burst_st(now_ns, std::span(tx_emits.data(), wanted));
    for (uint32_t i = 0; i < got; ++i) {
      if (!tx_emits[i].control) rte_prefetch0(mbuf_of(tx_emits[i].handle));
    }
    for (uint32_t i = 0; i < got; ++i) {
      const uint32_t ahead = i + kPrefetchAhead;
      if (ahead < got && !tx_emits[ahead].control && tx_emits[ahead].send) {
        // The tunnel header and the outer headers go in front of the payload.
        const rte_mbuf* m = mbuf_of(tx_emits[ahead].handle);
        rte_prefetch0(rte_pktmbuf_mtod(m, const std::byte*) - outer_header_bytes(true) -
                      wire::kHeaderSize);
        prefetch_data(m);
      }
      if (tx_emits[i].control) {
        send_control_st(tx_emits[i]);
      } else {
        send_data_st(tx_emits[i]);
      }
    }
    sent += got;
    if (got < wanted && (got == 0 || !tx_emits[got - 1].control)) break;  // nothing else due
  }
  return sent;
}

void Gateway::Impl::flush_wan_st() noexcept {
  // TX drain: l3fwd holds partial bursts up to 100 us; a slot schedule cannot (a guard band is
  // ~1 us), so the frames due in this iteration leave in one burst at its end.
  for (WanPortState& state : wan) {
    state.port->flush_st(queue());
    const EthCounters& eth = state.port->counters(queue());
    state.io->tx_packets += eth.tx_packets - state.reported_tx_packets;
    state.io->tx_bytes += eth.tx_bytes - state.reported_tx_bytes;
    state.io->tx_errors += eth.tx_failed - state.reported_tx_failed;
    counters.tx_failed += eth.tx_failed - state.reported_tx_failed;
    state.reported_tx_packets = eth.tx_packets;
    state.reported_tx_bytes = eth.tx_bytes;
    state.reported_tx_failed = eth.tx_failed;
  }
}

uint32_t Gateway::Impl::release_st(int64_t now_ns) noexcept {
  uint32_t released = 0;
  while (released < batch) {
    const uint32_t wanted = std::min(kEmitBurst, batch - released);
    const uint32_t got = engine.next_rx_burst_st(now_ns, std::span(rx_emits.data(), wanted));
    for (uint32_t i = 0; i < got; ++i) rte_prefetch0(mbuf_of(rx_emits[i].handle));
    for (uint32_t i = 0; i < got; ++i) {
      if (i + kPrefetchAhead < got) prefetch_data(mbuf_of(rx_emits[i + kPrefetchAhead].handle));
      rte_mbuf* m = mbuf_of(rx_emits[i].handle);
      // The mbuf holds the UDP payload: strip the tunnel header, keep the payload.
      (void)rte_pktmbuf_adj(m, static_cast<uint16_t>(wire::kHeaderSize));
      deliver_local_st(m, rx_emits[i]);
    }
    released += got;
    if (got < wanted) break;
  }
  flush_local_st();
  return released;
}

void Gateway::Impl::sync_peers_st(int64_t now_ns) noexcept {
  if (now_ns < next_peer_sync_ns) return;
  next_peer_sync_ns = now_ns + gw::kPeerSyncIntervalNs;
  if (shared->peers) shared->peers->sync_st(engine);
}

uint32_t Gateway::poll_once_st(int64_t now_ns) noexcept {
  // TSC accounting per phase (7 reads per iteration, not per packet): where the time goes.
  Impl& impl = *impl_;
  BackendCounters& c = impl.counters;
  ++c.loop_iterations;
  // TX first: everything already due leaves before new frames are offered. The scheduler's
  // timing wheel only advances when frames are taken out, and refuses departures more than
  // its horizon (a few cycles) past that point; after a stall (a preempted vCPU) the due
  // frames must be taken out before new ones are scheduled. TX again after RX for frames that
  // are due at once.
  const uint64_t t0 = rte_rdtsc();
  uint32_t work = impl.transmit_st(now_ns, UINT32_MAX);
  const uint64_t t1 = rte_rdtsc();
  work += impl.wan_rx_st(now_ns);
  const uint64_t t2 = rte_rdtsc();
  work += impl.local_rx_st(now_ns);
  const uint64_t t3 = rte_rdtsc();
  impl.engine.poll_control_st(now_ns);
  if (impl.sharded()) impl.sync_peers_st(now_ns);
  const uint64_t t4 = rte_rdtsc();
  work += impl.transmit_st(now_ns, impl.batch * static_cast<uint32_t>(impl.wan.size()));
  impl.flush_wan_st();
  const uint64_t t5 = rte_rdtsc();
  work += impl.release_st(now_ns);
  const uint64_t t6 = rte_rdtsc();
  c.cycles_transmit += (t1 - t0) + (t5 - t4);
  c.cycles_wan_rx += t2 - t1;
  c.cycles_local_rx += t3 - t2;
  c.cycles_control += t4 - t3;
  c.cycles_release += t6 - t5;
  return work;
}

}  // namespace detwan::dataplane::dpdk

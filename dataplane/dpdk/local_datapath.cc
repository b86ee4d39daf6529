// The gateway's poll loop, host side (TUN, DPDK local port, service sockets): no exceptions,
// no allocation, no logging per packet. Socket and TUN I/O are non-blocking system calls.
#include <cerrno>
#include <cstring>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dataplane/dpdk/gateway_impl.h"
#include "dataplane/wire/byte_order.h"

namespace detwan::dataplane::dpdk {
namespace {

wire::DataType ip_type_of(const std::byte* packet, uint32_t bytes) noexcept {
  const auto version = bytes > 0 ? std::to_integer<uint8_t>(packet[0]) >> 4 : 0;
  return version == 6 ? wire::DataType::kIpv6 : wire::DataType::kIpv4;
}

// Takes the spare mbuf (or a fresh one); nullptr when the pool is empty.
rte_mbuf* take_buffer(rte_mbuf*& spare, rte_mempool* pool) noexcept {
  rte_mbuf* m = spare != nullptr ? spare : rte_pktmbuf_alloc(pool);
  spare = nullptr;
  return m;
}

void keep_spare(rte_mbuf*& spare, rte_mbuf* m) noexcept {
  rte_pktmbuf_reset(m);
  spare = m;
}

// A protected tunnel's copy of `m` for its protection path: a new mbuf from the pool with the
// same data and metadata (data type) at the pool's default headroom, which holds the
// encapsulation.
void submit_replica(gw::Engine& engine, rte_mempool* pool, const gw::SubmitInfo& submit,
                    const rte_mbuf* m, int64_t now_ns) noexcept {
  rte_mbuf* copy = rte_pktmbuf_copy(m, pool, 0, UINT32_MAX);
  if (copy == nullptr) {
    engine.replica_not_made_st(submit);
    return;
  }
  if (engine.submit_replica_st(submit, handle_of(copy), copy->pkt_len, now_ns) !=
      common::Status::kOk) {
    rte_pktmbuf_free(copy);  // refused (counted by the engine)
  }
}

}  // namespace

bool Gateway::Impl::submit_local_st(rte_mbuf* m, int64_t now_ns) noexcept {
  gw::SubmitInfo submit;
  common::Status status = common::Status::kOk;
  if (data_type_of(m) == wire::DataType::kDatagram) {
    status = engine.submit_service_st(m->hash.fdir.hi, handle_of(m), m->pkt_len, now_ns, &submit);
  } else {
    const std::span<const std::byte> packet(rte_pktmbuf_mtod(m, const std::byte*), m->data_len);
    status = engine.submit_tun_st(handle_of(m), packet, now_ns, &submit);
  }
  if (submit.wants_replica()) submit_replica(engine, pool, submit, m, now_ns);
  return status == common::Status::kOk;  // else counted by the engine; the caller frees
}

bool Gateway::Impl::local_packet_st(rte_mbuf* m, int64_t now_ns) noexcept {
  if (sharded()) {
    uint32_t index = gw::Engine::kNoTunnel;
    if (data_type_of(m) == wire::DataType::kDatagram) {
      index = m->hash.fdir.hi;
    } else {
      index = engine.route_st(
          std::span<const std::byte>(rte_pktmbuf_mtod(m, const std::byte*), m->data_len));
    }
    // No tunnel: submitted here, where the engine counts the drop.
    if (index != gw::Engine::kNoTunnel) {
      const uint32_t owner = gw::shard_of_tunnel(engine.tunnel_id(index), shared->shard_count);
      if (owner != shard) {
        dispatch_st(shared->local_in[owner], m);
        return true;
      }
    }
  }
  return submit_local_st(m, now_ns);
}

uint32_t Gateway::Impl::local_rx_st(int64_t now_ns) noexcept {
  uint32_t handled = 0;
  gw::LocalIo& io = engine.local_io();
  rte_mbuf* mbufs[EthPort::kMaxBurst];
  if (sharded()) {
    // Host packets of this shard's tunnels that another shard read.
    const unsigned got = rte_ring_sc_dequeue_burst(shared->local_in[shard],
                                                   reinterpret_cast<void**>(mbufs), batch, nullptr);
    for (unsigned i = 0; i < got; ++i) {
      if (submit_local_st(mbufs[i], now_ns)) {
        ++handled;
      } else {
        rte_pktmbuf_free(mbufs[i]);
      }
    }
  }
  if (local.port) {
    const uint16_t got = queue() < local.port->rx_queue_count()
                             ? local.port->rx_burst_st(queue(), mbufs, static_cast<uint16_t>(batch))
                             : uint16_t{0};
    for (uint16_t i = 0; i < got && i < kPrefetchAhead; ++i) prefetch_data(mbufs[i]);
    for (uint16_t i = 0; i < got; ++i) {
      if (i + kPrefetchAhead < got) prefetch_data(mbufs[i + kPrefetchAhead]);
      rte_mbuf* m = mbufs[i];
      const auto* frame = rte_pktmbuf_mtod(m, const std::byte*);
      const uint16_t ether_type =
          m->data_len > kEtherHeaderBytes ? wire::load_be16(frame + 12) : uint16_t{0};
      if (m->nb_segs != 1 || (ether_type != kEtherTypeIpv4 && ether_type != kEtherTypeIpv6)) {
        ++io.tun_rx_errors;
        rte_pktmbuf_free(m);
        continue;
      }
      ++io.tun_rx_packets;
      (void)rte_pktmbuf_adj(m, kEtherHeaderBytes);
      set_data_type(m,
                    ether_type == kEtherTypeIpv6 ? wire::DataType::kIpv6 : wire::DataType::kIpv4);
      if (local_packet_st(m, now_ns)) {
        ++handled;
      } else {
        rte_pktmbuf_free(m);  // counted by the engine
      }
    }
  } else if (local.tun && shard == 0) {
    for (uint32_t i = 0; i < batch; ++i) {
      rte_mbuf* m = take_buffer(spare, pool);
      if (m == nullptr) {
        ++counters.no_buffer;
        break;
      }
      auto* data = rte_pktmbuf_mtod(m, std::byte*);
      const ssize_t got = ::read(local.tun->fd(), data, rte_pktmbuf_tailroom(m));
      if (got <= 0) {
        if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          ++io.tun_rx_errors;
        }
        keep_spare(spare, m);
        break;
      }
      m->data_len = static_cast<uint16_t>(got);
      m->pkt_len = static_cast<uint32_t>(got);
      ++io.tun_rx_packets;
      set_data_type(m, ip_type_of(data, m->data_len));
      if (local_packet_st(m, now_ns)) {
        ++handled;
      } else {
        keep_spare(spare, m);  // dropped and counted by the engine; reuse the buffer
      }
    }
  }
  if (shard != 0) return handled;  // shard 0 reads the service sockets
  for (uint32_t index = 0; index < local.service.size(); ++index) {
    const ServiceSocket& service = local.service[index];
    if (!service.fd.valid()) continue;
    for (uint32_t i = 0; i < batch; ++i) {
      rte_mbuf* m = take_buffer(spare, pool);
      if (m == nullptr) {
        ++counters.no_buffer;
        break;
      }
      auto* data = rte_pktmbuf_mtod(m, std::byte*);
      const ssize_t got =
          ::recv(service.fd.get(), data, rte_pktmbuf_tailroom(m), MSG_DONTWAIT | MSG_TRUNC);
      if (got < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ++io.service_rx_errors;
        keep_spare(spare, m);
        break;
      }
      if (static_cast<std::size_t>(got) > rte_pktmbuf_tailroom(m)) {  // truncated
        ++io.service_rx_errors;
        keep_spare(spare, m);
        continue;
      }
      m->data_len = static_cast<uint16_t>(got);
      m->pkt_len = static_cast<uint32_t>(got);
      ++io.service_rx_packets;
      set_data_type(m, wire::DataType::kDatagram);
      m->hash.fdir.hi = index;
      if (local_packet_st(m, now_ns)) {
        ++handled;
      } else {
        keep_spare(spare, m);
      }
    }
  }
  return handled;
}

void Gateway::Impl::deliver_local_st(rte_mbuf* m, const gw::RxEmit& emit) noexcept {
  gw::LocalIo& io = engine.local_io();
  const auto* payload = rte_pktmbuf_mtod(m, const std::byte*);
  if (data_type_of(m) == wire::DataType::kDatagram) {
    const gw::Endpoint* to = emit.service_deliver;
    int fd = -1;
    if (to != nullptr && emit.tunnel_index < local.service.size() &&
        local.service[emit.tunnel_index].fd.valid() &&
        local.service[emit.tunnel_index].ipv6 == to->ipv6) {
      fd = local.service[emit.tunnel_index].fd.get();
    } else if (to != nullptr) {
      fd = to->ipv6 ? local.sender_v6.get() : local.sender_v4.get();
    }
    if (fd < 0) {
      ++counters.local_dropped;
      rte_pktmbuf_free(m);
      return;
    }
    sockaddr_storage address{};
    socklen_t length = 0;
    if (to->ipv6) {
      auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
      v6->sin6_family = AF_INET6;
      v6->sin6_port = htons(to->port);
      std::memcpy(&v6->sin6_addr, to->address, 16);
      length = sizeof(sockaddr_in6);
    } else {
      auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
      v4->sin_family = AF_INET;
      v4->sin_port = htons(to->port);
      std::memcpy(&v4->sin_addr, to->address, 4);
      length = sizeof(sockaddr_in);
    }
    if (::sendto(fd, payload, m->data_len, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&address),
                 length) == static_cast<ssize_t>(m->data_len)) {
      ++io.service_tx_packets;
    } else {
      ++io.service_tx_errors;
    }
    rte_pktmbuf_free(m);
    return;
  }
  if (local.port) {
    auto* frame = reinterpret_cast<std::byte*>(rte_pktmbuf_prepend(m, kEtherHeaderBytes));
    if (frame == nullptr) {
      ++io.tun_tx_errors;
      rte_pktmbuf_free(m);
      return;
    }
    std::memcpy(frame, local.peer_mac.bytes, 6);
    std::memcpy(frame + 6, local.port->mac().bytes, 6);
    wire::store_be16(frame + 12,
                     data_type_of(m) == wire::DataType::kIpv6 ? kEtherTypeIpv6 : kEtherTypeIpv4);
    local.port->send_st(queue(), m);
    return;
  }
  if (local.tun) {
    if (::write(local.tun->fd(), payload, m->data_len) == static_cast<ssize_t>(m->data_len)) {
      ++io.tun_tx_packets;
    } else {
      ++io.tun_tx_errors;
    }
  } else {
    ++counters.local_dropped;
  }
  rte_pktmbuf_free(m);
}

void Gateway::Impl::flush_local_st() noexcept {
  if (!local.port) return;
  local.port->flush_st(queue());
  const EthCounters& eth = local.port->counters(queue());
  gw::LocalIo& io = engine.local_io();
  io.tun_tx_packets += eth.tx_packets - local_reported_tx_packets;
  io.tun_tx_errors += eth.tx_failed - local_reported_tx_failed;
  counters.tx_failed += eth.tx_failed - local_reported_tx_failed;
  local_reported_tx_packets = eth.tx_packets;
  local_reported_tx_failed = eth.tx_failed;
}

}  // namespace detwan::dataplane::dpdk

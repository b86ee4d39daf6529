// Hot path of an ethdev port: no exceptions, no allocation, no logging.
#include "dataplane/dpdk/port.h"

namespace detwan::dataplane::dpdk {

uint16_t EthPort::rx_burst_st(uint16_t queue, rte_mbuf** mbufs, uint16_t count) noexcept {
  const uint16_t got =
      rte_eth_rx_burst(port_id_, queue, mbufs, count < kMaxBurst ? count : kMaxBurst);
  EthCounters& counters = queues_[queue].counters;
  for (uint16_t i = 0; i < got; ++i) counters.rx_bytes += mbufs[i]->pkt_len;
  counters.rx_packets += got;
  return got;
}

void EthPort::send_st(uint16_t queue, rte_mbuf* mbuf) noexcept {
  Queue& q = queues_[queue];
  if (q.tx_count == kMaxBurst) flush_st(queue);
  q.tx_buffer[q.tx_count++] = mbuf;
}

void EthPort::flush_st(uint16_t queue) noexcept {
  Queue& q = queues_[queue];
  if (q.tx_count == 0) return;
  uint64_t bytes = 0;
  for (uint16_t i = 0; i < q.tx_count; ++i) bytes += q.tx_buffer[i]->pkt_len;
  const uint16_t sent = rte_eth_tx_burst(port_id_, queue, q.tx_buffer, q.tx_count);
  // The driver may free sent mbufs at once: the bytes were summed before.
  for (uint16_t i = sent; i < q.tx_count; ++i) {
    bytes -= q.tx_buffer[i]->pkt_len;
    rte_pktmbuf_free(q.tx_buffer[i]);
  }
  q.counters.tx_packets += sent;
  q.counters.tx_bytes += bytes;
  q.counters.tx_failed += static_cast<uint64_t>(q.tx_count - sent);
  q.tx_count = 0;
}

ChecksumState rx_ip_checksum_state(const rte_mbuf* mbuf) noexcept {
  switch (mbuf->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK) {
    case RTE_MBUF_F_RX_IP_CKSUM_GOOD:
      return ChecksumState::kGood;
    case RTE_MBUF_F_RX_IP_CKSUM_BAD:
      return ChecksumState::kBad;
    default:
      return ChecksumState::kUnknown;
  }
}

ChecksumState rx_udp_checksum_state(const rte_mbuf* mbuf) noexcept {
  switch (mbuf->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK) {
    case RTE_MBUF_F_RX_L4_CKSUM_GOOD:
      return ChecksumState::kGood;
    case RTE_MBUF_F_RX_L4_CKSUM_BAD:
      return ChecksumState::kBad;
    default:
      return ChecksumState::kUnknown;
  }
}

}  // namespace detwan::dataplane::dpdk

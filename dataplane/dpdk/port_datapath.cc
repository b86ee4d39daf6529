// Hot path of an ethdev port: no exceptions, no allocation, no logging.
#include "dataplane/dpdk/port.h"

namespace detwan::dataplane::dpdk {

uint16_t EthPort::rx_burst_st(rte_mbuf** mbufs, uint16_t count) noexcept {
  const uint16_t got = rte_eth_rx_burst(port_id_, 0, mbufs, count < kMaxBurst ? count : kMaxBurst);
  for (uint16_t i = 0; i < got; ++i) counters_.rx_bytes += mbufs[i]->pkt_len;
  counters_.rx_packets += got;
  return got;
}

void EthPort::send_st(rte_mbuf* mbuf) noexcept {
  if (tx_count_ == kMaxBurst) flush_st();
  tx_buffer_[tx_count_++] = mbuf;
}

void EthPort::flush_st() noexcept {
  if (tx_count_ == 0) return;
  uint64_t bytes = 0;
  for (uint16_t i = 0; i < tx_count_; ++i) bytes += tx_buffer_[i]->pkt_len;
  const uint16_t sent = rte_eth_tx_burst(port_id_, 0, tx_buffer_, tx_count_);
  // The driver may free sent mbufs at once: the bytes were summed before.
  for (uint16_t i = sent; i < tx_count_; ++i) {
    bytes -= tx_buffer_[i]->pkt_len;
    rte_pktmbuf_free(tx_buffer_[i]);
  }
  counters_.tx_packets += sent;
  counters_.tx_bytes += bytes;
  counters_.tx_failed += static_cast<uint64_t>(tx_count_ - sent);
  tx_count_ = 0;
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

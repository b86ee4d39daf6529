// Hot path of the DPDK backend: no exceptions, no allocation, no logging.
#include <algorithm>
#include <cstdint>

#include "common/clock.h"
#include "tools/wanem/dpdk/port.h"
#include "tools/wanem/run_loop.h"

namespace detwan::wanem::dpdk {

static_assert(Port<DpdkPort>);

uint32_t DpdkPort::rx_burst(Side side, uint64_t* handles, uint32_t count) noexcept {
  rte_mbuf* mbufs[kMaxBurst];
  const auto wanted = static_cast<uint16_t>(std::min(count, kMaxBurst));
  const uint16_t got = rte_eth_rx_burst(port_id_[index_of(side)], 0, mbufs, wanted);
  SideCounters& side_counters = counters_.side[index_of(side)];
  for (uint16_t i = 0; i < got; ++i) {
    handles[i] = reinterpret_cast<uintptr_t>(mbufs[i]);
    side_counters.rx_bytes += mbufs[i]->pkt_len;
  }
  side_counters.rx_packets += got;
  return got;
}

uint32_t DpdkPort::tx_burst(Side side, const uint64_t* handles, uint32_t count) noexcept {
  rte_mbuf* mbufs[kMaxBurst];
  const auto wanted = static_cast<uint16_t>(std::min(count, kMaxBurst));
  uint64_t bytes[kMaxBurst];
  for (uint16_t i = 0; i < wanted; ++i) {
    mbufs[i] = mbuf(handles[i]);
    bytes[i] = mbufs[i]->pkt_len;  // read before tx: the driver may free the mbuf at once
  }
  const uint16_t sent = rte_eth_tx_burst(port_id_[index_of(side)], 0, mbufs, wanted);
  SideCounters& side_counters = counters_.side[index_of(side)];
  for (uint16_t i = 0; i < sent; ++i) side_counters.tx_bytes += bytes[i];
  side_counters.tx_packets += sent;
  return sent;
}

common::Status DpdkPort::clone(uint64_t handle, uint64_t* copy) noexcept {
  rte_mbuf* duplicate = rte_pktmbuf_copy(mbuf(handle), pool_, 0, UINT32_MAX);
  if (duplicate == nullptr) return common::Status::kBusy;
  *copy = reinterpret_cast<uintptr_t>(duplicate);
  return common::Status::kOk;
}

common::Result<RunOutcome> forward(DpdkPort& port, const BackendRun& run) {
  // TSC clock: a busy-poll loop reads the time a few times per iteration.
  const common::TscClock clock;
  return run_forwarding(port, clock, run, port.pool_frames(), "dpdk");
}

}  // namespace detwan::wanem::dpdk

#pragma once
// One DPDK ethdev (a NIC, or a vdev such as net_ring, net_af_packet, net_memif) with one RX and
// one TX queue per shard of the gateway (gw/shard.h; RX: as many as the device has, up to that),
// as the gateway uses it: a WAN port (tunnel frames) or the optional local port
// (plain IP-in-Ethernet frames of the host side). Buffers are rte_mbufs from the gateway's pool.
//
// Setup (port.cc) returns Result errors naming the port ("wan_ports[0] (wan1): no DPDK device
// 'net_ring9' (devices: ...)"). Datapath (port_datapath.cc): rx_burst() and an l3fwd-style TX
// buffer (send() buffers, flush() hands the burst to the driver, frees what it refused and
// counts it). Datapath functions are owned by the gateway's poll thread (_st), never allocate,
// throw or log.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include "common/status.h"
#include "dataplane/dpdk/frame.h"
#include "dataplane/gw/engine.h"

namespace detwan::dataplane::dpdk {

struct EthPortOptions {
  std::string label;         // for messages: "wan_ports[0] (wan1)", "local port"
  std::string device;        // ethdev name as known to the EAL (vdev name, PCI address)
  std::string local_mac;     // "" = the device's own MAC
  uint16_t rx_queue_size = 1024;
  uint16_t tx_queue_size = 1024;
  uint32_t mtu_bytes = 1500;  // IP MTU; set on the device where it supports it
  bool want_checksum_offload = true;  // use IPv4/UDP checksum offloads the device has
  // Queue pairs wanted, one per shard. Every shard needs a TX queue of its own (an error names
  // the device if it has fewer); RX queues are capped at what the device has (the shards
  // beyond read nothing: the others dispatch to them).
  uint16_t queues = 1;
};

// Counters of one port, written by the poll thread only.
struct EthCounters {
  uint64_t rx_packets = 0, rx_bytes = 0, tx_packets = 0, tx_bytes = 0;
  uint64_t tx_failed = 0;   // frames the driver did not take (freed)
  uint64_t frame_drops[kFrameDropCount] = {};  // WAN ports: parse_wan_frame() rejections
  uint64_t encap_failed = 0;  // frames that could not be framed (no headroom, bad header)
};

class EthPort {
 public:
  static constexpr uint16_t kMaxBurst = 64;

  // Resolves options.device with rte_eth_dev_get_port_by_name, configures the RX and TX queues
  // (options.queues) fed from `pool`, enables the checksum offloads it has, starts it.
  static common::Result<std::unique_ptr<EthPort>> open(const EthPortOptions& options,
                                                       rte_mempool* pool);
  ~EthPort();  // stops and closes the device (frees any buffered TX frames first)
  EthPort(const EthPort&) = delete;
  EthPort& operator=(const EthPort&) = delete;

  [[nodiscard]] uint16_t port_id() const noexcept { return port_id_; }
  [[nodiscard]] const MacAddress& mac() const noexcept { return mac_; }
  [[nodiscard]] const std::string& label() const noexcept { return label_; }
  [[nodiscard]] bool tx_ip_checksum_offload() const noexcept { return tx_ip_checksum_; }
  [[nodiscard]] bool tx_udp_checksum_offload() const noexcept { return tx_udp_checksum_; }
  [[nodiscard]] uint16_t rx_queue_count() const noexcept { return rx_queues_; }
  [[nodiscard]] uint16_t tx_queue_count() const noexcept {
    return static_cast<uint16_t>(queues_.size());
  }
  // Counters of one queue (written by the thread that owns it), and their sum.
  [[nodiscard]] EthCounters& counters(uint16_t queue = 0) noexcept {
    return queues_[queue].counters;
  }
  [[nodiscard]] const EthCounters& counters(uint16_t queue = 0) const noexcept {
    return queues_[queue].counters;
  }
  [[nodiscard]] EthCounters total_counters() const noexcept;

  // ---- datapath (port_datapath.cc); each queue is owned by one thread ----
  // Up to `count` (<= kMaxBurst) frames received on RX queue `queue` (< rx_queue_count());
  // counts rx_packets/rx_bytes.
  [[nodiscard]] uint16_t rx_burst_st(uint16_t queue, rte_mbuf** mbufs, uint16_t count) noexcept;
  // Buffers one frame for TX queue `queue`; flushes first when the buffer is full. Takes
  // ownership.
  void send_st(uint16_t queue, rte_mbuf* mbuf) noexcept;
  // Hands every buffered frame of `queue` to the driver; frees and counts (tx_failed) what it
  // refuses.
  void flush_st(uint16_t queue) noexcept;
  [[nodiscard]] uint16_t pending_tx(uint16_t queue) const noexcept {
    return queues_[queue].tx_count;
  }
  // Queue 0: the whole port on one thread.
  [[nodiscard]] uint16_t rx_burst_st(rte_mbuf** mbufs, uint16_t count) noexcept {
    return rx_burst_st(0, mbufs, count);
  }
  void send_st(rte_mbuf* mbuf) noexcept { send_st(0, mbuf); }
  void flush_st() noexcept { flush_st(0); }

 private:
  EthPort() = default;

  struct alignas(64) Queue {  // one cache line apart: owned by different threads
    uint16_t tx_count = 0;
    rte_mbuf* tx_buffer[kMaxBurst] = {};
    EthCounters counters;
  };

  std::string label_;
  uint16_t port_id_ = 0;
  bool started_ = false;
  MacAddress mac_;
  bool tx_ip_checksum_ = false;
  bool tx_udp_checksum_ = false;
  uint16_t rx_queues_ = 1;
  std::vector<Queue> queues_;  // one per TX queue
};

// The mbuf behind a gateway buffer handle, and back.
[[nodiscard]] inline rte_mbuf* mbuf_of(uint64_t handle) noexcept {
  return reinterpret_cast<rte_mbuf*>(static_cast<uintptr_t>(handle));
}
[[nodiscard]] inline uint64_t handle_of(rte_mbuf* mbuf) noexcept {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(mbuf));
}

// What the NIC said about a received frame's checksums.
[[nodiscard]] ChecksumState rx_ip_checksum_state(const rte_mbuf* mbuf) noexcept;
[[nodiscard]] ChecksumState rx_udp_checksum_state(const rte_mbuf* mbuf) noexcept;

}  // namespace detwan::dataplane::dpdk

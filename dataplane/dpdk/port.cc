// Setup of one ethdev port of the gateway.
#include "dataplane/dpdk/port.h"

#include <algorithm>

#include <fmt/format.h>
#include <rte_errno.h>

#include "dataplane/dpdk/eal.h"

namespace detwan::dataplane::dpdk {
namespace {

std::string known_devices() {
  std::string known;
  uint16_t port = 0;
  RTE_ETH_FOREACH_DEV(port) {
    char name[RTE_ETH_NAME_MAX_LEN] = {};
    if (rte_eth_dev_get_name_by_port(port, name) == 0) {
      known += fmt::format("{}{}", known.empty() ? "" : ", ", name);
    }
  }
  return known.empty() ? "none: name one with --vdev in dpdk.eal" : known;
}

}  // namespace

common::Result<std::unique_ptr<EthPort>> EthPort::open(const EthPortOptions& options,
                                                       rte_mempool* pool) {
  std::unique_ptr<EthPort> port(new EthPort());
  port->label_ = options.label;
  const std::string& label = options.label;
  if (rte_eth_dev_get_port_by_name(options.device.c_str(), &port->port_id_) != 0) {
    return common::make_error(common::ErrorCode::kNotFound,
                              fmt::format("{}: no DPDK device '{}' (devices: {})", label,
                                          options.device, known_devices()));
  }
  const uint16_t id = port->port_id_;
  rte_eth_dev_info info{};
  if (rte_eth_dev_info_get(id, &info) != 0) {
    return std::unexpected(rte_error(common::ErrorCode::kIo, label + ": device info"));
  }
  rte_eth_conf conf{};
  if (options.want_checksum_offload) {
    const uint64_t tx_wanted = RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_UDP_CKSUM;
    const uint64_t rx_wanted = RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM;
    conf.txmode.offloads = info.tx_offload_capa & tx_wanted;
    conf.rxmode.offloads = info.rx_offload_capa & rx_wanted;
    port->tx_ip_checksum_ = (conf.txmode.offloads & RTE_ETH_TX_OFFLOAD_IPV4_CKSUM) != 0;
    port->tx_udp_checksum_ = (conf.txmode.offloads & RTE_ETH_TX_OFFLOAD_UDP_CKSUM) != 0;
  }
  const uint16_t wanted = options.queues == 0 ? 1 : options.queues;
  if (info.max_tx_queues < wanted) {
    return common::make_error(
        common::ErrorCode::kConfig,
        fmt::format("{}: device '{}' has {} TX queue(s), the gateway's {} shards need one each",
                    label, options.device, info.max_tx_queues, wanted));
  }
  port->rx_queues_ = std::max<uint16_t>(1, std::min<uint16_t>(wanted, info.max_rx_queues));
  port->queues_.resize(wanted);
  if (port->rx_queues_ > 1) {
    // Spread received flows over the RX queues where the device hashes (RSS); the shards pass
    // what is not theirs on (dispatch rings), so any spreading is correct.
    conf.rxmode.mq_mode = info.flow_type_rss_offloads != 0 ? RTE_ETH_MQ_RX_RSS : RTE_ETH_MQ_RX_NONE;
    conf.rx_adv_conf.rss_conf.rss_hf =
        info.flow_type_rss_offloads & (RTE_ETH_RSS_NONFRAG_IPV4_UDP | RTE_ETH_RSS_NONFRAG_IPV6_UDP);
  }
  if (rte_eth_dev_configure(id, port->rx_queues_, wanted, &conf) != 0) {
    return std::unexpected(rte_error(common::ErrorCode::kIo, label + ": configure"));
  }
  // Vdevs without an MTU notion (net_ring, net_null) say ENOTSUP; their frames are unlimited.
  const int mtu_status = rte_eth_dev_set_mtu(id, static_cast<uint16_t>(options.mtu_bytes));
  if (mtu_status != 0 && mtu_status != -ENOTSUP) {
    return common::make_error(common::ErrorCode::kConfig,
                              fmt::format("{}: device '{}' refuses MTU {}: {}", label,
                                          options.device, options.mtu_bytes,
                                          rte_strerror(-mtu_status)));
  }
  uint16_t rx_descriptors = options.rx_queue_size;
  uint16_t tx_descriptors = options.tx_queue_size;
  (void)rte_eth_dev_adjust_nb_rx_tx_desc(id, &rx_descriptors, &tx_descriptors);
  const int socket = rte_eth_dev_socket_id(id);
  const auto socket_id = static_cast<unsigned>(socket < 0 ? 0 : socket);
  rte_eth_rxconf rxconf = info.default_rxconf;
  rxconf.offloads = conf.rxmode.offloads;
  for (uint16_t q = 0; q < port->rx_queues_; ++q) {
    if (rte_eth_rx_queue_setup(id, q, rx_descriptors, socket_id, &rxconf, pool) != 0) {
      return std::unexpected(
          rte_error(common::ErrorCode::kIo, fmt::format("{}: RX queue {}", label, q)));
    }
  }
  rte_eth_txconf txconf = info.default_txconf;
  txconf.offloads = conf.txmode.offloads;
  for (uint16_t q = 0; q < wanted; ++q) {
    if (rte_eth_tx_queue_setup(id, q, tx_descriptors, socket_id, &txconf) != 0) {
      return std::unexpected(
          rte_error(common::ErrorCode::kIo, fmt::format("{}: TX queue {}", label, q)));
    }
  }
  if (options.local_mac.empty()) {
    rte_ether_addr address{};
    if (rte_eth_macaddr_get(id, &address) != 0) {
      return std::unexpected(rte_error(common::ErrorCode::kIo, label + ": read MAC address"));
    }
    std::copy(std::begin(address.addr_bytes), std::end(address.addr_bytes), port->mac_.bytes);
  } else if (!parse_mac(options.local_mac, &port->mac_)) {
    return common::make_error(
        common::ErrorCode::kConfig,
        fmt::format("{}: local_mac '{}' is not a MAC address like 02:00:00:00:00:01", label,
                    options.local_mac));
  } else {
    // Frames to the configured MAC must get through the device's filter: set it as the
    // device's address where possible, else listen promiscuously (vdevs usually are anyway).
    rte_ether_addr address{};
    std::copy(std::begin(port->mac_.bytes), std::end(port->mac_.bytes), address.addr_bytes);
    if (rte_eth_dev_default_mac_addr_set(id, &address) != 0) {
      (void)rte_eth_promiscuous_enable(id);
    }
  }
  if (rte_eth_dev_start(id) != 0) {
    return std::unexpected(rte_error(common::ErrorCode::kIo, label + ": start"));
  }
  port->started_ = true;
  return port;
}

EthCounters EthPort::total_counters() const noexcept {
  EthCounters sum;
  for (const Queue& q : queues_) {
    const EthCounters& c = q.counters;
    sum.rx_packets += c.rx_packets;
    sum.rx_bytes += c.rx_bytes;
    sum.tx_packets += c.tx_packets;
    sum.tx_bytes += c.tx_bytes;
    sum.tx_failed += c.tx_failed;
    sum.encap_failed += c.encap_failed;
    for (int i = 0; i < kFrameDropCount; ++i) sum.frame_drops[i] += c.frame_drops[i];
  }
  return sum;
}

EthPort::~EthPort() {
  for (Queue& q : queues_) {
    for (uint16_t i = 0; i < q.tx_count; ++i) rte_pktmbuf_free(q.tx_buffer[i]);
    q.tx_count = 0;
  }
  if (started_) {
    (void)rte_eth_dev_stop(port_id_);
    (void)rte_eth_dev_close(port_id_);
  }
}

}  // namespace detwan::dataplane::dpdk

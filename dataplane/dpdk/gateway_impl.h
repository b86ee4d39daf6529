#pragma once
// Private state of the DPDK gateway, shared by its setup (gateway.cc, local.cc) and its loop
// (gateway_datapath.cc, local_datapath.cc). Not part of the backend's interface.
#include <memory>
#include <optional>
#include <vector>

#include "common/unique_fd.h"
#include "dataplane/dpdk/frame.h"
#include "dataplane/dpdk/gateway.h"
#include "dataplane/dpdk/port.h"
#include "dataplane/gw/tun.h"

namespace detwan::dataplane::dpdk {

struct WanPortState {
  std::unique_ptr<EthPort> port;
  std::string device;
  WanAddress address;         // our MAC + local endpoint: what received frames must match
  MacAddress next_hop_mac;    // destination of every frame we send
  gw::PortIo* io = nullptr;   // the engine's I/O counters of this port
};

struct ServiceSocket {
  common::UniqueFd fd;
  uint16_t port = 0;  // bound UDP port (host order)
  bool ipv6 = false;
};

// The host side: TUN or a DPDK local port, plus the service sockets.
struct LocalSide {
  std::optional<gw::TunDevice> tun;
  std::unique_ptr<EthPort> port;
  MacAddress peer_mac;
  // Per engine tunnel index as of open(); fd invalid if it has no listener. Tunnels added at
  // run time lie beyond it (or reuse an index without one): look up in bounds.
  std::vector<ServiceSocket> service;
  common::UniqueFd sender_v4, sender_v6;  // for tunnels that deliver but do not listen
  rte_mbuf* spare = nullptr;  // kept between polls so an empty read costs no pool round trip
};

// The outer-header tag kept in mbuf->hash.usr between submit/receive and transmit/release:
// the tunnel payload's wire::DataType.
inline void set_data_type(rte_mbuf* mbuf, wire::DataType type) noexcept {
  mbuf->hash.usr = static_cast<uint32_t>(type);
}
[[nodiscard]] inline wire::DataType data_type_of(const rte_mbuf* mbuf) noexcept {
  return static_cast<wire::DataType>(mbuf->hash.usr);
}

struct Gateway::Impl {
  Impl(gw::Engine& engine_ref, const gw::GatewayConfig& config_ref)
      : engine(engine_ref), config(config_ref) {}
  ~Impl();

  gw::Engine& engine;
  const gw::GatewayConfig& config;
  GatewayOptions options;
  rte_mempool* pool = nullptr;
  uint32_t batch = 32;
  std::vector<WanPortState> wan;
  LocalSide local;
  BackendCounters counters;

  // ---- datapath (gateway_datapath.cc, local_datapath.cc) ----
  uint32_t wan_rx_st(int64_t now_ns) noexcept;
  uint32_t transmit_st(int64_t now_ns, uint32_t max_frames) noexcept;  // no flush
  void flush_wan_st() noexcept;
  uint32_t release_st(int64_t now_ns) noexcept;
  uint32_t local_rx_st(int64_t now_ns) noexcept;
  void send_data_st(const gw::TxEmit& emit) noexcept;
  void send_control_st(const gw::TxEmit& emit) noexcept;
  // Takes the mbuf (payload = the tunnel payload) and delivers or frees it.
  void deliver_local_st(rte_mbuf* mbuf, const gw::RxEmit& emit) noexcept;
  void flush_local_st() noexcept;
};

// Setup of the local side (local.cc).
common::Result<void> open_local_side(Gateway::Impl& impl);

}  // namespace detwan::dataplane::dpdk

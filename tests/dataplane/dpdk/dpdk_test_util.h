#pragma once
// Shared by the DPDK backend's tests and its forwarding benchmark: one EAL per process without
// hugepages, back-to-back net_ring ethdev pairs (rte_eth_from_rings), two-gateway
// configurations, and IPv4/UDP frames to inject on a local port.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <rte_eal.h>
#include <rte_eth_ring.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include "common/status.h"
#include "dataplane/dpdk/eal.h"
#include "dataplane/dpdk/frame.h"
#include "dataplane/gw/config.h"

namespace detwan::dataplane::dpdk::testing {

// The EAL of a test process: no hugepages, no PCI, a file prefix unique to the process (added
// by init_eal), lcores 0 and 1 both allowed on CPUs 0-1 so that threads the test starts are
// not pinned to one CPU. Returns an error if the EAL cannot start.
inline const common::Result<EalInit>& test_eal() {
  static const common::Result<EalInit> eal = init_eal(
      {"--no-huge", "-m", "256", "--no-pci", "--no-shconf", "--log-level=*:error", "--lcores",
       "0@(0-1),1@(0-1)"});
  return eal;
}

// Cleans the EAL up after the last test (removes its runtime files).
class EalCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    if (!test_eal() || !test_eal()->initialised) return;
    const std::string runtime_dir = rte_eal_get_runtime_dir();
    cleanup_eal();
    std::error_code ignored;  // the directory is this process' own (unique file prefix)
    std::filesystem::remove_all(runtime_dir, ignored);
  }
};
inline ::testing::Environment* const kEalCleanup =
    ::testing::AddGlobalTestEnvironment(new EalCleanup);

// A ring both ends of which the test may use: a DPDK rte_ring that outlives the ethdevs.
struct RingDeleter {
  void operator()(rte_ring* ring) const noexcept { rte_ring_free(ring); }
};
using RingPtr = std::unique_ptr<rte_ring, RingDeleter>;

// flags: 0 (multi-producer, multi-consumer) or RING_F_SP_ENQ | RING_F_SC_DEQ for a ring with
// one thread at each end (net_ring then counts without atomics: its per-queue counters share
// cache lines, so atomic adds on them make queues of different threads interfere).
inline RingPtr make_ring(const std::string& name, unsigned size = 1024, unsigned flags = 0) {
  return RingPtr(rte_ring_create(name.c_str(), size, 0, flags));
}

// An ethdev named `name` that receives what is enqueued on `rx` and transmits into `tx`.
inline int ring_port(const std::string& name, rte_ring* rx, rte_ring* tx) {
  rte_ring* rx_rings[1] = {rx};
  rte_ring* tx_rings[1] = {tx};
  return rte_eth_from_rings(name.c_str(), rx_rings, 1, tx_rings, 1, 0);
}

inline gw::Endpoint endpoint(const char* text) {
  auto parsed = gw::parse_endpoint(text);
  return parsed ? *parsed : gw::Endpoint{};
}
inline gw::Prefix prefix(const char* text) {
  auto parsed = gw::parse_prefix(text);
  return parsed ? *parsed : gw::Prefix{};
}

inline const char* kMacA = "02:00:00:00:00:0a";  // gateway A's WAN port
inline const char* kMacB = "02:00:00:00:00:0b";  // gateway B's WAN port
inline const char* kHostMacA = "02:00:00:00:01:0a";  // host behind A (its local port's peer)
inline const char* kHostMacB = "02:00:00:00:01:0b";

// One gateway of the pair A (10.0.0.1, site 10.20.1.0/24) <-> B (10.0.0.2, site 10.20.2.0/24):
// WAN port on `wan_device`, tunnel 7 towards the other site owning slots 0-49 of a 10 Gbit/s,
// 1 ms / 100-slot cycle at 1 Gbit/s, bound 0 (released on receipt), no TUN.
inline gw::GatewayConfig pair_config(bool is_a, const std::string& wan_device) {
  gw::GatewayConfig config;
  config.name = is_a ? "a" : "b";
  config.backend = gw::Backend::kDpdk;
  config.timing = gw::TimingMode::kBusy;
  config.tun.enabled = false;
  config.dpdk.mbuf_count = 2047;
  gw::WanPortConfig port;
  port.name = "wan0";
  port.local = endpoint(is_a ? "10.0.0.1:4789" : "10.0.0.2:4789");
  port.line_rate_bps = 10'000'000'000;
  port.capacity_frames = 4096;
  port.dpdk = gw::DpdkPortConfig{wan_device, is_a ? kMacA : kMacB, is_a ? kMacB : kMacA, 512,
                                 512};
  config.wan_ports.push_back(port);
  gw::PeerConfig peer;
  peer.name = is_a ? "b" : "a";
  peer.wan_port = "wan0";
  peer.endpoint = endpoint(is_a ? "10.0.0.2:4789" : "10.0.0.1:4789");
  peer.clock_offset_ns = 0;
  config.peers.push_back(peer);
  gw::TunnelConfig tunnel;
  tunnel.id = 7;
  tunnel.peer = peer.name;
  tunnel.rate_bps = 1'000'000'000;
  for (uint32_t slot = 0; slot < 50; ++slot) tunnel.slots.push_back(slot);
  tunnel.dst_prefixes.push_back(prefix(is_a ? "10.20.2.0/24" : "10.20.1.0/24"));
  config.tunnels.push_back(tunnel);
  return config;
}

// An ethdev with one queue pair per ring pair: RX queue q receives from rx[q], TX queue q
// transmits into tx[q] (the gateway's shard q uses queue q).
inline int ring_port_queues(const std::string& name, std::vector<rte_ring*> rx,
                            std::vector<rte_ring*> tx) {
  return rte_eth_from_rings(name.c_str(), rx.data(), static_cast<unsigned>(rx.size()), tx.data(),
                            static_cast<unsigned>(tx.size()), 0);
}

// pair_config with `tunnels` tunnels 1..N instead of tunnel 7 (for the sharded gateway): tunnel
// i owns slot i-1 of a `slot_count`-slot cycle of `cycle_ns` on a `line_rate_bps` port (the other
// slots are unreserved; a slot must hold more than one 1518-byte frame), reserves 80 % of its
// nominal share, and carries the hosts 10.20.{2|1}.i (A sends to .2.i).
inline gw::GatewayConfig many_tunnels_config(bool is_a, const std::string& wan_device,
                                             uint32_t tunnels, uint64_t line_rate_bps,
                                             int64_t cycle_ns, uint32_t slot_count = 100) {
  gw::GatewayConfig config = pair_config(is_a, wan_device);
  gw::WanPortConfig& port = config.wan_ports[0];
  port.line_rate_bps = line_rate_bps;
  port.cycle_ns = cycle_ns;
  port.slot_count = slot_count;
  const gw::TunnelConfig base = config.tunnels[0];
  config.tunnels.clear();
  for (uint32_t i = 1; i <= tunnels && i <= slot_count; ++i) {
    gw::TunnelConfig tunnel = base;
    tunnel.id = i;
    tunnel.rate_bps = line_rate_bps / slot_count * 8 / 10;
    tunnel.queue_frames = 512;
    tunnel.slots = {i - 1};
    tunnel.dst_prefixes = {prefix(fmt::format("10.20.{}.{}/32", is_a ? 2 : 1, i).c_str())};
    config.tunnels.push_back(tunnel);
  }
  return config;
}

// An Ethernet + IPv4 + UDP frame from `from` to `to` with `payload_bytes` of a pattern that
// starts with `tag`, as a host behind a gateway sends it to the gateway's local port.
inline std::vector<std::byte> host_frame(const char* from, const char* to, const char* dst_mac,
                                         std::size_t payload_bytes, uint32_t tag) {
  const gw::Endpoint source = endpoint(from);
  const gw::Endpoint destination = endpoint(to);
  std::vector<std::byte> frame(outer_header_bytes(false) + payload_bytes);
  for (std::size_t i = 0; i < payload_bytes; ++i) {
    frame[outer_header_bytes(false) + i] = static_cast<std::byte>((tag >> ((i % 4) * 8)) + i);
  }
  OuterSpec spec;
  (void)parse_mac("02:00:00:00:02:00", &spec.source_mac);
  (void)parse_mac(dst_mac, &spec.destination_mac);
  spec.source = &source;
  spec.destination = &destination;
  (void)build_outer_headers(frame, spec, false, false);
  return frame;
}

// Copies bytes into a fresh mbuf of `pool`; nullptr if the pool is empty.
inline rte_mbuf* mbuf_from(rte_mempool* pool, const std::vector<std::byte>& bytes) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool);
  if (m == nullptr) return nullptr;
  char* data = rte_pktmbuf_append(m, static_cast<uint16_t>(bytes.size()));
  if (data == nullptr) {
    rte_pktmbuf_free(m);
    return nullptr;
  }
  std::memcpy(data, bytes.data(), bytes.size());
  return m;
}

inline std::vector<std::byte> bytes_of(const rte_mbuf* m) {
  const auto* data = rte_pktmbuf_mtod(m, const std::byte*);
  return std::vector<std::byte>(data, data + m->data_len);
}

}  // namespace detwan::dataplane::dpdk::testing

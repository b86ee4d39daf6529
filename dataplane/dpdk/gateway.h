#pragma once
// The DPDK backend of detwan-gw: the gateway's WAN ports are DPDK ethdevs (NICs or vdevs), the
// engine (dataplane/gw/engine.h) does everything tunnel-related, and one busy-polling lcore runs
// the loop: RX bursts -> parse Ethernet/IP/UDP -> engine; engine TX -> prepend tunnel header,
// UDP, IP, Ethernet in the mbuf's headroom -> TX burst; released packets -> the local side.
//
// Local side: the kernel TUN device (config.tun) and the tunnels' UDP service sockets, copied
// into/out of mbufs; or, for kernel bypass on the host side (tests, the forwarding benchmark),
// a DPDK "local port" carrying plain IPv4/IPv6 packets in Ethernet frames (GatewayOptions;
// it replaces TUN when set).
//
// Threading: open() and the destructor on any thread; everything else on the one thread that
// owns the engine (_st). The EAL must be initialised first (init_eal(), eal.h); run() does it.
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "dataplane/gw/run_context.h"

struct rte_mempool;

namespace detwan::dataplane::gw {
class ControlServer;
}

namespace detwan::dataplane::dpdk {

class TscTaiClock;  // gateway_impl.h

// Host side over a DPDK ethdev instead of TUN: frames received there must be Ethernet +
// IPv4/IPv6 (the Ethernet header is stripped and the IP packet submitted like a TUN read);
// released IP packets leave with an Ethernet header from the port's MAC to `peer_mac`.
struct LocalPortOptions {
  std::string device;    // ethdev name, e.g. "net_ring_host0"
  std::string peer_mac;  // destination MAC of released packets (required)
  uint16_t rx_queue_size = 1024;
  uint16_t tx_queue_size = 1024;
};

struct GatewayOptions {
  std::optional<LocalPortOptions> local_port;
  // Tunables of the loop, with their defaults.
  int64_t control_poll_interval_ns = 1'000'000;  // control server poll (<= 10 ms, run_context.h)
  // timing: low-cpu only. An idle loop sleeps until the engine's next event, at most
  // idle_sleep_ns; the longer it has been idle, the longer it may sleep: idle time / 8, up to
  // idle_sleep_max_ns. A wake-up costs 10-50 µs of CPU on a VM (seen: 50 µs sleeps took a
  // core), so a gateway with no traffic must not wake 20,000 times a second; the price is up to
  // idle_sleep_max_ns of delay for the first packet after >= 8 x that of silence (a packet
  // the engine holds is released on time: its release is the next event).
  int64_t idle_sleep_ns = 50'000;
  int64_t idle_sleep_max_ns = 1'000'000;
  bool checksum_offload = true;  // use the device's IPv4/UDP checksum offloads if it has them
};

// The longest idle sleep of the low-cpu loop after `idle_ns` without work: idle / 8, at least
// min_ns, at most max_ns (GatewayOptions::idle_sleep_ns / idle_sleep_max_ns).
[[nodiscard]] constexpr int64_t idle_sleep_cap_ns(int64_t idle_ns, int64_t min_ns,
                                                  int64_t max_ns) noexcept {
  const int64_t grown = idle_ns / 8;
  if (grown < min_ns) return min_ns;
  return grown > max_ns ? (max_ns > min_ns ? max_ns : min_ns) : grown;
}

// Counters of the backend beyond the engine's PortIo/LocalIo (which it also feeds).
struct BackendCounters {
  uint64_t wan_frame_drops_total = 0;  // sum of parse_wan_frame() rejections, all ports
  uint64_t encap_failed = 0;           // data/control frames that could not be framed
  uint64_t tx_failed = 0;              // frames the drivers refused (freed)
  uint64_t no_buffer = 0;              // mbuf pool empty (TUN/service reads, control frames)
  uint64_t local_dropped = 0;          // released packets the local side could not deliver
  uint64_t loop_iterations = 0;
  // Sharded gateway: packets handed to the shard that owns their tunnel, and those lost because
  // its ring was full.
  uint64_t dispatched = 0, dispatch_dropped = 0;
  // TSC cycles spent per phase of poll_once_st (rte_get_tsc_hz() per second), engine included:
  // WAN RX (parse + engine receive), local RX (+ engine submit), control timers, TX (engine
  // schedule + encapsulation + TX burst), release (engine playout + local delivery).
  uint64_t cycles_wan_rx = 0, cycles_local_rx = 0, cycles_control = 0, cycles_transmit = 0,
           cycles_release = 0;
};

class Gateway {
 public:
  // Creates the mbuf pool (config.dpdk.mbuf_count, sized for the largest MTU) and opens every
  // WAN port (config.wan_ports[i].dpdk), the TUN device if config.tun.enabled and no local port
  // is given, and the service sockets. Errors name the port/field/device.
  static common::Result<std::unique_ptr<Gateway>> open(gw::Engine& engine,
                                                       const gw::GatewayConfig& config,
                                                       const GatewayOptions& options = {});
  // A gateway spread over cores (gw/shard.h): engines[k] is shard k (created with ShardSpec{k,
  // N}); returns one Gateway per shard, each to be polled by its own thread. They share the pool,
  // the devices (each shard has queue k of every device: its own TX queue, and RX queue k where
  // the device has one) and the host side (shard 0 reads TUN and the service sockets). A shard
  // passes a packet whose tunnel another shard owns to that shard's ring (software dispatch);
  // where the device steers the tunnel's frames to the owner's RX queue (flow rules installed
  // here when the shard count is a power of two and the device takes them, flow_steering.h; or
  // the peer's shard k sending on queue k) nothing is passed. The schedule stays exact: see
  // shard.h.
  static common::Result<std::vector<std::unique_ptr<Gateway>>> open_shards(
      const std::vector<gw::Engine*>& engines, const gw::GatewayConfig& config,
      const GatewayOptions& options = {});
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  // One iteration of the loop at time now_ns (TAI, or virtual in tests): WAN RX, local RX,
  // control timers, TX of every due frame, release of every due packet, TX drain. Returns the
  // number of packets it handled (0 = idle). Never blocks.
  uint32_t poll_once_st(int64_t now_ns) noexcept;

  // The busy loop: poll_once_st() with the TSC converted to TAI, control->poll_st() and
  // admin->poll_st() (either may be nullptr) every control_poll_interval_ns, until `stop`.
  // Drains nothing after stop: frames still queued in the engine are freed with the gateway.
  void run_st(std::atomic<bool>& stop, gw::ControlServer* control,
              gw::ControlServer* admin = nullptr);
  // The busy loop of one shard of several (open_shards), on the shards' common clock. Shard 0
  // serves `control` and `admin` for the whole gateway (gw::answer_sharded_request over
  // `engines`, every shard's engine by index) with the other shards paused while it answers;
  // the others serve nothing and stop for those pauses. run_shards() calls it on each lcore.
  void run_shard_st(std::atomic<bool>& stop, const TscTaiClock& clock,
                    const std::vector<gw::Engine*>& engines, gw::ControlServer* control,
                    gw::ControlServer* admin);

  [[nodiscard]] BackendCounters counters() const noexcept;
  // {"wan_ports":[{"name":..,"device":..,"port_id":..,"rx_packets":..,...,
  //  "frame_drops":{"other_mac":0,...},"rx_steering":"flow_rules"|"dispatch"|"none"}],
  //  "local":{...},"no_buffer":..,...}
  [[nodiscard]] std::string counters_json() const;
  [[nodiscard]] uint16_t wan_port_id(uint32_t port_index) const noexcept;
  // With several shards, per WAN port: how its frames reach their owner shard (flow_steering.h):
  // "wan_ports[0] (wan0): 2 flow rules", or why the device does not steer them (then RSS and the
  // dispatch rings do). Empty with one shard.
  [[nodiscard]] const std::vector<std::string>& wan_steering_notes() const noexcept;
  [[nodiscard]] rte_mempool* pool() const noexcept;
  // UDP port the service socket of tunnel_index is bound to (0 if it has none, or the tunnel was
  // added at run time: service sockets exist only for the file's tunnels); for tests that bind
  // to port 0.
  [[nodiscard]] uint16_t service_port(uint32_t tunnel_index) const noexcept;

  struct Impl;

 private:
  friend common::Result<void> run_shards(std::vector<std::unique_ptr<Gateway>>& shards,
                                         const std::vector<gw::Engine*>& engines,
                                         const std::vector<uint32_t>& lcores,
                                         std::atomic<bool>& stop, gw::ControlServer* control,
                                         gw::ControlServer* admin);
  explicit Gateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Runs the shards of one gateway (open_shards, engines[k] = shard k's engine) until `stop`:
// shard k on lcores[k] (an lcore enabled by the EAL; lcores[0] may be the calling main lcore,
// which then runs shard 0 itself), all on one TSC time base. Shard 0 serves `control` and
// `admin`. Errors name field 'dpdk.lcores'. Must be called on the main lcore.
common::Result<void> run_shards(std::vector<std::unique_ptr<Gateway>>& shards,
                                const std::vector<gw::Engine*>& engines,
                                const std::vector<uint32_t>& lcores, std::atomic<bool>& stop,
                                gw::ControlServer* control, gw::ControlServer* admin);

// The backend entry point (run_context.h): initialises the EAL from config.dpdk.eal_args,
// opens the gateway, runs the loop on the calling thread — or on config.dpdk.lcore if it names
// a worker lcore, the calling thread waiting for it — until context.stop, closes everything and,
// if it initialised the EAL, cleans it up (so it runs once per process). With
// config.dpdk.lcores (several): context.engine must be shard 0 of that many (ShardSpec); the
// other shards' engines are made here with its epoch, and run_shards runs them all.
// Must be called on the main lcore.
common::Result<void> run(gw::RunContext& context);

}  // namespace detwan::dataplane::dpdk

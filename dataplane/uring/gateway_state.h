#pragma once
// Private to dataplane/uring/gateway*.cc: what Gateway::open() builds and the loop runs on.
#include <cstdint>
#include <optional>
#include <vector>

#include <liburing.h>

#include "common/status.h"
#include "dataplane/gw/config.h"
#include "dataplane/gw/run_context.h"
#include "dataplane/gw/tun.h"
#include "dataplane/uring/buffer_pool.h"
#include "dataplane/uring/port.h"
#include "dataplane/uring/tun_offload.h"
#include "dataplane/uring/wan_batch.h"

namespace detwan::dataplane::uring {

// Receives kept in flight per socket/device: enough to absorb a burst between two loop turns
// without leaning on the kernel's socket buffer, few enough to leave buffers for the engine.
inline constexpr uint32_t kMaxWanReceiveDepth = 16;
inline constexpr uint32_t kLocalReceiveDepth = 16;

// A tunnel's service sockets: `listen` receives the application's datagrams (and, when the
// families match, sends the far side's to service_deliver, so the application sees them come
// from the service port); `sender` is an unbound socket used when they do not.
struct ServiceSockets {
  std::optional<UdpSocket> listen;
  std::optional<UdpSocket> sender;
  std::optional<gw::Endpoint> deliver;
  [[nodiscard]] const UdpSocket* deliver_socket() const noexcept {
    if (sender) return &*sender;
    return listen ? &*listen : nullptr;
  }
};

struct ShardGroup;  // shards.h

// A shard's backend counters (shards.h): read by shard 0 while the others are paused, and
// after the threads ended.
struct ShardCounters {
  uint64_t loop_iterations = 0;
  uint64_t tun_dispatched = 0;      // TUN packets read here for another shard's tunnel
  uint64_t wan_misdirected = 0;     // WAN datagrams of another shard's tunnel received here
  uint64_t dispatched = 0;          // both, handed to the owner's dispatch ring
  uint64_t dispatch_dropped = 0;    // both, lost: the owner's ring was full
  uint64_t dispatch_received = 0;   // taken from the other shards' rings into this engine
  uint64_t dispatch_no_buffer = 0;  // left in a ring for a later turn: no free buffer here
};

// One shard's share of the gateway (one per shard; a gateway of one shard has one).
struct GatewayState {
  GatewayState() = default;
  GatewayState(const GatewayState&) = delete;
  GatewayState& operator=(const GatewayState&) = delete;
  // The ring goes first: io_uring_queue_exit() cancels and waits for what is in flight, which
  // still points into the buffers and uses the sockets.
  ~GatewayState() {
    if (ring_open) io_uring_queue_exit(&ring);
  }

  gw::GatewayConfig config;  // as given to open()
  std::optional<BufferPool> pool;
  std::vector<UdpSocket> wan;            // config.wan_ports order
  std::vector<ServiceSockets> services;  // config.tunnels order
  std::optional<gw::TunDevice> tun;      // shard 0 only: the device and every queue's descriptor
  int tun_fd = -1;                       // this shard's TUN queue, -1: no TUN device
  uint32_t tun_header_bytes = 0;         // its virtio-net header in front of each packet
  uint32_t shard = 0;                    // this shard's index (shard.h)
  ShardGroup* group = nullptr;           // nullptr: a gateway of one shard
  int cpu = -1;                          // pin the datapath thread here; -1: no pinning
  ShardCounters counters;
  uint32_t wan_receive_depth = 1;
  // UDP GSO batches (wan_batch.h), here rather than in the loop's state because a send in flight
  // points at them until io_uring_queue_exit(); gso_enabled per WAN port (config.wan_gso, and
  // off once the port's route refused a batch).
  std::vector<GsoSend> gso_sends;
  std::vector<uint8_t> gso_enabled;
  // UDP GRO receives (wan_batch.h): wan_receive_depth per WAN port with gro_enabled, in port
  // order; gro_enabled per port (config.wan_gro and the kernel took UDP_GRO).
  std::vector<std::byte> large_memory;
  std::vector<LargeReceive> large_receives;
  std::vector<uint8_t> gro_enabled;
  // UDP GSO runs written to the TUN device (tun_offload.h), here for the same reason as
  // gso_sends; tun_gso: tun.offload, and off once the device refused a run.
  std::vector<TunRun> tun_runs;
  bool tun_gso = false;
  io_uring ring{};
  bool ring_open = false;
  // Low-cpu timing: the ring defers its completion work to the loop's own waits
  // (IORING_SETUP_DEFER_TASKRUN, single issuer), so the loop can sleep outside the ring while
  // arrivals pile up (timing.h, blind sleeps); opened disabled, enabled by the loop's thread.
  bool deferred_taskrun = false;
  bool ran = false;
};

// The loop (gateway_datapath.cc). Runs until context.stop; setup problems found on entry
// (config mismatch, CPU pinning) are returned before anything is submitted.
common::Result<void> run_datapath(GatewayState& state, gw::RunContext& context);

}  // namespace detwan::dataplane::uring

#pragma once
// The io_uring backend of detwan-gw: UDP sockets on the WAN ports, the TUN device and the
// tunnels' service sockets, all read and written through one io_uring on the datapath thread,
// around the sans-I/O gw::Engine. Works unprivileged (CAP_NET_ADMIN only for the TUN device).
//
//   run(context)      open everything for context.config, run the loop until context.stop, close.
//
// The two steps separately, for callers that must know the bound ports before they build the
// engine (a WAN or service endpoint with port 0 binds a free port; tests start two gateways on
// port 0 and then tell each the other's endpoint):
//   auto gateway = Gateway::open(config);        // binds, creates the TUN device and the ring
//   gateway->wan_endpoint(0) ...                 // the endpoints actually bound
//   gateway->run(context);                       // context.config: the same ports and tunnels
//
// Timing (config.timing):
//   low-cpu  submit, then sleep in io_uring_submit_and_wait_timeout until the engine's next
//            event (TAI deadline turned into a relative timeout, timer slack 1 ns) or a
//            completion; the default, costs almost no CPU when idle.
//   busy     pin to config.cpu, never sleep: peek completions and read the TSC in a loop.
//            Lowest departure and playout error, one full core.
//
// Errors: setup returns an Error naming the device or endpoint; the loop itself never fails
// (errors are counted in engine.port_io()/local_io()).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "common/status.h"
#include "dataplane/gw/config.h"
#include "dataplane/gw/run_context.h"

namespace detwan::dataplane::uring {

struct GatewayShards;  // shards.h

// Several shards (config.shards > 1, dataplane/uring/shards.h): each shard's own counters.
struct ShardStats {
  uint64_t loop_iterations = 0;
  uint64_t tun_dispatched = 0;     // TUN packets this shard read for another shard's tunnel
  uint64_t wan_misdirected = 0;    // WAN datagrams of another shard's tunnel that reached it
  uint64_t dispatched = 0;         // both, handed to the owner's dispatch ring
  uint64_t dispatch_dropped = 0;   // both, lost to a full ring
  uint64_t dispatch_received = 0;  // taken from the others' rings into this shard's engine
};

class Gateway {
 public:
  struct OpenOptions {
    // Several shards: attach the reuseport program that steers WAN datagrams to the owner of
    // their tunnel. false (tests only): the kernel's 4-tuple hash picks the socket, and the
    // datagrams that reach another shard are dispatched (ShardStats::wan_misdirected).
    bool steer_wan = true;
  };
  // Opens the packet buffers, one UDP socket per WAN port, one per tunnel with a service port
  // (plus a sending socket where the service_deliver endpoint's family differs), the TUN device
  // if config.tun.enabled, and the ring; with config.shards = N > 1, all of it per shard
  // (shards.h: N sockets per WAN port in one reuseport group, an N-queue TUN device, a tunnel's
  // service sockets in its owner shard). Errors: kConfig (sizes), kIo (naming what failed).
  static common::Result<std::unique_ptr<Gateway>> open(const gw::GatewayConfig& config);
  static common::Result<std::unique_ptr<Gateway>> open(const gw::GatewayConfig& config,
                                                       const OpenOptions& options);
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  // The endpoint WAN port `port` (config order) is bound to, its port resolved.
  [[nodiscard]] gw::Endpoint wan_endpoint(size_t port) const;
  // The endpoint tunnel `tunnel` (config order) listens on for service datagrams, if it has one.
  [[nodiscard]] std::optional<gw::Endpoint> service_endpoint(size_t tunnel) const;

  // Runs the datapath on the calling thread until context.stop is set, then cancels every
  // operation in flight. context.config must have the same WAN ports (count, address family)
  // and tunnels (ids, service ports) as the config given to open(); kConfig otherwise.
  // Several shards: context.engine must have been created as shard 0 of N (gw::ShardSpec, with
  // an epoch); run() creates shards 1.. from context.config with its epoch, runs them on threads
  // of their own and shard 0 (and context.control/admin, for the whole gateway) here, and
  // returns when all have stopped.
  common::Result<void> run(gw::RunContext& context);

  [[nodiscard]] uint32_t shard_count() const;
  // Shard k's engine (k >= 1), created by run() and kept until the Gateway is destroyed;
  // nullptr before run() and for shard 0 (context.engine). Read it once run() returned.
  [[nodiscard]] const gw::Engine* shard_engine(uint32_t shard) const;
  // Shard k's backend counters; read once run() returned (or from the control socket's stats,
  // "backend_shards").
  [[nodiscard]] ShardStats shard_stats(uint32_t shard) const;

 private:
  explicit Gateway(std::unique_ptr<GatewayShards> shards);
  std::unique_ptr<GatewayShards> shards_;
};

// open(context.config), then run(context).
common::Result<void> run(gw::RunContext& context);

}  // namespace detwan::dataplane::uring

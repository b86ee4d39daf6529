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
#include <memory>
#include <optional>

#include "common/status.h"
#include "dataplane/gw/config.h"
#include "dataplane/gw/run_context.h"

namespace detwan::dataplane::uring {

struct GatewayState;  // gateway_state.h

class Gateway {
 public:
  // Opens the packet buffers, one UDP socket per WAN port, one per tunnel with a service port
  // (plus a sending socket where the service_deliver endpoint's family differs), the TUN device
  // if config.tun.enabled, and the ring. Errors: kConfig (sizes), kIo (naming what failed).
  static common::Result<std::unique_ptr<Gateway>> open(const gw::GatewayConfig& config);
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
  common::Result<void> run(gw::RunContext& context);

 private:
  explicit Gateway(std::unique_ptr<GatewayState> state);
  std::unique_ptr<GatewayState> state_;
};

// open(context.config), then run(context).
common::Result<void> run(gw::RunContext& context);

}  // namespace detwan::dataplane::uring

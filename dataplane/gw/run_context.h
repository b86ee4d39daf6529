#pragma once
// What detwan-gw hands a packet-I/O backend to run: the engine, the effective configuration,
// the control channel to serve, and the stop flag. Every backend folder (uring/, dpdk/) has a
// gateway.h declaring
//     common::Result<void> run(RunContext& context);
// with the same meaning: open the backend's ports, run the datapath loop on the calling thread
// until context.stop is set (SIGINT/SIGTERM), close everything, and return. Setup failures
// (a device that cannot be opened, a socket that cannot be bound) return an Error naming the
// device/endpoint; the datapath itself never fails, it counts.
#include <atomic>

#include "common/status.h"
#include "dataplane/gw/config.h"
#include "dataplane/gw/engine.h"

namespace detwan::dataplane::gw {

class ControlServer;  // dataplane/gw/control_server.h

struct RunContext {
  Engine& engine;
  const GatewayConfig& config;
  // Non-blocking control channel. The loop calls control->poll_st(engine, now_ns) at least
  // every 10 ms (and when control->fd() is readable); may be nullptr in tests.
  ControlServer* control = nullptr;
  std::atomic<bool>& stop;
  // The admin socket (reads and writes), served exactly like `control`; nullptr: none. A write
  // it answers changes the engine's tunnels between two polls (Engine::apply_st).
  ControlServer* admin = nullptr;
};

}  // namespace detwan::dataplane::gw

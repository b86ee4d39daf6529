#pragma once
// detwan-gw's HTTP exporter (config `metrics:`; docs/gateway-stats.md, "Metrics over HTTP"):
// GET /metrics answers the gateway's Prometheus exposition (Engine::prometheus_text, merged over
// the shards) plus the exporter's own connection counters (detwan_gw_http_connections_total).
//
// Who may talk to it: the HTTP server of control/api (Boost.Beast) checks the client address
// against metrics.allow (default: loopback only) before it reads anything, and with
// metrics.tokens_file every request carries a bearer token. Any other path is 404, any other
// method 405.
//
// Threading: the HTTP server runs on a thread of its own; the exposition is built on the
// datapath thread, which owns the engine, in parts: a scrape hands the read-only control
// server (ControlServer::submit) a request for the first part (the gateway, ports, peers, host
// counters and the first kTunnelsPerPart tunnels by id), answered at its next poll within the
// control channel's per-poll budget; each answer asks for the next kTunnelsPerPart tunnels, so
// one poll never holds the datapath for more than that many tunnels however many the gateway
// carries. The parts are joined by family (common::prometheus::merge) on a thread of their
// own, never on the datapath. Scrapes closer together than metrics.min_interval share one build
// (the last answer is served again), so N scrapers cost the datapath at most one build per
// interval. At most kMaxWaiting scrapes wait for a build; more are answered 503.
#include <cstdint>
#include <functional>
#include <memory>

#include "common/net_address.h"
#include "common/status.h"
#include "dataplane/gw/config.h"
#include "dataplane/gw/control_server.h"

namespace detwan::dataplane::daemon {

class MetricsServer {
 public:
  static constexpr size_t kMaxWaiting = 64;
  // Tunnels per part: ~0.5 ms of the loop (docs/benchmarks/observability.md, "Scrape cost":
  // 2.6 ms per 50); a longer stall of the loop delays TUN reads into a burst beyond a tunnel's
  // policer
  // ("its effect on forwarding").
  static constexpr uint32_t kTunnelsPerPart = 10;
  // Listens on config.listen (errors name it, or the tokens file). `control` must outlive the
  // server's use of it: destroy the MetricsServer first. clock_ns: monotonic time.
  static common::Result<std::unique_ptr<MetricsServer>> start(const gw::MetricsConfig& config,
                                                              gw::ControlServer& control,
                                                              std::function<int64_t()> clock_ns);
  // Answers waiting scrapes 503 (and gives them 200 ms to be written), then stops the HTTP
  // server.
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  [[nodiscard]] common::HostPort local_endpoint() const;
  // Builds asked of the datapath, and scrapes answered from the last build.
  [[nodiscard]] uint64_t builds() const noexcept;
  [[nodiscard]] uint64_t cached_answers() const noexcept;

  struct State;

 private:
  MetricsServer() = default;
  std::shared_ptr<State> state_;
};

}  // namespace detwan::dataplane::daemon

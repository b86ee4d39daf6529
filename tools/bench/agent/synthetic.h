#pragma once
// Synthetic WAN topologies for the agent's benchmarks: N nodes scattered over a 3,000 km square,
// a random spanning tree plus random short links up to an average degree (about 5 links per
// node), delay = distance at 200 km/ms, capacities 10/40/100 Gbit/s. Every tenth node is a
// site with a gateway (planning only: no admin socket is contacted), the rest transit nodes.
// Seeded: the same arguments give the same topology.
#include <cstdint>
#include <random>
#include <string>

#include "control/agent/agent.h"
#include "control/gateway/reconciler.h"
#include "control/model/topology.h"

namespace detwan::tools::agent_bench {

struct SyntheticOptions {
  uint32_t nodes = 1000;
  double degree = 5.0;  // average links per node
  uint32_t site_every = 10;
  uint64_t seed = 1;
  std::string journal = ":memory:";
};

control::model::Topology synthetic_topology(const SyntheticOptions& options);

// A random reservation between two sites: 0.1 .. 2 Gbit/s, 1 .. 6 h long, starting within
// `spread_s` seconds (a day by default; shorter spreads make requests contend).
struct RandomRequest {
  std::string src, dst;
  uint64_t rate_bps = 0;
  int64_t start_offset_ns = 0;
  int64_t duration_ns = 0;
};
RandomRequest random_request(const control::model::Topology& t, std::mt19937_64& rng,
                             uint32_t spread_s = 86'400);

// The committed reservation of `q`, its window from base_ns on.
control::agent::ReserveRequest reserve_request(const RandomRequest& q, int64_t base_ns,
                                               std::string fingerprint);

// The benchmarks' gateways: none (reservations are committed, never provisioned).
class NoGateways final : public control::gateway::GatewayClient {
 public:
  common::Result<std::string> request(const std::string& socket, const std::string&) override {
    return common::make_error(common::ErrorCode::kUnavailable, "benchmark: no gateway " + socket);
  }
};

}  // namespace detwan::tools::agent_bench

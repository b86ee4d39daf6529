#pragma once
// The alpha-beta cost model that chooses a collective's algorithm and chunk size.
//
// A link is modelled as T(n bytes) = alpha_ns + n / rate. Inside a site alpha and rate are the
// intra-site transport's (configured defaults, or measured at init); between two sites alpha is
// half the measured round-trip time and rate is the site pair's reserved tunnel rate, shared by
// the local ranks that drive it in parallel (each inter-site channel gets rate / ranks_per_site).
// Each algorithm's predicted time is the sum over its steps of the slowest link used in that
// step (see docs/collectives.md "Choosing an algorithm" for the formulas).
//
// Deterministic mode: plan() must depend only on (collective, bytes, topology, the configured
// model), never on measurements, so every run picks the same plan and reduction order.
#include <cstdint>
#include <string>
#include <vector>

#include "collectives/topology/topology.h"
#include "collectives/types.h"

namespace detwan::collectives {

struct LinkModel {
  int64_t alpha_ns = 0;     // one-way latency + per-message software cost
  int64_t rate_bps = 0;     // bits per second available to one channel; 0 = unknown (10 Gbit/s)
};

// What the communicator assumes between two ranks of one site (shm or tcp on one host) unless
// configured otherwise; the agent's placement planner uses the same figure.
inline constexpr LinkModel kDefaultIntraLink{20'000, 10'000'000'000};

struct NetworkModel {
  LinkModel intra;                        // between two ranks of one site
  // inter[i][j]: site i -> site j, per channel (rate already divided among the local ranks).
  std::vector<std::vector<LinkModel>> inter;
  [[nodiscard]] const LinkModel& link(const Topology& topology, int from_rank, int to_rank) const;
};

struct Plan {
  Algorithm algorithm = Algorithm::kRing;
  int64_t chunk_bytes = 0;      // pipelining unit; 0 = whole message in one piece per step
  double predicted_ns = 0;
  std::string reason;           // "hier: 2 sites x 2, predicted 2.81 s (ring 4.2 s, ...)"
};

struct PlanOverride {
  Algorithm algorithm = Algorithm::kAuto;  // kAuto = choose
  int64_t chunk_bytes = 0;                 // 0 = choose
};

// Predicted time of `algorithm` for the collective over `bytes` (the per-rank buffer size as
// nccl-tests counts it: allreduce/broadcast/reduce = the buffer, allgather = the output,
// reduce-scatter = the input). +infinity if the algorithm cannot run on this topology
// (e.g. a hierarchical allgather on one site, halving-doubling broadcast).
[[nodiscard]] double predict_ns(Collective collective, Algorithm algorithm, int64_t bytes,
                                int64_t chunk_bytes, const Topology& topology,
                                const NetworkModel& model);

// The cheapest algorithm (and its chunk size) for the collective, honouring `override`.
// Algorithms that cannot run on the topology are never chosen; an override naming one falls
// back to ring and says so in `reason`.
[[nodiscard]] Plan choose_plan(Collective collective, int64_t bytes, const Topology& topology,
                               const NetworkModel& model, const PlanOverride& override);

}  // namespace detwan::collectives

#pragma once
// The placement planner: where a data-parallel training job should run and what WAN it needs
// (docs/control.md, "Co-scheduling"). Compute and network decided together.
//
// A job synchronises its gradients once per step: step time = the slowest rank's compute time
// + the part of the gradient's allreduce that is not hidden behind it. Each allreduce is
// predicted by the collective library's own cost model (collectives/topology/cost_model.h: the
// same alpha-beta model that picks the algorithm at run time; inside a site 20 us and 10 Gbit/s
// per channel, between sites the reservation's latency bound and its payload rate shared by the
// site's ranks). Without overlap (bucket_bytes 0) the whole allreduce follows the compute: an
// upper bound. With overlap (PyTorch DDP, Horovod: the gradient is allreduced in buckets while
// the backward pass still produces it) the model is a pipeline: the backward pass - the last
// `backward_fraction` of the step's compute - produces the gradient evenly, a bucket is ready
// when its last byte is (the first may be smaller: DDP's is 1 MiB), the buckets' allreduces run one
// after another in order, and the step ends when compute and the last bucket's allreduce have
// (predict_step). Efficiency = compute / step time.
//
// Candidates: every site that can host all ranks alone, and every pair of sites with every split
// of the ranks between them (ranks go to a site's fastest pools first) -- but no pair that cannot
// beat the best single site whatever the WAN gives (a single site meeting the target wins; a
// pair's step is at least its fastest pool's compute), and of the others the kMaxSitePairs with
// the fastest pools, each pair's WAN asked once; only when none of those
// can host the job, every set of 3 (then 4, up to max_sites) sites with the ranks spread evenly
// over their capacity. A multi-site candidate needs a WAN reservation between every pair of its
// sites (the communicator joins every pair), at one rate: the smallest whole Mbit/s that meets
// the target step time (binary search under the least the domain can admit over the pairs in
// the window; the model takes the pairs' largest latency bound), or without a target the one
// that reaches kDefaultEfficiency (else the most it can admit). Choice: with a target, the
// candidate meeting it with the fewest sites, then the least reserved rate in total, then the
// shortest step; without one, the shortest step, then fewer sites, then less rate.
//
// Pure: the WAN is asked through a callback (the agent answers from its admission planner and
// ledger), so it books nothing and is tested on its own.
#include <cstdint>
#include <functional>
#include <utility>
#include <string>
#include <variant>
#include <vector>

#include <boost/json.hpp>

namespace detwan::control::compute {

inline constexpr double kDefaultEfficiency = 0.9;
// A job that overlaps (bucket_bytes) without a backward share, on pools that measured none: a
// backward pass costs about twice the forward.
inline constexpr double kDefaultBackwardFraction = 2.0 / 3.0;
inline constexpr uint32_t kMaxRanks = 4096;
inline constexpr uint32_t kMaxSites = 4;        // sites one job may span
inline constexpr uint32_t kMaxSiteSets = 2000;  // 3+ site sets evaluated per size, at most
// Pairs of sites asked of the WAN per plan, at most: those with the fastest pools (a WAN lookup
// is ~17 path searches; at 1,000 sites ~500,000 pairs could hold a job).
inline constexpr size_t kMaxSitePairs = 16;
// Pairs asked of the WAN per plan in all (3+ site sets included), at most.
inline constexpr size_t kMaxWanPairs = 64;

// Compute a pool offers this job in its window.
struct PoolOffer {
  std::string pool;
  std::string site;
  std::string kind;
  uint32_t ranks = 0;            // ranks it can host in the window
  int64_t step_compute_ns = 0;   // one step's compute on one rank of this pool, for this job
  double backward_fraction = 0;  // measured share of it in the backward pass; 0: unknown
};

// What the domain can admit between two sites in the window.
struct WanOffer {
  uint64_t max_rate_bps = 0;     // 0: nothing (`refusal` says why)
  int64_t latency_ns = 0;        // the reservation's latency bound at that rate
  double payload_fraction = 0.94;  // UDP payload share of the reserved rate (tunnel framing)
  std::string refusal;
};
using WanLookup = std::function<WanOffer(const std::string& from, const std::string& to)>;

struct Job {
  uint64_t gradient_bytes = 0;   // allreduced per step
  uint32_t ranks = 0;            // data-parallel degree
  int64_t target_step_ns = 0;    // 0: none
  double min_efficiency = 0;     // 0: none; else target = compute / min_efficiency
  uint32_t max_sites = kMaxSites;      // 1..kMaxSites
  uint64_t rate_step_bps = 1'000'000;  // reservations in whole multiples of this
  // Overlap: the framework allreduces the gradient in buckets of this size while the backward
  // pass runs (PyTorch DDP: bucket_cap_mb, 25 MiB by default); 0: one allreduce after compute.
  uint64_t bucket_bytes = 0;
  // Share of a step's compute spent in the backward pass; 0: the slowest pool's measured share
  // (none measured: kDefaultBackwardFraction).
  double backward_fraction = 0;
  // The first bucket's size when it differs (DDP: 1 MiB, first_bucket_bytes); 0: bucket_bytes.
  uint64_t first_bucket_bytes = 0;
  // Each rank's share of the global batch follows its speed (detwan.torch.hetero): a step's
  // compute is then ranks / sum(1 / step_compute_ns) over the ranks (every rank finishes its
  // share together) instead of the slowest rank's; a slow pool adds throughput instead of
  // setting the pace. false: equal shares.
  bool speed_shares = false;
  // Only this placement (site -> ranks, summing to `ranks`): "what would this one give?" (the
  // planner still chooses the pools and the rate). Empty: the planner chooses.
  std::vector<std::pair<std::string, uint32_t>> fixed;
};

struct SitePlacement {
  std::string site;
  uint32_t ranks = 0;
  struct Share {
    std::string pool;
    std::string kind;
    uint32_t ranks = 0;
    int64_t step_compute_ns = 0;
    double backward_fraction = 0;
    double batch_fraction = 0;  // of the global batch, for each rank of this pool
  };
  std::vector<Share> pools;
};

struct WanNeed {
  std::string from;
  std::string to;
  uint64_t rate_bps = 0;
  int64_t latency_ns = 0;
};

struct Placement {
  std::vector<SitePlacement> sites;
  std::vector<WanNeed> reservations;
  int64_t compute_ns = 0;        // slowest rank (speed shares: ranks / sum(1 / step))
  int64_t allreduce_ns = 0;      // the gradient's allreduce (all its buckets, one after another)
  int64_t exposed_ns = 0;        // the part of it not hidden behind compute: step - compute
  int64_t step_ns = 0;
  uint32_t buckets = 1;
  double backward_fraction = 0;  // used for the overlap (0: none)
  double efficiency = 0;
  std::string algorithm;         // the collective library's choice for this placement
  uint32_t candidates = 0;       // placements considered
};

// Stable causes, also the API's error codes.
inline constexpr const char* kNotEnoughCompute = "not_enough_compute";
inline constexpr const char* kNotEnoughWan = "not_enough_wan";
inline constexpr const char* kBoundTooTight = "bound_too_tight";
inline constexpr const char* kInvalidJob = "invalid_job";

struct Refusal {
  std::string cause;
  std::string message;
};

using Decision = std::variant<Placement, Refusal>;

Decision place(const Job& job, const std::vector<PoolOffer>& pools, const WanLookup& wan);

// The collective model's prediction for one placement (tests, the API's "what if"):
// ranks_per_site[i] ranks at site i (1 or 2 sites), one inter-site rate and latency.
struct Prediction {
  int64_t allreduce_ns = 0;
  std::string algorithm;
};
Prediction predict_allreduce(uint64_t gradient_bytes, const std::vector<uint32_t>& ranks_per_site,
                             uint64_t payload_rate_bps, int64_t latency_ns);

// One step of a placement: compute, then (or overlapped with its backward pass) the allreduce.
struct StepPrediction {
  int64_t step_ns = 0;
  int64_t allreduce_ns = 0;
  int64_t exposed_ns = 0;
  uint32_t buckets = 1;
  std::string algorithm;
};
struct Overlap {
  uint64_t bucket_bytes = 0;        // 0: none
  double backward_fraction = 0;     // 0: none
  uint64_t first_bucket_bytes = 0;  // 0: bucket_bytes (DDP: 1 MiB, ready early)
};
StepPrediction predict_step(uint64_t gradient_bytes, int64_t compute_ns, const Overlap& overlap,
                            const std::vector<uint32_t>& ranks_per_site, uint64_t payload_rate_bps,
                            int64_t latency_ns);

// The placement's sites as the API shows them: [{"site", "ranks", "pools": [{"pool", "kind",
// "ranks", "step_compute_ns"}]}] (POST /v1/plan, local and federated).
boost::json::array sites_json(const Placement& placement);

}  // namespace detwan::control::compute

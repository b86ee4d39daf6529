#pragma once
// Command line of `detwan-bench <collective>` (nccl-tests' options plus how the ranks meet):
//
//   detwan-bench allreduce|broadcast|reduce|allgather|reducescatter|alltoall|sendrecv
//     -b/--minbytes 8 -e/--maxbytes 64M -f/--stepfactor 2 | -i/--stepbytes N
//     -d/--datatype float|...|all  -o/--op sum|prod|min|max|avg|all  -r/--root 0
//     -n/--iters 20 -w/--warmup_iters 5 -m/--agg_iters 1 --inflight K -c/--check 1
//     -a/--algo auto|ring|hd|tree|hier
//     --chunk BYTES --deterministic --json
//   one rank of a launched job:  --rank R --nranks N --id tcp://HOST:PORT|file:///DIR
//                                (the secret: DETWAN_BOOTSTRAP_SECRET)
//                                (or DETWAN_RANK / DETWAN_NRANKS / DETWAN_ID) [--site S]
//                                [--wan-rate R] (+ CommConfig::from_environment's DETWAN_*)
//   all ranks on this host:      --local N [--sites K]   (the default: --local 1)
//   over the lab:                --lab ... (handled before this parser: tools/lab/collectives.py)
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collectives/types.h"
#include "tools/bench/coll_sizes.h"

namespace detwan::bench {

enum class LaunchMode { kRank, kLocal };

struct CollBenchOptions {
  Collective collective = Collective::kAllReduce;
  std::string collective_name = "allreduce";
  SweepOptions sweep;
  std::vector<DataType> types{DataType::kFloat32};
  std::vector<ReduceOp> ops{ReduceOp::kSum};
  int root = 0;
  int iters = 20;
  int warmup_iters = 5;
  // -m: operations submitted together per iteration, each on its own buffers (nccl-tests'
  // agg_iters; the time reported is per operation); --inflight: CommConfig::inflight_ops.
  int agg_iters = 1;
  int inflight_ops = 0;        // 0: not given (DETWAN_INFLIGHT_OPS / 1)
  bool check = true;
  collectives::Algorithm algorithm = collectives::Algorithm::kAuto;
  bool algorithm_set = false;  // -a given: overrides DETWAN_ALGO
  int64_t chunk_bytes = -1;    // -1: not given (environment / the cost model decides)
  bool deterministic = false;
  bool json = false;

  LaunchMode mode = LaunchMode::kLocal;
  // kRank
  int rank = -1;
  int nranks = -1;
  std::string id;
  std::string site;            // empty: DETWAN_SITE / "default"
  int64_t wan_rate_bps = -1;   // -1: not given
  std::string intra_backend;   // empty: environment / default
  std::string inter_backend;
  std::string listen_host;
  int64_t op_timeout_ns = 0;   // 0: environment / default
  // kLocal
  int local_ranks = 1;
  int local_sites = 1;
  std::vector<int> local_site_sizes;  // --site-sizes 3,1: ranks of sites a, b, ...; empty: even
  double timeout_s = 3600;     // the whole local run; ranks are killed after it
};

struct ParsedArgs {
  CollBenchOptions options;
  bool help = false;           // -h/--help: print help_text, exit 0
  std::string help_text;
};

using EnvLookup = std::function<const char*(const char*)>;

// argv[0] = program, argv[1] = the collective. Errors (kInvalidArgument) name the option and
// the offending value. `env` resolves DETWAN_RANK / DETWAN_NRANKS / DETWAN_ID (default getenv).
[[nodiscard]] common::Result<ParsedArgs> parse_collective_args(int argc, const char* const* argv,
                                                               const EnvLookup& env = {});

// Site name of local rank r of n ranks in k sites: "a", "b", ... (n / k consecutive ranks each,
// or site_sizes[i] consecutive ranks for site i when given).
[[nodiscard]] std::string local_site_name(int rank, int nranks, int nsites,
                                          const std::vector<int>& site_sizes = {});

}  // namespace detwan::bench

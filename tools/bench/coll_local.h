#pragma once
// `detwan-bench <collective> --local N [--sites K]`: runs N copies of this binary on this host
// as the ranks of one job (sites "a", "b", ... of N/K consecutive ranks, every rank listening
// on 127.0.0.1), meeting through a file bootstrap in a fresh temporary directory.
//
// Rank 0's stdout is this process's stdout (the table streams; --json: its object, or one with
// "error" when rank 0 printed none); the other ranks' stdout goes to stderr. When a rank fails
// the others get a grace period to report, then are killed; on the timeout or SIGINT/SIGTERM/
// SIGHUP every rank is killed at once. Ranks also die with this process (PR_SET_PDEATHSIG).
// Returns 0 when every rank exited 0, else the first failing status (1 if killed).
#include <string>
#include <vector>

#include "tools/bench/coll_options.h"

namespace detwan::bench {

// The argv of local rank `rank`: `args` (argv[1..], collective first) without --local, --sites
// and --timeout, plus --rank/--nranks/--id/--site (and --listen-host 127.0.0.1 unless given).
[[nodiscard]] std::vector<std::string> local_rank_args(const std::vector<std::string>& args,
                                                       const CollBenchOptions& options, int rank,
                                                       const std::string& id);

[[nodiscard]] int run_local(const CollBenchOptions& options, int argc, char** argv);

}  // namespace detwan::bench

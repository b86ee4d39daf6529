#pragma once
// One rank of `detwan-bench <collective>`: joins the communicator, runs the sweep, and (rank 0
// only) prints the table or the JSON object. Every rank must run with the same options.
//
// Per row: with -c 1, the inputs carry the pattern of coll_pattern.h, the output is poisoned,
// one operation runs and every rank counts its wrong elements; then -w warmup operations, a
// barrier, -n timed operations. time = (timed span / iters), the maximum over ranks; #wrong =
// the sum over ranks (both gathered with allreduce, so every rank takes part).
//
// Exit status: 0 all rows ran and nothing was wrong; 1 a rank failed or an element was wrong
// (the table so far and the error are printed); 2 bad configuration.
#include "tools/bench/coll_options.h"

namespace detwan::bench {

[[nodiscard]] int run_rank(const CollBenchOptions& options);

}  // namespace detwan::bench

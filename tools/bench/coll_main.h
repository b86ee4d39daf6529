#pragma once
// Entry of the collective subcommands of detwan-bench (argv[1] = allreduce, broadcast, ...):
// parses coll_options.h's command line and runs one rank (coll_run.h) or launches them all on
// this host (coll_local.h). `--lab` is routed earlier (coll_lab_exec.h).
namespace detwan::bench {

// True when argv[1] names a collective of the bench.
[[nodiscard]] bool is_collective_command(int argc, char** argv);
[[nodiscard]] int run_collective_command(int argc, char** argv);

}  // namespace detwan::bench

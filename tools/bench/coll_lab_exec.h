#pragma once
// `detwan-bench <collective> --lab ...`: the lab orchestration lives in Python next to the rest
// of the lab (tools/lab/collectives.py); this hands the command line over to it, as
// lab_exec.h does for `transport --lab`.
namespace detwan::bench {

// True when argv[1] is a collective of the bench and "--lab" is among the arguments.
[[nodiscard]] bool wants_collective_lab(int argc, char** argv);

// Replaces this process with `/usr/bin/python3 -m lab.collectives COLLECTIVE ARGS` (argv[1..]
// minus "--lab"), with PYTHONPATH=<repo>/tools, DETWAN_BENCH_BINARY=this binary and, unless
// set, DETWAN_BUILD_DIR=the build directory this binary sits in. The repository is
// $DETWAN_REPO, else the first parent of this binary holding tools/lab/collectives.py.
// Returns only on failure (the exit status, after printing why).
int exec_collective_lab(int argc, char** argv);

}  // namespace detwan::bench

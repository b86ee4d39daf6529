#pragma once
// `detwan-bench transport --lab ...`: the lab orchestration lives in Python next to the rest of
// the lab (tools/lab/transport.py); this hands the command line over to it.
#include <string>

namespace detwan::bench {

// Replaces this process with `/usr/bin/python3 -m lab.transport ARGS` (argv[2..] minus
// "--lab"), with PYTHONPATH=<repo>/tools, DETWAN_BENCH_BINARY=this binary and, unless set,
// DETWAN_BUILD_DIR=the build directory this binary sits in. The repository is $DETWAN_REPO, else
// the first parent of this binary holding tools/lab/transport.py. Returns only on failure (the
// exit status, after printing why).
int exec_lab(int argc, char** argv);

// The same for any lab module: `/usr/bin/python3 -m lab.MODULE argv[first_arg..]` (minus
// "--lab"), the repository found by tools/lab/MODULE.py.
int exec_lab_module(const std::string& module, int first_arg, int argc, char** argv);

}  // namespace detwan::bench

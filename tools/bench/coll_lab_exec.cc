#include "tools/bench/coll_lab_exec.h"

#include <cstring>

#include "tools/bench/coll_sizes.h"
#include "tools/bench/lab_exec.h"

namespace detwan::bench {

bool wants_collective_lab(int argc, char** argv) {
  if (argc < 3 || !parse_bench_collective(argv[1])) return false;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--lab") == 0) return true;
  }
  return false;
}

// The collective's name (argv[1]) goes along: lab.collectives takes it as its first argument.
int exec_collective_lab(int argc, char** argv) {
  return exec_lab_module("collectives", 1, argc, argv);
}

}  // namespace detwan::bench

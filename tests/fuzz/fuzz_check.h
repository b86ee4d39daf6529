#pragma once
// The fuzz targets' invariant check: a violated invariant prints the condition and where, then
// aborts — a crash (with its input kept) for libFuzzer, a failed test for the g++ corpus replay.
#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "fuzz: invariant failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

#pragma once
// The sharded mode of dataplane_dpdk_fwd_bench (fwd_bench_shards.cc).
#include <cstdint>

namespace detwan::dataplane::dpdk::testing {

struct ShardBenchOptions {
  uint32_t shards = 2;
  uint32_t tunnels = 64;
  uint32_t packets = 2048;
  uint32_t payload_bytes = 18;
  double seconds = 5;
  bool dispatch = false;
  uint32_t ports = 1;  // WAN ports; tunnel i leaves on port (i-1) % ports  // every packet on queue
                       // 0 (software dispatch) instead of its owner's
};

// Needs the EAL initialised with at least `shards` lcores. Returns the exit status.
int run_sharded_bench(const ShardBenchOptions& options);

}  // namespace detwan::dataplane::dpdk::testing

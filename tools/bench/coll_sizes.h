#pragma once
// The arithmetic of `detwan-bench <collective>` that nccl-tests defines: the size sweep, how a
// size becomes element counts for each collective, and the bus-bandwidth factors.
// Pure functions: no I/O, no communicator.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "collectives/types.h"

namespace detwan::bench {

using collectives::Collective;
using collectives::DataType;
using collectives::ReduceOp;

// The collectives the bench runs (by subcommand name, as nccl-tests' binaries:
// allreduce broadcast reduce allgather reducescatter alltoall sendrecv).
[[nodiscard]] common::Result<Collective> parse_bench_collective(std::string_view name);
[[nodiscard]] const std::vector<std::string_view>& bench_collective_names();

// Whether the collective takes a reduce op (redop column) / a root (root column).
[[nodiscard]] bool has_reduce_op(Collective collective);
[[nodiscard]] bool has_root(Collective collective);

struct SweepOptions {
  uint64_t min_bytes = 8;
  uint64_t max_bytes = uint64_t{64} << 20;
  uint64_t step_factor = 2;  // used when step_bytes == 0
  uint64_t step_bytes = 0;   // > 0: additive steps (nccl-tests -i)
};

// min, min*f, min*f^2, ... <= max (or min, min+i, ...). A size of 0 is followed by 1 (a
// factor cannot grow 0). kInvalidArgument naming the option when the sweep is empty or
// would not advance (factor < 2 without step bytes).
[[nodiscard]] common::Result<std::vector<uint64_t>> sweep_sizes(const SweepOptions& sweep);

// One row's element counts, as nccl-tests' getCollByteCount computes them from a size.
struct Shape {
  size_t count = 0;        // the count column (the `count` argument of the API call)
  size_t send_count = 0;   // elements in the send buffer
  size_t recv_count = 0;   // elements in the receive buffer
  uint64_t size_bytes = 0; // the size column: max(send, recv) bytes (allgather: the output,
                           // reducescatter: the input)
};
// count = size / type size, rounded down to a multiple of nranks for allgather,
// reducescatter and alltoall.
[[nodiscard]] Shape shape_for(Collective collective, uint64_t size_bytes, DataType type,
                              int nranks);

// nccl-tests' busbw = algbw x factor: allreduce 2(n-1)/n; reducescatter, allgather,
// alltoall (n-1)/n; broadcast, reduce, sendrecv 1.
[[nodiscard]] double bus_factor(Collective collective, int nranks);
// GB/s (1e9 bytes per second) of size_bytes in time_us; 0 when time_us <= 0.
[[nodiscard]] double algbw_gbps(uint64_t size_bytes, double time_us);

}  // namespace detwan::bench

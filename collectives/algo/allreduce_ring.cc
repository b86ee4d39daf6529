// Pipelined chunked ring allreduce: reduce-scatter then allgather around ranks 0..n-1, as one
// continuous ring run (detail::run_ring) so the allgather's first chunks leave while the
// reduce-scatter's last ones are still arriving.
//
// Steps: 2(n-1); each step moves one block of count/n elements to the next rank, split into
// chunk_bytes messages that are all in flight together.
#include <numeric>
#include <vector>

#include "collectives/algo/algorithms.h"
#include "collectives/algo/detail.h"

namespace detwan::collectives::algo {

Result<void> all_reduce_ring(OpContext& ctx, const void* send, void* recv, size_t count,
                             DataType type, ReduceOp op) {
  const int n = ctx.peers.size();
  if (n <= 1 || count == 0) {
    detail::copy_to_recv(send, recv, count, type);
    return {};
  }
  // Out of place, the ring reads the input from send: no copy into recv first.
  const std::byte* src = detail::ring_source(send, recv, count, type);
  std::vector<int> ring(static_cast<size_t>(n));
  std::iota(ring.begin(), ring.end(), 0);
  detail::SendQueue sends(ctx);
  auto ok = detail::run_ring(ctx, ring, detail::as_bytes(recv), count, type, op, 0, 2 * (n - 1),
                             sends, src);
  if (!ok) return ok;
  return sends.wait_all();
}

}  // namespace detwan::collectives::algo

// all_reduce(): argument checks, the trivial cases, dispatch, and kAvg's final division (the
// algorithms only ever reduce with kSum semantics for kAvg).
#include <fmt/format.h>

#include "collectives/algo/algorithms.h"
#include "collectives/algo/detail.h"
#include "collectives/reduce/reduce.h"

namespace detwan::collectives::algo {

Result<void> all_reduce(OpContext& ctx, Algorithm algorithm, const void* send, void* recv,
                        size_t count, DataType type, ReduceOp op) {
  const int rank = ctx.peers.rank();
  if (static_cast<int>(type) >= kNumDataTypes) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("rank {}: allreduce: unknown data type {}", rank,
                                  static_cast<int>(type)));
  }
  if (static_cast<int>(op) >= kNumReduceOps) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("rank {}: allreduce: unknown reduce op {}", rank,
                                  static_cast<int>(op)));
  }
  if (count > 0 && (send == nullptr || recv == nullptr)) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("rank {}: allreduce: null {} buffer with count {}", rank,
                                  send == nullptr ? "send" : "recv", count));
  }
  if (count == 0) return {};
  const int n = ctx.peers.size();
  Result<void> ok;
  if (n == 1) {
    detail::copy_to_recv(send, recv, count, type);
  } else {
    switch (algorithm) {
      case Algorithm::kRing:
        ok = all_reduce_ring(ctx, send, recv, count, type, op);
        break;
      case Algorithm::kHalvingDoubling:
        ok = all_reduce_halving_doubling(ctx, send, recv, count, type, op);
        break;
      case Algorithm::kTree:
        ok = all_reduce_tree(ctx, send, recv, count, type, op);
        break;
      case Algorithm::kHierarchical:
        ok = all_reduce_hierarchical(ctx, send, recv, count, type, op);
        break;
      default:
        return make_error(ErrorCode::kInvalidArgument,
                          fmt::format("rank {}: allreduce: algorithm '{}' is not a concrete "
                                      "algorithm (resolve auto with the cost model first)",
                                      rank, to_string(algorithm)));
    }
  }
  if (!ok) return ok;
  reduce::finalize_average(recv, count, type, op, n);
  return {};
}

}  // namespace detwan::collectives::algo

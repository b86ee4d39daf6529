// Reduce-scatter (NCCL semantics): send holds size() * recv_count elements; rank r receives
// block r (elements [r * recv_count, (r + 1) * recv_count)) reduced over all ranks.
// Every algorithm runs the pipelined ring (ring_reduce_scatter_inplace, rank order) on a copy
// of send: the ring reduces in place, send is const, and in place (recv inside send) needs the
// copy anyway.
#include <cstring>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "collectives/algo/algorithms.h"
#include "collectives/algo/detail.h"
#include "collectives/reduce/reduce.h"

namespace detwan::collectives::algo {

Result<void> reduce_scatter(OpContext& ctx, Algorithm /*algorithm*/, const void* send, void* recv,
                            size_t recv_count, DataType type, ReduceOp op) {
  const int n = ctx.peers.size();
  const int rank = ctx.peers.rank();
  if (recv_count == 0) return {};
  if (send == nullptr || recv == nullptr) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("reduce_scatter: rank {}: null {} buffer for {} elements", rank,
                                  send == nullptr ? "send" : "recv", recv_count));
  }
  const size_t elem = data_type_size(type);
  const auto nranks = static_cast<size_t>(n);
  if (recv_count > SIZE_MAX / elem / nranks) {
    return make_error(
        ErrorCode::kInvalidArgument,
        fmt::format("reduce_scatter: {} elements x {} ranks overflows", recv_count, n));
  }
  const size_t bytes = recv_count * elem;
  const auto* src = detail::as_bytes(send);
  if (n == 1) {
    detail::copy_to_recv(send, recv, recv_count, type);
    return {};
  }
  std::vector<std::byte> work(src, src + nranks * bytes);
  std::vector<int> group(nranks);
  std::iota(group.begin(), group.end(), 0);
  if (auto ok = ring_reduce_scatter_inplace(ctx, group, work.data(), nranks * recv_count, type, op);
      !ok) {
    return ok;
  }
  // block_of(n * recv_count, n, r) is exactly [r * recv_count, (r + 1) * recv_count).
  std::memmove(recv, work.data() + static_cast<size_t>(rank) * bytes, bytes);
  reduce::finalize_average(recv, recv_count, type, op, n);
  return {};
}

}  // namespace detwan::collectives::algo

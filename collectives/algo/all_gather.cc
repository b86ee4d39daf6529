// Allgather: recv holds size() * send_count elements, rank r's at offset r * send_count.
//   kRing (default)  pipelined ring over all ranks in rank order (ring_all_gather_inplace)
//   kHierarchical    when topology.uniform() and there are several sites: (1) every rank
//                    exchanges its own block with the ranks of equal local index in the other
//                    sites, all WAN pairs at once (each block crosses the WAN once per site,
//                    and every local rank drives its own share); (2) ring allgather inside the
//                    site of those per-local-index groups of blocks; (3) local reordering.
//                    Otherwise it falls back to the ring.
#include <algorithm>
#include <cstring>
#include <deque>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "collectives/algo/algorithms.h"
#include "collectives/algo/detail.h"

namespace detwan::collectives::algo {
namespace {

Result<void> all_gather_ring(OpContext& ctx, const std::byte* send, std::byte* recv, size_t count,
                             DataType type) {
  const int n = ctx.peers.size();
  const size_t bytes = count * data_type_size(type);
  std::byte* mine = recv + static_cast<size_t>(ctx.peers.rank()) * bytes;
  if (send != mine) std::memmove(mine, send, bytes);
  std::vector<int> group(static_cast<size_t>(n));
  std::iota(group.begin(), group.end(), 0);
  return ring_all_gather_inplace(ctx, group, recv, count * static_cast<size_t>(n), type);
}

Result<void> all_gather_hierarchical(OpContext& ctx, const std::byte* send, std::byte* recv,
                                     size_t count, DataType type) {
  const Topology& topology = ctx.topology;
  const int rank = ctx.peers.rank();
  const auto sites = static_cast<size_t>(topology.num_sites());
  const auto per_site = static_cast<size_t>(topology.ranks_per_site());
  const auto site = static_cast<size_t>(topology.site_of(rank));
  const auto local = static_cast<size_t>(topology.local_index(rank));
  const size_t elem = data_type_size(type);
  const size_t bytes = count * elem;
  const size_t chunk = detail::chunk_elems(ctx, type);

  // Staging, ordered [local index][site]: the blocks one local index gathers over the WAN are
  // contiguous, so the intra-site ring moves them as one block. Declared before `sends`.
  std::vector<std::byte> staging(sites * per_site * bytes);
  auto slot = [&](size_t i, size_t s) { return staging.data() + (i * sites + s) * bytes; };
  std::memcpy(slot(local, site), send, bytes);

  // (1) WAN exchange with the ranks of equal local index. The sends read the caller's send
  // buffer, which (in place) is part of recv: they are waited for before recv is written.
  detail::SendQueue sends(ctx);
  std::deque<detail::RecvQueue> queues;
  for (size_t s = 0; s < sites; ++s) {
    if (s == site) continue;
    const int peer = topology.ranks_of_site(static_cast<int>(s))[local];
    (void)detail::send_chunked(sends, peer, send, count, elem, chunk);
  }
  const size_t chunks = detail::num_chunks(count, chunk);
  auto chunk_bytes = [&](size_t c) { return std::min(chunk, count - c * chunk) * elem; };
  size_t posted = 0;
  for (size_t s = 0; s < sites; ++s) {
    if (s != site) queues.emplace_back(ctx, topology.ranks_of_site(static_cast<int>(s))[local]);
  }
  for (size_t c = 0; c < chunks; ++c) {
    for (; posted < chunks && posted < c + detail::kRecvWindow; ++posted) {
      for (auto& queue : queues) queue.expect(chunk_bytes(posted));
    }
    size_t q = 0;
    for (size_t s = 0; s < sites; ++s) {
      if (s == site) continue;
      auto message = queues[q++].next();
      if (!message) return std::unexpected(message.error());
      std::memcpy(slot(local, s) + c * chunk * elem, message->data(), message->size());
    }
  }

  // (2) Ring allgather inside the site: block i (all sites' blocks of local index i) is held
  // by the site's rank of local index i.
  const auto& site_ranks = topology.ranks_of_site(static_cast<int>(site));
  if (auto ok =
          ring_all_gather_inplace(ctx, site_ranks, staging.data(), sites * per_site * count, type);
      !ok) {
    return ok;
  }
  if (auto ok = sends.wait_all(); !ok) return ok;

  // (3) Reorder into rank order.
  for (size_t i = 0; i < per_site; ++i) {
    for (size_t s = 0; s < sites; ++s) {
      const auto q = static_cast<size_t>(topology.ranks_of_site(static_cast<int>(s))[i]);
      std::memcpy(recv + q * bytes, slot(i, s), bytes);
    }
  }
  return {};
}

}  // namespace

Result<void> all_gather(OpContext& ctx, Algorithm algorithm, const void* send, void* recv,
                        size_t send_count, DataType type) {
  const int n = ctx.peers.size();
  if (send_count == 0) return {};
  if (send == nullptr || recv == nullptr) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("all_gather: rank {}: null {} buffer for {} elements",
                                  ctx.peers.rank(), send == nullptr ? "send" : "recv", send_count));
  }
  if (send_count > SIZE_MAX / data_type_size(type) / static_cast<size_t>(n)) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("all_gather: {} elements x {} ranks overflows", send_count, n));
  }
  const Topology& topology = ctx.topology;
  if (algorithm == Algorithm::kHierarchical && topology.size() == n && topology.uniform() &&
      topology.num_sites() > 1) {
    return all_gather_hierarchical(ctx, detail::as_bytes(send), detail::as_bytes(recv), send_count,
                                   type);
  }
  return all_gather_ring(ctx, detail::as_bytes(send), detail::as_bytes(recv), send_count, type);
}

}  // namespace detwan::collectives::algo

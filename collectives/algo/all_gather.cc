// Allgather: recv holds size() * send_count elements, rank r's at offset r * send_count.
//   kRing (default)  pipelined ring over all ranks in rank order (ring_all_gather_inplace)
//   kHierarchical    when there are several sites (any number of ranks each): (1) every rank
//                    sends its own block to one rank of every other site, local index l to
//                    local index l mod L_site there, all WAN pairs at once (each block crosses
//                    the WAN once per site, and every rank drives its own share); (2) ring
//                    allgather inside the site of what each rank holds; (3) local reordering.
//                    With one site it falls back to the ring.
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
  const int sites = topology.num_sites();
  const int site = topology.site_of(rank);
  const auto local = static_cast<size_t>(topology.local_index(rank));
  const auto& site_ranks = topology.ranks_of_site(site);
  const size_t elem = data_type_size(type);
  const size_t bytes = count * elem;
  const size_t chunk = detail::chunk_elems(ctx, type);
  const std::vector<std::vector<int>> held = gather_holdings(topology, site);
  size_t width = 0;  // blocks per holder in the staging buffer (the most any holder holds)
  for (const auto& blocks : held) width = std::max(width, blocks.size());

  // Staging, ordered [holder][its blocks]: what one holder gathered over the WAN is contiguous,
  // so the intra-site ring moves it as one block (holders with fewer blocks leave the rest of
  // their slot unused: intra-site bytes only, and none with equal sites). Declared before
  // `sends`.
  std::vector<std::byte> staging(site_ranks.size() * width * bytes);
  auto slot = [&](size_t m, size_t j) { return staging.data() + (m * width + j) * bytes; };
  const auto& mine = held[local];
  std::deque<detail::RecvQueue> queues;
  std::vector<size_t> queue_slot;  // slot index in mine of each queue's blocks
  for (size_t j = 0; j < mine.size(); ++j) {
    if (mine[j] == rank) {
      std::memcpy(slot(local, j), send, bytes);
    } else {
      queues.emplace_back(ctx, mine[j]);
      queue_slot.push_back(j);
    }
  }

  // (1) WAN: this rank's block to its holder in every other site. The sends read the caller's
  // send buffer, which (in place) is part of recv: they are waited for before recv is written.
  detail::SendQueue sends(ctx);
  for (int s = 0; s < sites; ++s) {
    if (s == site) continue;
    const auto& there = topology.ranks_of_site(s);
    (void)detail::send_chunked(sends, there[local % there.size()], send, count, elem, chunk);
  }
  const size_t chunks = detail::num_chunks(count, chunk);
  auto chunk_bytes = [&](size_t c) { return std::min(chunk, count - c * chunk) * elem; };
  size_t posted = 0;
  for (size_t c = 0; c < chunks && !queues.empty(); ++c) {
    for (; posted < chunks && posted < c + detail::kRecvWindow; ++posted) {
      for (auto& queue : queues) queue.expect(chunk_bytes(posted));
    }
    for (size_t q = 0; q < queues.size(); ++q) {
      auto message = queues[q].next();
      if (!message) return std::unexpected(message.error());
      std::memcpy(slot(local, queue_slot[q]) + c * chunk * elem, message->data(),
                  message->size());
    }
  }

  // (2) Ring allgather inside the site: block m is what the site's local index m holds.
  if (auto ok = ring_all_gather_inplace(ctx, site_ranks, staging.data(),
                                        site_ranks.size() * width * count, type);
      !ok) {
    return ok;
  }
  if (auto ok = sends.wait_all(); !ok) return ok;

  // (3) Reorder into rank order.
  for (size_t m = 0; m < held.size(); ++m) {
    for (size_t j = 0; j < held[m].size(); ++j) {
      std::memcpy(recv + static_cast<size_t>(held[m][j]) * bytes, slot(m, j), bytes);
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
  if (algorithm == Algorithm::kHierarchical && topology.size() == n && topology.num_sites() > 1) {
    return all_gather_hierarchical(ctx, detail::as_bytes(send), detail::as_bytes(recv), send_count,
                                   type);
  }
  return all_gather_ring(ctx, detail::as_bytes(send), detail::as_bytes(recv), send_count, type);
}

}  // namespace detwan::collectives::algo

// Reduce to one root.
//   kTree      binomial tree towards root, pipelined chunk by chunk (small messages)
//   kRing      ring reduce-scatter, then every block owner sends its block to the root
//              (bandwidth-optimal: each rank sends (n-1)/n x count in the reduce-scatter,
//              then its count/n block once; the root receives about count in total)
//   otherwise  tree if bytes <= kTreeMaxBytes, else ring
// The result lands in the root's recv only; the other ranks' recv is not touched (may be null).
#include "collectives/reduce/reduce.h"

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

constexpr size_t kTreeMaxBytes = size_t{64} << 10;

// Binomial tree rooted at `root`: acc = own OP child(1) OP child(2) OP child(4) ... (children
// by increasing distance, a fixed order), forwarded to the parent chunk by chunk.
Result<void> reduce_tree(OpContext& ctx, const std::byte* send, std::byte* recv, size_t count,
                         DataType type, ReduceOp op, int root) {
  const int n = ctx.peers.size();
  const int rank = ctx.peers.rank();
  const int v = (rank - root + n) % n;
  int parent = -1;
  std::vector<int> children;
  for (int mask = 1; mask < n; mask <<= 1) {
    if ((v & mask) != 0) {
      parent = (v - mask + root) % n;
      break;
    }
    if (v + mask < n) children.push_back((v + mask + root) % n);
  }

  const size_t elem = data_type_size(type);
  const size_t chunk = detail::chunk_elems(ctx, type);
  const size_t chunks = detail::num_chunks(count, chunk);
  // Where this rank's partial result lives: the root's recv; a leaf sends straight from its
  // send buffer; an inner rank needs scratch (declared before `sends`, which may still read it
  // on an error path).
  std::vector<std::byte> scratch;
  const std::byte* partial = send;
  std::byte* acc = nullptr;
  if (rank == root) {
    acc = recv;
  } else if (!children.empty()) {
    scratch.resize(count * elem);
    acc = scratch.data();
  }
  if (acc != nullptr) partial = acc;

  detail::SendQueue sends(ctx);
  std::deque<detail::RecvQueue> queues;
  for (int child : children) queues.emplace_back(ctx, child);
  size_t posted = 0;
  for (size_t c = 0; c < chunks; ++c) {
    const size_t offset = c * chunk;
    const size_t n_elems = std::min(chunk, count - offset);
    for (; posted < chunks && posted < c + detail::kRecvWindow; ++posted) {
      const size_t size = std::min(chunk, count - posted * chunk) * elem;
      for (auto& queue : queues) queue.expect(size);
    }
    for (size_t i = 0; i < queues.size(); ++i) {
      auto message = queues[i].next();
      if (!message) return std::unexpected(message.error());
      if (i == 0) {
        reduce::reduce_to(acc + offset * elem, send + offset * elem, message->data(), n_elems, type,
                          op);
      } else {
        reduce::reduce_inplace(acc + offset * elem, message->data(), n_elems, type, op);
      }
    }
    if (queues.empty() && acc != nullptr && acc != send) {  // the root of a 1-rank tree
      std::memmove(acc + offset * elem, send + offset * elem, n_elems * elem);
    }
    if (parent >= 0) (void)sends.post(parent, {partial + offset * elem, n_elems * elem});
  }
  if (auto ok = sends.wait_all(); !ok) return ok;
  if (rank == root) reduce::finalize_average(recv, count, type, op, n);
  return {};
}

// Ring reduce-scatter over all ranks in rank order, then block r goes from rank r to the root.
Result<void> reduce_ring(OpContext& ctx, const std::byte* send, std::byte* recv, size_t count,
                         DataType type, ReduceOp op, int root) {
  const int n = ctx.peers.size();
  const int rank = ctx.peers.rank();
  const size_t elem = data_type_size(type);
  const size_t chunk = detail::chunk_elems(ctx, type);
  std::vector<int> group(static_cast<size_t>(n));
  std::iota(group.begin(), group.end(), 0);

  std::vector<std::byte> scratch;  // before `sends` (see reduce_tree)
  std::byte* work = recv;
  if (rank != root) {
    scratch.assign(send, send + count * elem);
    work = scratch.data();
  } else if (send != recv) {
    std::memmove(recv, send, count * elem);
  }
  if (auto ok = ring_reduce_scatter_inplace(ctx, group, work, count, type, op); !ok) return ok;

  const auto nblocks = static_cast<size_t>(n);
  detail::SendQueue sends(ctx);
  if (rank != root) {
    const Block mine = block_of(count, nblocks, static_cast<size_t>(rank));
    (void)detail::send_chunked(sends, root, work + mine.offset * elem, mine.count, elem, chunk);
    return sends.wait_all();
  }
  // Root: receive every other block; all peers' receives are posted (windowed) before any is
  // waited for, so the owners send in parallel.
  struct Incoming {
    int peer;
    Block block;
    detail::RecvQueue queue;
    size_t posted = 0;
    size_t done = 0;
  };
  std::deque<Incoming> incoming;
  for (int q = 0; q < n; ++q) {
    if (q == root) continue;
    incoming.push_back(
        {q, block_of(count, nblocks, static_cast<size_t>(q)), detail::RecvQueue(ctx, q)});
  }
  auto top_up = [&](Incoming& in) {
    const size_t chunks = detail::num_chunks(in.block.count, chunk);
    for (; in.posted < chunks && in.posted < in.done + detail::kRecvWindow; ++in.posted) {
      in.queue.expect(std::min(chunk, in.block.count - in.posted * chunk) * elem);
    }
  };
  for (auto& in : incoming) top_up(in);
  for (auto& in : incoming) {
    const size_t chunks = detail::num_chunks(in.block.count, chunk);
    for (; in.done < chunks; ++in.done) {
      top_up(in);
      auto message = in.queue.next();
      if (!message) return std::unexpected(message.error());
      std::memcpy(recv + (in.block.offset + in.done * chunk) * elem, message->data(),
                  message->size());
    }
  }
  reduce::finalize_average(recv, count, type, op, n);
  return {};
}

}  // namespace

Result<void> reduce(OpContext& ctx, Algorithm algorithm, const void* send, void* recv, size_t count,
                    DataType type, ReduceOp op, int root) {
  const int n = ctx.peers.size();
  const int rank = ctx.peers.rank();
  if (root < 0 || root >= n) {
    return make_error(
        ErrorCode::kInvalidArgument,
        fmt::format("reduce: root {} out of range (communicator of {} ranks)", root, n));
  }
  if (count == 0) return {};
  if (send == nullptr || (rank == root && recv == nullptr)) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("reduce: rank {}: null {} buffer for {} elements", rank,
                                  send == nullptr ? "send" : "recv", count));
  }
  const size_t bytes = count * data_type_size(type);
  const bool ring =
      algorithm == Algorithm::kRing || (algorithm != Algorithm::kTree && bytes > kTreeMaxBytes);
  if (ring && n > 1) {
    return reduce_ring(ctx, detail::as_bytes(send), detail::as_bytes(recv), count, type, op, root);
  }
  return reduce_tree(ctx, detail::as_bytes(send), detail::as_bytes(recv), count, type, op, root);
}

}  // namespace detwan::collectives::algo

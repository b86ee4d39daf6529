#pragma once
// The collective algorithms, written against Peers (point-to-point messages between the
// communicator's ranks). Every function is called by every rank of the communicator (or of
// the group it names) with matching arguments, on the communicator's executor thread, and
// blocks until this rank's part is done.
//
// Buffers: `send` and `recv` are host memory of count elements of `type`; send == recv means
// in place. A rank's buffers are only read/written by this call while it runs; on return every
// send from them has been acknowledged, so the caller may reuse them.
//
// Reduction order: every algorithm combines contributions in an order fixed by
// (algorithm, nranks, count, chunk_bytes, topology) alone, never by message arrival, so the
// same plan gives bitwise identical results run after run.
//
// Errors: Result<void> with the first failure (peer named, from Peers); a rank that fails
// leaves its recv buffer unspecified.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "collectives/net/peers.h"
#include "collectives/topology/topology.h"
#include "collectives/types.h"

namespace detwan::collectives::algo {

struct OpContext {
  Peers& peers;
  const Topology& topology;
  Deadline deadline;
  // Pipelining unit in bytes for the ring/hierarchical algorithms; 0 = the algorithm's default
  // (kDefaultChunkBytes).
  int64_t chunk_bytes = 0;
};

inline constexpr int64_t kDefaultChunkBytes = int64_t{4} << 20;

// ---- allreduce -----------------------------------------------------------------------
// Pipelined chunked ring: reduce-scatter then allgather around rank order 0..n-1.
Result<void> all_reduce_ring(OpContext& ctx, const void* send, void* recv, size_t count,
                             DataType type, ReduceOp op);
// Recursive halving (reduce-scatter) + recursive doubling (allgather); non-powers of two fold
// the extra ranks into partners first.
Result<void> all_reduce_halving_doubling(OpContext& ctx, const void* send, void* recv,
                                         size_t count, DataType type, ReduceOp op);
// Binomial-tree reduce to rank 0, then binomial-tree broadcast: 2 log2(n) latencies.
Result<void> all_reduce_tree(OpContext& ctx, const void* send, void* recv, size_t count,
                             DataType type, ReduceOp op);
// Site-aware (any number of ranks per site): ring reduce-scatter inside each site, the shards
// reduced across sites segment by segment by the ranks holding them (site_segments: with equal
// sites the ranks of equal local index; each rank drives its own share of the WAN in
// parallel), ring allgather inside each site. Chunked so the phases of successive chunks
// overlap.
Result<void> all_reduce_hierarchical(OpContext& ctx, const void* send, void* recv, size_t count,
                                     DataType type, ReduceOp op);
// Dispatch by algorithm (kAuto is not valid here: the caller resolves it with the cost model).
Result<void> all_reduce(OpContext& ctx, Algorithm algorithm, const void* send, void* recv,
                        size_t count, DataType type, ReduceOp op);

// ---- the other collectives --------------------------------------------------------------
// `algorithm` selects where several apply (kTree = binomial, kRing = pipelined chain/ring,
// kHierarchical = site-aware); others fall back to the default named in the .cc.
Result<void> broadcast(OpContext& ctx, Algorithm algorithm, const void* send, void* recv,
                       size_t count, DataType type, int root);
Result<void> reduce(OpContext& ctx, Algorithm algorithm, const void* send, void* recv,
                    size_t count, DataType type, ReduceOp op, int root);
// recv holds size() * send_count elements.
Result<void> all_gather(OpContext& ctx, Algorithm algorithm, const void* send, void* recv,
                        size_t send_count, DataType type);
// send holds size() * recv_count elements.
Result<void> reduce_scatter(OpContext& ctx, Algorithm algorithm, const void* send, void* recv,
                            size_t recv_count, DataType type, ReduceOp op);
// count elements to and from every rank (pairwise exchange, no staging through other ranks).
Result<void> all_to_all(OpContext& ctx, const void* send, void* recv, size_t count,
                        DataType type);
// Dissemination barrier: ceil(log2 n) rounds of 0-byte messages.
Result<void> barrier(OpContext& ctx);

// ---- point to point ---------------------------------------------------------------------
struct P2pOp {
  bool is_send = true;
  int peer = -1;
  const void* send = nullptr;  // is_send
  void* recv = nullptr;        // !is_send
  size_t bytes = 0;
};
// Posts every send and receive at once, then waits for all: a group of matching sends and
// receives never deadlocks. Receives must match the sent sizes exactly.
Result<void> point_to_point(OpContext& ctx, std::span<const P2pOp> ops);

// ---- building blocks over a subset of ranks (used by the hierarchical algorithms) --------
// `group` lists communicator ranks in ring order and includes this rank. Counts are in
// elements; block i of `buf` (count/|group| elements, the remainder spread over the first
// blocks) ends up reduced over the group at group[i] (reduce-scatter) / everywhere (allgather).
Result<void> ring_reduce_scatter_inplace(OpContext& ctx, std::span<const int> group, void* buf,
                                         size_t count, DataType type, ReduceOp op);
Result<void> ring_all_gather_inplace(OpContext& ctx, std::span<const int> group, void* buf,
                                     size_t count, DataType type);
// [offset, count) of block `index` when `count` elements are split into `blocks` blocks.
struct Block {
  size_t offset = 0;
  size_t count = 0;
};
[[nodiscard]] Block block_of(size_t count, size_t blocks, size_t index);
// Consecutive pieces of a pipelined buffer of `count` elements: they start at `min_piece`
// elements, double up to the body size max(min_piece, count / body_pieces), and shrink the same
// way at the end, so the pipeline's first stage (before anything overlaps it) and its last
// stage (after nothing overlaps it) handle only min_piece elements. A count too small for that
// is cut into clamp(count / min_piece, 1, body_pieces) equal blocks (block_of).
[[nodiscard]] std::vector<Block> ramped_pieces(size_t count, size_t min_piece,
                                               size_t body_pieces);

}  // namespace detwan::collectives::algo

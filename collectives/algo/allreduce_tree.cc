// Binomial-tree reduce to rank 0, then binomial-tree broadcast from rank 0.
//
// Rank r's parent is r minus its lowest set bit; its children are r + 2^j for every 2^j below
// that bit (r + 2^j < n). Steps: ceil(log2 n) up and as many down; each moves the whole buffer,
// as chunk_bytes messages pipelined through the tree (a node forwards chunk c as soon as it has
// it, so large buffers do not pay the depth times the transfer time). Reduction order at every
// node: own, then children by increasing distance (acc = acc OP child).
#include <algorithm>
#include <cstring>
#include <deque>
#include <vector>

#include "collectives/algo/algorithms.h"
#include "collectives/algo/detail.h"
#include "collectives/reduce/reduce.h"

namespace detwan::collectives::algo {

Result<void> all_reduce_tree(OpContext& ctx, const void* send, void* recv, size_t count,
                             DataType type, ReduceOp op) {
  detail::copy_to_recv(send, recv, count, type);
  const int n = ctx.peers.size();
  const int rank = ctx.peers.rank();
  if (n <= 1 || count == 0) return {};
  std::byte* buf = detail::as_bytes(recv);
  const size_t elem = data_type_size(type);
  const size_t chunk = detail::chunk_elems(ctx, type);
  const size_t chunks = detail::num_chunks(count, chunk);
  auto chunk_bytes_of = [&](size_t c) { return std::min(chunk, count - c * chunk) * elem; };

  int parent = -1;
  std::vector<int> children;  // increasing distance
  for (int mask = 1; mask < n; mask <<= 1) {
    if ((rank & mask) != 0) {
      parent = rank - mask;
      break;
    }
    if (rank + mask < n) children.push_back(rank + mask);
  }

  detail::SendQueue sends(ctx);
  // Reduce: per chunk, fold in every child, then pass the chunk up.
  std::deque<detail::RecvQueue> from_children;  // deque: RecvQueue is not relocatable
  for (int child : children) from_children.emplace_back(ctx, child);
  std::vector<size_t> sent_up(chunks, detail::kNoWait);
  size_t posted = 0;
  for (size_t c = 0; c < chunks; ++c) {
    for (; posted < chunks && posted < c + detail::kRecvWindow; ++posted) {
      for (auto& queue : from_children) queue.expect(chunk_bytes_of(posted));
    }
    std::byte* at = buf + c * chunk * elem;
    for (auto& queue : from_children) {
      auto message = queue.next();
      if (!message) return std::unexpected(message.error());
      reduce::reduce_inplace(at, message->data(), message->size() / elem, type, op);
    }
    if (parent >= 0) sent_up[c] = sends.post(parent, {at, chunk_bytes_of(c)});
  }

  // Broadcast: per chunk, take it from the parent, then pass it to the children, the largest
  // subtree (farthest child) first.
  detail::RecvQueue from_parent(ctx, parent);
  posted = 0;
  for (size_t c = 0; c < chunks; ++c) {
    std::byte* at = buf + c * chunk * elem;
    if (parent >= 0) {
      for (; posted < chunks && posted < c + detail::kRecvWindow; ++posted) {
        from_parent.expect(chunk_bytes_of(posted));
      }
      auto message = from_parent.next();
      if (!message) return std::unexpected(message.error());
      // The chunk went up zero-copy; it may be overwritten once acknowledged.
      if (auto ok = sends.wait_for(sent_up[c]); !ok) return ok;
      std::memcpy(at, message->data(), message->size());
    }
    for (auto child = children.rbegin(); child != children.rend(); ++child) {
      (void)sends.post(*child, {at, chunk_bytes_of(c)});
    }
  }
  return sends.wait_all();
}

}  // namespace detwan::collectives::algo

// Recursive halving reduce-scatter + recursive doubling allgather (Rabenseifner).
//
// n not a power of two: with p2 = 2^floor(log2 n) and r = n - p2, rank 2i+1 (i < r) first sends
// its whole buffer to rank 2i, which reduces (own OP received) and takes part as virtual rank
// i; ranks >= 2r take part as virtual rank (rank - r). At the end rank 2i sends the result back.
// Round by round each rank keeps one half of its current range, sends the other half to its
// partner (virtual rank XOR distance) and reduces the partner's copy of the kept half into its
// own (own OP received): every element's final value is computed by exactly one rank, then
// copied, so all ranks end bitwise identical.
#include <cstring>
#include <utility>
#include <vector>

#include "collectives/algo/algorithms.h"
#include "collectives/algo/detail.h"
#include "collectives/reduce/reduce.h"

namespace detwan::collectives::algo {
namespace {

struct Range {
  size_t lo = 0;
  size_t hi = 0;
  [[nodiscard]] size_t count() const { return hi - lo; }
};

// Receives `range` from `peer` (chunked) and reduces it into buf: buf = buf OP received.
Result<void> recv_reduce(OpContext& ctx, int peer, std::byte* buf, Range range, DataType type,
                         ReduceOp op, size_t elem, size_t chunk) {
  return detail::recv_chunked(
      ctx, peer, range.count(), elem, chunk,
      [&](size_t offset, std::span<const std::byte> message) -> Result<void> {
        reduce::reduce_inplace(buf + (range.lo + offset) * elem, message.data(),
                               message.size() / elem, type, op);
        return {};
      });
}

// Receives `range` from `peer` (chunked) into buf.
Result<void> recv_copy(OpContext& ctx, int peer, std::byte* buf, Range range, size_t elem,
                       size_t chunk) {
  return detail::recv_chunked(
      ctx, peer, range.count(), elem, chunk,
      [&](size_t offset, std::span<const std::byte> message) -> Result<void> {
        std::memcpy(buf + (range.lo + offset) * elem, message.data(), message.size());
        return {};
      });
}

}  // namespace

Result<void> all_reduce_halving_doubling(OpContext& ctx, const void* send, void* recv,
                                         size_t count, DataType type, ReduceOp op) {
  detail::copy_to_recv(send, recv, count, type);
  const int n = ctx.peers.size();
  const int rank = ctx.peers.rank();
  if (n <= 1 || count == 0) return {};
  std::byte* buf = detail::as_bytes(recv);
  const size_t elem = data_type_size(type);
  const size_t chunk = detail::chunk_elems(ctx, type);
  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  const int extra = n - p2;
  auto real_rank = [&](int virtual_rank) {
    return virtual_rank < extra ? 2 * virtual_rank : virtual_rank + extra;
  };
  detail::SendQueue sends(ctx);
  const Range all{0, count};

  // Fold the extra ranks into their even partners.
  int vrank = rank < 2 * extra ? (rank % 2 == 0 ? rank / 2 : -1) : rank - extra;
  if (rank < 2 * extra) {
    if (rank % 2 == 1) {
      detail::send_chunked(sends, rank - 1, buf, count, elem, chunk);
    } else if (auto ok = recv_reduce(ctx, rank + 1, buf, all, type, op, elem, chunk); !ok) {
      return ok;
    }
  }

  if (vrank >= 0) {
    // Recursive halving: ranges[j] is the range held before round j.
    std::vector<Range> ranges;
    Range range = all;
    for (int distance = p2 / 2; distance >= 1; distance /= 2) {
      ranges.push_back(range);
      const int partner = real_rank(vrank ^ distance);
      const size_t mid = range.lo + range.count() / 2;
      const bool keep_low = (vrank & distance) == 0;
      const Range keep = keep_low ? Range{range.lo, mid} : Range{mid, range.hi};
      const Range give = keep_low ? Range{mid, range.hi} : Range{range.lo, mid};
      detail::send_chunked(sends, partner, buf + give.lo * elem, give.count(), elem, chunk);
      if (auto ok = recv_reduce(ctx, partner, buf, keep, type, op, elem, chunk); !ok) return ok;
      range = keep;
    }
    // Doubling overwrites exactly the halves sent above.
    if (auto ok = sends.wait_all(); !ok) return ok;
    int round = static_cast<int>(ranges.size()) - 1;
    for (int distance = 1; distance < p2; distance *= 2, --round) {
      const int partner = real_rank(vrank ^ distance);
      const Range parent = ranges[static_cast<size_t>(round)];
      const size_t mid = parent.lo + parent.count() / 2;
      const Range other = (vrank & distance) == 0 ? Range{mid, parent.hi} : Range{parent.lo, mid};
      detail::send_chunked(sends, partner, buf + range.lo * elem, range.count(), elem, chunk);
      if (auto ok = recv_copy(ctx, partner, buf, other, elem, chunk); !ok) return ok;
      range = parent;
    }
  }

  // Unfold: the even partner hands the result back.
  if (rank < 2 * extra) {
    if (rank % 2 == 0) {
      detail::send_chunked(sends, rank + 1, buf, count, elem, chunk);
    } else {
      if (auto ok = sends.wait_all(); !ok) return ok;
      if (auto ok = recv_copy(ctx, rank - 1, buf, all, elem, chunk); !ok) return ok;
    }
  }
  return sends.wait_all();
}

}  // namespace detwan::collectives::algo

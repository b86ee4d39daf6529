// Dissemination barrier: in round k (distance 2^k < n) rank r sends an empty message to
// (r + 2^k) % n and waits for one from (r - 2^k) % n. After ceil(log2 n) rounds every rank has
// (transitively) heard from every other, so none leaves before all have entered. The distances
// are distinct modulo n, so each ordered pair exchanges at most one message per barrier.
#include <cstdint>
#include <span>

#include "collectives/algo/algorithms.h"

namespace detwan::collectives::algo {

Result<void> barrier(OpContext& ctx) {
  const int n = ctx.peers.size();
  const int rank = ctx.peers.rank();
  for (int64_t distance = 1; distance < n; distance *= 2) {
    // A copied send: nothing to wait for (its acknowledgement is irrelevant to the barrier).
    ctx.peers.send_copy(static_cast<int>((rank + distance) % n), {});
    if (auto ok =
            ctx.peers.recv_into(static_cast<int>((rank - distance + n) % n), {}, ctx.deadline);
        !ok) {
      return ok;
    }
  }
  return {};
}

}  // namespace detwan::collectives::algo

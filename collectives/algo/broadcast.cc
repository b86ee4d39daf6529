// Broadcast as a relay: every rank has at most one parent and forwards each chunk to its
// children as soon as the chunk has arrived, so every link of the relay is busy at once.
//   kTree          binomial tree from root (log2 n latencies; small messages)
//   kRing          chain in rank order starting at root (bandwidth-optimal for large messages)
//   kHierarchical  root -> one rank in each other site (one WAN crossing per site), then a
//                  chain inside each site
//   otherwise      tree if bytes <= kTreeMaxBytes, else ring
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "collectives/algo/algorithms.h"
#include "collectives/algo/detail.h"

namespace detwan::collectives::algo {
namespace {

constexpr size_t kTreeMaxBytes = size_t{64} << 10;

struct Relay {
  int parent = -1;            // -1: this rank is the root
  std::vector<int> children;  // in sending order
};

Relay binomial_relay(int rank, int n, int root) {
  Relay relay;
  const int v = (rank - root + n) % n;  // position relative to root
  int mask = 1;
  while (mask < n) {
    if ((v & mask) != 0) {
      relay.parent = (v - mask + root) % n;
      break;
    }
    mask <<= 1;
  }
  // Children below the lowest set bit of v (for the root: below n), largest subtree first.
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (v + mask < n) relay.children.push_back((v + mask + root) % n);
  }
  return relay;
}

Relay chain_relay(int rank, int n, int root) {
  Relay relay;
  const int v = (rank - root + n) % n;
  if (v > 0) relay.parent = (rank - 1 + n) % n;
  if (v + 1 < n) relay.children.push_back((rank + 1) % n);
  return relay;
}

Relay hierarchical_relay(const Topology& topology, int rank, int root) {
  const int root_site = topology.site_of(root);
  // Each site's entry rank: root itself in root's site, else the rank with root's local index
  // (modulo the site's size), so different roots spread the WAN load over different ranks.
  auto leader_of = [&](int site) {
    if (site == root_site) return root;
    const auto& ranks = topology.ranks_of_site(site);
    return ranks[static_cast<size_t>(topology.local_index(root)) % ranks.size()];
  };
  Relay relay;
  const int site = topology.site_of(rank);
  const auto& ranks = topology.ranks_of_site(site);
  const int leader = leader_of(site);
  if (rank == root) {
    for (int s = 0; s < topology.num_sites(); ++s) {
      if (s != root_site) relay.children.push_back(leader_of(s));
    }
  } else if (rank == leader) {
    relay.parent = root;
  }
  // Chain inside the site, in site order starting at the leader.
  const auto size = static_cast<int>(ranks.size());
  const int leader_pos = topology.local_index(leader);
  const int pos = (topology.local_index(rank) - leader_pos + size) % size;
  if (pos > 0) relay.parent = ranks[static_cast<size_t>((leader_pos + pos - 1) % size)];
  if (pos + 1 < size)
    relay.children.push_back(ranks[static_cast<size_t>((leader_pos + pos + 1) % size)]);
  return relay;
}

Result<void> run_relay(OpContext& ctx, const Relay& relay, const std::byte* src, std::byte* dst,
                       size_t count, DataType type) {
  const size_t elem = data_type_size(type);
  const size_t chunk = detail::chunk_elems(ctx, type);
  detail::SendQueue sends(ctx);
  if (relay.parent < 0) {
    for (size_t offset = 0; offset < count; offset += chunk) {
      const size_t n = std::min(chunk, count - offset);
      for (int child : relay.children) (void)sends.post(child, {src + offset * elem, n * elem});
    }
    // The copy overlaps the sends; src is never written.
    if (src != dst) std::memmove(dst, src, count * elem);
    return sends.wait_all();
  }
  auto ok = detail::recv_chunked(
      ctx, relay.parent, count, elem, chunk,
      [&](size_t offset, std::span<const std::byte> message) -> Result<void> {
        std::byte* region = dst + offset * elem;
        std::memcpy(region, message.data(), message.size());
        // region is never written again during this call, so it can be sent zero copy.
        for (int child : relay.children) (void)sends.post(child, {region, message.size()});
        return {};
      });
  if (!ok) return ok;
  return sends.wait_all();
}

}  // namespace

Result<void> broadcast(OpContext& ctx, Algorithm algorithm, const void* send, void* recv,
                       size_t count, DataType type, int root) {
  const int n = ctx.peers.size();
  const int rank = ctx.peers.rank();
  if (root < 0 || root >= n) {
    return make_error(
        ErrorCode::kInvalidArgument,
        fmt::format("broadcast: root {} out of range (communicator of {} ranks)", root, n));
  }
  if (count == 0) return {};
  if (recv == nullptr || (rank == root && send == nullptr)) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("broadcast: rank {}: null {} buffer for {} elements", rank,
                                  recv == nullptr ? "recv" : "send", count));
  }
  const size_t bytes = count * data_type_size(type);
  Relay relay;
  if (algorithm == Algorithm::kHierarchical && ctx.topology.size() == n) {
    relay = hierarchical_relay(ctx.topology, rank, root);
  } else if (algorithm == Algorithm::kTree) {
    relay = binomial_relay(rank, n, root);
  } else if (algorithm == Algorithm::kRing || bytes > kTreeMaxBytes) {
    relay = chain_relay(rank, n, root);
  } else {
    relay = binomial_relay(rank, n, root);
  }
  return run_relay(ctx, relay, detail::as_bytes(send), detail::as_bytes(recv), count, type);
}

}  // namespace detwan::collectives::algo

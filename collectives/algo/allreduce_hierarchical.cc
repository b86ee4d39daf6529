// Site-aware allreduce: with L ranks per site and S sites,
//   (1) ring reduce-scatter inside the site: local rank l ends with block l reduced over its
//       site;
//   (2) the S ranks of local index l (one per site) allreduce block l among themselves: S == 2
//       is one exchange (both send, both receive, both compute site0_part OP site1_part, in that
//       order, so both get bitwise identical results); S > 2 is a ring among them. All L local
//       ranks do this at the same time, so each drives its own 1/L share of the WAN;
//   (3) ring allgather inside the site.
// The buffer is processed in pieces so the WAN starts early and stays busy: the reduce-scatters
// of all pieces run first, each piece's WAN exchange (chunk_bytes messages, all posted at once)
// leaving as soon as its reduce-scatter is done; then piece by piece the exchange is completed
// and the piece's allgather runs while later pieces are still on the WAN. Only the first
// piece's reduce-scatter and the last piece's allgather are not overlapped, so the pieces ramp
// up from kMinShardBytes per local rank to 1/kBodyPieces of the buffer and down again at the
// end (ramped_pieces). The last kCopyTailBytes of this rank's WAN messages are sent as copies:
// completing them does not wait for their acknowledgement, a WAN round trip.
#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "collectives/algo/algorithms.h"
#include "collectives/algo/detail.h"
#include "collectives/reduce/reduce.h"

namespace detwan::collectives::algo {
namespace {

constexpr size_t kBodyPieces = 8;
constexpr size_t kMinShardBytes = size_t{256} << 10;
constexpr size_t kCopyTailBytes = size_t{4} << 20;

Result<void> check_topology(const OpContext& ctx) {
  const Topology& topology = ctx.topology;
  if (topology.size() != ctx.peers.size()) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("hierarchical: the topology has {} ranks, the communicator {}",
                                  topology.size(), ctx.peers.size()));
  }
  if (!topology.uniform()) {
    std::string sizes;
    for (int site = 0; site < topology.num_sites(); ++site) {
      if (site > 0) sizes += ", ";
      sizes += fmt::format("{}: {}", topology.site_name(site),
                           topology.ranks_of_site(site).size());
    }
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("hierarchical needs the same number of ranks per site ({})",
                                  sizes));
  }
  return {};
}

}  // namespace

Result<void> all_reduce_hierarchical(OpContext& ctx, const void* send, void* recv, size_t count,
                                     DataType type, ReduceOp op) {
  if (auto ok = check_topology(ctx); !ok) return ok;
  const Topology& topology = ctx.topology;
  const int rank = ctx.peers.rank();
  const int sites = topology.num_sites();
  const int per_site = topology.ranks_per_site();
  if (ctx.peers.size() <= 1 || count == 0) {
    detail::copy_to_recv(send, recv, count, type);
    return {};
  }
  const int my_site = topology.site_of(rank);
  const auto local = static_cast<size_t>(topology.local_index(rank));
  const std::vector<int>& site_group = topology.ranks_of_site(my_site);
  std::vector<int> cross_group;  // the rank of local index `local` in every site, site order
  for (int site = 0; site < sites; ++site) cross_group.push_back(topology.ranks_of_site(site)[local]);

  std::byte* buf = detail::as_bytes(recv);
  const size_t elem = data_type_size(type);
  const size_t chunk = detail::chunk_elems(ctx, type);
  const int rs_steps = per_site - 1;
  detail::SendQueue sends(ctx);
  if (sites == 1) {  // one ring, reading the input from send when out of place
    auto ok = detail::run_ring(ctx, site_group, buf, count, type, op, 0, 2 * rs_steps, sends,
                               detail::ring_source(send, recv, count, type));
    if (!ok) return ok;
    return sends.wait_all();
  }
  detail::copy_to_recv(send, recv, count, type);

  // Pieces of at least kMinShardBytes per local rank: small enough that the WAN starts after a
  // fraction of the intra-site work, large enough that the per-piece intra-site ring latency
  // stays negligible. Independent of chunk_bytes (that only sizes the messages).
  const size_t min_piece =
      std::max<size_t>(1, kMinShardBytes / elem) * static_cast<size_t>(per_site);
  const std::vector<Block> piece = ramped_pieces(count, min_piece, kBodyPieces);
  const size_t pieces = piece.size();
  std::vector<Block> shard(pieces);  // this rank's block of each piece (absolute offsets)
  for (size_t k = 0; k < pieces; ++k) {
    const Block b = block_of(piece[k].count, static_cast<size_t>(per_site), local);
    shard[k] = Block{piece[k].offset + b.offset, b.count};
  }
  // Pieces from first_copied on have their WAN messages copied (at most kCopyTailBytes).
  size_t first_copied = pieces;
  for (size_t tail = 0; first_copied > 0; --first_copied) {
    tail += shard[first_copied - 1].count * elem;
    if (tail > kCopyTailBytes) break;
  }

  // (1) every piece's intra-site reduce-scatter, each piece's WAN exchange posted right after.
  const int other = sites == 2 ? cross_group[my_site == 0 ? 1 : 0] : -1;
  std::vector<size_t> rs_last(pieces, detail::kNoWait);      // last intra send of the piece
  std::vector<std::vector<size_t>> wan_sent(pieces);          // per chunk of the shard
  for (size_t k = 0; k < pieces; ++k) {
    auto ok = detail::run_ring(ctx, site_group, buf + piece[k].offset * elem, piece[k].count,
                               type, op, 0, rs_steps, sends);
    if (!ok) return ok;
    if (sends.next_index() > 0) rs_last[k] = sends.next_index() - 1;
    if (other < 0) continue;
    for (size_t offset = 0; offset < shard[k].count; offset += chunk) {
      const size_t n = std::min(chunk, shard[k].count - offset);
      const std::span<const std::byte> message{buf + (shard[k].offset + offset) * elem, n * elem};
      wan_sent[k].push_back(k >= first_copied ? sends.post_copy(other, message)
                                              : sends.post(other, message));
    }
  }

  // (2) + (3) piece by piece.
  detail::RecvQueue from_other(ctx, other);
  size_t expected_piece = 0;  // WAN receives are posted ahead across piece boundaries
  size_t expected_chunk = 0;
  auto post_ahead = [&] {
    while (other >= 0 && from_other.posted() < detail::kRecvWindow && expected_piece < pieces) {
      const size_t offset = expected_chunk * chunk;
      if (offset >= shard[expected_piece].count) {
        ++expected_piece;
        expected_chunk = 0;
        continue;
      }
      from_other.expect(std::min(chunk, shard[expected_piece].count - offset) * elem);
      ++expected_chunk;
    }
  };
  for (size_t k = 0; k < pieces; ++k) {
    if (other >= 0) {
      for (size_t c = 0; c < wan_sent[k].size(); ++c) {
        post_ahead();
        auto message = from_other.next();
        if (!message) return std::unexpected(message.error());
        std::byte* at = buf + (shard[k].offset + c * chunk) * elem;
        const size_t n = message->size() / elem;
        // The shard went out zero-copy: overwrite it only once acknowledged.
        if (auto ok = sends.wait_for(wan_sent[k][c]); !ok) return ok;
        if (my_site == 0) {
          reduce::reduce_inplace(at, message->data(), n, type, op);  // mine OP theirs
        } else {
          reduce::reduce_to(at, message->data(), at, n, type, op);  // theirs OP mine
        }
      }
    } else {
      auto ok = detail::run_ring(ctx, cross_group, buf + shard[k].offset * elem, shard[k].count,
                                 type, op, 0, 2 * (sites - 1), sends);
      if (!ok) return ok;
    }
    // The allgather overwrites the blocks the reduce-scatter sent.
    if (auto ok = sends.wait_through(rs_last[k]); !ok) return ok;
    auto ok = detail::run_ring(ctx, site_group, buf + piece[k].offset * elem, piece[k].count,
                               type, op, rs_steps, 2 * rs_steps, sends);
    if (!ok) return ok;
  }
  return sends.wait_all();
}

}  // namespace detwan::collectives::algo

// Site-aware allreduce over S sites of L_s ranks each (any L_s >= 1, sites may differ):
//   (1) ring reduce-scatter inside each site: the site's local rank l ends with block l of the
//       buffer (block_of(count, L_s, l)) reduced over its site;
//   (2) the inter-site exchange. The sites' block boundaries together cut the buffer into
//       segments, each owned by exactly one rank per site (with equal sites a segment is a
//       block). The owners of a segment exchange it directly: each sends its part to the
//       S - 1 others and receives theirs, all at once, and every owner computes
//       site0_part OP site1_part OP ... in site order, so all get bitwise identical results.
//       Each rank sends its own block over the WAN, so every rank of a site drives its share
//       of the site's traffic, and each site pair carries the buffer once in each direction
//       whatever the sites' sizes, every pair at the same time (a ring over S sites would
//       carry 2(S-1)/S of it over S of the pairs, one segment's ring after another);
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
#include <cstring>
#include <deque>
#include <tuple>
#include <utility>
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
  return {};
}

// The messages of this rank's part of one segment's WAN exchange.
struct Exchange {
  SiteSegment segment;         // absolute offsets in the buffer; owners[s]: its rank in site s
  std::vector<size_t> sent;    // send index of each (chunk, other site) (kNoWait: copied)
};

// out = part(0) OP part(1) OP ... OP part(S-1), in site order, where part(s) is the received
// message of site s and `mine` for this rank's site; `mine` is overwritten with the result.
// scratch: n elements, used unless this rank's site is 0 (reduce into mine) or S == 2.
void reduce_in_site_order(std::byte* mine, const std::vector<const std::byte*>& parts,
                          size_t my_site, size_t n, DataType type, ReduceOp op,
                          std::byte* scratch) {
  const size_t sites = parts.size();
  auto part = [&](size_t s) { return s == my_site ? mine : parts[s]; };
  if (my_site == 0) {
    for (size_t s = 1; s < sites; ++s) reduce::reduce_inplace(mine, parts[s], n, type, op);
    return;
  }
  std::byte* acc = sites == 2 ? mine : scratch;
  reduce::reduce_to(acc, part(0), part(1), n, type, op);
  for (size_t s = 2; s < sites; ++s) reduce::reduce_inplace(acc, part(s), n, type, op);
  if (acc != mine) std::memcpy(mine, acc, n * data_type_size(type));
}

// Receives from the other site's ranks, each posted ahead in the order that rank sends.
class ExchangeReceives {
 public:
  explicit ExchangeReceives(OpContext& ctx) : ctx_(ctx) {}
  void plan(int peer, size_t bytes) { of(peer).sizes.push_back(bytes); }
  Result<detail::Received> next(int peer) {
    Stream& stream = of(peer);
    while (stream.queue.posted() < detail::kRecvWindow && stream.posted < stream.sizes.size()) {
      stream.queue.expect(stream.sizes[stream.posted++]);
    }
    return stream.queue.next();
  }

 private:
  struct Stream {
    Stream(OpContext& ctx, int peer) : queue(ctx, peer) {}
    detail::RecvQueue queue;
    std::vector<size_t> sizes;
    size_t posted = 0;
  };
  Stream& of(int peer) {
    for (auto& [p, stream] : streams_) {
      if (p == peer) return stream;
    }
    return streams_.emplace_back(std::piecewise_construct, std::forward_as_tuple(peer),
                                 std::forward_as_tuple(ctx_, peer)).second;
  }
  OpContext& ctx_;
  std::deque<std::pair<int, Stream>> streams_;
};

}  // namespace

Result<void> all_reduce_hierarchical(OpContext& ctx, const void* send, void* recv, size_t count,
                                     DataType type, ReduceOp op) {
  if (auto ok = check_topology(ctx); !ok) return ok;
  const Topology& topology = ctx.topology;
  const int rank = ctx.peers.rank();
  const int sites = topology.num_sites();
  if (ctx.peers.size() <= 1 || count == 0) {
    detail::copy_to_recv(send, recv, count, type);
    return {};
  }
  const int my_site = topology.site_of(rank);
  const auto local = static_cast<size_t>(topology.local_index(rank));
  const std::vector<int>& site_group = topology.ranks_of_site(my_site);
  const auto per_site = static_cast<int>(site_group.size());

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

  // Pieces of at least kMinShardBytes per rank of the largest site: small enough that the WAN
  // starts after a fraction of the intra-site work, large enough that the per-piece intra-site
  // ring latency stays negligible. The same on every rank; independent of chunk_bytes (that
  // only sizes the messages).
  const size_t min_piece = std::max<size_t>(1, kMinShardBytes / elem) *
                           static_cast<size_t>(topology.max_ranks_per_site());
  const std::vector<Block> piece = ramped_pieces(count, min_piece, kBodyPieces);
  const size_t pieces = piece.size();
  std::vector<Block> shard(pieces);  // this rank's block of each piece (absolute offsets)
  std::vector<std::vector<SiteSegment>> segments(pieces);  // this rank's, absolute offsets
  for (size_t k = 0; k < pieces; ++k) {
    const Block b = block_of(piece[k].count, static_cast<size_t>(per_site), local);
    shard[k] = Block{piece[k].offset + b.offset, b.count};
    segments[k] = site_segments(topology, piece[k].count, rank);
    for (SiteSegment& segment : segments[k]) segment.offset += piece[k].offset;
  }
  // Pieces from first_copied on have their WAN messages copied (at most kCopyTailBytes).
  size_t first_copied = pieces;
  for (size_t tail = 0; first_copied > 0; --first_copied) {
    tail += shard[first_copied - 1].count * elem;
    if (tail > kCopyTailBytes) break;
  }

  // (1) every piece's intra-site reduce-scatter, each piece's WAN exchange posted right after.
  const auto site_index = static_cast<size_t>(my_site);
  std::vector<size_t> rs_last(pieces, detail::kNoWait);      // last intra send of the piece
  std::vector<std::vector<Exchange>> exchanges(pieces);
  ExchangeReceives receives(ctx);
  for (size_t k = 0; k < pieces; ++k) {
    auto ok = detail::run_ring(ctx, site_group, buf + piece[k].offset * elem, piece[k].count,
                               type, op, 0, rs_steps, sends);
    if (!ok) return ok;
    if (sends.next_index() > 0) rs_last[k] = sends.next_index() - 1;
    for (const SiteSegment& segment : segments[k]) {
      Exchange& x = exchanges[k].emplace_back(Exchange{segment, {}});
      for (size_t offset = 0; offset < segment.count; offset += chunk) {
        const size_t n = std::min(chunk, segment.count - offset);
        const std::span<const std::byte> message{buf + (segment.offset + offset) * elem,
                                                 n * elem};
        for (size_t s = 0; s < segment.owners.size(); ++s) {
          if (s == site_index) continue;
          const int peer = segment.owners[s];
          x.sent.push_back(k >= first_copied ? sends.post_copy(peer, message)
                                             : sends.post(peer, message));
          receives.plan(peer, n * elem);
        }
      }
    }
  }

  // (2) + (3) piece by piece.
  const auto others = static_cast<size_t>(sites - 1);
  std::vector<std::byte> scratch(sites > 2 && my_site > 0 ? chunk * elem : 0);
  std::vector<detail::Received> messages;
  messages.reserve(others);
  std::vector<const std::byte*> parts(static_cast<size_t>(sites), nullptr);
  for (size_t k = 0; k < pieces; ++k) {
    for (const Exchange& x : exchanges[k]) {
      for (size_t c = 0; c * others < x.sent.size(); ++c) {
        messages.clear();
        for (size_t s = 0; s < x.segment.owners.size(); ++s) {
          if (s == site_index) continue;
          auto message = receives.next(x.segment.owners[s]);
          if (!message) return std::unexpected(message.error());
          messages.push_back(std::move(*message));
          parts[s] = messages.back().data();
        }
        std::byte* at = buf + (x.segment.offset + c * chunk) * elem;
        const size_t n = messages.front().size() / elem;
        // The chunk went out zero-copy: overwrite it only once every peer acknowledged it.
        for (size_t j = 0; j < others; ++j) {
          if (auto ok = sends.wait_for(x.sent[c * others + j]); !ok) return ok;
        }
        reduce_in_site_order(at, parts, site_index, n, type, op, scratch.data());
      }
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

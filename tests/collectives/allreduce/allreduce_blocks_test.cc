// block_of and the group building blocks ring_reduce_scatter_inplace / ring_all_gather_inplace
// (used by the hierarchical algorithms and by the reduce-scatter / allgather collectives).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tests/collectives/allreduce/allreduce_util.h"

namespace detwan::collectives::testing {
namespace {

TEST(BlockOf, CoversTheRangeInOrderWithTheRemainderOnTheFirstBlocks) {
  for (size_t count : {0, 1, 5, 7, 8, 1023}) {
    for (size_t blocks : {1, 2, 3, 8}) {
      size_t next = 0;
      for (size_t i = 0; i < blocks; ++i) {
        const algo::Block b = algo::block_of(count, blocks, i);
        EXPECT_EQ(b.offset, next) << count << " / " << blocks << " block " << i;
        EXPECT_EQ(b.count, count / blocks + (i < count % blocks ? 1 : 0));
        next += b.count;
      }
      EXPECT_EQ(next, count);
    }
  }
  EXPECT_EQ(algo::block_of(10, 0, 0).count, 0u);  // no blocks: empty, no division by zero
  EXPECT_EQ(algo::block_of(10, 3, 3).count, 0u);  // index out of range: empty
}

// The pieces tile [0, count) in order; returns their sizes.
std::vector<size_t> piece_sizes(size_t count, size_t min_piece, size_t body_pieces) {
  std::vector<size_t> sizes;
  size_t next = 0;
  for (const algo::Block& b : algo::ramped_pieces(count, min_piece, body_pieces)) {
    EXPECT_EQ(b.offset, next) << count << " min " << min_piece;
    if (count > 0) {
      EXPECT_GT(b.count, 0u) << count << " min " << min_piece;
    }
    next += b.count;
    sizes.push_back(b.count);
  }
  EXPECT_EQ(next, count) << count << " min " << min_piece;
  return sizes;
}

TEST(RampedPieces, RampUpFromTheMinimumToTheBodyAndDownAgain) {
  // 1024 elements, min 8, 8 body pieces (body 128): 8 16 32 64 | the other 784 as 6 pieces
  // of >= 128 | 64 32 16 8.
  const std::vector<size_t> expect = {8, 16, 32, 64, 131, 131, 131, 131, 130, 130, 64, 32, 16, 8};
  EXPECT_EQ(piece_sizes(1024, 8, 8), expect);
  // A 64 MiB float allreduce over 2 local ranks (the hierarchical algorithm's parameters):
  // the first and last pieces are 512 KiB, none is larger than 1/4 of the buffer.
  const auto big = piece_sizes(size_t{16} << 20, size_t{128} << 10, 8);
  EXPECT_EQ(big.front(), size_t{128} << 10);
  EXPECT_EQ(big.back(), size_t{128} << 10);
  for (size_t s : big) EXPECT_LE(s, size_t{4} << 20);
}

TEST(RampedPieces, SmallCountsAreCutIntoEqualBlocks) {
  EXPECT_EQ(piece_sizes(0, 8, 8), std::vector<size_t>{0});  // one empty piece
  EXPECT_EQ(piece_sizes(5, 8, 8), std::vector<size_t>{5});
  EXPECT_EQ(piece_sizes(24, 8, 8), (std::vector<size_t>{8, 8, 8}));
  EXPECT_EQ(piece_sizes(20, 8, 8), (std::vector<size_t>{10, 10}));  // body = min: no ramp
  // A ramp of 8 needs 2 x 8 + the body 15 = 31 elements: 30 is cut into 2 equal pieces.
  EXPECT_EQ(piece_sizes(30, 8, 2), (std::vector<size_t>{15, 15}));
  EXPECT_EQ(piece_sizes(7, 0, 0), std::vector<size_t>{7});  // 0 min / pieces: treated as 1
}

// value of element i contributed by rank r
int32_t contribution(int r, size_t i) { return static_cast<int32_t>((r + 1) * 1000 + i); }

// Runs reduce-scatter then allgather over `groups` (disjoint, any ring order) concurrently on
// a 6-rank mesh; ranks in no group do nothing. Checks the reduce-scatter's block ownership
// and the allgather's full result.
void check_groups(Mesh& mesh, const std::vector<std::vector<int>>& groups, size_t count,
                  int64_t chunk_bytes) {
  const int n = static_cast<int>(mesh.peers.size());
  std::vector<std::vector<int32_t>> after_rs(n), after_ag(n);
  auto results = run_ranks(n, [&](int r) -> Result<void> {
    const std::vector<int>* group = nullptr;
    for (const auto& g : groups) {
      for (int member : g) {
        if (member == r) group = &g;
      }
    }
    if (group == nullptr) return {};
    algo::OpContext ctx{*mesh.peers[r], mesh.topology, guard_deadline(), chunk_bytes};
    std::vector<int32_t> buf(count);
    for (size_t i = 0; i < count; ++i) buf[i] = contribution(r, i);
    auto ok = algo::ring_reduce_scatter_inplace(ctx, *group, buf.data(), count,
                                                DataType::kInt32, ReduceOp::kSum);
    if (!ok) return ok;
    after_rs[r] = buf;
    ok = algo::ring_all_gather_inplace(ctx, *group, buf.data(), count, DataType::kInt32);
    after_ag[r] = buf;
    return ok;
  });
  for (int r = 0; r < n; ++r) ASSERT_TRUE(results[r]) << results[r].error().message;
  for (const auto& g : groups) {
    std::vector<int32_t> total(count, 0);
    for (int member : g) {
      for (size_t i = 0; i < count; ++i) total[i] += contribution(member, i);
    }
    for (size_t pos = 0; pos < g.size(); ++pos) {
      const int r = g[pos];
      const algo::Block b = algo::block_of(count, g.size(), pos);
      for (size_t i = b.offset; i < b.offset + b.count; ++i) {
        ASSERT_EQ(after_rs[r][i], total[i]) << "reduce-scatter: rank " << r << " element " << i;
      }
      ASSERT_EQ(after_ag[r], total) << "allgather: rank " << r;
    }
  }
}

TEST(RingBlocks, GroupsInAnyRingOrderRunConcurrently) {
  auto mesh = make_mesh(site_layout(6, 2));
  ASSERT_NE(mesh, nullptr);
  check_groups(*mesh, {{0, 1, 2, 3, 4, 5}}, 1023, 0);
  check_groups(*mesh, {{4, 1, 3}, {0, 5}}, 1023, 40);     // chunks of 10 elements
  check_groups(*mesh, {{2}, {5, 0, 3, 1}}, 3, 4);          // fewer elements than ranks
  check_groups(*mesh, {{0, 1, 2}, {3, 4, 5}}, 0, 0);       // nothing to do
  check_groups(*mesh, {{0, 3}, {1, 4}, {2, 5}}, 100000, 4000);
}

TEST(RingBlocks, RejectsAGroupWithoutThisRank) {
  auto mesh = make_mesh(site_layout(2));
  ASSERT_NE(mesh, nullptr);
  algo::OpContext ctx{*mesh->peers[0], mesh->topology, guard_deadline(), 0};
  std::vector<int32_t> buf(4, 1);
  const std::vector<int> group{1};
  auto ok = algo::ring_reduce_scatter_inplace(ctx, group, buf.data(), buf.size(),
                                              DataType::kInt32, ReduceOp::kSum);
  ASSERT_FALSE(ok);
  EXPECT_EQ(ok.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(ok.error().message.find("not a member"), std::string::npos) << ok.error().message;
}

}  // namespace
}  // namespace detwan::collectives::testing

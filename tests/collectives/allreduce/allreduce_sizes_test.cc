// Sizes: 0, 1, odd (1023), large (1 << 20 elements); misaligned buffers (offset by 1 byte);
// chunk sizes that divide neither the blocks nor the buffer; in place and out of place. Every
// algorithm on a single site and on two sites, bit-exact against the reference.
#include <gtest/gtest.h>

#include <vector>

#include "tests/collectives/allreduce/allreduce_util.h"

namespace detwan::collectives::testing {
namespace {

struct SizeCase {
  size_t count;
  DataType type;
  ReduceOp op;
  int64_t chunk_bytes;
};

// Two meshes reused by every case: 3 ranks in one site, 2 sites x 2 ranks.
class AllReduceSizes : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    one_site_ = make_mesh(site_layout(3)).release();
    two_sites_ = make_mesh(site_layout(4, 2)).release();
  }
  static void TearDownTestSuite() {
    delete one_site_;
    delete two_sites_;
  }
  // both_placements: every case in place and out of place; else alternating.
  // meshes: 0 = both, 1 = one site only, 2 = two sites only.
  static void run(const std::vector<SizeCase>& cases, bool both_placements = true,
                  int meshes = 0) {
    ASSERT_NE(one_site_, nullptr);
    ASSERT_NE(two_sites_, nullptr);
    size_t variant = 0;
    for (Mesh* mesh : {one_site_, two_sites_}) {
      if ((meshes == 1 && mesh != one_site_) || (meshes == 2 && mesh != two_sites_)) continue;
      for (Algorithm algorithm : kAllAlgorithms) {
        for (const SizeCase& s : cases) {
          for (bool in_place : {false, true}) {
            if (!both_placements && in_place != (variant % 2 == 1)) continue;
            Case c;
            c.algorithm = algorithm;
            c.type = s.type;
            c.op = s.op;
            c.count = s.count;
            c.chunk_bytes = s.chunk_bytes;
            c.in_place = in_place;
            c.misalign_bytes = (variant++ % 2 == 0) ? 1 : 0;
            c.seed = variant;
            check_exact(*mesh, c);
            if (::testing::Test::HasFailure()) return;
          }
        }
      }
    }
  }
  static Mesh* one_site_;
  static Mesh* two_sites_;
};
Mesh* AllReduceSizes::one_site_ = nullptr;
Mesh* AllReduceSizes::two_sites_ = nullptr;

TEST_F(AllReduceSizes, ZeroElementsIsANoOpEvenWithNullBuffers) {
  for (Algorithm algorithm : kAllAlgorithms) {
    auto results = run_ranks(4, [&](int r) -> Result<void> {
      algo::OpContext ctx{*two_sites_->peers[r], two_sites_->topology, guard_deadline(), 0};
      return algo::all_reduce(ctx, algorithm, nullptr, nullptr, 0, DataType::kFloat32,
                              ReduceOp::kSum);
    });
    for (auto& result : results) EXPECT_TRUE(result) << result.error().message;
  }
  run({{0, DataType::kFloat32, ReduceOp::kSum, 0}});
}

TEST_F(AllReduceSizes, OneElement) {
  run({{1, DataType::kInt8, ReduceOp::kProd, 0}, {1, DataType::kFloat64, ReduceOp::kAvg, 0}});
}

TEST_F(AllReduceSizes, OddCountsWithChunksThatDoNotDivideTheBlocks) {
  run({{1023, DataType::kFloat32, ReduceOp::kSum, 1000},
       {1023, DataType::kBfloat16, ReduceOp::kMax, 26},
       {1023, DataType::kInt64, ReduceOp::kProd, 0},
       {1023, DataType::kUint8, ReduceOp::kAvg, 7}});
}

TEST_F(AllReduceSizes, LargeBuffers) {
  // 4 MiB per rank with the default chunks on two sites; 1 MiB with 300000-byte chunks (a
  // divisor of neither the blocks nor the pieces) on one site. Alternating placements and one
  // mesh per size keep the binary short.
  run({{size_t{1} << 20, DataType::kFloat32, ReduceOp::kSum, 0}}, false, 2);
  run({{size_t{1} << 18, DataType::kInt32, ReduceOp::kMin, 300000}}, false, 1);
}

// 20 MiB + 12 bytes of int32 summed by the hierarchical algorithm in 1 MiB messages.
Case hierarchical_ramp_case() {
  Case c;
  c.algorithm = Algorithm::kHierarchical;
  c.type = DataType::kInt32;
  c.op = ReduceOp::kSum;
  c.count = (size_t{5} << 20) + 3;
  c.chunk_bytes = int64_t{1} << 20;
  return c;
}

TEST_F(AllReduceSizes, HierarchicalRampedPiecesAndZeroCopyWanMessages) {
  // On 2 sites x 2 ranks: large enough for the hierarchical pieces to ramp (min 512 KiB, body
  // 2.5 MiB) and for each rank's 10 MiB shard to go out partly zero-copy (acknowledged before
  // the reduce overwrites it) and, for its last 4 MiB, as copies.
  Case c = hierarchical_ramp_case();
  c.misalign_bytes = 1;
  check_exact(*two_sites_, c);
}

TEST_F(AllReduceSizes, HierarchicalOnUnevenSitesRampsAndSendsZeroCopy) {
  // The same buffer on 3 + 1 ranks: a's ranks send 1/3 of each piece over the WAN each, b's one
  // rank all of it to three peers (its segments), partly zero-copy, the last 4 MiB as copies.
  auto uneven = make_mesh({"a", "a", "a", "b"});
  ASSERT_NE(uneven, nullptr);
  Case c = hierarchical_ramp_case();
  c.in_place = true;
  check_exact(*uneven, c);
}

}  // namespace
}  // namespace detwan::collectives::testing

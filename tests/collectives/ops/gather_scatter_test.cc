// all_gather and reduce_scatter (collectives/algo/{all_gather,reduce_scatter}.cc) over
// loopback meshes of 1..8 ranks: ring and hierarchical (2, 3 and 4 sites, equal and uneven), sizes 0/1/odd/large, every dtype (reduce_scatter: every dtype x op),
// unaligned buffers, in place (NCCL's layouts), small chunks. Bit-exact (see ops_util.h).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/collectives/ops/ops_util.h"

namespace detwan::collectives::testing {
namespace {

struct Case {
  Algorithm algorithm = Algorithm::kRing;
  size_t count = 0;  // per-rank block (send_count / recv_count)
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int64_t chunk_bytes = 0;
  size_t misalign = 0;
  bool in_place = false;
  uint64_t seed = 1;

  [[nodiscard]] std::string describe(const Mesh& mesh) const {
    return fmt::format(
        "layout={} algo={} count={} type={} op={} chunk={} misalign={} "
        "in_place={}",
        mesh.topology.describe(), to_string(algorithm), count, to_string(type), to_string(op),
        chunk_bytes, misalign, in_place);
  }
};

// In place (NCCL): send = recv + rank * count.
std::string run_all_gather(Mesh& mesh, const Case& c) {
  const int n = mesh.topology.size();
  const size_t bytes = c.count * data_type_size(c.type);
  std::vector<std::byte> expected(bytes * static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    fill(expected.data() + static_cast<size_t>(r) * bytes, c.count, c.type, c.seed, r);
  }
  return failures(run_ranks(n, [&](int rank) -> Result<void> {
    Buffer recv(bytes * static_cast<size_t>(n), c.misalign);
    Buffer send(bytes, (c.misalign + 1) % 4);
    std::byte* send_ptr =
        c.in_place ? recv.data() + static_cast<size_t>(rank) * bytes : send.data();
    fill(send_ptr, c.count, c.type, c.seed, rank);
    auto ctx = context(mesh, rank, c.chunk_bytes);
    auto ok = algo::all_gather(ctx, c.algorithm, send_ptr, recv.data(), c.count, c.type);
    if (!ok) return ok;
    if (!recv.guards_intact() || !send.guards_intact()) {
      return make_error(ErrorCode::kInternal, "wrote outside its buffers");
    }
    return compare(recv.data(), expected.data(), c.count * static_cast<size_t>(n), c.type,
                   "all_gather");
  }));
}

// In place (NCCL): recv = send + rank * count.
std::string run_reduce_scatter(Mesh& mesh, const Case& c) {
  const int n = mesh.topology.size();
  const auto nranks = static_cast<size_t>(n);
  const size_t bytes = c.count * data_type_size(c.type);
  const auto expected = reference_reduce(n, c.count * nranks, c.type, c.op, c.seed);
  return failures(run_ranks(n, [&](int rank) -> Result<void> {
    Buffer send(bytes * nranks, c.misalign);
    Buffer recv(bytes, (c.misalign + 2) % 4);
    fill(send.data(), c.count * nranks, c.type, c.seed, rank);
    const size_t mine = static_cast<size_t>(rank) * bytes;
    std::byte* recv_ptr = c.in_place ? send.data() + mine : recv.data();
    auto ctx = context(mesh, rank, c.chunk_bytes);
    auto ok = algo::reduce_scatter(ctx, c.algorithm, send.data(), recv_ptr, c.count, c.type, c.op);
    if (!ok) return ok;
    if (!recv.guards_intact() || !send.guards_intact()) {
      return make_error(ErrorCode::kInternal, "wrote outside its buffers");
    }
    return compare(recv_ptr, expected.data() + mine, c.count, c.type, "reduce_scatter");
  }));
}

class GatherScatterTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() { meshes().clear(); }
  static MeshCache& meshes() {
    static MeshCache cache;
    return cache;
  }
  static Mesh& mesh(int n, int sites) {
    Mesh* m = meshes().get(n, sites);
    if (m == nullptr) throw std::runtime_error("mesh setup failed");
    return *m;
  }
};

int sites_for(int n) { return n >= 2 ? 2 : 1; }

TEST_F(GatherScatterTest, AllGatherEveryRankCountSizeAndAlgorithm) {
  size_t variant = 0;
  for (int n = 1; n <= 8; ++n) {
    Mesh& m = mesh(n, sites_for(n));
    for (Algorithm algorithm : {Algorithm::kAuto, Algorithm::kRing, Algorithm::kHierarchical}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{1023}}) {
        for (bool in_place : {false, true}) {
          ++variant;
          Case c{.algorithm = algorithm,
                 .count = count,
                 .type = kAllTypes[variant % 10],
                 .chunk_bytes = variant % 2 == 0 ? 0 : 200,
                 .misalign = variant % 3,
                 .in_place = in_place,
                 .seed = variant};
          EXPECT_EQ(run_all_gather(m, c), "") << c.describe(m);
        }
      }
    }
  }
}

TEST_F(GatherScatterTest, AllGatherEveryDataType) {
  Mesh& m = mesh(4, 2);
  for (DataType type : kAllTypes) {
    for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kHierarchical}) {
      Case c{.algorithm = algorithm,
             .count = 33,
             .type = type,
             .chunk_bytes = 16,
             .misalign = 1,
             .seed = 3};
      EXPECT_EQ(run_all_gather(m, c), "") << c.describe(m);
    }
  }
}

TEST_F(GatherScatterTest, AllGatherHierarchicalThreeAndFourSites) {
  for (auto [n, sites] : {std::pair{6, 3}, std::pair{8, 4}, std::pair{3, 3}}) {
    Mesh& m = mesh(n, sites);
    for (bool in_place : {false, true}) {
      Case c{.algorithm = Algorithm::kHierarchical,
             .count = 517,
             .type = DataType::kUint64,
             .chunk_bytes = 1000,
             .misalign = 1,
             .in_place = in_place,
             .seed = 21};
      EXPECT_EQ(run_all_gather(m, c), "") << c.describe(m);
    }
  }
}

TEST_F(GatherScatterTest, AllGatherHierarchicalUnevenSites) {
  // 3 + 1 (b's one rank holds all of a's blocks), 1 + 4, interleaved ranks, 1 + 2 + 3.
  for (const char* layout : {"aaab", "abbbb", "abaab", "abbccc"}) {
    std::vector<std::string> sites;
    for (const char* at = layout; *at != 0; ++at) sites.emplace_back(1, *at);
    auto m = make_mesh(sites);
    ASSERT_NE(m, nullptr) << layout;
    for (bool in_place : {false, true}) {
      Case c{.algorithm = Algorithm::kHierarchical,
             .count = 301,
             .type = DataType::kFloat16,
             .chunk_bytes = 100,
             .misalign = 2,
             .in_place = in_place,
             .seed = 5};
      EXPECT_EQ(run_all_gather(*m, c), "") << c.describe(*m);
    }
  }
}

TEST_F(GatherScatterTest, AllGatherLarge) {
  Mesh& m = mesh(4, 2);
  for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kHierarchical}) {
    Case c{.algorithm = algorithm,
           .count = size_t{1} << 18,
           .type = DataType::kFloat32,
           .chunk_bytes = 256 << 10,
           .misalign = 1,
           .seed = 4};
    EXPECT_EQ(run_all_gather(m, c), "") << c.describe(m);
  }
}

TEST_F(GatherScatterTest, ReduceScatterEveryTypeAndOp) {
  size_t variant = 0;
  for (int n = 1; n <= 8; ++n) {
    Mesh& m = mesh(n, sites_for(n));
    for (DataType type : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        ++variant;
        Case c{.algorithm = Algorithm::kAuto,
               .count = 3,
               .type = type,
               .op = op,
               .chunk_bytes = variant % 3 == 0 ? 8 : 0,
               .misalign = variant % 2,
               .in_place = variant % 4 == 0,
               .seed = variant};
        EXPECT_EQ(run_reduce_scatter(m, c), "") << c.describe(m);
      }
    }
  }
}

TEST_F(GatherScatterTest, ReduceScatterSizes) {
  size_t variant = 0;
  for (int n = 1; n <= 8; ++n) {
    Mesh& m = mesh(n, sites_for(n));
    for (size_t count : {size_t{0}, size_t{1}, size_t{1023}}) {
      for (bool in_place : {false, true}) {
        ++variant;
        Case c{.algorithm = Algorithm::kRing,
               .count = count,
               .type = kAllTypes[variant % 10],
               .op = kAllOps[variant % 5],
               .chunk_bytes = variant % 2 == 0 ? 0 : 300,
               .misalign = variant % 3,
               .in_place = in_place,
               .seed = variant};
        EXPECT_EQ(run_reduce_scatter(m, c), "") << c.describe(m);
      }
    }
  }
}

TEST_F(GatherScatterTest, ReduceScatterLarge) {
  Mesh& m = mesh(8, 2);
  Case c{.algorithm = Algorithm::kRing,
         .count = size_t{1} << 17,
         .type = DataType::kFloat32,
         .op = ReduceOp::kAvg,
         .chunk_bytes = 128 << 10,
         .misalign = 1,
         .seed = 8};
  EXPECT_EQ(run_reduce_scatter(m, c), "") << c.describe(m);
}

}  // namespace
}  // namespace detwan::collectives::testing

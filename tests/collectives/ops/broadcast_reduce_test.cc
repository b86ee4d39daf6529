// broadcast and reduce (collectives/algo/{broadcast,reduce}.cc) over in-process loopback
// meshes of 1..8 ranks: every algorithm, several roots, sizes 0/1/odd/large, every dtype (and
// for reduce every dtype x op), unaligned buffers, in place, small chunks (pipelining), bad
// roots. Results are bit-exact (see ops_util.h for why floats are exact too).
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/collectives/ops/ops_util.h"

namespace detwan::collectives::testing {
namespace {

constexpr Algorithm kBroadcastAlgorithms[] = {Algorithm::kAuto, Algorithm::kTree, Algorithm::kRing,
                                              Algorithm::kHierarchical};
constexpr Algorithm kReduceAlgorithms[] = {Algorithm::kAuto, Algorithm::kTree, Algorithm::kRing};

std::vector<int> roots_for(int n) {
  std::set<int> roots{0, n - 1, n / 2};
  return {roots.begin(), roots.end()};
}

// Two sites from 2 ranks on (non-uniform for odd n), so kHierarchical has work to do.
int sites_for(int n) { return n >= 2 ? 2 : 1; }

struct Case {
  Algorithm algorithm = Algorithm::kAuto;
  int root = 0;
  size_t count = 0;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int64_t chunk_bytes = 0;
  size_t misalign = 0;
  bool in_place = false;
  uint64_t seed = 1;

  [[nodiscard]] std::string describe(int n) const {
    return fmt::format(
        "n={} algo={} root={} count={} type={} op={} chunk={} misalign={} "
        "in_place={}",
        n, to_string(algorithm), root, count, to_string(type), to_string(op), chunk_bytes, misalign,
        in_place);
  }
};

std::string run_broadcast(Mesh& mesh, const Case& c) {
  const int n = mesh.topology.size();
  const size_t bytes = c.count * data_type_size(c.type);
  const auto expected = contribution(c.count, c.type, c.seed, c.root);
  return failures(run_ranks(n, [&](int rank) -> Result<void> {
    Buffer recv(bytes, c.misalign);
    Buffer send(bytes, (c.misalign + 1) % 4);
    std::byte* send_ptr = nullptr;
    if (rank == c.root) {
      send_ptr = c.in_place ? recv.data() : send.data();
      fill(send_ptr, c.count, c.type, c.seed, rank);
    }
    auto ctx = context(mesh, rank, c.chunk_bytes);
    auto ok = algo::broadcast(ctx, c.algorithm, send_ptr, recv.data(), c.count, c.type, c.root);
    if (!ok) return ok;
    if (!recv.guards_intact() || !send.guards_intact()) {
      return make_error(ErrorCode::kInternal, "wrote outside its buffers");
    }
    return compare(recv.data(), expected.data(), c.count, c.type, "broadcast");
  }));
}

// recv of non-roots is filled with a pattern that must survive (the result is at root only).
std::string run_reduce(Mesh& mesh, const Case& c, bool null_recv_off_root = false) {
  const int n = mesh.topology.size();
  const size_t bytes = c.count * data_type_size(c.type);
  const auto expected = reference_reduce(n, c.count, c.type, c.op, c.seed);
  return failures(run_ranks(n, [&](int rank) -> Result<void> {
    Buffer recv(bytes, c.misalign);
    Buffer send(bytes, (c.misalign + 3) % 4);
    std::memset(recv.data(), 0x77, bytes);
    std::byte* send_ptr = (c.in_place && rank == c.root) ? recv.data() : send.data();
    fill(send_ptr, c.count, c.type, c.seed, rank);
    std::byte* recv_ptr = (null_recv_off_root && rank != c.root) ? nullptr : recv.data();
    auto ctx = context(mesh, rank, c.chunk_bytes);
    auto ok = algo::reduce(ctx, c.algorithm, send_ptr, recv_ptr, c.count, c.type, c.op, c.root);
    if (!ok) return ok;
    if (!recv.guards_intact() || !send.guards_intact()) {
      return make_error(ErrorCode::kInternal, "wrote outside its buffers");
    }
    if (rank == c.root) return compare(recv.data(), expected.data(), c.count, c.type, "reduce");
    if (c.in_place) return {};
    for (size_t i = 0; i < bytes; ++i) {
      if (recv.data()[i] != std::byte{0x77}) {
        return make_error(ErrorCode::kInternal, "non-root recv buffer was written");
      }
    }
    // The caller's send buffer is const.
    return compare(send.data(), contribution(c.count, c.type, c.seed, rank).data(), c.count, c.type,
                   "send buffer after reduce");
  }));
}

class BroadcastReduceTest : public ::testing::Test {
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

TEST_F(BroadcastReduceTest, BroadcastEveryAlgorithmRootSizeAndRankCount) {
  size_t variant = 0;
  for (int n = 1; n <= 8; ++n) {
    Mesh& m = mesh(n, sites_for(n));
    for (Algorithm algorithm : kBroadcastAlgorithms) {
      for (int root : roots_for(n)) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{1023}}) {
          ++variant;
          Case c;
          c.algorithm = algorithm;
          c.root = root;
          c.count = count;
          c.type = kAllTypes[variant % 10];
          c.chunk_bytes = variant % 2 == 0 ? 0 : 256;  // 256: many chunks in flight
          c.misalign = variant % 3;
          c.in_place = variant % 4 == 1;
          c.seed = variant;
          EXPECT_EQ(run_broadcast(m, c), "") << c.describe(n);
        }
      }
    }
  }
}

TEST_F(BroadcastReduceTest, BroadcastEveryDataType) {
  Mesh& m = mesh(5, 2);
  for (DataType type : kAllTypes) {
    for (Algorithm algorithm : kBroadcastAlgorithms) {
      Case c{.algorithm = algorithm,
             .root = 3,
             .count = 77,
             .type = type,
             .chunk_bytes = 64,
             .misalign = 1,
             .seed = 11};
      EXPECT_EQ(run_broadcast(m, c), "") << c.describe(5);
    }
  }
}

TEST_F(BroadcastReduceTest, BroadcastThreeSitesHierarchical) {
  Mesh& m = mesh(6, 3);
  for (int root = 0; root < 6; ++root) {
    Case c{.algorithm = Algorithm::kHierarchical,
           .root = root,
           .count = 4099,
           .type = DataType::kInt32,
           .chunk_bytes = 1024,
           .misalign = 1,
           .seed = static_cast<uint64_t>(root)};
    EXPECT_EQ(run_broadcast(m, c), "") << c.describe(6);
  }
}

TEST_F(BroadcastReduceTest, BroadcastLarge) {
  for (int n : {4, 8}) {
    Mesh& m = mesh(n, 2);
    for (Algorithm algorithm : {Algorithm::kAuto, Algorithm::kTree, Algorithm::kHierarchical}) {
      // 4 MiB in 256 KiB chunks: zero-copy sends, forwarded while later chunks arrive.
      Case c{.algorithm = algorithm,
             .root = n - 1,
             .count = size_t{1} << 20,
             .type = DataType::kFloat32,
             .chunk_bytes = 256 << 10,
             .misalign = 1,
             .seed = 5};
      EXPECT_EQ(run_broadcast(m, c), "") << c.describe(n);
    }
  }
}

TEST_F(BroadcastReduceTest, ReduceEveryTypeAndOp) {
  size_t variant = 0;
  for (int n = 1; n <= 8; ++n) {
    Mesh& m = mesh(n, sites_for(n));
    for (DataType type : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        ++variant;
        Case c{.algorithm = variant % 2 == 0 ? Algorithm::kTree : Algorithm::kRing,
               .root = static_cast<int>(variant % static_cast<size_t>(n)),
               .count = 7,
               .type = type,
               .op = op,
               .chunk_bytes = variant % 3 == 0 ? 8 : 0,
               .misalign = variant % 2,
               .seed = variant};
        EXPECT_EQ(run_reduce(m, c), "") << c.describe(n);
      }
    }
  }
}

TEST_F(BroadcastReduceTest, ReduceEveryAlgorithmRootSizeAndRankCount) {
  size_t variant = 0;
  for (int n = 1; n <= 8; ++n) {
    Mesh& m = mesh(n, sites_for(n));
    for (Algorithm algorithm : kReduceAlgorithms) {
      for (int root : roots_for(n)) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{1023}}) {
          ++variant;
          Case c{.algorithm = algorithm,
                 .root = root,
                 .count = count,
                 .type = kAllTypes[variant % 10],
                 .op = kAllOps[variant % 5],
                 .chunk_bytes = variant % 2 == 0 ? 0 : 128,
                 .misalign = variant % 3,
                 .in_place = variant % 4 == 1,
                 .seed = variant};
          EXPECT_EQ(run_reduce(m, c, variant % 5 == 2), "") << c.describe(n);
        }
      }
    }
  }
}

TEST_F(BroadcastReduceTest, ReduceLarge) {
  for (int n : {3, 8}) {
    Mesh& m = mesh(n, sites_for(n));
    for (Algorithm algorithm : {Algorithm::kTree, Algorithm::kRing}) {
      Case c{.algorithm = algorithm,
             .root = 1,
             .count = size_t{1} << 20,
             .type = DataType::kInt32,
             .op = ReduceOp::kSum,
             .chunk_bytes = 256 << 10,
             .misalign = 1,
             .seed = 9};
      EXPECT_EQ(run_reduce(m, c), "") << c.describe(n);
    }
  }
}

TEST_F(BroadcastReduceTest, BadRootIsInvalidArgumentOnEveryRank) {
  Mesh& m = mesh(3, 2);
  for (int root : {-1, 3, 100}) {
    auto results = run_ranks(3, [&](int rank) -> Result<void> {
      std::vector<int32_t> buf(4, 1);
      auto ctx = context(m, rank);
      auto b =
          algo::broadcast(ctx, Algorithm::kAuto, buf.data(), buf.data(), 4, DataType::kInt32, root);
      auto r = algo::reduce(ctx, Algorithm::kAuto, buf.data(), buf.data(), 4, DataType::kInt32,
                            ReduceOp::kSum, root);
      if (b || b.error().code != ErrorCode::kInvalidArgument ||
          b.error().message.find("root") == std::string::npos) {
        return make_error(ErrorCode::kInternal, "broadcast accepted root " + std::to_string(root));
      }
      if (r || r.error().code != ErrorCode::kInvalidArgument) {
        return make_error(ErrorCode::kInternal, "reduce accepted root " + std::to_string(root));
      }
      return {};
    });
    EXPECT_EQ(failures(results), "");
  }
  // The mesh is still usable afterwards (nothing was sent).
  Case c{.algorithm = Algorithm::kTree, .root = 2, .count = 5, .type = DataType::kInt64};
  EXPECT_EQ(run_broadcast(m, c), "");
}

}  // namespace
}  // namespace detwan::collectives::testing

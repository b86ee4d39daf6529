// all_to_all, barrier and point_to_point over loopback meshes of 1..8 ranks; every operation
// over a mesh with injected loss/reordering/duplication; determinism (same plan => bitwise
// identical results, run after run and whatever the arrival timing); argument errors.
#include <algorithm>
#include <atomic>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/collectives/ops/ops_util.h"

namespace detwan::collectives::testing {
namespace {

constexpr char kFaults[] = "loss=0.02,reorder=0.05,duplicate=0.01,seed=";

class MiscOpsTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() { meshes().clear(); }
  static MeshCache& meshes() {
    static MeshCache cache;
    return cache;
  }
  static Mesh& mesh(int n, int sites, const std::string& faults = "") {
    Mesh* m = meshes().get(n, sites, faults);
    if (m == nullptr) throw std::runtime_error("mesh setup failed");
    return *m;
  }
};

// Block j of rank r's send buffer is the data set (r * 64 + j) so every block differs.
std::string run_all_to_all(Mesh& mesh, size_t count, DataType type, int64_t chunk_bytes,
                           size_t misalign, bool in_place) {
  const int n = mesh.topology.size();
  const auto nranks = static_cast<size_t>(n);
  const size_t bytes = count * data_type_size(type);
  return failures(run_ranks(n, [&](int rank) -> Result<void> {
    Buffer send(bytes * nranks, misalign);
    Buffer recv(bytes * nranks, (misalign + 1) % 4);
    for (size_t j = 0; j < nranks; ++j) {
      fill(send.data() + j * bytes, count, type, static_cast<uint64_t>(rank) * 64 + j, rank);
    }
    std::byte* recv_ptr = in_place ? send.data() : recv.data();
    auto ctx = context(mesh, rank, chunk_bytes);
    if (auto ok = algo::all_to_all(ctx, send.data(), recv_ptr, count, type); !ok) return ok;
    if (!recv.guards_intact() || !send.guards_intact()) {
      return make_error(ErrorCode::kInternal, "wrote outside its buffers");
    }
    for (size_t j = 0; j < nranks; ++j) {
      const auto want =
          contribution(count, type, j * 64 + static_cast<size_t>(rank), static_cast<int>(j));
      auto ok = compare(recv_ptr + j * bytes, want.data(), count, type,
                        fmt::format("all_to_all block from rank {}", j));
      if (!ok) return ok;
    }
    return {};
  }));
}

TEST_F(MiscOpsTest, AllToAllEveryRankCountAndSize) {
  size_t variant = 0;
  for (int n = 1; n <= 8; ++n) {
    Mesh& m = mesh(n, 1);
    for (size_t count : {size_t{0}, size_t{1}, size_t{1023}}) {
      for (bool in_place : {false, true}) {
        ++variant;
        const DataType type = kAllTypes[variant % 10];
        const int64_t chunk = variant % 2 == 0 ? 0 : 100;
        EXPECT_EQ(run_all_to_all(m, count, type, chunk, variant % 3, in_place), "")
            << "n=" << n << " count=" << count << " type=" << to_string(type) << " chunk=" << chunk
            << " in_place=" << in_place;
      }
    }
  }
}

TEST_F(MiscOpsTest, AllToAllLarge) {
  Mesh& m = mesh(8, 1);
  EXPECT_EQ(run_all_to_all(m, size_t{1} << 17, DataType::kFloat64, 256 << 10, 1, false), "");
}

TEST_F(MiscOpsTest, BarrierNobodyLeavesBeforeEveryoneArrived) {
  for (int n = 1; n <= 8; ++n) {
    Mesh& m = mesh(n, 1);
    constexpr int kRounds = 4;
    std::vector<std::atomic<int>> arrived(kRounds);
    for (auto& a : arrived) a = 0;
    auto results = run_ranks(n, [&](int rank) -> Result<void> {
      auto ctx = context(m, rank);
      for (int round = 0; round < kRounds; ++round) {
        arrived[static_cast<size_t>(round)].fetch_add(1);
        if (auto ok = algo::barrier(ctx); !ok) return ok;
        const int seen = arrived[static_cast<size_t>(round)].load();
        if (seen != n) {
          return make_error(
              ErrorCode::kInternal,
              fmt::format("left barrier {} when only {} of {} had arrived", round, seen, n));
        }
      }
      return {};
    });
    EXPECT_EQ(failures(results), "") << "n=" << n;
  }
}

// Each rank sends three messages (0 bytes, 1 byte, 5000 bytes) to its successor and one to
// itself, receives the matching ones, operations deliberately listed in an order where a
// blocking implementation would deadlock (receives first).
std::string run_p2p_ring(Mesh& mesh) {
  const int n = mesh.topology.size();
  return failures(run_ranks(n, [&](int rank) -> Result<void> {
    const int next = (rank + 1) % n;
    const int prev = (rank - 1 + n) % n;
    const std::vector<size_t> sizes = {0, 1, 5000};
    std::vector<std::vector<std::byte>> out;
    std::vector<std::vector<std::byte>> in;
    for (size_t i = 0; i < sizes.size(); ++i) {
      out.emplace_back(sizes[i]);
      for (size_t b = 0; b < sizes[i]; ++b) out.back()[b] = std::byte(rank * 31 + i * 7 + b);
      in.emplace_back(sizes[i]);
    }
    std::vector<std::byte> self_out(64, std::byte(rank));
    std::vector<std::byte> self_in(64);
    std::vector<algo::P2pOp> ops;
    for (size_t i = 0; i < sizes.size(); ++i) {
      ops.push_back({.is_send = false, .peer = prev, .recv = in[i].data(), .bytes = sizes[i]});
    }
    ops.push_back({.is_send = false, .peer = rank, .recv = self_in.data(), .bytes = 64});
    for (size_t i = 0; i < sizes.size(); ++i) {
      ops.push_back({.is_send = true, .peer = next, .send = out[i].data(), .bytes = sizes[i]});
    }
    ops.push_back({.is_send = true, .peer = rank, .send = self_out.data(), .bytes = 64});
    auto ctx = context(mesh, rank);
    if (auto ok = algo::point_to_point(ctx, ops); !ok) return ok;
    for (size_t i = 0; i < sizes.size(); ++i) {
      for (size_t b = 0; b < sizes[i]; ++b) {
        if (in[i][b] != std::byte(prev * 31 + i * 7 + b)) {
          return make_error(ErrorCode::kInternal, fmt::format("message {} byte {} wrong", i, b));
        }
      }
    }
    if (self_in != self_out) return make_error(ErrorCode::kInternal, "self message wrong");
    return {};
  }));
}

TEST_F(MiscOpsTest, PointToPointGroupsEveryRankCount) {
  for (int n = 1; n <= 8; ++n) EXPECT_EQ(run_p2p_ring(mesh(n, 1)), "") << "n=" << n;
}

TEST_F(MiscOpsTest, PointToPointBadPeerAndSizeMismatch) {
  Mesh& m = mesh(2, 1);
  auto results = run_ranks(2, [&](int rank) -> Result<void> {
    auto ctx = context(m, rank);
    int32_t value = 1;
    for (int peer : {-1, 2}) {
      const algo::P2pOp op{.is_send = true, .peer = peer, .send = &value, .bytes = 4};
      auto ok = algo::point_to_point(ctx, std::span(&op, 1));
      if (ok || ok.error().code != ErrorCode::kInvalidArgument ||
          ok.error().message.find("peer " + std::to_string(peer)) == std::string::npos) {
        return make_error(ErrorCode::kInternal, "bad peer accepted or not named");
      }
    }
    return {};
  });
  EXPECT_EQ(failures(results), "");

  // A receive whose size differs from the message fails with both sizes named. This leaves
  // the mesh failed (as a communicator would be), so it is dropped afterwards.
  std::vector<std::string> errors(2);
  results = run_ranks(2, [&](int rank) -> Result<void> {
    auto ctx = context(m, rank);
    std::vector<std::byte> buf(100);
    const algo::P2pOp op =
        rank == 0 ? algo::P2pOp{.is_send = true, .peer = 1, .send = buf.data(), .bytes = 100}
                  : algo::P2pOp{.is_send = false, .peer = 0, .recv = buf.data(), .bytes = 60};
    auto ok = algo::point_to_point(ctx, std::span(&op, 1));
    if (!ok) errors[static_cast<size_t>(rank)] = ok.error().message;
    return {};
  });
  EXPECT_NE(errors[1].find("60"), std::string::npos) << errors[1];
  EXPECT_NE(errors[1].find("100"), std::string::npos) << errors[1];
  meshes().drop(2, 1);
}

// Every operation once over a lossy, reordering, duplicating network.
TEST_F(MiscOpsTest, EveryOperationOverInjectedFaults) {
  const int n = 4;
  Mesh& m = mesh(n, 2, std::string(kFaults) + "17");
  const size_t count = 4099;
  const int64_t chunk = 2048;
  auto bcast_expected = contribution(count, DataType::kFloat32, 3, 2);
  auto sum_expected = reference_reduce(n, count, DataType::kInt32, ReduceOp::kSum, 4);
  auto results = run_ranks(n, [&](int rank) -> Result<void> {
    auto ctx = context(m, rank, chunk);
    const size_t elem = 4;
    for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kHierarchical, Algorithm::kTree}) {
      std::vector<std::byte> buf(count * elem);
      if (rank == 2) fill(buf.data(), count, DataType::kFloat32, 3, 2);
      auto ok =
          algo::broadcast(ctx, algorithm, buf.data(), buf.data(), count, DataType::kFloat32, 2);
      if (!ok) return ok;
      if (auto c = compare(buf.data(), bcast_expected.data(), count, DataType::kFloat32,
                           "broadcast " + name(algorithm));
          !c) {
        return c;
      }
    }
    for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kTree}) {
      auto send = contribution(count, DataType::kInt32, 4, rank);
      std::vector<std::byte> recv(count * elem);
      auto ok = algo::reduce(ctx, algorithm, send.data(), recv.data(), count, DataType::kInt32,
                             ReduceOp::kSum, 1);
      if (!ok) return ok;
      if (rank == 1) {
        if (auto c = compare(recv.data(), sum_expected.data(), count, DataType::kInt32,
                             "reduce " + name(algorithm));
            !c) {
          return c;
        }
      }
    }
    for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kHierarchical}) {
      auto send = contribution(count, DataType::kInt32, 5, rank);
      std::vector<std::byte> recv(count * elem * n);
      auto ok = algo::all_gather(ctx, algorithm, send.data(), recv.data(), count, DataType::kInt32);
      if (!ok) return ok;
      for (int r = 0; r < n; ++r) {
        auto want = contribution(count, DataType::kInt32, 5, r);
        if (auto c = compare(recv.data() + static_cast<size_t>(r) * count * elem, want.data(),
                             count, DataType::kInt32, "all_gather " + name(algorithm));
            !c) {
          return c;
        }
      }
    }
    {
      auto send = contribution(count * n, DataType::kInt32, 6, rank);
      std::vector<std::byte> recv(count * elem);
      auto ok = algo::reduce_scatter(ctx, Algorithm::kRing, send.data(), recv.data(), count,
                                     DataType::kInt32, ReduceOp::kMax);
      if (!ok) return ok;
      auto want = reference_reduce(n, count * n, DataType::kInt32, ReduceOp::kMax, 6);
      if (auto c = compare(recv.data(), want.data() + static_cast<size_t>(rank) * count * elem,
                           count, DataType::kInt32, "reduce_scatter");
          !c) {
        return c;
      }
    }
    if (auto ok = algo::barrier(ctx); !ok) return ok;
    return {};
  });
  EXPECT_EQ(failures(results), "");
  EXPECT_EQ(run_all_to_all(m, 999, DataType::kUint8, 128, 1, false), "");
  EXPECT_EQ(run_p2p_ring(m), "");
  // The faults really happened (else this test would prove nothing about them).
  uint64_t retransmitted = 0;
  uint64_t duplicates = 0;
  for (int r = 0; r < n; ++r) {
    for (int p = 0; p < n; ++p) {
      if (auto stats = m.peers[static_cast<size_t>(r)]->channel_stats(p)) {
        retransmitted += stats->segments_retransmitted;
        duplicates += stats->dropped_duplicate;
      }
    }
  }
  EXPECT_GT(retransmitted, 0u);
  EXPECT_GT(duplicates, 0u);
}

// Non-integer floats make the result depend on the reduction order: the same plan must still
// give bitwise identical results twice, on a clean and on a faulty network (different arrival
// timing), and the reduce-scatter + all-gather result must be identical on every rank.
TEST_F(MiscOpsTest, DeterministicAcrossRunsTimingAndRanks) {
  const int n = 5;
  const size_t count = 3001;
  const DataType types[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBfloat16};
  auto random_floats = [&](int rank, DataType type) {
    std::mt19937 rng(static_cast<uint32_t>(rank * 1000 + static_cast<int>(type)));
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    std::vector<std::byte> out(count * n * data_type_size(type));
    for (size_t i = 0; i < count * n; ++i) {
      const float f = value(rng) * 3.7f;
      if (type == DataType::kFloat32) {
        std::memcpy(out.data() + i * 4, &f, 4);
      } else {
        const uint16_t h =
            type == DataType::kFloat16 ? reduce::float_to_half(f) : reduce::float_to_bfloat16(f);
        std::memcpy(out.data() + i * 2, &h, 2);
      }
    }
    return out;
  };
  // Per rank: reduce results (tree, ring; root 0 only) then all_gather(reduce_scatter) bytes,
  // for every type.
  struct Output {
    std::vector<std::byte> reduced;
    std::vector<std::byte> gathered;
    bool operator==(const Output&) const = default;
  };
  auto run_on = [&](Mesh& m) {
    std::vector<Output> out(n);
    auto results = run_ranks(n, [&](int rank) -> Result<void> {
      auto ctx = context(m, rank, 512);
      auto& mine = out[static_cast<size_t>(rank)];
      for (DataType type : types) {
        const size_t elem = data_type_size(type);
        const auto send = random_floats(rank, type);
        for (Algorithm algorithm : {Algorithm::kTree, Algorithm::kRing}) {
          std::vector<std::byte> recv(count * elem);
          auto ok = algo::reduce(ctx, algorithm, send.data(), recv.data(), count, type,
                                 ReduceOp::kSum, 0);
          if (!ok) return ok;
          if (rank == 0) mine.reduced.insert(mine.reduced.end(), recv.begin(), recv.end());
        }
        std::vector<std::byte> block(count * elem);
        auto ok = algo::reduce_scatter(ctx, Algorithm::kRing, send.data(), block.data(), count,
                                       type, ReduceOp::kAvg);
        if (!ok) return ok;
        std::vector<std::byte> all(count * elem * n);
        ok = algo::all_gather(ctx, Algorithm::kRing, block.data(), all.data(), count, type);
        if (!ok) return ok;
        mine.gathered.insert(mine.gathered.end(), all.begin(), all.end());
      }
      return {};
    });
    EXPECT_EQ(failures(results), "");
    return out;
  };
  const auto first = run_on(mesh(n, 2));
  const auto second = run_on(mesh(n, 2));
  const auto faulty = run_on(mesh(n, 2, std::string(kFaults) + "99"));
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(first[r], second[r]) << "rank " << r << " differs between runs";
    EXPECT_EQ(first[r], faulty[r]) << "rank " << r << " differs on the faulty network";
  }
  ASSERT_FALSE(first[0].reduced.empty());
  ASSERT_FALSE(first[0].gathered.empty());
  for (int r = 1; r < n; ++r) {
    EXPECT_EQ(first[r].gathered, first[0].gathered) << "rank " << r << " differs from rank 0";
  }
}

}  // namespace
}  // namespace detwan::collectives::testing

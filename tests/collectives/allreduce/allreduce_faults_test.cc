// Injected loss/reordering, determinism, float tolerance with random inputs, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "tests/collectives/allreduce/allreduce_util.h"

namespace detwan::collectives::testing {
namespace {

// Random floats in [-1, 1) from the seeded hash (same on every platform).
std::vector<std::byte> random_floats(int rank, size_t count, uint64_t seed) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t h = mix(seed ^ mix(static_cast<uint64_t>(rank) << 40 ^ i));
    values[i] = static_cast<float>(static_cast<double>(h >> 11) * 0x1p-52 - 1.0);
  }
  std::vector<std::byte> out(count * sizeof(float));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

std::vector<std::vector<std::byte>> random_inputs(int n, size_t count, uint64_t seed) {
  std::vector<std::vector<std::byte>> inputs(n);
  for (int r = 0; r < n; ++r) inputs[r] = random_floats(r, count, seed);
  return inputs;
}

constexpr const char* kFaults = "loss=0.02,reorder=0.05,duplicate=0.01,seed=";

TEST(AllReduceFaults, LossAndReorderingGiveExactResults) {
  for (int sites : {1, 2}) {
    auto mesh = make_mesh(site_layout(4, sites), std::string(kFaults) + std::to_string(sites));
    ASSERT_NE(mesh, nullptr);
    for (Algorithm algorithm : kAllAlgorithms) {
      for (auto [count, chunk] : {std::pair<size_t, int64_t>{1023, 1000},
                                  std::pair<size_t, int64_t>{270000, 65536 + 4}}) {
        Case c;
        c.algorithm = algorithm;
        c.type = DataType::kInt32;
        c.op = ReduceOp::kProd;
        c.count = count;
        c.chunk_bytes = chunk;
        c.seed = count;
        check_exact(*mesh, c);
        c.type = DataType::kFloat32;
        c.op = ReduceOp::kSum;
        c.in_place = true;
        check_exact(*mesh, c);
        ASSERT_FALSE(::testing::Test::HasFailure()) << c.describe();
      }
    }
  }
}

// The reduction order depends on the plan only: the same random inputs give the same bits run
// after run, on every rank, and with or without loss and reordering on the links.
TEST(AllReduceFaults, RandomFloatsAreBitwiseReproducibleAndEqualOnEveryRank) {
  const int n = 6;
  auto clean = make_mesh(site_layout(n, 2));
  auto lossy = make_mesh(site_layout(n, 2), std::string(kFaults) + "11");
  ASSERT_NE(clean, nullptr);
  ASSERT_NE(lossy, nullptr);
  const size_t count = 50000;
  const auto inputs = random_inputs(n, count, 42);
  for (Algorithm algorithm : kAllAlgorithms) {
    Case c;
    c.algorithm = algorithm;
    c.count = count;
    c.chunk_bytes = 12000;
    const auto first = run_allreduce(*clean, c, inputs);
    const auto second = run_allreduce(*clean, c, inputs);
    const auto faulty = run_allreduce(*lossy, c, inputs);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(first[r].size(), count * sizeof(float));
      EXPECT_TRUE(first[r] == first[0]) << to_string(algorithm) << ": rank " << r
                                        << " differs from rank 0";
      EXPECT_TRUE(second[r] == first[r]) << to_string(algorithm) << ": rank " << r
                                         << " differs between two runs";
      EXPECT_TRUE(faulty[r] == first[r]) << to_string(algorithm) << ": rank " << r
                                         << " differs under loss and reordering";
    }
  }
}

// Tolerance for random (inexact) floats: a sum of n terms evaluated in any order by
// round-to-nearest arithmetic is within (n-1) * u * sum(|x_r|) of the exact sum (u = eps/2,
// the unit roundoff; Higham, "Accuracy and Stability of Numerical Algorithms", 4.2). We
// allow n * eps * sum(|x_r|), twice that bound. The reference is computed in double.
TEST(AllReduceFaults, RandomFloatSumsAreWithinTheRoundingBound) {
  for (int n : {3, 8}) {
    auto mesh = make_mesh(site_layout(n, n == 8 ? 2 : 1));
    ASSERT_NE(mesh, nullptr);
    const size_t count = 4099;
    const auto inputs = random_inputs(n, count, 7 + n);
    std::vector<double> exact(count, 0.0), magnitude(count, 0.0);
    for (int r = 0; r < n; ++r) {
      const auto* x = reinterpret_cast<const float*>(inputs[r].data());
      for (size_t i = 0; i < count; ++i) {
        exact[i] += x[i];
        magnitude[i] += std::fabs(x[i]);
      }
    }
    for (Algorithm algorithm : kAllAlgorithms) {
      Case c;
      c.algorithm = algorithm;
      c.count = count;
      c.chunk_bytes = 1000;
      const auto out = run_allreduce(*mesh, c, inputs);
      for (int r = 0; r < n; ++r) {
        ASSERT_EQ(out[r].size(), count * sizeof(float));
        const auto* got = reinterpret_cast<const float*>(out[r].data());
        for (size_t i = 0; i < count; ++i) {
          const double bound = n * 0x1p-23 * magnitude[i];
          ASSERT_LE(std::fabs(got[i] - exact[i]), bound)
              << to_string(algorithm) << " n=" << n << " rank " << r << " element " << i;
        }
      }
    }
  }
}

// Uneven sites (3 + 1, 2 + 3, interleaved ranks, three sites of 1, 2 and 3): random floats
// give the same bits on every rank, run after run and under loss and reordering.
TEST(AllReduceFaults, UnevenSitesAreBitwiseReproducibleAndEqualOnEveryRank) {
  for (const std::vector<std::string>& layout :
       {std::vector<std::string>{"a", "a", "a", "b"}, {"a", "a", "b", "b", "b"},
        {"a", "b", "a", "a"}, {"a", "b", "b", "c", "c", "c"}}) {
    const int n = static_cast<int>(layout.size());
    auto clean = make_mesh(layout);
    auto lossy = make_mesh(layout, std::string(kFaults) + "13");
    ASSERT_NE(clean, nullptr);
    ASSERT_NE(lossy, nullptr);
    const size_t count = 30011;
    const auto inputs = random_inputs(n, count, 5);
    Case c;
    c.algorithm = Algorithm::kHierarchical;
    c.count = count;
    c.chunk_bytes = 10000;
    const auto first = run_allreduce(*clean, c, inputs);
    const auto second = run_allreduce(*clean, c, inputs);
    const auto faulty = run_allreduce(*lossy, c, inputs);
    const std::string name = clean->topology.describe();
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(first[r].size(), count * sizeof(float)) << name;
      EXPECT_TRUE(first[r] == first[0]) << name << ": rank " << r << " differs from rank 0";
      EXPECT_TRUE(second[r] == first[r]) << name << ": rank " << r << " differs between runs";
      EXPECT_TRUE(faulty[r] == first[r]) << name << ": rank " << r << " differs under loss";
    }
  }
}

TEST(AllReduceErrors, BadArgumentsAreRejectedWithAMessage) {
  auto mesh = make_mesh(site_layout(2));
  ASSERT_NE(mesh, nullptr);
  algo::OpContext ctx{*mesh->peers[0], mesh->topology, guard_deadline(), 0};
  float x = 1.0f;
  auto ok = algo::all_reduce(ctx, Algorithm::kAuto, &x, &x, 1, DataType::kFloat32,
                             ReduceOp::kSum);
  ASSERT_FALSE(ok);
  EXPECT_EQ(ok.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(ok.error().message.find("auto"), std::string::npos) << ok.error().message;
  ok = algo::all_reduce(ctx, Algorithm::kRing, nullptr, &x, 1, DataType::kFloat32,
                        ReduceOp::kSum);
  ASSERT_FALSE(ok);
  EXPECT_NE(ok.error().message.find("null send buffer"), std::string::npos)
      << ok.error().message;
  ok = algo::all_reduce(ctx, Algorithm::kRing, &x, &x, 1, static_cast<DataType>(42),
                        ReduceOp::kSum);
  ASSERT_FALSE(ok);
  EXPECT_NE(ok.error().message.find("data type"), std::string::npos) << ok.error().message;
}

// A peer that answers with the wrong size (the ranks disagree about the count) is an error
// naming that peer, not a crash or a hang.
TEST(AllReduceErrors, MismatchedCountsNameThePeer) {
  auto mesh = make_mesh(site_layout(2));
  ASSERT_NE(mesh, nullptr);
  auto results = run_ranks(2, [&](int r) -> Result<void> {
    std::vector<float> buf(r == 0 ? 100 : 90, 1.0f);
    algo::OpContext ctx{*mesh->peers[r], mesh->topology, guard_deadline(), 0};
    return algo::all_reduce(ctx, Algorithm::kTree, buf.data(), buf.data(), buf.size(),
                            DataType::kFloat32, ReduceOp::kSum);
  });
  ASSERT_FALSE(results[0]);
  EXPECT_NE(results[0].error().message.find("rank 1"), std::string::npos)
      << results[0].error().message;
  EXPECT_NE(results[0].error().message.find("360 bytes where 400"), std::string::npos)
      << results[0].error().message;
  // Rank 1 waits for the broadcast: rank 0's abort ends that wait with an error.
  EXPECT_FALSE(results[1]);
}

}  // namespace
}  // namespace detwan::collectives::testing

// Every algorithm x every DataType x every ReduceOp at small sizes, on every rank count 1..8 in
// one site, on 2 sites x 1..4 ranks and on 3 sites x 2 ranks; results compared bit for bit
// with the exact reference (allreduce_util.h). In-place / out-of-place, misaligned buffers and
// multi-chunk messages rotate through the cases so every combination of them is hit per layout.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/collectives/allreduce/allreduce_util.h"

namespace detwan::collectives::testing {
namespace {

struct Layout {
  int ranks;
  int sites;
};

std::string layout_name(const ::testing::TestParamInfo<Layout>& info) {
  return fmt::format("{}ranks_{}sites", info.param.ranks, info.param.sites);
}

class AllReduceExact : public ::testing::TestWithParam<Layout> {};

void check_every_type_op_and_algorithm(Mesh& mesh) {
  size_t variant = 0;
  for (Algorithm algorithm : kAllAlgorithms) {
    for (DataType type : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        Case c;
        c.algorithm = algorithm;
        c.type = type;
        c.op = op;
        // 1, 2, 7 and 13 elements: fewer elements than ranks, odd, more than ranks.
        static constexpr size_t kCounts[] = {1, 2, 7, 13};
        c.count = kCounts[variant % 4];
        c.in_place = (variant / 4) % 2 == 1;
        c.misalign_bytes = (variant / 2) % 2;
        // Tiny chunks (3 elements at most) split every block into several messages.
        c.chunk_bytes = variant % 3 == 0 ? 0 : static_cast<int64_t>(3 * data_type_size(type));
        c.seed = variant + 1;
        ++variant;
        check_exact(mesh, c);
        if (::testing::Test::HasFailure()) return;  // one clear failure, not hundreds
      }
    }
  }
}

TEST_P(AllReduceExact, EveryTypeOpAndAlgorithmMatchesTheReference) {
  const Layout layout = GetParam();
  auto mesh = make_mesh(site_layout(layout.ranks, layout.sites));
  ASSERT_NE(mesh, nullptr);
  ASSERT_EQ(mesh->topology.num_sites(), layout.sites);
  check_every_type_op_and_algorithm(*mesh);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, AllReduceExact,
    ::testing::Values(Layout{1, 1}, Layout{2, 1}, Layout{3, 1}, Layout{4, 1}, Layout{5, 1},
                      Layout{6, 1}, Layout{7, 1}, Layout{8, 1}, Layout{2, 2}, Layout{4, 2},
                      Layout{6, 2}, Layout{8, 2}, Layout{6, 3}),
    layout_name);

// Sites of different sizes: one letter per rank names its site ("aaab": 3 + 1).
class AllReduceUneven : public ::testing::TestWithParam<const char*> {};

TEST_P(AllReduceUneven, EveryTypeOpAndAlgorithmMatchesTheReference) {
  std::vector<std::string> sites;
  for (const char* at = GetParam(); *at != 0; ++at) sites.emplace_back(1, *at);
  auto mesh = make_mesh(sites);
  ASSERT_NE(mesh, nullptr);
  ASSERT_FALSE(mesh->topology.uniform());
  check_every_type_op_and_algorithm(*mesh);
}

INSTANTIATE_TEST_SUITE_P(Layouts, AllReduceUneven,
                         ::testing::Values("aaab", "abbb", "aabbb", "abaa", "aaaaaab",
                                           "abbccc", "aabccc", "abccccc"));

}  // namespace
}  // namespace detwan::collectives::testing

#include "collectives/topology/topology.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace detwan::collectives {
namespace {

TEST(Topology, TwoSitesTwoRanks) {
  auto topology = Topology::build({"a", "a", "b", "b"});
  ASSERT_TRUE(topology.has_value()) << topology.error().message;
  EXPECT_EQ(topology->size(), 4);
  EXPECT_EQ(topology->num_sites(), 2);
  EXPECT_TRUE(topology->uniform());
  EXPECT_EQ(topology->ranks_per_site(), 2);
  EXPECT_EQ(topology->site_of(0), 0);
  EXPECT_EQ(topology->site_of(3), 1);
  EXPECT_EQ(topology->local_index(2), 0);
  EXPECT_EQ(topology->local_index(3), 1);
  EXPECT_TRUE(topology->same_site(0, 1));
  EXPECT_FALSE(topology->same_site(1, 2));
  EXPECT_EQ(topology->site_name(1), "b");
  EXPECT_EQ(topology->describe(), "2 sites x 2 ranks (a: 0 1, b: 2 3)");
}

TEST(Topology, InterleavedSitesAreNumberedByLowestRank) {
  // Site "west" holds rank 0, so it is site 0 even though "east" sorts first.
  auto topology = Topology::build({"west", "east", "west", "east", "west", "east"});
  ASSERT_TRUE(topology.has_value());
  EXPECT_EQ(topology->site_name(0), "west");
  EXPECT_EQ(topology->site_name(1), "east");
  EXPECT_EQ(topology->ranks_of_site(0), (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(topology->ranks_of_site(1), (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(topology->local_index(4), 2);
  EXPECT_EQ(topology->local_index(5), 2);
  EXPECT_EQ(topology->ranks_per_site(), 3);
}

TEST(Topology, NonUniform) {
  auto topology = Topology::build({"a", "a", "a", "b"});
  ASSERT_TRUE(topology.has_value());
  EXPECT_FALSE(topology->uniform());
  EXPECT_EQ(topology->ranks_per_site(), 0);
  EXPECT_EQ(topology->ranks_of_site(0).size(), 3u);
  EXPECT_NE(topology->describe().find("non-uniform"), std::string::npos);
  EXPECT_NE(topology->describe().find("b: 3"), std::string::npos);
}

TEST(Topology, SingleRankAndSingleSite) {
  auto one = Topology::build({"solo"});
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->size(), 1);
  EXPECT_TRUE(one->uniform());
  EXPECT_EQ(one->describe(), "1 site x 1 rank (solo: 0)");

  auto flat = Topology::build(std::vector<std::string>(8, "lan"));
  ASSERT_TRUE(flat.has_value());
  EXPECT_EQ(flat->num_sites(), 1);
  EXPECT_EQ(flat->ranks_per_site(), 8);
  EXPECT_EQ(flat->local_index(7), 7);
}

TEST(Topology, EveryRankItsOwnSite) {
  auto topology = Topology::build({"s0", "s1", "s2"});
  ASSERT_TRUE(topology.has_value());
  EXPECT_EQ(topology->num_sites(), 3);
  EXPECT_EQ(topology->ranks_per_site(), 1);
  for (int rank = 0; rank < 3; ++rank) EXPECT_EQ(topology->local_index(rank), 0);
}

TEST(Topology, Errors) {
  auto empty = Topology::build({});
  ASSERT_FALSE(empty.has_value());
  EXPECT_EQ(empty.error().code, ErrorCode::kInvalidArgument);

  auto unnamed = Topology::build({"a", "", "b"});
  ASSERT_FALSE(unnamed.has_value());
  EXPECT_EQ(unnamed.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(unnamed.error().message.find("rank 1"), std::string::npos) << unnamed.error().message;
}

}  // namespace
}  // namespace detwan::collectives

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
  EXPECT_EQ(topology->max_ranks_per_site(), 3);
  EXPECT_NE(topology->describe().find("non-uniform"), std::string::npos);
  EXPECT_NE(topology->describe().find("b: 3"), std::string::npos);
}

// Every site's block of element i (as the algorithms split: the first count % L blocks one
// longer) for a brute-force check of site_segments.
int owner_of(const Topology& topology, int site, size_t count, size_t i) {
  const auto& ranks = topology.ranks_of_site(site);
  const size_t blocks = ranks.size();
  size_t start = 0;
  for (size_t l = 0; l < blocks; ++l) {
    const size_t length = count / blocks + (l < count % blocks ? 1 : 0);
    if (i < start + length) return ranks[l];
    start += length;
  }
  return -1;
}

TEST(Topology, SiteSegmentsCoverTheBufferEachOwnedByOneRankPerSite) {
  for (const std::vector<std::string>& layout :
       {std::vector<std::string>{"a", "a", "a", "b"}, {"a", "b", "b", "c", "c", "c"},
        {"a", "b", "a", "a", "b"}, {"a", "a", "b", "b"}}) {
    auto topology = Topology::build(layout);
    ASSERT_TRUE(topology.has_value());
    for (size_t count : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{1000003}}) {
      const auto all = site_segments(*topology, count);
      size_t next = 0;
      for (const SiteSegment& segment : all) {
        ASSERT_EQ(segment.offset, next) << topology->describe() << " count " << count;
        ASSERT_GT(segment.count, 0u);
        ASSERT_EQ(segment.owners.size(), static_cast<size_t>(topology->num_sites()));
        for (int site = 0; site < topology->num_sites(); ++site) {
          // The whole segment lies in the owner's block.
          EXPECT_EQ(owner_of(*topology, site, count, segment.offset), segment.owners[site]);
          EXPECT_EQ(owner_of(*topology, site, count, segment.offset + segment.count - 1),
                    segment.owners[site]);
        }
        next += segment.count;
      }
      EXPECT_EQ(next, count);
      // A rank's own segments are the ones naming it, and together they are its block.
      for (int rank = 0; rank < topology->size(); ++rank) {
        size_t mine = 0;
        for (const SiteSegment& segment : site_segments(*topology, count, rank)) {
          EXPECT_EQ(segment.owners[topology->site_of(rank)], rank);
          mine += segment.count;
        }
        const size_t blocks = topology->ranks_of_site(topology->site_of(rank)).size();
        const auto local = static_cast<size_t>(topology->local_index(rank));
        EXPECT_EQ(mine, count / blocks + (local < count % blocks ? 1 : 0));
      }
    }
  }
  // Equal sites: the segments are the blocks, owned by equal local indices.
  auto even = Topology::build({"a", "a", "b", "b"});
  ASSERT_TRUE(even.has_value());
  const auto blocks = site_segments(*even, 10);
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(blocks[1].offset, 5u);
  EXPECT_EQ(blocks[1].owners, (std::vector<int>{1, 3}));
}

TEST(Topology, GatherHoldingsSpreadEveryForeignBlockOverTheSite) {
  auto topology = Topology::build({"a", "a", "a", "b", "c", "c"});
  ASSERT_TRUE(topology.has_value());
  // b's one rank holds everything from a and c.
  EXPECT_EQ(gather_holdings(*topology, 1), (std::vector<std::vector<int>>{{0, 1, 2, 3, 4, 5}}));
  // a's local index l holds its own block, b's block if l == 0, and c's local index l (mod 3).
  EXPECT_EQ(gather_holdings(*topology, 0),
            (std::vector<std::vector<int>>{{0, 3, 4}, {1, 5}, {2}}));
  // c (2 ranks): a's local indices 0 and 2 and b's only rank to c's local index 0, a's local
  // index 1 to c's local index 1.
  EXPECT_EQ(gather_holdings(*topology, 2), (std::vector<std::vector<int>>{{0, 2, 3, 4}, {1, 5}}));
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

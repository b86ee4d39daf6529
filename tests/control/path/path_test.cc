// control/path: shortest paths with transit-only interiors, and k link-disjoint paths
// (successive shortest paths), checked by hand on small graphs and against brute force on
// seeded random graphs.
#include "control/path/path.h"

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/control/topology_builder.h"

namespace detwan::control::path {
namespace {

using model::Topology;
using testing::TopologyBuilder;

// Weights by link name (the same in both directions).
LinkWeight weights(const Topology& t, std::map<std::string, int64_t> by_name) {
  return [&t, by_name](uint32_t link, uint32_t) { return by_name.at(t.links[link].name); };
}
const LinkFilter kAll = [](uint32_t, uint32_t) { return true; };

std::vector<std::string> node_names(const Topology& t, const Path& p) {
  std::vector<std::string> out;
  for (const uint32_t n : p.nodes) out.push_back(t.nodes[n].name);
  return out;
}

std::vector<std::string> link_names(const Topology& t, const Path& p) {
  std::vector<std::string> out;
  for (const uint32_t l : p.links) out.push_back(t.links[l].name);
  return out;
}

TEST(ShortestPath, KnownAnswerOnASmallGraph) {
  //        r1 --2-- r2
  //   1 /    \3      \ 1
  //  a        r3 --1-- b
  //   6 \____________/ (a-b direct: 10)
  const Topology t = TopologyBuilder()
                         .site("a")
                         .site("b")
                         .transit("r1")
                         .transit("r2")
                         .transit("r3")
                         .link("a-r1", "a", "r1")
                         .link("r1-r2", "r1", "r2")
                         .link("r2-b", "r2", "b")
                         .link("r1-r3", "r1", "r3")
                         .link("r3-b", "r3", "b")
                         .link("a-b", "a", "b")
                         .build();
  const auto w =
      weights(t, {{"a-r1", 1}, {"r1-r2", 2}, {"r2-b", 1}, {"r1-r3", 3}, {"r3-b", 1}, {"a-b", 10}});
  const auto p = shortest_path(t, t.find_node("a"), t.find_node("b"), kAll, w);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(node_names(t, *p), (std::vector<std::string>{"a", "r1", "r2", "b"}));
  EXPECT_EQ(link_names(t, *p), (std::vector<std::string>{"a-r1", "r1-r2", "r2-b"}));
  EXPECT_EQ(p->weight, 4);
  // The other way round: the same links reversed.
  const auto back = shortest_path(t, t.find_node("b"), t.find_node("a"), kAll, w);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(node_names(t, *back), (std::vector<std::string>{"b", "r2", "r1", "a"}));
  EXPECT_EQ(back->weight, 4);
  // No path from a node to itself, nor from an unknown node.
  EXPECT_FALSE(shortest_path(t, 0, 0, kAll, w).has_value());
  EXPECT_FALSE(shortest_path(t, 0, 99, kAll, w).has_value());
}

TEST(ShortestPath, FilterExcludesLinksAndSeesTheDirection) {
  const Topology t = TopologyBuilder()
                         .site("a")
                         .site("b")
                         .transit("r1")
                         .transit("r2")
                         .link("a-r1", "a", "r1")
                         .link("r1-b", "r1", "b")
                         .link("a-r2", "a", "r2")
                         .link("r2-b", "r2", "b")
                         .build();
  const auto w = weights(t, {{"a-r1", 1}, {"r1-b", 1}, {"a-r2", 5}, {"r2-b", 5}});
  const uint32_t r1b = t.find_link("r1-b");
  const LinkFilter no_r1b = [&](uint32_t l, uint32_t) { return l != r1b; };
  const auto p = shortest_path(t, t.find_node("a"), t.find_node("b"), no_r1b, w);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(link_names(t, *p), (std::vector<std::string>{"a-r2", "r2-b"}));
  EXPECT_EQ(p->weight, 10);
  // The filter is asked with the node the link is left from: refuse r1-b only from r1.
  const uint32_t r1 = t.find_node("r1");
  std::vector<std::pair<uint32_t, uint32_t>> asked;
  const LinkFilter not_from_r1 = [&](uint32_t l, uint32_t from) {
    asked.emplace_back(l, from);
    return !(l == r1b && from == r1);
  };
  const auto q = shortest_path(t, t.find_node("a"), t.find_node("b"), not_from_r1, w);
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(link_names(t, *q), (std::vector<std::string>{"a-r2", "r2-b"}));
  EXPECT_NE(std::find(asked.begin(), asked.end(), std::make_pair(r1b, r1)), asked.end());
  // Nothing admitted: no path.
  EXPECT_FALSE(shortest_path(
                   t, 0, 1, [](uint32_t, uint32_t) { return false; }, w)
                   .has_value());
}

TEST(ShortestPath, NeverPassesThroughAThirdSite) {
  // a - c - b is cheap but c is a site; a - r - b is the only path through transit nodes.
  const Topology t = TopologyBuilder()
                         .site("a")
                         .site("b")
                         .site("c")
                         .transit("r")
                         .link("a-c", "a", "c")
                         .link("c-b", "c", "b")
                         .link("a-r", "a", "r")
                         .link("r-b", "r", "b")
                         .build();
  const auto w = weights(t, {{"a-c", 1}, {"c-b", 1}, {"a-r", 50}, {"r-b", 50}});
  const auto p = shortest_path(t, t.find_node("a"), t.find_node("b"), kAll, w);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(node_names(t, *p), (std::vector<std::string>{"a", "r", "b"}));
  // Only through the site: no path. A site without a gateway is still a site.
  const Topology only_site = TopologyBuilder()
                                 .site("a")
                                 .site("b")
                                 .site("c", false)
                                 .link("a-c", "a", "c")
                                 .link("c-b", "c", "b")
                                 .build();
  EXPECT_FALSE(shortest_path(only_site, 0, 1, kAll, weights(only_site, {{"a-c", 1}, {"c-b", 1}}))
                   .has_value());
  EXPECT_TRUE(disjoint_paths(only_site, 0, 1, 2, kAll, weights(only_site, {{"a-c", 1}, {"c-b", 1}}))
                  .empty());
  // Directly adjacent sites are fine.
  EXPECT_TRUE(shortest_path(only_site, 0, 2, kAll, weights(only_site, {{"a-c", 1}, {"c-b", 1}}))
                  .has_value());
}

// The classic trap: the shortest path s-u-v-t uses the middle link u-v; removing its links
// leaves no second path, but s-u-t and s-v-t are two disjoint paths.
Topology trap() {
  return TopologyBuilder()
      .site("s")
      .site("t")
      .transit("u")
      .transit("v")
      .link("s-u", "s", "u")
      .link("u-v", "u", "v")
      .link("v-t", "v", "t")
      .link("s-v", "s", "v")
      .link("u-t", "u", "t")
      .build();
}
const std::map<std::string, int64_t> kTrapWeights = {
    {"s-u", 1}, {"u-v", 1}, {"v-t", 1}, {"s-v", 3}, {"u-t", 3}};

TEST(DisjointPaths, EscapesTheTrapThatGreedyRemovalFallsInto) {
  const Topology t = trap();
  const auto w = weights(t, kTrapWeights);
  const uint32_t s = t.find_node("s");
  const uint32_t d = t.find_node("t");
  // Greedy: shortest, then remove its links: no second path.
  const auto first = shortest_path(t, s, d, kAll, w);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(node_names(t, *first), (std::vector<std::string>{"s", "u", "v", "t"}));
  const LinkFilter without_first = [&](uint32_t l, uint32_t) {
    return std::find(first->links.begin(), first->links.end(), l) == first->links.end();
  };
  EXPECT_FALSE(shortest_path(t, s, d, without_first, w).has_value());

  const auto paths = disjoint_paths(t, s, d, 2, kAll, w);
  ASSERT_EQ(paths.size(), 2u);
  std::set<std::vector<std::string>> found;
  for (const Path& p : paths) {
    EXPECT_EQ(p.weight, 4);
    found.insert(node_names(t, p));
  }
  EXPECT_EQ(found, (std::set<std::vector<std::string>>{{"s", "u", "t"}, {"s", "v", "t"}}));
  // k = 1 is the shortest path.
  const auto one = disjoint_paths(t, s, d, 1, kAll, w);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(node_names(t, one[0]), (std::vector<std::string>{"s", "u", "v", "t"}));
  EXPECT_EQ(one[0].weight, 3);
  // More than exist: as many as exist.
  EXPECT_EQ(disjoint_paths(t, s, d, 5, kAll, w).size(), 2u);
  EXPECT_TRUE(disjoint_paths(t, s, d, 0, kAll, w).empty());
  EXPECT_TRUE(disjoint_paths(t, s, s, 2, kAll, w).empty());
}

TEST(DisjointPaths, SortedByWeight) {
  const Topology t = TopologyBuilder()
                         .site("a")
                         .site("b")
                         .transit("r1")
                         .transit("r2")
                         .transit("r3")
                         .link("a-r1", "a", "r1")
                         .link("r1-b", "r1", "b")
                         .link("a-r2", "a", "r2")
                         .link("r2-b", "r2", "b")
                         .link("a-r3", "a", "r3")
                         .link("r3-b", "r3", "b")
                         .build();
  const auto w =
      weights(t, {{"a-r1", 7}, {"r1-b", 7}, {"a-r2", 1}, {"r2-b", 1}, {"a-r3", 3}, {"r3-b", 3}});
  const auto paths = disjoint_paths(t, 0, 1, 3, kAll, w);
  ASSERT_EQ(paths.size(), 3u);
  EXPECT_EQ(paths[0].weight, 2);
  EXPECT_EQ(paths[1].weight, 6);
  EXPECT_EQ(paths[2].weight, 14);
  EXPECT_EQ(node_names(t, paths[0]), (std::vector<std::string>{"a", "r2", "b"}));
}

// ---- Randomized: every path valid, pairwise link-disjoint, and as many and as light as the
// best set of simple link-disjoint paths found by brute force.

struct Checked {
  size_t count = 0;
  int64_t total = 0;
};

// Simple paths src -> dst with transit-only interiors over admitted links (brute force).
void all_paths(const Topology& t, uint32_t u, uint32_t dst, const LinkFilter& admit,
               const LinkWeight& weight, std::vector<bool>& seen, Path& current,
               std::vector<Path>& out) {
  if (u == dst) {
    out.push_back(current);
    return;
  }
  for (const uint32_t l : t.nodes[u].links) {
    const uint32_t v = t.links[l].other_end(u);
    if (seen[v] || !admit(l, u)) continue;
    if (v != dst && t.nodes[v].site != model::kNone) continue;
    seen[v] = true;
    current.nodes.push_back(v);
    current.links.push_back(l);
    current.weight += weight(l, u);
    all_paths(t, v, dst, admit, weight, seen, current, out);
    current.weight -= weight(l, u);
    current.links.pop_back();
    current.nodes.pop_back();
    seen[v] = false;
  }
}

// The largest number (up to k) of pairwise link-disjoint paths among `paths`, and the least
// total weight of such a set.
void best_set(const std::vector<Path>& paths, size_t from, uint32_t k,
              std::vector<bool>& used_links, size_t count, int64_t total, Checked& best) {
  if (count > best.count || (count == best.count && total < best.total)) best = {count, total};
  if (count == k) return;
  for (size_t i = from; i < paths.size(); ++i) {
    const Path& p = paths[i];
    bool free = true;
    for (const uint32_t l : p.links) free = free && !used_links[l];
    if (!free) continue;
    for (const uint32_t l : p.links) used_links[l] = true;
    best_set(paths, i + 1, k, used_links, count + 1, total + p.weight, best);
    for (const uint32_t l : p.links) used_links[l] = false;
  }
}

TEST(DisjointPaths, RandomGraphsAgainstBruteForce) {
  std::mt19937_64 rng(4242);
  int nontrivial = 0;
  for (int round = 0; round < 5000; ++round) {
    TopologyBuilder builder;
    const int sites = 2 + static_cast<int>(rng() % 2);
    const int transits = 1 + static_cast<int>(rng() % 7);
    std::vector<std::string> names;
    for (int i = 0; i < sites; ++i) {
      names.push_back("s" + std::to_string(i));
      builder.site(names.back(), rng() % 4 != 0);
    }
    for (int i = 0; i < transits; ++i) {
      names.push_back("r" + std::to_string(i));
      builder.transit(names.back());
    }
    const int links = 2 + static_cast<int>(rng() % 15);
    for (int i = 0; i < links; ++i) {
      const size_t a = rng() % names.size();
      size_t b = rng() % names.size();
      if (b == a) b = (a + 1) % names.size();
      builder.link("l" + std::to_string(i), names[a], names[b]);  // parallel links allowed
    }
    const Topology t = builder.build();
    // Direction-dependent weights (0 included) and a random admission per direction.
    std::vector<int64_t> weight_of(2 * t.links.size());
    std::vector<bool> admitted(2 * t.links.size());
    for (size_t i = 0; i < weight_of.size(); ++i) {
      weight_of[i] = static_cast<int64_t>(rng() % 6);
      admitted[i] = rng() % 8 != 0;
    }
    const LinkWeight w = [&](uint32_t l, uint32_t from) {
      return weight_of[2 * l + static_cast<size_t>(t.links[l].direction_from(from))];
    };
    const LinkFilter admit = [&](uint32_t l, uint32_t from) {
      return static_cast<bool>(
          admitted[2 * l + static_cast<size_t>(t.links[l].direction_from(from))]);
    };
    const uint32_t src = 0;
    const uint32_t dst = 1;
    const uint32_t k = 1 + static_cast<uint32_t>(rng() % 4);
    const std::vector<Path> got = disjoint_paths(t, src, dst, k, admit, w);

    std::set<uint32_t> used;
    int64_t total = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const Path& p = got[i];
      SCOPED_TRACE("round " + std::to_string(round) + " path " + std::to_string(i));
      ASSERT_GE(p.nodes.size(), 2u);
      ASSERT_EQ(p.links.size() + 1, p.nodes.size());
      EXPECT_EQ(p.nodes.front(), src);
      EXPECT_EQ(p.nodes.back(), dst);
      std::set<uint32_t> nodes(p.nodes.begin(), p.nodes.end());
      EXPECT_EQ(nodes.size(), p.nodes.size()) << "not simple";
      int64_t weight = 0;
      for (size_t j = 0; j < p.links.size(); ++j) {
        const model::Link& link = t.links[p.links[j]];
        EXPECT_EQ(link.other_end(p.nodes[j]), p.nodes[j + 1]) << "link does not join its nodes";
        EXPECT_TRUE(admit(p.links[j], p.nodes[j])) << "link not admitted in this direction";
        if (j > 0) {
          EXPECT_EQ(t.nodes[p.nodes[j]].site, model::kNone) << "passes through a site";
        }
        EXPECT_TRUE(used.insert(p.links[j]).second) << "link shared by two paths";
        weight += w(p.links[j], p.nodes[j]);
      }
      EXPECT_EQ(p.weight, weight);
      if (i > 0) {
        EXPECT_LE(got[i - 1].weight, p.weight) << "not sorted";
      }
      total += p.weight;
    }

    std::vector<Path> simple;
    std::vector<bool> seen(t.nodes.size(), false);
    seen[src] = true;
    Path start;
    start.nodes.push_back(src);
    all_paths(t, src, dst, admit, w, seen, start, simple);
    std::vector<bool> used_links(t.links.size(), false);
    Checked best;
    best_set(simple, 0, k, used_links, 0, 0, best);
    ASSERT_EQ(got.size(), best.count)
        << "round " << round << ": " << got.size() << " paths, brute force finds " << best.count;
    EXPECT_EQ(total, best.total) << "round " << round << ": not of least total weight";
    nontrivial += best.count >= 2 ? 1 : 0;
  }
  EXPECT_GT(nontrivial, 30);
}

}  // namespace
}  // namespace detwan::control::path

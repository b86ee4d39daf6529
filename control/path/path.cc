#include "control/path/path.h"

#include <algorithm>
#include <limits>
#include <queue>
#include <utility>

namespace detwan::control::path {
namespace {

using model::kNone;
using model::Topology;

constexpr int64_t kInfinite = std::numeric_limits<int64_t>::max() / 4;

// May a path step onto node v (toward dst)? Interior nodes are transit nodes only.
bool may_enter(const Topology& t, uint32_t v, uint32_t src, uint32_t dst) {
  if (v == dst) return true;
  if (v == src) return false;
  return t.nodes[v].site == kNone;
}

}  // namespace

std::optional<Path> shortest_path(const Topology& t, uint32_t src, uint32_t dst,
                                  const LinkFilter& admit, const LinkWeight& weight) {
  if (src >= t.nodes.size() || dst >= t.nodes.size() || src == dst) return std::nullopt;
  std::vector<int64_t> dist(t.nodes.size(), kInfinite);
  std::vector<uint32_t> via(t.nodes.size(), kNone);  // link used to reach the node
  using Item = std::pair<int64_t, uint32_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> queue;
  dist[src] = 0;
  queue.emplace(0, src);
  while (!queue.empty()) {
    const auto [d, u] = queue.top();
    queue.pop();
    if (d != dist[u]) continue;
    if (u == dst) break;
    for (const uint32_t l : t.nodes[u].links) {
      const uint32_t v = t.links[l].other_end(u);
      if (!may_enter(t, v, src, dst)) continue;
      // Weight first (cheap); the admission test (calendars, slots) only for an improvement.
      const int64_t w = std::max<int64_t>(0, weight(l, u));
      if (d + w < dist[v] && admit(l, u)) {
        dist[v] = d + w;
        via[v] = l;
        queue.emplace(dist[v], v);
      }
    }
  }
  if (dist[dst] >= kInfinite) return std::nullopt;
  Path path;
  path.weight = dist[dst];
  for (uint32_t v = dst; v != src;) {
    path.nodes.push_back(v);
    path.links.push_back(via[v]);
    v = t.links[via[v]].other_end(v);
  }
  path.nodes.push_back(src);
  std::reverse(path.nodes.begin(), path.nodes.end());
  std::reverse(path.links.begin(), path.links.end());
  return path;
}

std::vector<Path> disjoint_paths(const Topology& t, uint32_t src, uint32_t dst, uint32_t k,
                                 const LinkFilter& admit, const LinkWeight& weight) {
  std::vector<Path> out;
  if (k == 0 || src >= t.nodes.size() || dst >= t.nodes.size() || src == dst) return out;
  // Arc 2l goes ends[0] -> ends[1], arc 2l+1 the other way; each carries at most one unit.
  const size_t links = t.links.size();
  std::vector<int8_t> flow(2 * links, 0);
  std::vector<int64_t> cost(2 * links, kInfinite);  // kInfinite: not admitted
  for (uint32_t l = 0; l < links; ++l) {
    for (int d = 0; d < 2; ++d) {
      const uint32_t from = t.links[l].ends[d];
      const uint32_t to = t.links[l].ends[1 - d];
      if (!may_enter(t, to, src, dst) || from == dst) continue;
      if (from != src && t.nodes[from].site != kNone) continue;
      if (!admit(l, from)) continue;
      cost[2 * l + static_cast<size_t>(d)] = std::max<int64_t>(0, weight(l, from));
    }
  }
  std::vector<int64_t> potential(t.nodes.size(), 0);
  uint32_t found = 0;
  for (; found < k; ++found) {
    // Dijkstra on reduced costs over the residual graph.
    std::vector<int64_t> dist(t.nodes.size(), kInfinite);
    std::vector<int64_t> via(t.nodes.size(), -1);  // residual arc: +(a+1) forward, -(a+1) undo
    using Item = std::pair<int64_t, uint32_t>;
    std::priority_queue<Item, std::vector<Item>, std::greater<>> queue;
    dist[src] = 0;
    queue.emplace(0, src);
    while (!queue.empty()) {
      const auto [d, u] = queue.top();
      queue.pop();
      if (d != dist[u]) continue;
      for (const uint32_t l : t.nodes[u].links) {
        const int dir = t.links[l].direction_from(u);
        const uint32_t v = t.links[l].other_end(u);
        const size_t forward = 2 * l + static_cast<size_t>(dir);
        const size_t backward = 2 * l + static_cast<size_t>(1 - dir);
        int64_t arc_cost = kInfinite;
        int64_t tag = 0;
        if (flow[backward] == 1) {  // undo the opposite unit: cost -c
          arc_cost = -cost[backward];
          tag = -static_cast<int64_t>(backward + 1);
        } else if (flow[forward] == 0 && cost[forward] < kInfinite) {
          arc_cost = cost[forward];
          tag = static_cast<int64_t>(forward + 1);
        }
        if (arc_cost >= kInfinite) continue;
        const int64_t reduced = arc_cost + potential[u] - potential[v];
        const int64_t nd = d + std::max<int64_t>(0, reduced);
        if (nd < dist[v]) {
          dist[v] = nd;
          via[v] = tag;
          queue.emplace(nd, v);
        }
      }
    }
    if (dist[dst] >= kInfinite) break;
    for (uint32_t v = 0; v < t.nodes.size(); ++v) {
      if (dist[v] < kInfinite) potential[v] += dist[v];
    }
    for (uint32_t v = dst; v != src;) {
      const int64_t tag = via[v];
      const size_t arc = static_cast<size_t>((tag > 0 ? tag : -tag) - 1);
      const uint32_t l = static_cast<uint32_t>(arc / 2);
      if (tag > 0) {
        flow[arc] = 1;
      } else {
        flow[arc] = 0;  // the opposite unit is cancelled
      }
      v = t.links[l].other_end(v);
    }
  }
  // Decompose the flow into paths from src.
  std::vector<bool> used(2 * links, false);
  for (uint32_t p = 0; p < found; ++p) {
    Path path;
    path.nodes.push_back(src);
    uint32_t u = src;
    std::vector<bool> seen(t.nodes.size(), false);
    seen[src] = true;
    bool ok = true;
    while (u != dst && ok) {
      ok = false;
      for (const uint32_t l : t.nodes[u].links) {
        const size_t arc = 2 * l + static_cast<size_t>(t.links[l].direction_from(u));
        if (flow[arc] != 1 || used[arc]) continue;
        const uint32_t v = t.links[l].other_end(u);
        if (seen[v]) continue;
        used[arc] = true;
        seen[v] = true;
        path.links.push_back(l);
        path.nodes.push_back(v);
        path.weight += cost[arc];
        u = v;
        ok = true;
        break;
      }
    }
    if (ok && u == dst) out.push_back(std::move(path));
  }
  std::sort(out.begin(), out.end(),
            [](const Path& a, const Path& b) { return a.weight < b.weight; });
  return out;
}

}  // namespace detwan::control::path

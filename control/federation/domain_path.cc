// Dijkstra over the domains' transits.
#include "control/federation/domain_path.h"

#include <algorithm>
#include <limits>
#include <map>
#include <queue>
#include <set>
#include <tuple>

namespace detwan::control::federation {

DomainPath find_domain_path(const std::vector<ParsedView>& views, const std::string& src,
                            const std::string& dst, uint64_t rate_bps, int64_t start_ns,
                            int64_t end_ns) {
  std::set<std::string> sites;
  std::map<std::string, std::vector<const Transit*>> out_edges;
  for (const ParsedView& v : views) {
    sites.insert(v.sites.begin(), v.sites.end());
    for (const Transit& t : v.transits) {
      if (t.available_bps(start_ns, end_ns) >= rate_bps) out_edges[t.from].push_back(&t);
    }
  }
  // Cost: (max latency, domains entered); the domain of the edge that reached a node.
  using Cost = std::pair<int64_t, int>;
  std::map<std::string, Cost> best;
  std::map<std::string, const Transit*> via;
  using Item = std::tuple<Cost, std::string>;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> queue;
  best[src] = {0, 0};
  queue.push({Cost{0, 0}, src});
  while (!queue.empty()) {
    auto [cost, node] = queue.top();
    queue.pop();
    if (best[node] != cost) continue;
    if (node == dst) break;
    if (node != src && sites.count(node) != 0) continue;  // sites are ends, not hops
    const Transit* in = via.count(node) != 0 ? via[node] : nullptr;
    for (const Transit* t : out_edges[node]) {
      const Cost next{cost.first + t->max_latency_ns,
                      cost.second + (in == nullptr || in->domain != t->domain ? 1 : 0)};
      const auto it = best.find(t->to);
      if (it == best.end() || next < it->second) {
        best[t->to] = next;
        via[t->to] = t;
        queue.push({next, t->to});
      }
    }
  }
  DomainPath path;
  if (best.count(dst) == 0 || src == dst) return path;
  std::vector<const Transit*> hops;
  for (std::string n = dst; n != src; n = via[n]->from) hops.push_back(via[n]);
  std::reverse(hops.begin(), hops.end());
  for (const Transit* t : hops) {
    if (path.segments.empty() || path.segments.back().domain != t->domain) {
      path.segments.push_back(SegmentPlan{t->domain, t->from, t->to, 0, 0});
    }
    SegmentPlan& s = path.segments.back();
    s.to = t->to;
    s.max_latency_ns += t->max_latency_ns;
    s.min_latency_ns += t->min_latency_ns;
  }
  path.max_latency_ns = best[dst].first;
  return path;
}

}  // namespace detwan::control::federation

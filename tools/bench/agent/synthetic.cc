#include "tools/bench/agent/synthetic.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace detwan::tools::agent_bench {

control::model::Topology synthetic_topology(const SyntheticOptions& o) {
  using control::model::Topology;
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> coordinate(0, 3000);  // km
  Topology t;
  t.domain = "synthetic";
  t.agent.name = "bench";
  t.agent.journal = o.journal;
  t.agent.api.listen = *common::parse_host_port("127.0.0.1:0", true);
  t.agent.api.allow = {*common::parse_ip_prefix("127.0.0.0/8")};
  t.agent.hold_timeout_ns = 3'600'000'000'000;
  std::vector<std::pair<double, double>> where(o.nodes);
  for (auto& p : where) p = {coordinate(rng), coordinate(rng)};
  for (uint32_t i = 0; i < o.nodes; ++i) {
    const bool site = i % o.site_every == 0;
    t.nodes.push_back({fmt::format("{}{}", site ? "s" : "n", i), control::model::kNone, {}});
    if (site) {
      control::model::Site s;
      s.name = t.nodes.back().name;
      s.gateway = static_cast<uint32_t>(t.gateways.size());
      t.sites.push_back(s);
      control::model::Gateway g;
      g.name = "gw-" + s.name;
      g.site = static_cast<uint32_t>(t.sites.size() - 1);
      g.admin_socket = "/nonexistent/" + g.name;
      g.playout_error_ns = 100'000;
      g.processing_delay_ns = 50'000;
      t.gateways.push_back(g);
    }
  }
  // Sites first in Topology::nodes is not required by finish(); keep node order = index order.
  std::set<std::pair<uint32_t, uint32_t>> edges;
  auto distance = [&](uint32_t a, uint32_t b) {
    return std::hypot(where[a].first - where[b].first, where[a].second - where[b].second);
  };
  // Spanning tree: each node joins its nearest earlier node among 16 random candidates.
  for (uint32_t i = 1; i < o.nodes; ++i) {
    uint32_t best = 0;
    double best_d = 1e18;
    std::uniform_int_distribution<uint32_t> earlier(0, i - 1);
    for (int k = 0; k < 16; ++k) {
      const uint32_t j = earlier(rng);
      if (distance(i, j) < best_d) {
        best_d = distance(i, j);
        best = j;
      }
    }
    edges.emplace(std::min(i, best), std::max(i, best));
  }
  // More links, preferring short ones, up to the average degree.
  const auto wanted = static_cast<size_t>(o.degree * o.nodes / 2);
  std::uniform_int_distribution<uint32_t> any(0, o.nodes - 1);
  while (edges.size() < wanted) {
    const uint32_t a = any(rng);
    uint32_t best = a;
    double best_d = 1e18;
    for (int k = 0; k < 8; ++k) {
      const uint32_t b = any(rng);
      if (b != a && distance(a, b) < best_d && edges.count({std::min(a, b), std::max(a, b)}) == 0) {
        best_d = distance(a, b);
        best = b;
      }
    }
    if (best != a) edges.emplace(std::min(a, best), std::max(a, best));
  }
  const uint64_t capacities[] = {10'000'000'000, 40'000'000'000, 100'000'000'000};
  for (const auto& [a, b] : edges) {
    control::model::Link link;
    link.name = fmt::format("l{}-{}", a, b);
    link.ends[0] = a;
    link.ends[1] = b;
    link.capacity_bps = capacities[rng() % 3];
    link.delay_ns = static_cast<int64_t>(distance(a, b) * 5'000) + 10'000;  // 200 km/ms
    link.jitter_ns = link.delay_ns / 20;
    link.reservable = 0.9;
    link.cycle_ns = 1'000'000;
    link.slot_count = 1000;
    link.guard_ns = 100;
    link.mtu_bytes = 9000;
    const auto l = static_cast<uint32_t>(t.links.size());
    t.links.push_back(link);
    for (const uint32_t end : {a, b}) {
      if (t.nodes[end].name[0] == 's') {
        const uint32_t site = end / o.site_every;
        t.gateways[t.sites[site].gateway].ports.push_back({link.name, l});
      }
    }
  }
  return t;
}

RandomRequest random_request(const control::model::Topology& t, std::mt19937_64& rng,
                             uint32_t spread_s) {
  std::uniform_int_distribution<size_t> site(0, t.sites.size() - 1);
  RandomRequest r;
  const size_t a = site(rng);
  size_t b = site(rng);
  while (b == a) b = site(rng);
  r.src = t.sites[a].name;
  r.dst = t.sites[b].name;
  r.rate_bps = 100'000'000ULL * (1 + rng() % 20);  // 0.1 .. 2 Gbit/s
  r.start_offset_ns = static_cast<int64_t>(rng() % spread_s) * 1'000'000'000;
  r.duration_ns = static_cast<int64_t>(1 + rng() % 6) * 3'600'000'000'000;  // 1..6 h
  return r;
}


control::agent::ReserveRequest reserve_request(const RandomRequest& q, int64_t base_ns,
                                               std::string fingerprint) {
  control::agent::ReserveRequest r;
  r.spec.src = q.src;
  r.spec.dst = q.dst;
  r.spec.min_bandwidth_bps = q.rate_bps;
  r.spec.start_ns = base_ns + q.start_offset_ns;
  r.spec.duration_ns = q.duration_ns;
  r.commit = true;
  r.fingerprint = std::move(fingerprint);
  return r;
}

}  // namespace detwan::tools::agent_bench

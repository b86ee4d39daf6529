#pragma once
// Path computation over the topology graph (docs/control.md, "Path computation").
//
//   shortest_path: Dijkstra from a source site to a destination site over links the caller
//     admits (capacity, slots, MTU: `LinkFilter`), weighted by the caller's `LinkWeight` (the
//     link's contribution to the worst-case latency). Intermediate nodes are transit nodes only:
//     a site's gateway does not forward tunnels.
//   disjoint_paths: up to k link-disjoint paths of least total weight (successive shortest
//     paths on the residual graph with Johnson potentials; for k = 2 this is Suurballe's
//     result), each a simple path, sorted by weight.
// Both are O((V + E) log V) per path. Pure functions of their arguments; thread-compatible.
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "control/model/topology.h"

namespace detwan::control::path {

struct Path {
  std::vector<uint32_t> nodes;  // src ... dst
  std::vector<uint32_t> links;  // links[i] joins nodes[i] and nodes[i + 1]
  int64_t weight = 0;           // sum of LinkWeight along the path
};

// May the path traverse `link` from node `from`? (the direction matters for slots)
using LinkFilter = std::function<bool(uint32_t link, uint32_t from)>;
// Weight >= 0 of traversing `link` from `from` (only called for admitted links).
using LinkWeight = std::function<int64_t(uint32_t link, uint32_t from)>;

std::optional<Path> shortest_path(const model::Topology& topology, uint32_t src_node,
                                  uint32_t dst_node, const LinkFilter& admit,
                                  const LinkWeight& weight);

std::vector<Path> disjoint_paths(const model::Topology& topology, uint32_t src_node,
                                 uint32_t dst_node, uint32_t k, const LinkFilter& admit,
                                 const LinkWeight& weight);

}  // namespace detwan::control::path

#pragma once
// The path of a federated reservation across domains (docs/federation.md, "Reservations across
// domains"): a graph whose nodes are site and border names and whose edges are the transits of
// every domain's view; Dijkstra on the transits' max latency (ties: fewer domains), keeping only
// transits with `rate_bps` available over the whole window. Segments are the maximal runs of
// consecutive transits of one domain. Pure; thread-compatible.
#include <cstdint>
#include <string>
#include <vector>

#include "control/federation/view.h"

namespace detwan::control::federation {

struct SegmentPlan {
  std::string domain;
  std::string from;  // a site or a border name
  std::string to;
  int64_t max_latency_ns = 0;  // from the views (the segment's admission computes the bound)
  int64_t min_latency_ns = 0;
};

struct DomainPath {
  std::vector<SegmentPlan> segments;
  int64_t max_latency_ns = 0;
};

// Empty segments: no path. A site is only ever an end of the path, never a hop through it.
DomainPath find_domain_path(const std::vector<ParsedView>& views, const std::string& src,
                            const std::string& dst, uint64_t rate_bps, int64_t start_ns,
                            int64_t end_ns);

}  // namespace detwan::control::federation

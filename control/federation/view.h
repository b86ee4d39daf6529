#pragma once
// A domain's abstract view (docs/federation.md, "Abstract view"): what another owner's agent
// may know of this domain to route a federated reservation through it. Borders, site names and
// transits (site/border -> border, border -> site) with the latency bounds of the best internal
// path and the reservable capacity left on it over the next 24 h. Never an internal node, link,
// gateway or port name, nor an address.
//
// Pure functions of (topology, ledger, time); thread-compatible (the agent calls it under its
// lock).
#include <cstdint>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "control/calendar/ledger.h"
#include "control/model/topology.h"

namespace detwan::control::federation {

inline constexpr int64_t kViewHorizonNs = 86'400'000'000'000;  // 24 h

boost::json::object build_view(const model::Topology& topology, const calendar::Ledger& ledger,
                               int64_t now_ns, int64_t horizon_ns = kViewHorizonNs);

// One step of available capacity: [from_ns, to_ns) has available_bps free on every link of the
// transit, in both directions.
struct CapacityStep {
  int64_t from_ns = 0;
  int64_t to_ns = 0;
  uint64_t available_bps = 0;
};

struct Transit {
  std::string domain;
  std::string from;
  std::string to;
  int64_t max_latency_ns = 0;
  int64_t min_latency_ns = 0;
  std::vector<CapacityStep> capacity;
  // The least available over [start_ns, end_ns) (a window past the last step keeps its level).
  [[nodiscard]] uint64_t available_bps(int64_t start_ns, int64_t end_ns) const;
};

struct ParsedView {
  std::string domain;
  int64_t generated_ns = 0;
  std::vector<std::string> sites;
  std::vector<std::pair<std::string, std::string>> borders;  // (name, neighbour domain)
  std::vector<Transit> transits;
  boost::json::array pools;  // {name, site, kind, ranks, ranks_next_hour}
};

// Reads a view a peer sent; errors name the field.
common::Result<ParsedView> parse_view(const boost::json::object& view);

}  // namespace detwan::control::federation

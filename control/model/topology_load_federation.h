#pragma once
// The federation sections of the topology file (docs/federation.md): `borders:` and
// `federation:`, and the `remote:` field of a gateway peer. Called by topology_load.cc's
// parse(); errors are thrown as common::Failure naming file, line and field (setup tier).
// Not thread-safe (a loader runs on one thread).
#include "common/config.h"
#include "control/model/topology.h"

namespace detwan::control::model::detail {

// Appends a planning-only Site (no gateway, no prefixes) per border, after the sites, and fills
// topology->borders. A border name must differ from every site name.
void parse_borders(const common::ConfigNode& root, Topology* topology);
// `federation:` (peers, cert, key, hold_timeout, call_timeout, tunnel_ids). The agent's own
// tunnel id range is cut below the federation's when it was left at its default, refused if it
// was given and overlaps.
void parse_federation(const common::ConfigNode& root, Topology* topology);

}  // namespace detwan::control::model::detail

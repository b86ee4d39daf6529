#pragma once
// A replica's own counters (control/daemon/replica.h), listed once (common/counter_table.h):
// the same table writes the "replica" object of GET /healthz and the detwan_agent_* families
// the replica adds to GET /metrics, so that the two cannot drift.
//
// Threading: pure functions of their arguments.
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

#include <boost/json.hpp>

#include "common/counter_table.h"

namespace detwan::control::daemon {

struct ReplicaCounters {
  uint64_t terms_won = 0;           // terms this replica was elected for
  uint64_t terms_lost = 0;          // terms that ended without a resignation at stop
  uint64_t warm_syncs = 0;          // syncs of the warm copy that completed
  uint64_t warm_sync_failures = 0;  // syncs of the warm copy that failed
};

inline constexpr char kReplicaPrefix[] = "detwan_agent_";
inline constexpr common::CounterField<ReplicaCounters> kReplicaFields[] = {
    {&ReplicaCounters::terms_won, "terms_won", "terms_won_total",
     "Terms this replica was elected for."},
    {&ReplicaCounters::terms_lost, "terms_lost", "terms_lost_total",
     "Terms that ended without a resignation at stop."},
    {&ReplicaCounters::warm_syncs, "warm_syncs", "warm_syncs_total",
     "Syncs of the warm copy that completed."},
    {&ReplicaCounters::warm_sync_failures, "warm_sync_failures", "warm_sync_failures_total",
     "Syncs of the warm copy that failed."},
};
static_assert(common::counter_table_covers<ReplicaCounters>(std::size(kReplicaFields)));

// What a replica is now: its counters and two gauges.
struct ReplicaState {
  std::string replica;  // its name (the `replica` label)
  bool leading = false;
  uint64_t warm_rows = 0;  // rows of the state it holds warm for a failover
  ReplicaCounters counters;
};

// The Prometheus families: detwan_agent_leader and detwan_agent_warm_rows (gauges) and every
// counter of kReplicaFields, each labelled replica="NAME".
std::string replica_metrics_text(const ReplicaState& state);
// {"leading", "warm_rows", "counters": {terms_won, ...}} for GET /healthz.
boost::json::object replica_json(const ReplicaState& state);

}  // namespace detwan::control::daemon

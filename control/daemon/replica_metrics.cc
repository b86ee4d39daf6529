#include "control/daemon/replica_metrics.h"

#include "common/prometheus.h"

namespace detwan::control::daemon {

std::string replica_metrics_text(const ReplicaState& state) {
  common::prometheus::Exposition e;
  const common::prometheus::Labels labels{{"replica", state.replica}};
  e.gauge("detwan_agent_leader", "1 while this replica leads its domain.", labels,
          state.leading ? 1 : 0);
  e.gauge("detwan_agent_warm_rows", "Rows of the state this follower holds warm for a failover.",
          labels, static_cast<double>(state.warm_rows));
  e.counters(kReplicaPrefix, labels, state.counters, kReplicaFields);
  return e.text();
}

boost::json::object replica_json(const ReplicaState& state) {
  boost::json::object counters;
  for (const auto& field : kReplicaFields) {
    counters[field.key] = state.counters.*field.member;
  }
  return boost::json::object{{"leading", state.leading},
                             {"warm_rows", state.warm_rows},
                             {"counters", std::move(counters)}};
}

}  // namespace detwan::control::daemon

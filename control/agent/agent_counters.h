#pragma once
// The agent's counter registry: what it counts listed once, with its place in Agent::stats()
// (GET /v1/stats) and its family in Agent::metrics_text() (GET /metrics), so that the two are
// written from the same lists (common/counter_table.h; docs/metrics.md, "One list per counter
// set"). Counters keyed by a label (admissions by operation, refusals by cause, transitions by
// target state) are maps of Counters; the reconciler's per-gateway counters a CounterField table.
#include <map>
#include <string>
#include <string_view>

#include "common/counter_table.h"
#include "control/agent/agent_impl.h"
#include "control/gateway/reconciler.h"

namespace detwan::control::agent {

// A family of counters keyed by one label: stats counters.<key>.<label value> = N, exposition
// detwan_agent_<metric>{<const label>, <label>="<label value>"} N.
struct LabelledCounters {
  std::map<std::string, uint64_t> Counters::*member;
  std::string_view key;
  std::string_view metric;
  std::string_view help;
  std::string_view label;
  std::string_view const_label_name = {};
  std::string_view const_label_value = {};
};

inline constexpr char kAgentPrefix[] = "detwan_agent_";
inline constexpr LabelledCounters kLabelledCounters[] = {
    {&Counters::admitted, "admitted", "admission_decisions_total", "Admission decisions.",
     "operation", "decision", "admitted"},
    {&Counters::refused, "refused", "admission_decisions_total", "Admission decisions.", "cause",
     "decision", "refused"},
    {&Counters::transitions, "transitions", "transitions_total",
     "Reservation state transitions, by target state.", "to"},
};

// stats gateways[].<key>; detwan_agent_gateway_<metric>{gateway}. generation and in_sync are
// gauges, written beside them.
inline constexpr char kGatewayPrefix[] = "detwan_agent_gateway_";
inline constexpr common::CounterField<gateway::ReconcilerCounters> kReconcilerFields[] = {
    {&gateway::ReconcilerCounters::passes, "passes", "reconcile_passes_total",
     "Reconciliation passes."},
    {&gateway::ReconcilerCounters::applies, "applies", "applies_total",
     "Passes that changed the gateway's tunnels."},
    {&gateway::ReconcilerCounters::refusals, "refusals", "refusals_total",
     "Tunnels the gateway refused."},
    {&gateway::ReconcilerCounters::unreachable, "unreachable", "unreachable_total",
     "Passes that could not reach the gateway."},
    {&gateway::ReconcilerCounters::restarts_seen, "restarts_seen", "restarts_seen_total",
     "Gateway restarts seen (new boot id)."},
};

}  // namespace detwan::control::agent

#pragma once
// The topology loader's agent.tls and policy sections (docs/trust.md), beside topology_load.cc.
// Setup tier: errors throw common::Failure naming file, line and field (ConfigNode::fail), like
// the rest of the loader. Threading: none (pure parsing).
#include "common/config.h"
#include "control/model/topology.h"

namespace detwan::control::model {

// A name in the topology (site, gateway, link, tenant, domain, ...): 1..64 of [A-Za-z0-9._-].
[[nodiscard]] bool valid_name(std::string_view name);

// The duration at `key` of `map` (a ConfigNode failure naming it when outside [min_ns,
// max_ns]), or `fallback` when absent.
int64_t duration_in(const common::ConfigNode& map, std::string_view key, int64_t fallback,
                    int64_t min_ns, int64_t max_ns);

// agent.tls: {cert, key, client_ca, require_client_cert}. Files are checked by
// `detwan-agent check` and at start (the API server), not here.
void parse_agent_tls(const common::ConfigNode& node, TlsSettings* tls);

// policy: {default: LIMITS, tenants: {NAME: LIMITS}, domains: {NAME: LIMITS}} with LIMITS
// {max_rate, max_link_share, max_window, max_reservations}.
void parse_policy(const common::ConfigNode& node, Policy* policy);

}  // namespace detwan::control::model

#pragma once
// API request bodies (JSON) -> agent requests, with errors that name the field
// ("field 'min_bandwidth_bps': must be an integer > 0"). docs/control-api.md lists every field.
// Unknown fields are errors, never ignored.
#include <string>

#include "control/agent/agent.h"

namespace detwan::control::api {

agent::Outcome<agent::ReserveRequest> parse_reserve(const std::string& body);
agent::Outcome<agent::ModifyRequest> parse_modify(const std::string& body);
agent::Outcome<agent::PathsRequest> parse_paths(const std::string& body);
agent::Outcome<compute::Pool> parse_pool(const std::string& body);
agent::Outcome<agent::PlanRequest> parse_plan(const std::string& body);

}  // namespace detwan::control::api

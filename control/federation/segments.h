#pragma once
// The participant's side of a federated reservation (docs/federation.md): the calls another
// domain's aggregator makes on /v1/federation/segments, answered from the local Agent. Used by
// the HTTP routes (control/api/federation_routes.cc) and, for its own domain's segment, by the
// coordinator directly (the same code, no HTTP).
//
//   POST  /v1/federation/segments                      reserve a segment (held)
//   GET   /v1/federation/segments?client_request_id=R  the segment a request made (404: none)
//   GET   /v1/federation/segments/{id}
//   PATCH /v1/federation/segments/{id}                 modify (min_bandwidth_bps, end_unix_ns)
//   POST  /v1/federation/segments/{id}/{commit|abort|provision|release|terminate|rotate-key}
// A segment may only be seen or changed by the domain that reserved it (403 otherwise).
// Every call is idempotent: creation by client_request_id, a transition to the state the
// segment is already in answers 200 with its JSON.
//
// Threading: as thread-safe as the Agent (each call takes its lock). Errors: the Agent's
// ApiError objects; a malformed body is 400 naming the field.
#include <map>
#include <string>

#include <boost/json.hpp>

#include "control/agent/agent.h"

namespace detwan::control::federation {

struct Answer {
  int status = 200;
  boost::json::object body;
};

// `rest` is the path after "/v1/federation/segments" ("" or "/{id}[/{action}]").
Answer handle_segment_call(agent::Agent& agent, const std::string& caller_domain,
                           const std::string& method, const std::string& rest,
                           const std::string& query, const std::string& body);

// Tokens peers present to us over plain HTTP (federation.peers[].accept_token_file): token ->
// domain. Errors name the file.
common::Result<std::map<std::string, std::string>> load_accept_tokens(
    const model::FederationSettings& settings);
// The domain whose token `bearer` is ("" if none), compared in constant time.
std::string domain_of_token(const std::map<std::string, std::string>& tokens,
                            const std::string& bearer);

}  // namespace detwan::control::federation

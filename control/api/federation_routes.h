#pragma once
// Federation routes (docs/federation.md), dispatched from routes.cc before the local ones:
//   GET  /v1/federation/view            the domain's abstract view (peers and admin tokens)
//   *    /v1/federation/segments[...]    a peer's segments (federation/segments.h; peers only)
//   POST /v1/reservations               when src or dst is not one of our sites: the
//                                       coordinator reserves it across domains
//   *    /v1/reservations/{id}[/action]  a federated reservation's operations
// A caller is a peer of domain D when its client certificate names D (Identity kPeer) or its
// bearer token is the one in federation.peers[D].accept_token_file; anyone else is refused
// with 403 naming the caller.
//
// Threading: as the Router (any I/O thread). Errors: ApiError objects.
#include <map>
#include <set>
#include <memory>
#include <string>

#include "common/status.h"
#include "control/agent/agent.h"
#include "control/api/http_server.h"
#include "control/federation/coordinator.h"

namespace detwan::control::api {

struct FederationRoutes {
  federation::Coordinator* coordinator = nullptr;    // null: participant only
  std::map<std::string, std::string> accept_tokens;  // token -> peer domain
  // Peer domain -> SHA-256 of each CA certificate in its federation.peers[].ca: a certificate
  // naming that domain is its agent only if one of these issued it.
  std::map<std::string, std::set<std::string>> peer_ca_sha256;
};

// Reads the peers' accept tokens; errors name the file.
common::Result<std::shared_ptr<FederationRoutes>> make_federation_routes(
    agent::Agent& agent, federation::Coordinator* coordinator);

// True when it answered the request (through `send`).
bool handle_federation(FederationRoutes& routes, agent::Agent& agent, HttpRequest& request,
                       std::string& route, const Respond& send);

}  // namespace detwan::control::api

#pragma once
// The agent's HTTP API (docs/control-api.md, docs/control-api.yaml): routes -> Agent calls.
//
//   GET    /healthz                         liveness and a summary
//   GET    /metrics                         Prometheus text format
//   GET    /openapi.yaml                    the OpenAPI 3 document
//   GET    /v1/topology                     sites, gateways (sync state), links (reserved now)
//   POST   /v1/paths                        candidate paths with bounds; nothing booked
//   GET    /v1/reservations[?state=S]       every reservation (without history)
//   POST   /v1/reservations                 reserve (commit/provision in the same call)
//   GET    /v1/reservations/{id}
//   PATCH  /v1/reservations/{id}            modify (min_bandwidth_bps, end_unix_ns)
//   DELETE /v1/reservations/{id}            terminate
//   POST   /v1/reservations/{id}/{commit|abort|provision|release|terminate|rotate-key}
//   GET    /v1/pools                        compute pools; POST registers (or replaces) one
//   GET    /v1/pools/{name}                 one pool; DELETE removes it
//   POST   /v1/plan                         placement + reservations + predicted step time
//   GET    /v1/policy                       the owner policy caps the identity may see
// Every route checks the request's Identity first (authority.h: tenants, verbs, sites, peers).
// A provisioning call answers once the dataplane is active (every gateway has the tunnel) or
// after the agent's provision_wait; "?wait=false" answers at once.
#include "control/agent/agent.h"
#include "control/api/federation_routes.h"
#include "control/api/http_server.h"

namespace detwan::control::api {

// The handler the HTTP server calls. `openapi` is the document served at /openapi.yaml.
Handler make_handler(agent::Agent& agent, std::string openapi);
// With the federation routes (docs/federation.md): /v1/federation/* and, with a coordinator,
// the federated reservations.
Handler make_handler(agent::Agent& agent, std::string openapi,
                     std::shared_ptr<FederationRoutes> federation);

}  // namespace detwan::control::api

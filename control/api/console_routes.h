#pragma once
// The operator console (docs/console.md): the page itself and the reads it polls.
//
//   GET /, /console.js, /console.css, /favicon.ico   the page (static, no data): open to any
//                                                    client the allow-list admits, like /healthz
//   GET /v1/whoami                      the caller's identity and what it may do (the page shows
//                                       the reserve and release forms only if may_reserve)
//   GET /v1/gateways                    every gateway as the reconciler last saw it
//   GET /v1/gateways/{name}/tunnels     a gateway's tunnels: live counters and delays (cached)
//   GET /v1/calendar[?horizon_s=&step_s=]  each link direction's reserved rate over time
// The page's files are embedded at build time from control/console/ (embed_text.py). Every page
// answer carries Content-Security-Policy (default-src 'self', no inline script or style),
// X-Content-Type-Options nosniff, X-Frame-Options DENY and Referrer-Policy no-referrer.
// Threading: called on the HTTP server's I/O threads; /v1/gateways/{name}/tunnels may block
// for the gateway's stats timeout (500 ms) once per second per gateway.
#include <functional>
#include <string>
#include <vector>

#include "control/agent/agent.h"
#include "control/api/http_server.h"

namespace detwan::control::api {

// The page's paths, which the HTTP server serves without a token (HttpServerOptions::open_paths).
const std::vector<std::string>& console_page_paths();

// Answers the request through `send` and returns true if it is one of the console's routes
// (`route` names it for the request counters); false leaves it to the other routes.
bool handle_console(agent::Agent& agent, const HttpRequest& request, std::string& route,
                    const std::function<void(HttpResponse)>& send);

}  // namespace detwan::control::api

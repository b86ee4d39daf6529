#pragma once
// Who may do what through the agent's API (docs/trust.md "Verbs and tenants"): decisions on a
// request's Identity (http_server.h), for routes.cc and the federation routes. Pure functions;
// threading: none.
//
//   * kAnonymous (no tokens file: a single-domain lab on loopback) may do everything;
//   * kToken: GETs need may_read; reserving, changing or releasing a reservation and POST
//     /v1/plan with reserve need may_reserve (and, with a sites list, both ends among them);
//     pools (POST, DELETE) need may_admin. A token acts on the reservations of its tenant; an
//     admin token (may_admin) on every tenant's;
//   * kPeer (another domain's agent, mutual TLS) may use /v1/federation/..., GET /healthz and
//     GET /v1/policy only; the federation routes decide the rest with its `domain`.
// A refusal is a 403 "forbidden" whose message names the identity and what it may not do; the
// caller logs it (warn) and counts it (Agent::count_refused("forbidden")).
#include <optional>
#include <string>
#include <string_view>

#include "control/api/http_server.h"
#include "control/reservation/reservation.h"

namespace detwan::control::api {

// The tenant a reservation made by `who` records ("" = the domain's operator: an admin token
// over every tenant, an old write token, or anonymous).
std::string tenant_of(const Identity& who);

// May `who` see and act on a reservation held by `reservation_tenant`?
bool may_act_on(const Identity& who, std::string_view reservation_tenant);
bool may_act_on(const Identity& who, const reservation::Reservation& reservation);

// May `who` reserve between these sites? std::nullopt if so, else the refusal's message.
std::optional<std::string> site_refusal(const Identity& who, std::string_view src,
                                        std::string_view dst);

// May a peer (kPeer) use this route? (/v1/federation/..., GET /healthz, GET /v1/policy)
bool peer_route(std::string_view method, std::string_view path);

// "token 'ops' (tenant 'job-team')", "peer 'w' (CN=...)", "anonymous client", for messages.
std::string describe(const Identity& who);

}  // namespace detwan::control::api

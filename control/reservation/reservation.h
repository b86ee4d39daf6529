#pragma once
// A reservation and its lifecycle (docs/control.md, "Reservations"), after the NSI Connection
// Service v2 (reservation, provision and lifecycle state machines) folded into one state:
//
//            reserve                commit               provision
//   (none) ─────────▶ held ─────────────▶ committed ─────────────▶ provisioned ◀──┐
//                      │ abort, hold timeout  │                     │ release     │ provision
//                      ▼                      │                     ▼             │
//                  terminated ◀───────────────┴──── terminate ─── released ───────┘
//                      ▲  end time passes (committed, provisioned, released)
//   failed: a gateway refused the reservation's tunnel (the gateway's message is the reason).
//
// held, committed, provisioned and released hold their resources (capacity on every link of
// the path, slots on the two gateway ports); terminated and failed hold none. A provisioned
// reservation's tunnel is on the gateways while start <= now < end ("dataplane active").
// modify (rate, end time) is allowed in held, committed, provisioned and released; it either
// applies whole or changes nothing, and increments `version`.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "control/reservation/tunnel_keys.h"
#include "control/admission/planner.h"

namespace detwan::control::reservation {

enum class State : uint8_t { kHeld, kCommitted, kProvisioned, kReleased, kTerminated, kFailed };
std::string_view to_string(State state) noexcept;  // "held", ...
std::optional<State> state_from_string(std::string_view text) noexcept;
[[nodiscard]] bool holds_resources(State state) noexcept;
[[nodiscard]] bool is_final(State state) noexcept;  // terminated, failed

// NSI CS v2 sub-states reported beside `state` (for operators who know NSI).
std::string_view nsi_reservation_state(State state) noexcept;  // ReserveHeld, ReserveStart, ...
std::string_view nsi_provision_state(State state) noexcept;    // Provisioned / Released
std::string_view nsi_lifecycle_state(State state, std::string_view reason) noexcept;

// What the client asked for (RFC 9016 names where they exist).
struct Spec {
  std::string src;  // site names
  std::string dst;
  uint64_t min_bandwidth_bps = 0;
  uint64_t max_burst_bytes = 0;           // 0 = auto
  int64_t max_latency_ns = 0;             // 0 = none
  int64_t max_latency_variation_ns = -1;  // -1 = none
  double max_loss = 1.0;                  // 1 = none
  uint32_t paths = 1;
  // 1+1 protection (PREOF): the tunnel sends every packet on paths[0] and paths[1] (link
  // disjoint, both booked at the full rate) and the far gateway keeps the first copy. Implies
  // paths >= 2.
  bool protect = false;
  // Authenticated, encrypted tunnel: "aes-256-gcm" (the default), "chacha20-poly1305", or
  // "none" when a request asks for it by name. The agent draws the key (tunnel_keys.h).
  std::string encrypt{kDefaultCipher};
  // The traffic the tunnel carries: destinations at each end, within the sites' tunnel
  // prefixes (canonical "10.20.2.2/32" text). Empty in a request: every tunnel prefix of the site.
  std::vector<std::string> src_prefixes;
  std::vector<std::string> dst_prefixes;
  bool asap = false;
  int64_t start_ns = 0;  // Unix ns; filled by the agent for asap / "now"
  int64_t end_ns = 0;
  int64_t duration_ns = 0;
};

// Where the reservation runs, by name (stable across restarts and topology reloads).
struct EndPlacement {
  std::string gateway;  // "" for a site without a gateway
  std::string link;
  std::string from;  // node the port sends from
  std::string port;
  std::string peer;
  std::vector<uint32_t> slots;
  uint64_t guaranteed_bps = 0;
};
struct PathPlacement {
  std::vector<std::string> nodes;
  std::vector<std::string> links;
  EndPlacement ends[2];
  admission::Bound bound;
};

struct Transition {
  int64_t at_ns = 0;
  std::string from;  // "" for the creation
  std::string to;
  std::string reason;
};

struct GatewayStatus {
  std::string gateway;
  bool programmed = false;  // the gateway has the tunnel as planned
  uint64_t generation = 0;  // the gateway's configuration generation when last seen
  std::string error;        // last problem programming it ("" if none)
};

struct Reservation {
  std::string id;  // "r-<key>"
  uint64_t key = 0;
  uint64_t version = 1;
  std::string client_request_id;
  // Who holds it: the tenant whose token reserved it ("" = the domain's operator), and the
  // foreign domain whose agent asked for it as a segment of a federated reservation ("" = local).
  std::string tenant;
  std::string requester_domain;
  State state = State::kHeld;
  std::string reason;  // why it is in its state (terminated: aborted, hold_timeout, end_time,
                       // terminated_by_client; failed: the gateway's message)
  Spec spec;
  int64_t hold_expires_ns = 0;  // held only
  uint32_t tunnel_id = 0;
  uint64_t burst_bytes = 0;  // the policer depth in use
  std::vector<PathPlacement> paths;
  TunnelKeys keys;  // encrypted reservations (spec.encrypt != "none")
  admission::Bound bound;
  int64_t created_ns = 0;
  int64_t updated_ns = 0;
  std::vector<Transition> history;
  // Dataplane, maintained by the agent from what the gateways report (not journaled).
  bool dataplane_active = false;
  std::vector<GatewayStatus> gateways;
};

// Placement by name from a plan (topology indices -> names).
std::vector<PathPlacement> placement_of(const model::Topology& topology,
                                        const admission::Plan& plan);
// The ledger booking of a reservation; errors name the link/node the topology no longer has.
common::Result<calendar::Booking> booking_of(const model::Topology& topology,
                                             const Reservation& reservation);

}  // namespace detwan::control::reservation

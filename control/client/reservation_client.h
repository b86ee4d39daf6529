#pragma once
// What a job needs to know about one reservation of detwan-agent, and how it asks for it:
// `GET /v1/reservations/{id}` (docs/control-api.md). The collective library uses it at init
// (the rate, bound and tunnel addresses of each site pair) and while it runs (is the tunnel
// still provisioned?). Setup tier: blocking, bounded by a timeout; errors name the agent and
// the reservation.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace detwan::control::client {

// Where the agent is: "http://127.0.0.1:7800" or "https://..." -- or its replica set,
// "URL1,URL2,..." (tried in turn, see http_call_replicas) -- and an optional bearer token (a
// read token of the job's tenant is enough). For an https agent, fetch_grant takes its TLS
// options from $DETWAN_AGENT_CA (the agent's CA; else the system's store), $DETWAN_AGENT_CERT
// and $DETWAN_AGENT_KEY, and an empty token from the file $DETWAN_AGENT_TOKEN_FILE
// (docs/trust.md).
struct AgentAddress {
  std::string url;
  std::string token;
  int timeout_ms = 5000;
};

// One reservation as its user sees it. Rates and byte counts are per direction.
struct TunnelGrant {
  std::string id;
  int64_t version = 0;
  std::string state;   // held, committed, provisioned, released, terminated, failed
  std::string reason;  // why it is in that state (e.g. "released by client")
  std::string src;     // site names; the reservation is bidirectional
  std::string dst;
  int64_t rate_bps = 0;     // min_bandwidth_bps: what the gateways guarantee each direction
  int64_t burst_bytes = 0;  // the gateways' policer depth: a sender may burst this much
  int64_t max_latency_ns = 0;
  int64_t max_latency_variation_ns = 0;
  int64_t min_latency_ns = 0;
  std::string delivery;  // "in_time" or "on_time"
  int64_t end_unix_ns = 0;
  std::vector<std::string> src_prefixes;  // traffic to these goes into the tunnel at dst's end
  std::vector<std::string> dst_prefixes;  // ... and to these at src's end
  int32_t mtu_bytes = 0;                  // largest inner IP packet the tunnel carries
  int32_t frame_overhead_bytes = 0;  // the gateway's bytes per packet, counted against the rate
  bool dataplane_active = false;     // every gateway has the tunnel as planned

  [[nodiscard]] bool provisioned() const { return state == "provisioned"; }
  [[nodiscard]] bool covers(std::string_view site) const { return site == src || site == dst; }
  // The prefixes of `site`'s own tunnel addresses (src_prefixes for src, dst_prefixes for dst).
  [[nodiscard]] const std::vector<std::string>& prefixes_of(std::string_view site) const;
  // "r-3 (a<->b, 100mbit, provisioned)"
  [[nodiscard]] std::string describe() const;
};

// Parses the agent's answer (the reservation object). kInvalidArgument naming the field that is
// missing or of the wrong type.
common::Result<TunnelGrant> parse_grant(std::string_view json_text);

// GET the reservation. kNotFound when the agent has no such reservation, kUnavailable when no
// agent answers, kConfig for a refused token; the message names the agent and id.
common::Result<TunnelGrant> fetch_grant(const AgentAddress& agent, const std::string& id);

}  // namespace detwan::control::client

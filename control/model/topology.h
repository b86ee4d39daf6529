#pragma once
// The agent's view of its administrative domain (docs/control.md, "Topology file"): sites and
// their gateways, transit nodes, and the WAN links between them with capacity, propagation
// delay, jitter, loss, slot cycle and the share of each link that may be reserved.
//
// Nodes are sites (each with one detwan-gw) or transit nodes (WAN routers the agent does not
// program). Links are full duplex: `capacity_bps` in each direction. A path runs from a site to
// another site through transit nodes only (a site's gateway does not forward tunnels).
// A link end at a site attaches to one WAN port of the site's gateway; that port's time-slot
// schedule (cycle_ns, slot_count, guard_ns, line rate = capacity_bps, mtu) is the link's.
//
// Setup tier: load_topology() reports every problem as one Error naming file, line and field
// ("topo.yaml:14:5: field 'links[2].capacity': ..."); a loaded Topology is immutable and its
// indices (node, link, gateway) are stable.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/net_address.h"
#include "common/status.h"

namespace detwan::control::model {

inline constexpr uint32_t kNone = UINT32_MAX;

struct Site {
  std::string name;
  uint32_t node = kNone;
  uint32_t gateway = kNone;  // index into Topology::gateways; kNone: planning only (no gateway)
  std::vector<common::IpPrefix> tunnel_prefixes;  // addresses whose traffic its tunnels carry
};

struct GatewayPort {
  std::string name;  // WAN port name in the gateway's configuration
  uint32_t link = kNone;
};

struct GatewayPeer {
  std::string name;          // peer name in the gateway's configuration
  std::string port;          // WAN port it is reached through
  uint32_t gateway = kNone;  // the far gateway (kNone when it is another domain's: `remote`)
  std::string remote{};      // a gateway of another domain, by name ("" = one of ours)
};

struct Gateway {
  std::string name;
  uint32_t site = kNone;
  std::string admin_socket;         // detwan-gw's admin control socket (filesystem path)
  int64_t playout_error_ns = 0;     // release error the operator vouches for (on-time delivery)
  int64_t processing_delay_ns = 0;  // worst-case time a packet spends in the gateway
  // The gateway's X25519 identity public key, base64 of 32 bytes (a PEM one in the file is
  // stored in this form); "" = not registered. When both gateways of a tunnel have one, its keys
  // come from key exchange and the agent holds no secret (control/reservation/tunnel_keys.h).
  std::string public_key;
  std::vector<GatewayPort> ports;
  std::vector<GatewayPeer> peers;
  // The port attached to `link`, or nullptr.
  [[nodiscard]] const GatewayPort* port_on_link(uint32_t link) const noexcept;
  // The peer that reaches gateway `far` through port `port`, or nullptr.
  [[nodiscard]] const GatewayPeer* peer_via(std::string_view port, uint32_t far) const noexcept;
};

struct Node {
  std::string name;
  uint32_t site = kNone;        // kNone: a transit node
  std::vector<uint32_t> links;  // incident links
};

struct Link {
  std::string name;
  uint32_t ends[2] = {kNone, kNone};  // node indices; direction 0 = ends[0] -> ends[1]
  uint64_t capacity_bps = 0;          // per direction; also the line rate its slots divide
  int64_t delay_ns = 0;               // nominal one-way propagation delay
  int64_t jitter_ns = 0;              // +/- around delay_ns the operator vouches for
  double loss = 0;                    // expected loss ratio, [0, 1)
  double reservable = 0.9;            // share of capacity (and of slots) reservations may take
  uint32_t mtu_bytes = 1500;
  int64_t cycle_ns = 1'000'000;
  uint32_t slot_count = 100;
  int64_t guard_ns = 0;
  [[nodiscard]] uint64_t reservable_bps() const noexcept;
  [[nodiscard]] uint32_t reservable_slots() const noexcept;
  // The node at the other end from `node`; kNone if `node` is not an end.
  [[nodiscard]] uint32_t other_end(uint32_t node) const noexcept;
  // 0 if traversed from ends[0], 1 from ends[1].
  [[nodiscard]] int direction_from(uint32_t node) const noexcept { return node == ends[0] ? 0 : 1; }
  [[nodiscard]] int64_t min_delay_ns() const noexcept {
    return delay_ns > jitter_ns ? delay_ns - jitter_ns : 0;
  }
  [[nodiscard]] int64_t max_delay_ns() const noexcept { return delay_ns + jitter_ns; }
};

// agent.tls (docs/trust.md): with cert, the API speaks HTTPS only.
struct TlsSettings {
  std::string cert;       // PEM chain of the agent's server certificate
  std::string key;        // its private key (a secret file)
  std::string client_ca;  // CAs whose client certificates are accepted (peers' CAs, ours)
  bool require_client_cert = false;
};

struct ApiSettings {
  common::HostPort listen{};            // default 127.0.0.1:7800
  std::vector<common::IpPrefix> allow;  // client addresses that may connect
  std::string tokens_file;              // "" = no bearer tokens required
  uint32_t max_connections = 64;
  uint64_t max_body_bytes = 1 << 20;
  int64_t request_timeout_ns = 10'000'000'000;
  TlsSettings tls;
};

// policy: (docs/trust.md, "Owner policy"): what a tenant or a foreign domain may hold at once.
// Unset = no cap. An entry under tenants/domains takes the default's value for a key it omits.
struct PolicyLimits {
  std::optional<uint64_t> max_rate_bps;      // per reservation
  std::optional<double> max_link_share;      // (0, 1] of a link's reservable rate, summed
  std::optional<int64_t> max_window_ns;      // end - start of one reservation
  std::optional<uint32_t> max_reservations;  // holding resources at once
};
struct Policy {
  PolicyLimits defaults;                        // every tenant / domain without an entry
  std::map<std::string, PolicyLimits> tenants;  // by tenant name
  std::map<std::string, PolicyLimits> domains;  // by foreign domain name
};

struct AgentSettings {
  std::string name;  // tunnels it programs carry owner "agent:<name>"
  ApiSettings api;
  std::string journal = "detwan-agent.db";   // SQLite file (WAL)
  bool journal_sync_full = false;            // fsync every commit (power-loss safe)
  int64_t hold_timeout_ns = 60'000'000'000;  // default time a hold stays without commit
  int64_t reconcile_interval_ns = 1'000'000'000;
  int64_t provision_wait_ns = 5'000'000'000;  // how long a provision call waits for gateways
  // A terminated or failed reservation leaves the hot state (memory, the startup's load) this
  // long after its last transition, into the store's archive; 0 = never.
  int64_t archive_after_ns = 7 * 86'400'000'000'000;
  // Tunnel ids are 32 bits on the wire (docs/wire-format.md); a live reservation holds one for
  // its life, so the range bounds how many the domain holds at once.
  uint32_t first_tunnel_id = 1000;
  uint32_t last_tunnel_id = 2'147'483'647;  // 2^31 - 1: the upper half is the federation's
};

// Federation (docs/federation.md): a point where this domain meets a neighbour, named alike by
// both (like an NSI STP). Each border is also a node and a planning-only site (no gateway).
struct Border {
  std::string name;
  std::string domain;     // the neighbour's domain
  uint32_t site = kNone;  // its planning-only site
};

struct FederationPeer {
  std::string domain;
  std::string url;                // "https://host:port" (or http:// on loopback for tests)
  std::string ca;                 // CA of the peer agent's server certificate
  std::string token_file;         // optional bearer token we present to that peer
  std::string accept_token_file;  // optional token that peer presents to us (plain HTTP)
};

struct FederationSettings {
  std::vector<FederationPeer> peers;
  std::string cert;  // our client certificate toward peers (mutual TLS)
  std::string key;
  int64_t hold_timeout_ns = 30'000'000'000;  // holds of segments this agent coordinates
  int64_t call_timeout_ns = 2'000'000'000;   // one call to a peer
  uint32_t first_tunnel_id = 2'147'483'648;  // ids of cross-domain tunnels: 2^31 ..
  uint32_t last_tunnel_id = 4'294'967'295;   // .. 2^32 - 1
  [[nodiscard]] const FederationPeer* peer(std::string_view domain) const noexcept;
};

struct Topology {
  std::string source;  // file it came from
  std::string domain;
  AgentSettings agent;
  Policy policy;
  std::vector<Node> nodes;
  std::vector<Site> sites;
  std::vector<Gateway> gateways;
  std::vector<Link> links;
  std::vector<Border> borders;    // docs/federation.md
  FederationSettings federation;  // peers empty: no federation

  [[nodiscard]] uint32_t find_node(std::string_view name) const noexcept;
  [[nodiscard]] uint32_t find_site(std::string_view name) const noexcept;
  [[nodiscard]] uint32_t find_link(std::string_view name) const noexcept;
  [[nodiscard]] uint32_t find_gateway(std::string_view name) const noexcept;
  // The gateway of the site at `node` (kNone for a transit node or a site without one).
  [[nodiscard]] uint32_t gateway_at_node(uint32_t node) const noexcept;
  // The border at `site` (a border's planning-only site), or nullptr.
  [[nodiscard]] const Border* border_at_site(uint32_t site) const noexcept;

  // Filled by finish(): name -> index.
  std::unordered_map<std::string, uint32_t> node_index, site_index, link_index, gateway_index;
};

common::Result<Topology> load_topology(const std::string& path);
common::Result<Topology> load_topology_string(const std::string& yaml,
                                              const std::string& source = "<string>");
// Cross-references and indices of a Topology built in code (tests, synthetic benchmarks):
// checks names, ends, gateway ports/peers exactly like the loader. Errors name the item.
common::Result<void> finish(Topology& topology);

}  // namespace detwan::control::model

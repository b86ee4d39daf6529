#pragma once
// Configuration of one detwan-gw: WAN ports with their slot schedules, peers (remote gateways),
// tunnels, the local TUN interface, and backend settings. Loaded from YAML
// (docs/examples/gateway.yaml is the commented reference; docs/gateway.md the operator guide).
//
// Setup only (tier 2 in docs/errors.md): load_gateway_config() returns every problem as an Error
// whose message names the file, line, column and field ("gw.yaml:12:9: field
// 'tunnels[0].slots': slot 120 out of range [0, 100) of WAN port 'wan1'"). Validation covers
// the ranges of every field, unknown keys, duplicate names/ids, slot lists (out of range,
// claimed twice by two tunnels of one port), guard >= slot length, a reservation above the
// port's line rate, a tunnel whose slots cannot carry its rate, a bound below the peer's
// configured minimum path delay, and backend-specific sections (dpdk.* required for backend
// dpdk). docs/gateway.md ("Configuration") lists every rule.
// All durations are ns, rates bit/s, sizes bytes (units in the names).
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/x25519.h"
#include "dataplane/aead/aead.h"
#include "dataplane/sched/gate_control_list.h"
#include "dataplane/sched/playout.h"
#include "dataplane/sched/token_bucket.h"
#include "dataplane/sched/tx_scheduler.h"

namespace detwan::dataplane::gw {

enum class Backend : uint8_t { kUring = 0, kDpdk = 1 };

// A packet whose destination matches a tunnel but whose source is outside its src_prefixes
// (a host that is not the tunnel's tenant): dropped (the default), or sent best effort on the
// tunnel's behalf, never in its slots; counted either way (docs/gateway.md, "match").
enum class ForeignSource : uint8_t { kDrop = 0, kBestEffort = 1 };
// How the datapath waits for its next deadline.
enum class TimingMode : uint8_t {
  kLowCpu = 0,  // sleep in io_uring_wait_cqe_timeout until the next event (small machines)
  kBusy = 1,    // busy-poll the TSC on a dedicated core (lowest departure/playout error)
};

// An IPv4 or IPv6 address with a prefix length, e.g. 10.20.2.0/24 or fd00::/64.
struct Prefix {
  bool ipv6 = false;
  uint8_t address[16] = {};  // network order; IPv4 in the first 4 bytes
  uint8_t length = 0;        // prefix length in bits
  friend bool operator==(const Prefix&, const Prefix&) = default;
};

// A UDP endpoint "10.101.12.1:4789" or "[fd00::1]:4789".
struct Endpoint {
  bool ipv6 = false;
  uint8_t address[16] = {};
  uint16_t port = 0;
  // Compared per WAN datagram (the source check): the 16 address bytes at once, not the byte
  // loop a defaulted comparison of the array compiles to.
  friend bool operator==(const Endpoint& a, const Endpoint& b) noexcept {
    return a.port == b.port && a.ipv6 == b.ipv6 &&
           std::memcmp(a.address, b.address, sizeof a.address) == 0;
  }
};

struct PortRange {
  uint16_t first = 0;
  uint16_t last = 65535;  // inclusive
  friend bool operator==(const PortRange&, const PortRange&) = default;
};

struct DpdkPortConfig {
  std::string device;        // PCI address ("0000:3b:00.0") or vdev name as given in eal args
  std::string local_mac;     // "" = the port's own MAC
  std::string next_hop_mac;  // MAC the encapsulated frames are addressed to (required)
  uint16_t rx_queue_size = 1024;
  uint16_t tx_queue_size = 1024;
  friend bool operator==(const DpdkPortConfig&, const DpdkPortConfig&) = default;
};

struct WanPortConfig {
  std::string name;              // unique, e.g. "wan1"
  Endpoint local;                // UDP endpoint the gateway sends from and listens on
  uint64_t line_rate_bps = 0;    // the link's rate the slots divide (> 0)
  uint32_t mtu_bytes = 1500;     // IP MTU of the WAN link (576..9216)
  int64_t cycle_ns = 1'000'000;  // cycle length C, a multiple of slot_count
  uint32_t slot_count = 100;     // S
  int64_t guard_ns = 0;          // < slot length
  int64_t base_time_ns = 0;      // cycles start at base_time + k*C (TAI ns)
  uint8_t best_effort_dscp = 0;  // DSCP of best-effort (and downgraded) frames
  uint32_t capacity_frames = 65536;
  std::optional<DpdkPortConfig> dpdk;  // required when the backend is dpdk
  friend bool operator==(const WanPortConfig&, const WanPortConfig&) = default;
};

struct PeerConfig {
  std::string name;      // unique
  std::string wan_port;  // name of the WanPortConfig it is reached through
  Endpoint endpoint;     // the peer gateway's UDP endpoint on that port
  // Receiver clock - sender clock; nullopt = estimate by two-way exchange ("auto").
  std::optional<int64_t> clock_offset_ns;
  int64_t time_exchange_interval_ns = 1'000'000'000;
  int64_t keepalive_interval_ns = 100'000'000;
  int64_t dead_after_ns = 1'000'000'000;  // no packet from the peer for this long -> "down"
  int64_t min_path_delay_ns = 0;  // known propagation delay; a tunnel bound below it is an error
  friend bool operator==(const PeerConfig&, const PeerConfig&) = default;
};

// 1+1 protection (PREOF, docs/gateway.md "Protection"): every packet of the tunnel also leaves
// on a second, disjoint WAN path, to the same remote gateway reached through another WAN port
// (another peer entry); the far end delivers whichever copy arrives first and eliminates the
// other by sequence number. The copy carries path id 1 and leaves in `slots` of that port.
struct TunnelProtection {
  std::string peer;             // PeerConfig name; its WAN port differs from the primary peer's
  std::vector<uint32_t> slots;  // the tunnel's slots on that peer's WAN port
  friend bool operator==(const TunnelProtection&, const TunnelProtection&) = default;
};

// An authenticated, encrypted tunnel (docs/wire-format.md, "Authenticated tunnels"): every
// packet is sealed with `tx_key`; every key held may open. Two keys exist only while a key is
// being rotated. Secrets are never printed (describe() and tunnels_json() show fingerprints).
// With key_exchange x25519 (peer_public_key set) no secret is configured: each key names a
// context and its secret is derived by ECDH with the gateway's identity key when the tunnel is
// loaded or applied (aead/key_exchange.h; docs/gateway.md, "Identity key").
struct TunnelKey {
  // (A constructor, not an aggregate: TunnelKey{id, secret} stays complete without a context.)
  TunnelKey() = default;
  TunnelKey(uint8_t key_id, const aead::Key& key_secret, std::string key_context = {})
      : id(key_id), secret(key_secret), context(std::move(key_context)) {}
  uint8_t id = 0;  // 1 .. 255, names the key in configuration and stats (not on the wire)
  aead::Key secret{};
  std::string context;  // x25519: the key's context (e.g. "r-12/gen-1"); "" otherwise
  friend bool operator==(const TunnelKey&, const TunnelKey&) = default;
};
struct TunnelAuth {
  aead::Cipher cipher = aead::Cipher::kAes256Gcm;
  std::vector<TunnelKey> keys;  // 1 or 2, distinct ids
  uint8_t tx_key = 0;           // id of the key that seals what the tunnel sends
  // key_exchange x25519: the far gateway's public key; nullopt: the keys' secrets are given.
  std::optional<common::crypto::X25519Key> peer_public_key;
  friend bool operator==(const TunnelAuth&, const TunnelAuth&) = default;
};

// The gateway's own long-term X25519 key pair (`identity: {private_key_file: PATH}`), a PEM
// private key in a secret file. Its public key is what the operator registers with the agent.
struct GatewayIdentity {
  std::string private_key_file;
  common::crypto::X25519KeyPair keys;
  friend bool operator==(const GatewayIdentity&, const GatewayIdentity&) = default;
};

struct TunnelConfig {
  uint32_t id = 0;   // 1 .. 2^32-1, unique in the gateway, the same at both ends
  std::string peer;  // PeerConfig name
  // Free label of whoever manages the tunnel (a control agent writes "agent:NAME"), at most
  // kMaxOwnerBytes, no control characters; "" = none. Not used by the datapath.
  std::string owner;
  uint64_t rate_bps = 0;        // reserved rate (policer rate)
  std::vector<uint32_t> slots;  // owned slots on the peer's WAN port
  uint64_t burst_bytes = 0;     // policer depth; 0 = auto (sched::TunnelTxPolicy)
  sched::OverRateAction over_rate = sched::OverRateAction::kDrop;
  uint64_t shaper_rate_bps = 0;  // 0 = no shaper beyond the slots and the policer
  uint32_t queue_frames = 1024;
  int64_t max_wait_ns = 0;  // 0 = no limit
  // A frame the datapath dequeues too late to end inside its window: moved to the tunnel's next
  // window (default) or dropped; counted either way, never sent outside the tunnel's slots.
  sched::MissedSlot missed_slot = sched::MissedSlot::kNextWindow;
  int64_t bound_ns = 0;  // on-time delivery bound; 0 = deliver on receipt
  sched::LateAction late = sched::LateAction::kDeliver;
  int64_t max_hold_ns = 1'000'000'000;
  uint32_t playout_capacity_frames = 4096;
  uint8_t dscp = 46;  // DSCP of the tunnel's encapsulated frames (EF)
  uint32_t replay_window_bits = 4096;
  // Traffic that enters the tunnel from the TUN interface: destination in one of dst_prefixes,
  // source in one of src_prefixes (empty: any source) and, if udp_ports is not empty, UDP with
  // the destination port in one of the ranges. A packet to dst_prefixes from another source is
  // foreign: foreign_source decides. At the egress a decapsulated packet is delivered only if
  // its source is in dst_prefixes and its destination in src_prefixes (each when not empty).
  std::vector<Prefix> dst_prefixes;
  std::vector<Prefix> src_prefixes;
  std::vector<PortRange> udp_ports;
  ForeignSource foreign_source = ForeignSource::kDrop;
  // Optional UDP service port: datagrams received on `service_listen` enter the tunnel as
  // application datagrams; the far gateway sends them from its own service socket to its
  // tunnel's `service_deliver`.
  std::optional<Endpoint> service_listen;
  std::optional<Endpoint> service_deliver;
  std::optional<TunnelProtection> protection;  // nullopt: one path
  std::optional<TunnelAuth> auth;              // nullopt: packets are not authenticated
  friend bool operator==(const TunnelConfig&, const TunnelConfig&) = default;
};

struct TunConfig {
  bool enabled = true;
  std::string name = "dtw0";
  uint32_t mtu_bytes = 1400;   // must leave room for the encapsulation on every WAN port
  std::vector<Prefix> routes;  // routes the gateway installs via the TUN device (may be empty)
  // uring backend: a virtio-net header on every read and write, checksum and UDP segmentation
  // offload (the host hands the gateway whole UDP GSO runs; TunDevice::open); false = plain.
  bool offload = true;
  // The device's transmit queue (txqueuelen, packets): what the kernel holds for the gateway
  // between two reads. A coalescing loop reads at most every gateway.rx_coalesce, so the queue
  // must hold a burst that long (Linux's default for a TUN device is 500).
  uint32_t queue_packets = 4096;
  friend bool operator==(const TunConfig&, const TunConfig&) = default;
};

struct DpdkConfig {
  std::vector<std::string> eal_args;  // passed to rte_eal_init after argv[0]
  uint32_t mbuf_count = 8191;
  int lcore = -1;  // -1 = the main lcore
  // Several lcores: the gateway runs as lcores.size() shards (shard.h), shard k on lcores[k]
  // (lcores[0] may be the main lcore). Empty: one shard on `lcore`. Not with `lcore` >= 0.
  std::vector<uint32_t> lcores;
  friend bool operator==(const DpdkConfig&, const DpdkConfig&) = default;
};

// The HTTP exporter (`metrics:`; docs/gateway-stats.md, "Metrics over HTTP"): GET /metrics answers
// the Prometheus exposition over HTTP, built on the datapath thread like the control socket's
// "prometheus" request, at most once per min_interval (closer scrapes get the last answer).
struct MetricsConfig {
  std::string listen;              // "host:port"; "" = no HTTP exporter
  std::vector<std::string> allow;  // client prefixes; empty = loopback only
  std::string tokens_file;         // bearer tokens (control/api/http_server.h); "" = none
  int64_t min_interval_ns = 1'000'000'000;
  friend bool operator==(const MetricsConfig&, const MetricsConfig&) = default;
};

struct GatewayConfig {
  std::string source;  // file the config came from ("<string>" for load_string)
  std::string name;
  Backend backend = Backend::kUring;
  TimingMode timing = TimingMode::kLowCpu;
  int cpu = -1;  // pin the datapath thread; -1 = no pinning
  // Unix socket of the control channel: a path, or "@name" for an abstract socket (per network
  // namespace). "" = "@detwan-gw", so `detwan-gw stats` run in the gateway's namespace finds it.
  std::string control_socket;
  // Admin socket: a filesystem path (never abstract: a path has permissions) serving reads and
  // the writes (apply, ...) of the control channel; "" = none, the gateway cannot be changed at
  // run time. The file gets admin_mode right after bind; a peer whose uid is not 0, not the
  // gateway's euid and not in admin_uids is refused (SO_PEERCRED).
  std::string admin_socket;
  uint32_t admin_mode = 0600;
  std::vector<uint32_t> admin_uids;
  uint32_t buffer_count = 8192;  // packet buffers of the uring backend (per shard)
  // uring backend: the gateway runs as `shards` engines on as many datapath threads (shard.h,
  // dataplane/uring/shards.h), 1..64; shard k's thread pinned to shard_cpus[k] when the list is
  // given (its size is `shards`; not with `cpu` >= 0). The dpdk backend uses dpdk.lcores.
  uint32_t shards = 1;
  std::vector<uint32_t> shard_cpus;
  uint32_t batch = 32;  // rx/tx burst size
  // uring backend: frames due together to one peer leave in one sendmsg with UDP_SEGMENT
  // (dataplane/uring/wan_batch.h); false = one sendmsg per frame.
  bool wan_gso = true;
  // uring backend: WAN sockets receive runs of datagrams in one recvmsg (UDP_GRO) and cut them
  // into frames; false = one recvmsg per datagram.
  bool wan_gro = true;
  // uring backend, timing low-cpu: how the loop wakes (docs/gateway.md, "Wake-ups").
  //  release_ahead: a wake-up sends every frame due within this much of it, but never past the
  //    end of the slot window open then (so no frame leaves outside its owner's slots);
  //  playout_ahead: it releases every on-time packet due within this much (early by at most it);
  //  rx_coalesce: while something is due within this much, an arrival alone does not wake the
  //    loop (kCoalesceCompletions do); arrivals wait at most until then.
  // 0 = per packet, as a busy loop (timing busy ignores all three).
  int64_t release_ahead_ns = 500'000;
  int64_t playout_ahead_ns = 50'000;
  int64_t rx_coalesce_ns = 500'000;
  TunConfig tun;
  std::optional<GatewayIdentity> identity;  // nullopt: no key pair, no x25519 tunnels
  std::vector<WanPortConfig> wan_ports;
  std::vector<PeerConfig> peers;
  std::vector<TunnelConfig> tunnels;
  DpdkConfig dpdk;
  MetricsConfig metrics;
  // Compares every field, `source` included (a round-trip test copies it first).
  friend bool operator==(const GatewayConfig&, const GatewayConfig&) = default;
};

inline constexpr std::size_t kMaxOwnerBytes = 64;
inline constexpr uint32_t kMaxUringShards = 64;         // gateway.shards
inline constexpr int64_t kMaxWakeBatchNs = 10'000'000;  // release_ahead, playout_ahead, rx_coalesce

common::Result<GatewayConfig> load_gateway_config(const std::string& path);
common::Result<GatewayConfig> load_gateway_config_string(const std::string& yaml,
                                                         const std::string& source = "<string>");
// The effective configuration (every default filled in) as YAML that load_gateway_config
// accepts again, followed by comments with derived values (slot length, guaranteed rate per
// tunnel, max payload per port). `detwan-gw --check-config` prints it.
std::string describe(const GatewayConfig& config);

// Formatting/parsing helpers shared with the backends and tests.
common::Result<Prefix> parse_prefix(std::string_view text);
common::Result<Endpoint> parse_endpoint(std::string_view text);
std::string format_prefix(const Prefix& prefix);
std::string format_endpoint(const Endpoint& endpoint);
bool prefix_contains(const Prefix& prefix, bool ipv6, const uint8_t* address) noexcept;

// ---- Derived values shared by validation, describe() and the engine (additive) ----
// Ethernet header (14) + FCS (4): what a frame adds to the IP packet on the line.
inline constexpr uint32_t kEthernetOverheadBytes = 18;
// Largest frame a port sends, in bytes on the wire: mtu_bytes + kEthernetOverheadBytes
// (sched::GclConfig::max_frame_bytes).
uint32_t max_frame_bytes(const WanPortConfig& port) noexcept;
// Largest tunnel payload on the port: wire::max_payload_for_mtu(mtu, the port's IP version).
uint32_t max_tunnel_payload_bytes(const WanPortConfig& port) noexcept;
// Lookup by name; nullptr if there is none.
const WanPortConfig* find_wan_port(const GatewayConfig& config, std::string_view name) noexcept;
const PeerConfig* find_peer(const GatewayConfig& config, std::string_view name) noexcept;
// Refuses an admin socket name that is not an absolute filesystem path (kInvalidArgument): "",
// "@abstract", relative, too long or with a NUL. For the config loader and --admin-socket.
common::Result<void> check_admin_socket(std::string_view path);
// The transmit policy of one tunnel: what the validator checks and the engine runs (one
// builder, so they cannot drift).
sched::TunnelTxPolicy tunnel_tx_policy(const TunnelConfig& tunnel) noexcept;
// The tunnel's slots on `port`: its own when its peer is reached through the port, its
// protection path's when that peer is; nullptr when the tunnel does not use the port.
const std::vector<uint32_t>* slots_on_port(const GatewayConfig& config, const TunnelConfig& tunnel,
                                           const WanPortConfig& port) noexcept;
// The port's transmit scheduler configuration: capacity and the policy of every tunnel whose
// peer is reached through the port (port_gcl_config's tunnels, same order).
sched::TxSchedulerConfig port_tx_config(const GatewayConfig& config, const WanPortConfig& port);
// The port's gate control list configuration: cycle, slots, guard, base time, line rate,
// max_frame_bytes(port), and every tunnel whose peer is reached through the port (config
// order; reserved rate = the tunnel's rate). Input of sched::GateControlList::create().
sched::GclConfig port_gcl_config(const GatewayConfig& config, const WanPortConfig& port);

// ---- Run-time tunnel changes (the control channel's apply; docs/gateway.md) ----
// One apply request: tunnels to add, to modify (each replaces the whole definition of the
// tunnel with its id) and ids to remove. Items are in the vocabulary of a `tunnels:` entry.
struct TunnelChanges {
  std::vector<TunnelConfig> add;
  std::vector<TunnelConfig> modify;
  std::vector<uint32_t> remove;
};
// A configuration reload (SIGHUP, {"cmd":"reload"}; docs/gateway.md, "Reloading the
// configuration"): the changes that turn the tunnels `file_ids` named (the file as last loaded)
// into those `file` (the file now) names, in `running` (the gateway's configuration now: the
// file's tunnels and those added at run time). A tunnel of the file that runs differently is
// modified, one it no longer names removed, a new one added; tunnels added at run time are left
// alone unless the file names their id. Refused (kConfig) when `file` changes anything but the
// tunnels, naming the first section that differs (control_socket, admin_socket, timing and cpu,
// which command-line options override, are not compared).
common::Result<TunnelChanges> reload_changes(const GatewayConfig& running,
                                             const std::vector<uint32_t>& file_ids,
                                             const GatewayConfig& file);
// Parses one request item, a JSON object (text), with the file's tunnel parser: the object
// becomes the YAML map it spells (strings, numbers and booleans as scalars). Errors (kConfig)
// start with `label`: "add[0] (tunnel 1001): field 'slots': ...".
common::Result<TunnelConfig> parse_tunnel_item(std::string_view json_object,
                                               const std::string& label);
// The configuration after `changes`, checked with exactly the file's rules (validate()), plus
// the rules of a run-time change: ids once per request, modify/remove only existing ids, add
// only new ones, no service port added, peer/replay_window/playout_capacity/service unchanged
// by modify. Errors (kConfig) name the request item and the field:
// "add[0] (tunnel 1001): field 'slots': slot 120 out of range [0, 100) of WAN port 'ab1'".
// `current` is not changed. Removed tunnels leave the list; modified ones keep their place;
// added ones are appended in request order.
common::Result<GatewayConfig> apply_tunnel_changes(const GatewayConfig& current,
                                                   const TunnelChanges& changes);

}  // namespace detwan::dataplane::gw

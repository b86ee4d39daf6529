#pragma once
// The gateway's tunnel core, shared by every packet-I/O backend (uring/, dpdk/, loopback/).
// Sans-I/O: the backend owns the packet buffers and the sockets/ports and calls the engine with
// opaque buffer handles and the current time; the engine classifies, polices, schedules into
// the time slots of each WAN port (sched::TxScheduler), builds the tunnel headers, checks and
// decapsulates what arrives (wire::decode, replay window), releases it on time
// (sched::Playout), runs the control exchange with each peer (two-way time exchange,
// keepalives), and keeps every counter and histogram. Backends dispatch to it at compile time:
// the poll functions are templates taking the backend's sink.
//
// Buffers: a handle is the backend's (buffer index, mbuf pointer, ...). When a submit/receive
// call returns Status::kOk the engine holds the handle and gives it back exactly once, through
// a poll_tx or poll_rx sink; on any other status the caller still owns it (and frees it). A
// backend keeps a buffer's payload at a fixed headroom of wire::kHeaderSize so encapsulation
// writes the header in place (see TxEmit). Handles must be below Engine::kControlHandleTag (bit
// 63 clear): the engine tags its own control packets with that bit inside the schedulers, and a
// submit with the bit set returns kInvalidArgument.
//
// Time: every now_ns is CLOCK_TAI nanoseconds (or a virtual clock in tests), never going
// backwards. Threading: one datapath thread owns the engine (functions ending in _st are
// documented as such; all datapath ones are). Stats text is built on that thread between polls.
// Datapath functions never allocate, throw or log; they return a Status and count the reason.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "dataplane/gw/config.h"
#include "dataplane/gw/shard.h"
#include "dataplane/sched/playout.h"
#include "dataplane/sched/tx_scheduler.h"
#include "dataplane/wire/control.h"
#include "dataplane/wire/drop_reason.h"
#include "dataplane/wire/header.h"

namespace detwan::common::prometheus {
class Exposition;  // common/prometheus.h
}  // namespace detwan::common::prometheus

namespace detwan::dataplane::gw {

// Engine-level drop reasons (besides the scheduler's TxDrop, the wire's DropReason and the
// playout's PlayoutDrop), each a counter "detwan-gw stats" prints.
enum class EngineDrop : uint8_t {
  kNoRoute = 0,     // local packet whose destination no tunnel serves
  kNotIp,           // TUN packet that is not a parseable IPv4/IPv6 packet
  kTooBig,          // local packet above the WAN port's max tunnel payload (MTU - encap)
  kUnknownTunnel,   // WAN packet with a tunnel id this gateway does not have
  kWrongPeer,       // WAN packet for a known tunnel from an endpoint that is not its peer
  kWrongPort,       // WAN packet for a known tunnel received on another WAN port
  kControlBacklog,  // control packet not sent: the control outbox was full
  kUnknownPath,     // WAN packet for a known tunnel with a path id it does not have (0, and 1
                    // on a protected tunnel)
  // Authenticated tunnels (docs/wire-format.md): also counted per tunnel.
  kAuthMissing,       // the tunnel has keys, the packet lacks flag A
  kAuthUnexpected,    // flag A on a tunnel without keys
  kAuthTruncated,     // flag A and a payload shorter than the tag
  kAuthFailed,        // no key of the tunnel opens it (forged, corrupted, replayed into another
                      // tunnel or header, sealed for another epoch or direction)
  kReflected,         // a control packet carrying this gateway's own epoch (its own, sent back)
  kAuthAwaitingPeer,  // data on an authenticated tunnel before the peer's epoch is known
  kAuthRateLimited,   // a control packet from an unknown epoch beyond the candidate key rate
  // The control exchange (docs/wire-format.md, "Keepalive"); also counted per peer.
  kControlReplayed,  // a control packet whose sequence number was seen (or is too old)
  kControlStale,     // a control packet from an epoch not accepted as the peer's (an earlier
                     // boot's keepalive replayed, or a time packet of another epoch)
  // A tunnel carries only its tenant (docs/gateway.md, "match"): also counted per tunnel.
  kForeignSource,  // local packet to a tunnel's dst_prefixes from a source outside its
                   // src_prefixes, dropped (foreign_source: drop)
  kForeignInner,   // decapsulated packet whose source is outside the tunnel's dst_prefixes or
                   // destination outside its src_prefixes (or no IP packet where one is checked)
  kCount
};
inline constexpr int kEngineDropCount = static_cast<int>(EngineDrop::kCount);
std::string_view to_string(EngineDrop reason) noexcept;  // "no_route", "not_ip", ...

// I/O counters the backend increments (the engine only reports them).
struct PortIo {
  uint64_t rx_packets = 0, rx_bytes = 0, tx_packets = 0, tx_bytes = 0;
  uint64_t rx_errors = 0;    // receive calls that failed or were truncated
  uint64_t tx_errors = 0;    // sends that failed (the frame is lost and counted here)
  uint64_t no_buffer = 0;    // receives skipped because the buffer pool was empty
  uint64_t tx_batches = 0;   // sends that carried several frames (UDP GSO, io_uring backend)
  uint64_t gso_refused = 0;  // batches the route refused; their frames went out one by one
  uint64_t rx_batches = 0;   // receives that carried several frames (UDP GRO, io_uring backend)
};
struct LocalIo {
  uint64_t tun_rx_packets = 0, tun_tx_packets = 0, tun_rx_errors = 0, tun_tx_errors = 0;
  uint64_t tun_rx_batches = 0;   // TUN reads that carried several packets (UDP GSO, tun.offload)
  uint64_t tun_tx_batches = 0;   // TUN writes that carried several packets (UDP GSO, tun.offload)
  uint64_t tun_gso_refused = 0;  // runs the device refused; their packets went one by one
  uint64_t service_rx_packets = 0, service_tx_packets = 0, service_rx_errors = 0,
           service_tx_errors = 0;
  // The backend loop's sleeps (io_uring, timing low-cpu; at moderate rates a gateway's CPU is
  // its wake-ups): every sleep, the ones that did not wake for a single arrival (rx_coalesce),
  // the coalesced sleeps taken outside the ring (blind: nothing wakes them before their end),
  // and how sleeps ended: at their deadline with nothing to reap, or with completions waiting.
  uint64_t loop_sleeps = 0, loop_coalesced_sleeps = 0, loop_blind_sleeps = 0,
           loop_timer_wakeups = 0, loop_io_wakeups = 0;
};

// Counters of the control channel (dataplane/gw/control_server.h), kept here so that stats show
// them; the control servers increment them.
struct ControlIo {
  uint64_t requests = 0;        // requests answered, both sockets
  uint64_t refused_peers = 0;   // admin socket connections refused by uid (SO_PEERCRED)
  uint64_t applied = 0;         // writes that changed the gateway
  uint64_t refused_writes = 0;  // writes refused (bad request, stale generation, read-only socket)
  uint64_t deferred = 0;        // requests answered at a later poll: the per-poll budget was spent
  uint64_t rate_limited = 0;    // requests held because their uid was over its rate (read-only)
};

// What a successful apply_st() did.
struct ApplyResult {
  uint64_t generation = 0;                         // the gateway's generation after the change
  std::vector<uint32_t> added, modified, removed;  // tunnel ids, request order
};

// Handed to the poll_tx sink: one frame whose departure time has come.
struct TxEmit {
  uint64_t handle = 0;       // the backend's buffer (data frames only)
  bool control = false;      // an engine-built control packet: send `bytes`, there is no handle
  bool send = true;          // false: it missed its slot (counted): free it, do not send
  bool best_effort = false;  // leaves in unreserved slots (flag B on data frames)
  uint32_t port_index = 0;   // WAN port it leaves on
  // Tunnel it belongs to (control: the peer's control tunnel); kNoTunnel for a frame handed back
  // (send == false) because its tunnel was removed.
  uint32_t tunnel_index = 0;
  const Endpoint* destination = nullptr;  // peer gateway endpoint
  uint8_t dscp = 0;  // for the outer IP header (tunnel dscp, or best-effort dscp)
  // As scheduled: bytes on the line (payload + encapsulation + Ethernet header and FCS), start
  // and end of serialisation. departure_ns <= the now_ns of poll_tx_st.
  uint32_t wire_bytes = 0;
  int64_t departure_ns = 0;
  int64_t tx_end_ns = 0;
  // Data frames: the header encode_frame_st() writes in front of the payload. Sequence, cycle
  // id, flags (A on an authenticated tunnel), session, tunnel/path id and tx timestamp are
  // filled in; type and payload length come from the backend's buffer.
  wire::TunnelHeader header;
  // Control frames: the complete UDP payload (header + body), valid during the sink call.
  std::span<const std::byte> bytes;
};

// What a submit asks of the backend besides queueing. For a 1+1 protected tunnel (PREOF) the
// backend copies the packet into a new buffer and passes it to submit_replica_st() with these
// values; it does so whatever the submit's status (the copy may get through where the primary
// did not), before it frees a refused buffer. No copy possible (no buffer): replica_not_made_st.
struct SubmitInfo {
  uint32_t replica_tunnel = UINT32_MAX;  // tunnel index; UINT32_MAX: no copy wanted
  uint64_t replica_sequence = 0;         // the sequence number both copies carry
  bool replica_best_effort = false;      // the primary went as best effort (flag B)
  [[nodiscard]] bool wants_replica() const noexcept { return replica_tunnel != UINT32_MAX; }
};

// What on_wan_datagram() learnt about an accepted data packet, for the backend's buffer.
struct RxInfo {
  uint32_t tunnel_index = 0;
  wire::DataType type = wire::DataType::kDatagram;
  uint32_t payload_offset = 0;  // = wire::kHeaderSize
  uint32_t payload_bytes = 0;   // plaintext (an authenticated packet's tag follows it)
};

// Handed to the poll_rx sink: one packet whose release time has come.
struct RxEmit {
  uint64_t handle = 0;
  uint32_t tunnel_index = 0;
  bool late = false;
  bool best_effort = false;     // flag B: released on receipt, no playout
  int64_t tx_timestamp_ns = 0;  // sender's clock
  int64_t target_ns = 0;        // release target (receiver's clock; arrival when not on time)
  // The tunnel's service_deliver endpoint (datagrams), nullptr if it has none.
  const Endpoint* service_deliver = nullptr;
};

// What the engine knows about a peer's clock and liveness (also in stats_json()).
struct PeerStatus {
  bool up = false;
  bool has_control_tunnel = false;  // false: no tunnel, so no exchange and never up
  bool offset_configured = false;   // PeerConfig::clock_offset_ns given
  int64_t playout_offset_ns = 0;    // receiver(local) - sender(peer), applied to the playouts
  wire::ClockSample best_sample;    // filter's best: offset = peer - local
  uint64_t clock_samples = 0;
  int64_t last_rx_ns = INT64_MIN;  // INT64_MIN: never
};

class Engine {
 public:
  static constexpr uint32_t kNoTunnel = UINT32_MAX;
  // Handles the backend passes must be below this (see "Buffers" above).
  static constexpr uint64_t kControlHandleTag = uint64_t{1} << 63;

  // Setup: builds one GateControlList + TxScheduler per WAN port, a Playout and a replay window
  // per tunnel, the classifier. Errors (kConfig) name the tunnel/port. start_ns anchors the
  // schedulers (TAI ns).
  // `shard`: this engine is one shard of a gateway spread over cores (shard.h): the same
  // configuration, best effort in its part of the unreserved slots only, control exchanges
  // only with the peers it leads. The default is the whole gateway on one core.
  static common::Result<std::unique_ptr<Engine>> create(const GatewayConfig& config,
                                                        int64_t start_ns, ShardSpec shard = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // ---- local -> WAN ----
  // An IPv4/IPv6 packet read from the TUN device (ip_packet: the whole packet). Classified by
  // destination prefix, source prefix and UDP port (classify.h); policed and queued in its
  // tunnel's slots, or as best effort on behalf of the tunnel (a prefix matched, its ports did
  // not; a foreign source with foreign_source best-effort; or downgraded by the policer).
  // Frames are scheduled with their size on the wire: payload + wire::encap_overhead_bytes + 18
  // (Ethernet header and FCS). kOk: queued (engine holds handle); kDropped/kMalformed: counted
  // (not_ip, no_route, foreign_source, too_big, or the scheduler's reason), caller frees;
  // kInvalidArgument: a handle with kControlHandleTag set.
  // *info (if not nullptr) says whether the backend should make a copy for a protection path
  // (SubmitInfo); without `info` a protected tunnel's copies are counted replicas_not_made.
  [[nodiscard]] common::Status submit_tun_st(uint64_t handle, std::span<const std::byte> ip_packet,
                                             int64_t now_ns, SubmitInfo* info = nullptr) noexcept;
  // A datagram received on tunnel_index's service port (payload_bytes of application data). A
  // removed tunnel's service port still receives: kDropped, counted no_route.
  [[nodiscard]] common::Status submit_service_st(uint32_t tunnel_index, uint64_t handle,
                                                 uint32_t payload_bytes, int64_t now_ns,
                                                 SubmitInfo* info = nullptr) noexcept;
  // The copy of a packet for its tunnel's protection path (see SubmitInfo): the same payload in
  // a buffer of its own, queued in the tunnel's slots on the protection peer's port with the
  // primary's sequence number. Status and ownership as for submit_tun_st.
  [[nodiscard]] common::Status submit_replica_st(const SubmitInfo& info, uint64_t handle,
                                                 uint32_t payload_bytes, int64_t now_ns) noexcept;
  // The backend could not copy a packet for the protection path (counted on the tunnel).
  void replica_not_made_st(const SubmitInfo& info) noexcept;

  // A data frame's bytes, for the sink of poll_tx_st: `frame` starts wire::kHeaderSize before
  // the payload (payload_bytes of it) and extends as far as the buffer does; writes the header
  // (emit.header with `type` and the payload length) and, on an authenticated tunnel
  // (emit.header.is_auth()), seals the payload in place and appends the aead::kTagBytes tag.
  // Returns the UDP payload size to send, or 0: no room (counted seal_failed on the tunnel) or
  // an invalid header — the caller frees the buffer and counts a tx error.
  [[nodiscard]] std::size_t encode_frame_st(const TxEmit& emit, wire::DataType type,
                                            std::span<std::byte> frame,
                                            std::size_t payload_bytes) noexcept;

  // Hands every frame due at now_ns to sink(const TxEmit&), across all WAN ports in departure
  // order, at most max_frames. Returns how many. The sink must send (or free when !send) before
  // returning, or copy what it needs: `bytes` and `destination` are only valid during the call.
  // A control packet that missed its slot is not handed over (nothing to free; it is counted
  // missed_slot and the next timer sends a new one).
  template <typename Sink>
  uint32_t poll_tx_st(int64_t now_ns, Sink&& sink, uint32_t max_frames = UINT32_MAX) noexcept;
  // The burst form, for a backend that prefetches its buffers before it touches them: fills
  // `out` with up to out.size() of the frames poll_tx_st would hand over, in the same order, and
  // returns how many. A control frame ends a burst (it is the last one filled): its `bytes` stay
  // valid until the next call that dequeues from the engine, so the caller sends the burst first.
  // A burst shorter than out.size() that does not end with a control frame: nothing else is due.
  [[nodiscard]] uint32_t next_tx_burst_st(int64_t now_ns, std::span<TxEmit> out) noexcept;

  // ---- WAN -> local ----
  // One UDP payload received on WAN port port_index from `source`. Checks, in order: wire::decode
  // with the port's max payload (kMalformed, counted per port by wire reason), tunnel id
  // (unknown_tunnel), source == the endpoint of the peer the path id names (path 1 on a
  // protected tunnel: its protection peer; else its peer) (wrong_peer; all 16 address bytes
  // are compared, so a backend zeroes the unused 12 of an IPv4 address), port (wrong_port),
  // path id 0, or 1 when protected (unknown_path) -> kDropped. Then authentication, before any
  // state is touched: a tunnel with keys needs flag A and a payload its keys open, which is
  // decrypted in place (auth_missing, auth_truncated, auth_failed); flag A on a tunnel without
  // keys is auth_unexpected -> kDropped. Data packets of a tenant-bound tunnel (match.src): the
  // inner packet's destination in its src_prefixes and source in its dst_prefixes (a flag-B
  // packet of a foreign_source best-effort tunnel may have any source) (foreign_inner ->
  // kDropped, before the replay window moves; classify.h, inner_verdict). Then the replay window
  // (duplicate/too_old -> kDropped, counted on the port and the tunnel; on a protected tunnel a
  // duplicate is the other path's copy: counted eliminated on the tunnel's path, not a drop
  // reason), then the tunnel's playout (flag B: released
  // on receipt) -> kOk (engine holds handle, *info filled) or kDropped (playout reason).
  // Control packets: processed -> kBusy ("consumed": caller frees), or kMalformed.
  // kInvalidArgument: port_index out of range or info == nullptr.
  [[nodiscard]] common::Status on_wan_datagram_st(uint32_t port_index, const Endpoint& source,
                                                  uint64_t handle, std::span<std::byte> udp_payload,
                                                  int64_t now_ns, RxInfo* info) noexcept;
  // Hands every packet whose release time has come to sink(const RxEmit&). The backend
  // delivers it (TUN write or service send) and frees the buffer.
  template <typename Sink>
  uint32_t poll_rx_st(int64_t now_ns, Sink&& sink, uint32_t max_frames = UINT32_MAX) noexcept;
  // The burst form: up to out.size() of the packets poll_rx_st would hand over, in order; a full
  // burst moves the release cursor on as a spent poll_rx_st budget does.
  [[nodiscard]] uint32_t next_rx_burst_st(int64_t now_ns, std::span<RxEmit> out) noexcept;

  // ---- shards (shard.h) ----
  [[nodiscard]] const ShardSpec& shard() const noexcept;
  // The tunnel index an IPv4/IPv6 packet from the local side is classified into (best effort on
  // behalf of a tunnel included), kNoTunnel if it is not IP or matches no tunnel. Read-only: a
  // dispatcher uses it to hand the packet to the owning shard, which submits it.
  [[nodiscard]] uint32_t route_st(std::span<const std::byte> ip_packet) const noexcept;
  // The tunnel id a WAN datagram names (the header's tunnel id field, read without checking
  // anything else), 0 if the datagram is too short to have one. For dispatch only: the owner
  // checks everything.
  [[nodiscard]] static uint32_t peek_tunnel_id(std::span<const std::byte> udp_payload) noexcept;
  // True if this shard runs the peer's control exchange (it owns the peer's control tunnel),
  // always with one shard.
  [[nodiscard]] bool leads_peer(uint32_t peer_index) const noexcept;
  // The lead's view of a peer, to publish to the other shards; and taking it over there:
  // liveness, the clock offset of the tunnels' playouts, the peer's epoch (a new one resets the
  // replay windows, as a keepalive would). No effect on the lead itself or out of range.
  [[nodiscard]] PeerSync peer_sync_st(uint32_t peer_index) const noexcept;
  void adopt_peer_st(uint32_t peer_index, const PeerSync& sync) noexcept;

  // ---- timers ----
  // Queues due control packets (time requests, keepalives) and updates peer liveness. A shard
  // queues them only for the peers it leads.
  void poll_control_st(int64_t now_ns) noexcept;
  // Earliest instant anything is due (tx departure, playout release, control timer).
  [[nodiscard]] int64_t next_event_ns() const noexcept;
  // Whether an active tunnel delivers on time (bound > 0): its packets are stamped when the
  // backend reads them, so a backend that batches arrivals must not hold them back (io_uring
  // low-cpu: no rx_coalesce then). O(tunnels), as next_event_ns().
  [[nodiscard]] bool carries_on_time() const noexcept;
  // A backend that wakes once per batch (the io_uring loop in low-cpu timing): from now on the
  // polls hand over frames departing up to tx_ahead_ns after their now_ns, but never past the
  // end of the slot window open at now_ns (sched::TxScheduler::release_horizon_ns), and packets
  // whose playout release is up to rx_ahead_ns away. 0 and 0 (the default) = exactly due ones.
  void set_release_ahead_st(int64_t tx_ahead_ns, int64_t rx_ahead_ns) noexcept;

  // ---- run-time changes (setup tier: on the datapath thread, between polls; may allocate) ----
  // Adds, modifies and removes tunnels, all or nothing: apply_tunnel_changes() checks the
  // result with the configuration file's rules (errors name the request item and field), then
  // every new gate control list, each port's scheduler change (TxScheduler::prepare_reconfigure),
  // the new tunnels' playouts and the classifier are built before anything is swapped in; on an
  // error nothing changed. The commit cannot fail and reuses storage: each port's spare timing
  // wheel, the counters of the tunnels that remain, and the playouts and replay window of a
  // drained index a new tunnel takes (when their sizes fit). Cost: O(tunnels + slots + frames
  // queued), plus a new tunnel's storage when it takes a new index (docs/gateway.md, "What a
  // change does to traffic"). WAN ports and peers never change. Tunnels not in the request are
  // not disturbed (queued frames keep their departures; sequence numbers, policer and shaper,
  // playouts, replay window and counters go on). A modified tunnel keeps its
  // index, sequence space, replay window, counters and held packets; new bound/late/max_hold
  // apply to packets received from now on; TxScheduler::reconfigure() says what happens to its
  // queued frames (re-placed in its new slots, or handed back to poll_tx with send == false).
  // A removed tunnel stops matching at once, its queued frames are handed back (tunnel_removed)
  // and its WAN packets count unknown_tunnel; its playouts still release what they hold, at
  // their times, under its old index (kept inactive until they are empty). A new tunnel gets a
  // new index, or a drained one whose tunnel never had service sockets. Each peer's control
  // tunnel is chosen again (its first tunnel; none: no control exchange, it goes down after
  // dead_after). generation() grows by one.
  [[nodiscard]] common::Result<ApplyResult> apply_st(const TunnelChanges& changes, int64_t now_ns);
  [[nodiscard]] uint64_t generation() const noexcept;
  // The ids of the tunnels the configuration file named at start or at the last reload
  // ({"cmd":"reload"}, SIGHUP): a reload removes those the file no longer names and leaves the
  // tunnels added at run time (detwan-gw apply, the agent) alone.
  [[nodiscard]] const std::vector<uint32_t>& file_tunnel_ids() const noexcept;
  void set_file_tunnel_ids(std::vector<uint32_t> ids);
  // 16 hex digits drawn at create(): a reader that sees another boot id knows the generation
  // counter started again.
  [[nodiscard]] const std::string& boot_id() const noexcept;
  // {"gateway","boot_id","generation","tunnels":[..],"peers":[..],"wan_ports":[..]}: the
  // configuration in force (docs/gateway.md, "tunnels").
  [[nodiscard]] std::string tunnels_json() const;
  ControlIo& control_io() noexcept;

  // ---- observability and setup ----
  // The configuration in force: the file's, with the tunnels as changed by apply_st.
  [[nodiscard]] const GatewayConfig& config() const noexcept;
  [[nodiscard]] uint32_t port_count() const noexcept;
  // Tunnel indices in use, active or draining: every tunnel index is below this (it only grows).
  [[nodiscard]] uint32_t tunnel_count() const noexcept;
  [[nodiscard]] uint32_t tunnel_index(uint32_t tunnel_id) const noexcept;  // kNoTunnel if none
  // False for an index whose tunnel was removed (or out of range).
  [[nodiscard]] bool tunnel_active(uint32_t tunnel_index) const noexcept;
  // Whether the tunnel can carry data now: active, and unauthenticated or holding data keys
  // (its peer's epoch is known; docs/wire-format.md, "Key schedule"). Until then its local
  // packets are refused (auth_awaiting_peer).
  [[nodiscard]] bool tunnel_ready(uint32_t tunnel_index) const noexcept;
  // The tunnel id at an index (also while it drains); 0 if out of range.
  [[nodiscard]] uint32_t tunnel_id(uint32_t tunnel_index) const noexcept;
  [[nodiscard]] uint32_t max_payload_bytes(uint32_t port_index) const noexcept;
  [[nodiscard]] uint32_t peer_count() const noexcept;
  [[nodiscard]] uint32_t port_of_tunnel(uint32_t tunnel_index) const noexcept;
  [[nodiscard]] PeerStatus peer_status(uint32_t peer_index) const noexcept;
  [[nodiscard]] uint64_t drops(EngineDrop reason) const noexcept;
  [[nodiscard]] const wire::DropCounters& rx_drops(uint32_t port_index) const noexcept;
  [[nodiscard]] const sched::TxScheduler& scheduler(uint32_t port_index) const noexcept;
  // The tunnel's on-time playout, or (best_effort) the bound-0 one that releases flag-B packets.
  [[nodiscard]] const sched::Playout& playout(uint32_t tunnel_index,
                                              bool best_effort = false) const noexcept;
  PortIo& port_io(uint32_t port_index) noexcept;
  LocalIo& local_io() noexcept;
  // Everything the engine counts, as one JSON object (schema in docs/gateway-stats.md):
  // {"gateway":..,"uptime_ns":..,"drops":{..},"ports":[..],"tunnels":[..],"peers":[..],"local":..}
  [[nodiscard]] std::string stats_json(int64_t now_ns) const;
  // The same in Prometheus text exposition format (counters *_total, latencies as histograms;
  // common/prometheus.h).
  [[nodiscard]] std::string prometheus_text(int64_t now_ns) const;
  // One exposition for a gateway spread over shards (shard.h; shards[k] is shard k of N): each
  // tunnel's series from the shard that owns it, each peer's from its lead; engine drops, port,
  // best-effort and host-side counters summed over the shards, their histograms merged (exact:
  // the shards' histograms share one bucket layout). N = 1 is prometheus_text(now_ns).
  [[nodiscard]] static std::string prometheus_text(const std::vector<Engine*>& shards,
                                                   int64_t now_ns);
  // A part of that exposition, so that a large gateway's is built over several polls (the HTTP
  // exporter, dataplane/daemon/metrics_server.h): the head (gateway, ports, peers, host
  // counters) if `head`, and the max_tunnels tunnels with the lowest ids above after_tunnel.
  // *next_after (if given) is the last id written when tunnels above it remain, else -1.
  // Parts are expositions of their own; common::prometheus::merge joins them by family.
  struct PrometheusPart {
    bool head = true;
    int64_t after_tunnel = -1;
    uint32_t max_tunnels = UINT32_MAX;
  };
  [[nodiscard]] static std::string prometheus_text(const std::vector<Engine*>& shards,
                                                   int64_t now_ns, const PrometheusPart& part,
                                                   int64_t* next_after);

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  // The pieces of prometheus_text (engine_prometheus.cc).
  static void write_head(common::prometheus::Exposition& e, const std::vector<Engine*>& shards,
                         int64_t now_ns);
  static void write_tunnel(common::prometheus::Exposition& e, const std::vector<Engine*>& shards,
                           uint32_t id);
  static void write_peers_and_host(common::prometheus::Exposition& e,
                                   const std::vector<Engine*>& shards, int64_t now_ns);
  // Datapath steps used by the templates (engine_datapath.cc).
  bool next_tx_st(int64_t now_ns, TxEmit* emit) noexcept;
  bool next_rx_st(int64_t now_ns, RxEmit* emit) noexcept;
  // A poll_rx_st that used its whole budget: the next one starts at the next playout, so that
  // one tunnel's backlog cannot hold the others back.
  void rx_budget_spent_st() noexcept;
  std::unique_ptr<Impl> impl_;
};

template <typename Sink>
uint32_t Engine::poll_tx_st(int64_t now_ns, Sink&& sink, uint32_t max_frames) noexcept {
  uint32_t count = 0;
  TxEmit emit;
  while (count < max_frames && next_tx_st(now_ns, &emit)) {
    sink(static_cast<const TxEmit&>(emit));
    ++count;
  }
  return count;
}

template <typename Sink>
uint32_t Engine::poll_rx_st(int64_t now_ns, Sink&& sink, uint32_t max_frames) noexcept {
  uint32_t count = 0;
  RxEmit emit;
  while (count < max_frames && next_rx_st(now_ns, &emit)) {
    sink(static_cast<const RxEmit&>(emit));
    ++count;
  }
  if (count == max_frames) rx_budget_spent_st();
  return count;
}

}  // namespace detwan::dataplane::gw

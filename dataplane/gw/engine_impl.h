#pragma once
// Private state of gw::Engine, shared by its source files (engine.cc setup, engine_datapath.cc
// per packet, engine_control.cc peers, engine_stats.cc JSON/Prometheus). Not a public header.
#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/histogram_history.h"
#include "dataplane/gw/classify.h"
#include "dataplane/gw/clock_filter.h"
#include "dataplane/gw/config.h"
#include "dataplane/gw/engine.h"
#include "dataplane/gw/engine_auth.h"
#include "dataplane/gw/shard.h"
#include "dataplane/sched/playout.h"
#include "dataplane/sched/tx_scheduler.h"
#include "dataplane/wire/control.h"
#include "dataplane/wire/drop_reason.h"
#include "dataplane/wire/replay_window.h"

namespace detwan::dataplane::gw {

inline constexpr uint32_t kNoIndex = UINT32_MAX;
inline constexpr int64_t kNeverNs = std::numeric_limits<int64_t>::min();
inline constexpr int64_t kNoEventNs = std::numeric_limits<int64_t>::max();
// A tunnel's packets carry path id 0 on its peer's port; with 1+1 protection (PREOF) their
// copies carry 1 on the protection peer's port.
inline constexpr uint8_t kPrimaryPathId = 0;
inline constexpr uint8_t kProtectionPathId = 1;
inline constexpr uint32_t kMaxPaths = 2;
// Time requests a peer may have in flight; a response matching none of them is ignored.
inline constexpr uint32_t kOutstandingExchanges = 4;
// Control packets queued at once: this many per peer (time request, response, keepalive and
// some slack for a burst of requests from the peer), at least kMinControlOutbox.
inline constexpr uint32_t kControlOutboxPerPeer = 8;
inline constexpr uint32_t kMinControlOutbox = 64;
// An authenticated control packet from an epoch that is neither the peer's nor the candidate's
// costs an HKDF (a candidate key): at most one per this long per peer path.
inline constexpr int64_t kCandidateSpacingNs = 10'000'000;
// The control packets' replay window per peer path (sequence numbers of its current epoch).
inline constexpr uint32_t kControlReplayWindowBits = 64;
// A keepalive claiming a new epoch answers one of our own keepalives: its last_rx_counter is
// at most this many behind our latest (and at least this many, whatever the interval, so a
// slow path still restarts), or the claim is refused as stale (see fresh_answer()).
inline constexpr uint64_t kMinFreshKeepalives = 4;

struct PortState {
  uint32_t config_index = 0;
  wire::IpVersion ip = wire::IpVersion::kV4;
  uint32_t max_payload_bytes = 0;     // max_payload_for_mtu(mtu, ip)
  uint32_t frame_overhead_bytes = 0;  // encap_overhead_bytes(ip) + Ethernet header and FCS
  sched::TxScheduler scheduler;
  wire::DropCounters rx_drops;  // decode failures, and the replay drops of its tunnels
  PortIo io;
};

struct TunnelCounters {
  uint64_t best_effort_offered_packets = 0;  // prefix matched, port not: sent as best effort
  uint64_t best_effort_offered_bytes = 0;
  uint64_t sent_on_time_packets = 0;      // emitted in the tunnel's slots (data)
  uint64_t sent_best_effort_packets = 0;  // emitted with flag B (unmatched port, downgraded)
  uint64_t missed_slot_packets = 0;       // handed back with send == false
  uint64_t rx_on_time_packets = 0;        // accepted by the replay window, pushed to playout
  uint64_t rx_best_effort_packets = 0;    // flag B, accepted
  uint64_t rx_bytes = 0;
  // Per path (index = path id): data packets received that passed the header checks, those
  // that were the first copy (delivered), and the copies eliminated as already received
  // (protected tunnels only; on an unprotected tunnel a repeat is a replay drop, `duplicate`).
  std::array<uint64_t, kMaxPaths> path_rx_packets{};
  std::array<uint64_t, kMaxPaths> path_first_packets{};
  std::array<uint64_t, kMaxPaths> path_eliminated_packets{};
  // The peer gateway restarted (a keepalive with a new session epoch): the replay window
  // started again for its new sequence numbers.
  uint64_t peer_restarts = 0;
  uint64_t replicas_sent = 0;  // copies sent on the protection path
  uint64_t replicas_not_made = 0;  // the backend could not copy the packet (no buffer)
  uint64_t auth_unexpected_packets = 0;  // flag A on this tunnel, which has no keys
  // Not the tunnel's tenant (classify.h): local packets to its dst_prefixes from a source
  // outside its src_prefixes, dropped or sent best effort by its foreign_source policy (never
  // in its slots); decapsulated packets whose addresses are outside its prefixes, dropped.
  uint64_t foreign_source_dropped_packets = 0;
  uint64_t foreign_source_best_effort_packets = 0;
  uint64_t rx_foreign_inner_packets = 0;
};

// One engine tunnel index. Indices are stable: a removed tunnel stays here, inactive, until its
// playouts have released what they hold; a later tunnel may take the index only if no backend
// ever had service sockets for it (had_service false).
struct TunnelState {
  TunnelConfig config;  // its own copy: a removed tunnel keeps it while it drains
  bool active = true;
  bool had_service = false;
  uint32_t id = 0;
  uint32_t peer = 0;
  uint32_t port = 0;
  // 1+1 protection: the protection path's peer and port; kNoIndex when unprotected.
  uint32_t protect_peer = kNoIndex;
  uint32_t protect_port = kNoIndex;
  [[nodiscard]] bool protected_path() const noexcept { return protect_peer != kNoIndex; }
  sched::Playout on_time;
  sched::Playout best_effort;  // bound 0: releases flag-B packets on receipt
  wire::ReplayWindow replay;
  wire::DropCounters replay_drops;  // duplicate, too_old
  uint64_t next_sequence = 0;       // of the next data frame it sends
  uint64_t peer_epoch = 0;          // the far gateway's session epoch its window is for; 0: none
  TunnelCounters counters;
  // Copies of the playouts' delay and lateness histograms every 10 s for 5 min: the windowed
  // percentiles of stats (Engine::Impl::record_windows, common/histogram_history.h).
  struct Windows {
    common::HistogramHistory on_time_wan_delay, on_time_lateness, best_effort_wan_delay;
    void clear() noexcept {
      on_time_wan_delay.clear();
      on_time_lateness.clear();
      best_effort_wan_delay.clear();
    }
  } windows;
  std::unique_ptr<TunnelAuthState> auth;  // nullptr: not authenticated
  // Bytes a packet grows by after its payload: the AEAD tag on an authenticated tunnel.
  [[nodiscard]] uint32_t trailer_bytes() const noexcept {
    return auth ? static_cast<uint32_t>(aead::kTagBytes) : 0;
  }
};

struct PeerCounters {
  uint64_t time_requests_sent = 0;
  uint64_t time_requests_received = 0;
  uint64_t time_responses_sent = 0;  // answers to the peer's requests
  uint64_t time_responses_received = 0;
  uint64_t time_responses_ignored = 0;  // no outstanding request with that id, or bad sample
  uint64_t keepalives_sent = 0;
  uint64_t keepalives_received = 0;
  uint64_t up_transitions = 0;
  uint64_t down_transitions = 0;
  uint64_t restarts = 0;  // keepalives with a new session epoch (the peer gateway restarted)
  // Refused control packets (docs/wire-format.md, "Keepalive"): replayed within an epoch,
  // reflected (our own epoch), from an epoch not accepted (stale), time responses to no
  // outstanding request (time_responses_ignored above).
  uint64_t control_replayed = 0;
  uint64_t control_reflected = 0;
  uint64_t control_stale = 0;
  uint64_t early_keepalives = 0;  // sent ahead of the interval: the peer did not know our epoch
};

struct PeerState {
  uint32_t config_index = 0;
  uint32_t port = 0;
  uint32_t control_tunnel = kNoIndex;  // first tunnel of the peer; kNoIndex: none
  bool up = false;
  int64_t last_rx_ns = kNeverNs;
  int64_t next_time_request_ns = 0;
  int64_t next_keepalive_ns = 0;
  std::array<uint64_t, kOutstandingExchanges> outstanding{};  // exchange ids (random); 0 = free
  uint32_t outstanding_next = 0;
  uint64_t keepalive_counter = 0;     // last sent
  uint64_t last_rx_keepalive = 0;     // highest counter received from the peer
  uint64_t peer_last_rx_counter = 0;  // what the peer says it received from us
  uint64_t control_sequence = 0;
  uint64_t epoch = 0;  // the peer's session epoch from its keepalives; 0: none heard yet
  // The last epoch and keepalive counter heard from the peer on this path, accepted or not:
  // what our keepalives echo (echo_epoch, last_rx_counter), so that a peer whose new epoch we
  // have not accepted yet can prove it answers us now.
  uint64_t heard_epoch = 0;
  uint64_t heard_counter = 0;
  std::optional<wire::ReplayWindow> control_replay;  // control sequence numbers of `epoch`
  int64_t next_candidate_ns = kNeverNs;
  int64_t last_keepalive_sent_ns = kNeverNs;
  ClockFilter clock;
  int64_t playout_offset_ns = 0;  // receiver - sender, applied to the tunnels' playouts
  PeerCounters counters;
};

struct ControlSlot {
  bool used = false;
  uint32_t peer = 0;
  wire::ControlBody body;
};

struct Engine::Impl {
  GatewayConfig config;
  int64_t start_ns = 0;
  // record_windows: when it looks next, and the tunnel it goes on from (a bounded number of
  // copies per look, so a gateway with many tunnels spreads them over several looks).
  int64_t next_windows_ns = 0;
  uint32_t windows_cursor = 0;
  uint64_t windows_skipped = 0;  // copies not taken: out of memory
  std::vector<PortState> ports;
  std::vector<TunnelState> tunnels;  // by engine tunnel index (file order at create)
  // next_rx_st's place: the playout it releases from (tunnel index * 2, + 1 for best effort).
  // It drains one playout before it looks at the next, so a release costs O(1) and a poll
  // O(tunnels) once, not per packet; a poll that stops at its budget resumes there.
  uint32_t rx_cursor = 0;
  // set_release_ahead_st(): how far ahead of now the polls release (0 = only what is due).
  int64_t tx_ahead_ns = 0;
  int64_t rx_ahead_ns = 0;
  // One bit per playout (tunnel index * 2, + 1 for best effort) that may hold packets: set by a
  // push, cleared when a scan finds the playout empty. A poll looks only at set bits, so an idle
  // poll costs O(tunnels / 64) (a shard holds every tunnel of the gateway but receives only its
  // own). Sized for the tunnels vector at create() and apply_st().
  std::vector<uint64_t> held_playouts;
  void mark_held(uint32_t playout_index) noexcept {
    held_playouts[playout_index / 64] |= uint64_t{1} << (playout_index % 64);
  }
  // (id, index) of the active tunnels, sorted by id.
  std::vector<std::pair<uint32_t, uint32_t>> tunnel_ids;
  uint64_t generation = 0;  // +1 per successful apply_st
  std::vector<uint32_t> file_tunnel_ids;  // Engine::file_tunnel_ids()
  uint64_t epoch = 0;       // this gateway's session epoch (keepalives), random per create()
  // The tunnel key schedule (aead/key_schedule.h) and the numbering of transmit sessions.
  std::unique_ptr<aead::KeyDeriver> deriver;
  AuthEnv auth_env;
  ShardSpec shard;          // which shard of the gateway this engine is (shard.h)
  std::string boot_id;      // the epoch as 16 hex digits
  ControlIo control;
  std::vector<PeerState> peers;  // config order
  Classifier classifier;
  std::vector<ControlSlot> outbox;
  std::array<uint64_t, kEngineDropCount> drops{};
  LocalIo local;
  std::array<std::byte, wire::kHeaderSize + wire::kMaxControlBodySize + aead::kTagBytes>
      control_scratch{};

  [[nodiscard]] uint32_t find_tunnel(uint32_t id) const noexcept;
  void count(EngineDrop reason) noexcept { ++drops[static_cast<std::size_t>(reason)]; }
  [[nodiscard]] const WanPortConfig& port_config(const PortState& p) const noexcept {
    return config.wan_ports[p.config_index];
  }
  [[nodiscard]] const TunnelConfig& tunnel_config(const TunnelState& t) const noexcept {
    return t.config;
  }
  [[nodiscard]] const PeerConfig& peer_config(const PeerState& p) const noexcept {
    return config.peers[p.config_index];
  }
  // The port and path id on which `tunnel` reaches peer `peer_index` (its peer: port, path 0;
  // its protection peer: protect_port, path 1).
  [[nodiscard]] static uint32_t port_to(const TunnelState& tunnel, uint32_t peer_index) noexcept {
    return tunnel.peer == peer_index ? tunnel.port : tunnel.protect_port;
  }
  [[nodiscard]] static uint8_t path_to(const TunnelState& tunnel, uint32_t peer_index) noexcept {
    return tunnel.peer == peer_index ? kPrimaryPathId : kProtectionPathId;
  }
  // Control plane (engine_control.cc), all on the datapath thread.
  void queue_control(uint32_t peer, const wire::ControlBody& body, int64_t now_ns) noexcept;
  // Takes the tunnels' due window copies (TunnelState::Windows): looks every
  // kWindowsLookNs, at most kWindowsCopiesPerLook copies per look. Control path (allocates).
  static constexpr int64_t kWindowsLookNs = 100'000'000;
  static constexpr uint32_t kWindowsCopiesPerLook = 64;
  void record_windows(int64_t now_ns) noexcept;
  // Builds the control packet of an outbox slot the scheduler released; false if it has none.
  bool emit_control(uint32_t slot, const sched::TxFrame& frame, int64_t now_ns,
                    TxEmit* emit) noexcept;
  // A control packet from peer `peer` (one path of a tunnel), its header's epoch and sequence
  // (authenticated if the tunnel is): applies the rules of docs/wire-format.md ("Keepalive").
  // False: refused and counted (replayed, stale epoch, unanswered time response).
  bool on_control(uint32_t peer, const wire::ControlBody& body, uint64_t epoch,
                  uint64_t sequence, int64_t now_ns) noexcept;
  // Authenticates a WAN packet of `tunnel` from peer path `peer` (it has keys, or the packet
  // has flag A): opens it in place and trims packet->payload to the plaintext. False: dropped
  // and counted (engine and tunnel). engine_auth_datapath.cc.
  bool open(TunnelState& tunnel, uint32_t peer, std::span<std::byte> datagram,
            wire::PacketView* packet, int64_t now_ns) noexcept;
  // Whether a keepalive's echo answers one of our recent keepalives on this path.
  [[nodiscard]] bool fresh_answer(const PeerState& peer, const wire::Keepalive& k) const noexcept;
  // Sends a keepalive soon (at most 8 per interval): the peer does not know our epoch yet.
  void hurry_keepalive(PeerState& peer, int64_t now_ns) noexcept;
  // An authenticated tunnel seals data only with keys toward the peer's current epoch: false
  // (counted auth_awaiting_peer) until that epoch is known.
  bool can_seal(TunnelState& tunnel) noexcept {
    if (!tunnel.auth || tunnel.auth->has_data_keys()) return true;
    ++tunnel.auth->counters.drops[static_cast<int>(AuthDrop::kAwaitingPeer)];
    count(EngineDrop::kAuthAwaitingPeer);
    return false;
  }
  void mark_alive(PeerState& peer, int64_t now_ns) noexcept;
  void apply_offset(PeerState& peer) noexcept;
  void set_playout_offset(PeerState& peer, int64_t offset_ns) noexcept;
  // This shard runs the peer's control exchange (it owns the peer's control tunnel).
  [[nodiscard]] bool leads(const PeerState& peer) const noexcept;
  // A keepalive from `peer` with session epoch `epoch`: a new one (the peer restarted) starts
  // the replay windows of the peer's tunnels again (once per tunnel, whichever path says it).
  void on_peer_epoch(uint32_t peer, uint64_t epoch, uint64_t counter) noexcept;
  [[nodiscard]] int64_t next_control_event_ns() const noexcept;
  // Each peer's control tunnel: its first active tunnel in config.tunnels order (setup).
  void choose_control_tunnels() noexcept;
};

// What a tunnel's state is made of, checked, before any storage (engine.cc): its peer and port,
// and its playouts' configuration at the peer's current clock offset.
struct TunnelSetup {
  TunnelConfig config;
  uint32_t peer = 0;
  uint32_t port = 0;
  uint32_t protect_peer = kNoIndex;  // kNoIndex: unprotected
  uint32_t protect_port = kNoIndex;
  sched::PlayoutConfig on_time;
  sched::PlayoutConfig best_effort;  // bound 0
  std::unique_ptr<TunnelAuthState> auth;
};
// Errors name the tunnel. An authenticated tunnel gets its keys from `env`, toward the epoch
// its peer has in `peers` (if known).
common::Result<TunnelSetup> tunnel_setup(const GatewayConfig& config,
                                         const std::vector<PeerState>& peers,
                                         const TunnelConfig& tunnel, AuthEnv& env);
// A new tunnel state (allocates two playouts and a replay window); errors name the tunnel.
common::Result<TunnelState> make_tunnel(TunnelSetup setup);
common::Result<TunnelState> make_tunnel(const GatewayConfig& config,
                                        const std::vector<PeerState>& peers,
                                        const TunnelConfig& tunnel, AuthEnv& env);
// Whether a drained tunnel index (nothing held) has the storage `setup` needs: playouts of its
// playout_capacity_frames and a replay window of its replay_window_bits.
[[nodiscard]] bool fits(const TunnelState& drained, const TunnelSetup& setup) noexcept;
// Makes `drained` what make_tunnel(setup) would return, reusing its playouts and replay window
// (nothing allocated; the playouts' counters cleared where they were used). fits() must hold.
void restart_tunnel(TunnelState& drained, TunnelSetup&& setup) noexcept;

}  // namespace detwan::dataplane::gw

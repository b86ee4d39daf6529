#pragma once
// The gateway's counter registry: every counter struct of the engine listed once, with its key
// in stats_json() and its family in prometheus_text() (common/counter_table.h). The stats, the
// exposition and the sums over shards are written from these tables; the static_asserts below
// fail the build when a struct gains a counter its table does not name. What the tables do not
// hold is written by hand in both documents: per-reason arrays (drops), per-path arrays,
// histograms, gauges and configuration values (docs/metrics.md, "One list per counter set").
//
// A key with a dot is nested in the JSON: "keepalive.sent" is {"keepalive": {"sent": N}}.
#include <iterator>

#include "common/counter_table.h"
#include "dataplane/gw/engine.h"
#include "dataplane/gw/engine_auth.h"
#include "dataplane/gw/engine_impl.h"

namespace detwan::dataplane::gw {

template <typename C>
using Field = common::CounterField<C>;

// ports[].io; detwan_gw_port_*{port}.
inline constexpr char kPortIoPrefix[] = "detwan_gw_port_";
inline constexpr Field<PortIo> kPortIoFields[] = {
    {&PortIo::rx_packets, "rx_packets", "rx_packets_total", "Datagrams received on the WAN port"},
    {&PortIo::rx_bytes, "rx_bytes", "rx_bytes_total", "Bytes received on the WAN port"},
    {&PortIo::tx_packets, "tx_packets", "tx_packets_total", "Datagrams sent on the WAN port"},
    {&PortIo::tx_bytes, "tx_bytes", "tx_bytes_total", "Bytes sent on the WAN port"},
    {&PortIo::rx_errors, "rx_errors", "rx_errors_total", "Failed or truncated receives"},
    {&PortIo::tx_errors, "tx_errors", "tx_errors_total", "Failed sends"},
    {&PortIo::no_buffer, "no_buffer", "no_buffer_total",
     "Receives skipped for lack of a buffer"},
    {&PortIo::tx_batches, "tx_batches", "tx_batches_total",
     "Sends that carried several frames (UDP GSO, io_uring backend)"},
    {&PortIo::gso_refused, "gso_refused", "gso_refused_total",
     "GSO batches the route refused (their frames were sent one by one)"},
    {&PortIo::rx_batches, "rx_batches", "rx_batches_total",
     "Receives that carried several frames (UDP GRO, io_uring backend)"},
};
static_assert(common::counter_table_covers<PortIo>(std::size(kPortIoFields)));

// local; detwan_gw_* (no labels).
inline constexpr char kLocalIoPrefix[] = "detwan_gw_";
inline constexpr Field<LocalIo> kLocalIoFields[] = {
    {&LocalIo::tun_rx_packets, "tun_rx_packets", "tun_rx_packets_total",
     "Packets read from the TUN device"},
    {&LocalIo::tun_tx_packets, "tun_tx_packets", "tun_tx_packets_total",
     "Packets written to the TUN device"},
    {&LocalIo::tun_rx_errors, "tun_rx_errors", "tun_rx_errors_total", "Failed TUN reads"},
    {&LocalIo::tun_tx_errors, "tun_tx_errors", "tun_tx_errors_total", "Failed TUN writes"},
    {&LocalIo::tun_rx_batches, "tun_rx_batches", "tun_rx_batches_total",
     "TUN reads that carried several packets (UDP GSO, tun.offload)"},
    {&LocalIo::tun_tx_batches, "tun_tx_batches", "tun_tx_batches_total",
     "TUN writes that carried several packets (UDP GSO, tun.offload)"},
    {&LocalIo::tun_gso_refused, "tun_gso_refused", "tun_gso_refused_total",
     "UDP GSO runs the TUN device refused (then written packet by packet)"},
    {&LocalIo::service_rx_packets, "service_rx_packets", "service_rx_packets_total",
     "Datagrams received on service ports"},
    {&LocalIo::service_tx_packets, "service_tx_packets", "service_tx_packets_total",
     "Datagrams sent from service ports"},
    {&LocalIo::service_rx_errors, "service_rx_errors", "service_rx_errors_total",
     "Failed service receives"},
    {&LocalIo::service_tx_errors, "service_tx_errors", "service_tx_errors_total",
     "Failed service sends"},
    {&LocalIo::loop_sleeps, "loop_sleeps", "loop_sleeps_total",
     "Sleeps of the datapath loop (io_uring, timing low-cpu)"},
    {&LocalIo::loop_coalesced_sleeps, "loop_coalesced_sleeps", "loop_coalesced_sleeps_total",
     "Sleeps that did not wake for a single arrival (gateway.rx_coalesce)"},
    {&LocalIo::loop_blind_sleeps, "loop_blind_sleeps", "loop_blind_sleeps_total",
     "Coalesced sleeps outside the ring: no arrival woke them before their end"},
    {&LocalIo::loop_timer_wakeups, "loop_timer_wakeups", "loop_wakeups_total",
     "How the loop's sleeps ended", "cause", "timer"},
    {&LocalIo::loop_io_wakeups, "loop_io_wakeups", "loop_wakeups_total",
     "How the loop's sleeps ended", "cause", "io"},
};
static_assert(common::counter_table_covers<LocalIo>(std::size(kLocalIoFields)));

// control; detwan_gw_control_* (both sockets and the HTTP exporter's local requests).
inline constexpr char kControlIoPrefix[] = "detwan_gw_control_";
inline constexpr Field<ControlIo> kControlIoFields[] = {
    {&ControlIo::requests, "requests", "requests_total", "Control requests answered"},
    {&ControlIo::refused_peers, "refused_peers", "refused_peers_total",
     "Admin socket connections refused by uid (SO_PEERCRED)"},
    {&ControlIo::applied, "applied", "applied_total", "Writes that changed the gateway"},
    {&ControlIo::refused_writes, "refused_writes", "refused_writes_total",
     "Writes refused (bad request, stale generation, read-only socket)"},
    {&ControlIo::deferred, "deferred", "deferred_total",
     "Requests answered at a later poll: the per-poll budget was spent"},
    {&ControlIo::rate_limited, "rate_limited", "rate_limited_total",
     "Requests held because their uid was over its rate"},
};
static_assert(common::counter_table_covers<ControlIo>(std::size(kControlIoFields)));

// tunnels[].tx and tunnels[].rx; detwan_gw_tunnel_*{tunnel,port}. The per-path arrays are
// written beside them (tunnels[].paths[], detwan_gw_tunnel_rx_path_*{path}).
inline constexpr char kTunnelPrefix[] = "detwan_gw_tunnel_";
inline constexpr Field<TunnelCounters> kTunnelTxFields[] = {
    {&TunnelCounters::sent_on_time_packets, "sent_on_time_packets",
     "tx_sent_on_time_packets_total", "Data frames emitted in the tunnel's slots"},
    {&TunnelCounters::sent_best_effort_packets, "sent_best_effort_packets",
     "tx_sent_best_effort_packets_total",
     "Data frames emitted as best effort (port not matched, or downgraded)"},
    {&TunnelCounters::missed_slot_packets, "missed_slot_packets", "tx_missed_slot_packets_total",
     "Data frames that missed their slot (not sent)"},
    {&TunnelCounters::best_effort_offered_packets, "best_effort_offered_packets",
     "tx_best_effort_offered_packets_total",
     "Packets to the tunnel's prefixes outside its UDP ports, sent as best effort"},
    {&TunnelCounters::best_effort_offered_bytes, "best_effort_offered_bytes",
     "tx_best_effort_offered_bytes_total", "Bytes of those packets"},
    {&TunnelCounters::foreign_source_dropped_packets, "foreign_source_dropped_packets",
     "tx_foreign_source_packets_total",
     "Packets to the tunnel's prefixes from a source outside its match.src (not its tenant), by "
     "what its foreign_source policy did",
     "action", "dropped"},
    {&TunnelCounters::foreign_source_best_effort_packets, "foreign_source_best_effort_packets",
     "tx_foreign_source_packets_total",
     "Packets to the tunnel's prefixes from a source outside its match.src (not its tenant), by "
     "what its foreign_source policy did",
     "action", "best_effort"},
    {&TunnelCounters::replicas_sent, "replicas_sent", "tx_replicas_sent_total",
     "Copies sent on the protection path (1+1 protection)"},
    {&TunnelCounters::replicas_not_made, "replicas_not_made", "tx_replicas_not_made_total",
     "Copies the backend could not make (no buffer)"},
};
inline constexpr Field<TunnelCounters> kTunnelRxFields[] = {
    {&TunnelCounters::rx_on_time_packets, "accepted_on_time_packets", "rx_accepted_packets_total",
     "Data packets the replay window accepted, by class", "class", "on_time"},
    {&TunnelCounters::rx_best_effort_packets, "accepted_best_effort_packets",
     "rx_accepted_packets_total", "Data packets the replay window accepted, by class", "class",
     "best_effort"},
    {&TunnelCounters::rx_bytes, "accepted_bytes", "rx_accepted_bytes_total",
     "Bytes of the data packets accepted"},
    {&TunnelCounters::rx_foreign_inner_packets, "foreign_inner_packets",
     "rx_foreign_inner_packets_total",
     "Decapsulated packets dropped: source outside the tunnel's match.dst or destination outside "
     "its match.src"},
    {&TunnelCounters::peer_restarts, "peer_restarts", "rx_peer_restarts_total",
     "Replay window started again: the peer gateway restarted (new session epoch)"},
    {&TunnelCounters::auth_unexpected_packets, "auth_unexpected_packets",
     "rx_auth_unexpected_packets_total",
     "Packets flagged authenticated on a tunnel that has no keys (dropped)"},
};
static_assert(common::counter_table_covers<TunnelCounters>(
    std::size(kTunnelTxFields) + std::size(kTunnelRxFields), 3 * kMaxPaths));

// tunnels[].auth; detwan_gw_tunnel_auth_*{tunnel,port}. drops[] beside them.
inline constexpr char kAuthPrefix[] = "detwan_gw_tunnel_auth_";
inline constexpr Field<AuthCounters> kAuthFields[] = {
    {&AuthCounters::sealed_packets, "sealed_packets", "sealed_packets_total",
     "Packets sealed with the tunnel's transmit key (data and control)"},
    {&AuthCounters::seal_failed, "seal_failed", "seal_failed_total",
     "Packets that could not be sealed (not sent)"},
    {&AuthCounters::opened_packets, "opened_packets", "opened_packets_total",
     "Packets a key of the tunnel opened (data and control)"},
    {&AuthCounters::new_sessions, "new_sessions", "new_sessions_total",
     "Sender sessions first opened (a peer start or a key change)"},
    {&AuthCounters::key_derivations, "key_derivations", "key_derivations_total",
     "Keys derived for a new peer epoch (HKDF; docs/wire-format.md, Key schedule)"},
    {&AuthCounters::candidate_derivations, "candidate_derivations", "candidate_derivations_total",
     "Control keys derived for a control packet from an unknown peer epoch"},
};
static_assert(common::counter_table_covers<AuthCounters>(std::size(kAuthFields), kAuthDropCount));

// peers[]; detwan_gw_peer_*{peer}.
inline constexpr char kPeerPrefix[] = "detwan_gw_peer_";
inline constexpr char kControlRefusedHelp[] =
    "Control packets refused: replayed in the epoch, our own sent back, or from an epoch not "
    "accepted (an earlier boot's)";
inline constexpr Field<PeerCounters> kPeerFields[] = {
    {&PeerCounters::up_transitions, "up_transitions", "transitions_total",
     "Peer state changes, by new state", "to", "up"},
    {&PeerCounters::down_transitions, "down_transitions", "transitions_total",
     "Peer state changes, by new state", "to", "down"},
    {&PeerCounters::restarts, "restarts", "restarts_total",
     "Keepalives with a new session epoch: the peer gateway restarted"},
    {&PeerCounters::time_requests_sent, "time_exchange.requests_sent", "time_requests_sent_total",
     "Time requests sent"},
    {&PeerCounters::time_requests_received, "time_exchange.requests_received",
     "time_requests_received_total", "Time requests received"},
    {&PeerCounters::time_responses_sent, "time_exchange.responses_sent",
     "time_responses_sent_total", "Time responses sent"},
    {&PeerCounters::time_responses_received, "time_exchange.responses_received",
     "time_responses_received_total", "Time responses received"},
    {&PeerCounters::time_responses_ignored, "time_exchange.responses_ignored",
     "time_responses_ignored_total",
     "Time responses to no outstanding request, or with a bad sample"},
    {&PeerCounters::keepalives_sent, "keepalive.sent", "keepalives_sent_total", "Keepalives sent"},
    {&PeerCounters::keepalives_received, "keepalive.received", "keepalives_received_total",
     "Keepalives received"},
    {&PeerCounters::early_keepalives, "keepalive.early", "early_keepalives_total",
     "Keepalives sent ahead of the interval: the peer did not know our epoch"},
    {&PeerCounters::control_replayed, "control_refused.replayed", "control_refused_total",
     kControlRefusedHelp, "reason", "replayed"},
    {&PeerCounters::control_reflected, "control_refused.reflected", "control_refused_total",
     kControlRefusedHelp, "reason", "reflected"},
    {&PeerCounters::control_stale, "control_refused.stale", "control_refused_total",
     kControlRefusedHelp, "reason", "stale"},
};
static_assert(common::counter_table_covers<PeerCounters>(std::size(kPeerFields)));

}  // namespace detwan::dataplane::gw

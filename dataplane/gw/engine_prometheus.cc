// Engine::prometheus_text(): the engine's counters in the Prometheus text exposition format
// 0.0.4 (docs/gateway.md, "Statistics"; written by common/prometheus.h). Counters end in _total;
// latencies are Prometheus histograms in seconds with the fixed buckets of common/prometheus.h
// (delays: kDelayBucketsSeconds; errors against a schedule: kErrorBucketsSeconds). A sharded
// gateway's exposition is the same families, merged over its shards (each tunnel from its owner).
#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "common/histogram.h"
#include "common/prometheus.h"
#include "common/version.h"
#include "dataplane/gw/engine.h"
#include "dataplane/gw/engine_impl.h"
#include "dataplane/gw/shard.h"

namespace detwan::dataplane::gw {
namespace {

using common::prometheus::Exposition;
using common::prometheus::kDelayBucketsSeconds;
using common::prometheus::kErrorBucketsSeconds;
using common::prometheus::Labels;

// The scheduler counters of one owner (a port, its best effort, or a tunnel) under `prefix`.
// Per tunnel only the departure error is a histogram (queue_wait stays in stats and per port):
// a histogram is ~20 series, and a gateway may carry a thousand tunnels.
void tx_counters(Exposition& e, std::string_view prefix, std::string_view who, const Labels& labels,
                 const sched::TxCounters& c, bool queue_wait = true) {
  const auto name = [&](std::string_view metric) { return fmt::format("{}_{}", prefix, metric); };
  const auto help = [&](std::string_view what) { return fmt::format("{} of {}", what, who); };
  e.counter(name("offered_packets_total"), help("Frames offered to the scheduler"), labels,
            c.offered_packets);
  e.counter(name("offered_bytes_total"), help("Bytes (on the wire) offered"), labels,
            c.offered_bytes);
  e.counter(name("queued_packets_total"), help("Frames accepted into the schedule"), labels,
            c.queued_packets);
  e.counter(name("queued_bytes_total"), help("Bytes accepted into the schedule"), labels,
            c.queued_bytes);
  e.counter(name("sent_packets_total"), help("Frames sent in their slots"), labels, c.sent_packets);
  e.counter(name("sent_bytes_total"), help("Bytes sent in their slots"), labels, c.sent_bytes);
  e.counter(name("downgraded_packets_total"),
            help("Frames above the reservation sent as best effort"), labels, c.downgraded_packets);
  e.counter(name("downgraded_bytes_total"), help("Bytes above the reservation sent as best effort"),
            labels, c.downgraded_bytes);
  e.counter(name("held_for_slot_total"), help("Frames that waited for a later window"), labels,
            c.held_for_slot);
  e.counter(name("rescheduled_total"), help("Frames that missed their window and took a later one"),
            labels, c.rescheduled);
  for (int i = 0; i < sched::kTxDropCount; ++i) {
    Labels with_reason = labels;
    with_reason.emplace_back("reason", std::string(to_string(static_cast<sched::TxDrop>(i))));
    e.counter(name("drops_total"), help("Frames dropped by the scheduler, by reason"), with_reason,
              c.dropped[i]);
  }
  e.histogram_ns(name("departure_error_seconds"), help("Actual minus scheduled departure"), labels,
                 c.departure_error_ns, kErrorBucketsSeconds);
  if (queue_wait) {
    e.histogram_ns(name("queue_wait_seconds"), help("Scheduled departure minus enqueue time"),
                   labels, c.queue_wait_ns, kErrorBucketsSeconds);
  }
}

// Best effort is released on receipt: its one-way delay is its WAN delay and it has no target,
// so only the on-time class has the one-way delay, lateness and playout error histograms.
void playout_counters(Exposition& e, const Labels& labels, const sched::PlayoutCounters& c,
                      bool on_time) {
  constexpr std::string_view p = "detwan_gw_tunnel_rx";
  e.counter(fmt::format("{}_received_packets_total", p), "Packets pushed to the playout", labels,
            c.received_packets);
  e.counter(fmt::format("{}_received_bytes_total", p), "Payload bytes pushed to the playout",
            labels, c.received_bytes);
  e.counter(fmt::format("{}_released_packets_total", p), "Packets released", labels,
            c.released_packets);
  e.counter(fmt::format("{}_released_bytes_total", p), "Payload bytes released", labels,
            c.released_bytes);
  e.counter(fmt::format("{}_late_packets_total", p), "Packets that arrived after their target",
            labels, c.late_packets);
  e.counter(fmt::format("{}_late_delivered_total", p), "Late packets delivered anyway", labels,
            c.late_delivered);
  for (int i = 0; i < sched::kPlayoutDropCount; ++i) {
    Labels with_reason = labels;
    with_reason.emplace_back("reason", std::string(to_string(static_cast<sched::PlayoutDrop>(i))));
    e.counter(fmt::format("{}_playout_drops_total", p), "Packets dropped by the playout, by reason",
              with_reason, c.dropped[i]);
  }
  e.histogram_ns(fmt::format("{}_wan_delay_seconds", p),
                 "Arrival minus sender time (WAN one-way delay)", labels, c.wan_delay_ns,
                 kDelayBucketsSeconds);
  if (!on_time) return;
  e.histogram_ns(fmt::format("{}_one_way_delay_seconds", p), "Release minus sender time", labels,
                 c.one_way_delay_ns, kDelayBucketsSeconds);
  e.histogram_ns(fmt::format("{}_lateness_seconds", p), "Arrival minus target of late packets",
                 labels, c.lateness_ns, kErrorBucketsSeconds);
  e.histogram_ns(fmt::format("{}_playout_error_seconds", p), "Actual minus target release",
                 labels, c.playout_error_ns, kErrorBucketsSeconds);
}

// Sums of the shards' counters (prometheus_text over shards).
void add_io(PortIo& into, const PortIo& from) {
  into.rx_packets += from.rx_packets;
  into.rx_bytes += from.rx_bytes;
  into.tx_packets += from.tx_packets;
  into.tx_bytes += from.tx_bytes;
  into.rx_errors += from.rx_errors;
  into.tx_errors += from.tx_errors;
  into.no_buffer += from.no_buffer;
  into.tx_batches += from.tx_batches;
  into.gso_refused += from.gso_refused;
  into.rx_batches += from.rx_batches;
}

void add_io(LocalIo& into, const LocalIo& from) {
  into.tun_rx_packets += from.tun_rx_packets;
  into.tun_tx_packets += from.tun_tx_packets;
  into.tun_rx_errors += from.tun_rx_errors;
  into.tun_tx_errors += from.tun_tx_errors;
  into.tun_rx_batches += from.tun_rx_batches;
  into.tun_tx_batches += from.tun_tx_batches;
  into.tun_gso_refused += from.tun_gso_refused;
  into.service_rx_packets += from.service_rx_packets;
  into.service_tx_packets += from.service_tx_packets;
  into.service_rx_errors += from.service_rx_errors;
  into.service_tx_errors += from.service_tx_errors;
  into.loop_sleeps += from.loop_sleeps;
  into.loop_coalesced_sleeps += from.loop_coalesced_sleeps;
  into.loop_blind_sleeps += from.loop_blind_sleeps;
  into.loop_timer_wakeups += from.loop_timer_wakeups;
  into.loop_io_wakeups += from.loop_io_wakeups;
}

void add_tx(sched::TxCounters& into, const sched::TxCounters& from) {
  into.offered_packets += from.offered_packets;
  into.offered_bytes += from.offered_bytes;
  into.queued_packets += from.queued_packets;
  into.queued_bytes += from.queued_bytes;
  into.sent_packets += from.sent_packets;
  into.sent_bytes += from.sent_bytes;
  into.downgraded_packets += from.downgraded_packets;
  into.downgraded_bytes += from.downgraded_bytes;
  into.held_for_slot += from.held_for_slot;
  into.rescheduled += from.rescheduled;
  for (int i = 0; i < sched::kTxDropCount; ++i) into.dropped[i] += from.dropped[i];
  (void)into.departure_error_ns.merge(from.departure_error_ns);
  (void)into.queue_wait_ns.merge(from.queue_wait_ns);
}

}  // namespace

std::string Engine::prometheus_text(int64_t now_ns) const {
  return prometheus_text(std::vector<Engine*>{const_cast<Engine*>(this)}, now_ns);
}

std::string Engine::prometheus_text(const std::vector<Engine*>& shards, int64_t now_ns) {
  return prometheus_text(shards, now_ns, PrometheusPart{}, nullptr);
}

std::string Engine::prometheus_text(const std::vector<Engine*>& shards, int64_t now_ns,
                                    const PrometheusPart& part, int64_t* next_after) {
  const Impl& m = *shards[0]->impl_;
  Exposition e;
  // This part's tunnels: the max_tunnels lowest ids above after_tunnel, in id order (ids, not
  // indices: a tunnel added or removed between two parts never appears twice).
  std::vector<uint32_t> ids;
  for (const TunnelState& listed : m.tunnels) {
    if (listed.active && static_cast<int64_t>(listed.id) > part.after_tunnel) {
      ids.push_back(listed.id);
    }
  }
  const bool more = ids.size() > part.max_tunnels;
  if (more) {
    std::nth_element(ids.begin(), ids.begin() + part.max_tunnels, ids.end());
    ids.resize(part.max_tunnels);
  }
  std::sort(ids.begin(), ids.end());
  if (next_after != nullptr) *next_after = more ? static_cast<int64_t>(ids.back()) : -1;
  if (part.head) write_head(e, shards, now_ns);
  for (const uint32_t id : ids) write_tunnel(e, shards, id);
  if (part.head) write_peers_and_host(e, shards, now_ns);
  return e.text();
}

void Engine::write_head(common::prometheus::Exposition& e, const std::vector<Engine*>& shards,
                        int64_t now_ns) {
  const auto count = static_cast<uint32_t>(shards.size());
  const Impl& m = *shards[0]->impl_;
  e.gauge("detwan_gw_info", "The gateway (constant 1)", {{"gateway", m.config.name}}, 1);
  e.gauge("detwan_build_info", "The program and its version (constant 1)",
          {{"program", "detwan-gw"}, {"version", std::string(common::kVersion)}}, 1);
  e.gauge("detwan_gw_uptime_seconds", "Time since the engine was created", {},
          static_cast<double>(now_ns - m.start_ns) * 1e-9);
  if (count > 1) {
    e.gauge("detwan_gw_shards", "Engine shards (cores) the gateway runs on", {}, count);
  }
  for (int i = 0; i < kEngineDropCount; ++i) {
    uint64_t dropped = 0;
    for (const Engine* shard : shards) dropped += shard->impl_->drops[static_cast<std::size_t>(i)];
    e.counter("detwan_gw_engine_drops_total", "Packets the engine dropped, by reason",
              {{"reason", std::string(to_string(static_cast<EngineDrop>(i)))}}, dropped);
  }
  for (std::size_t p = 0; p < m.ports.size(); ++p) {
    const PortState& port = m.ports[p];
    const Labels labels{{"port", m.port_config(port).name}};
    PortIo io = port.io;
    wire::DropCounters rx_drops = port.rx_drops;
    sched::TxCounters port_tx = port.scheduler.port_counters();
    sched::TxCounters best_effort_tx = port.scheduler.best_effort_counters();
    for (uint32_t k = 1; k < count; ++k) {
      const PortState& other = shards[k]->impl_->ports[p];
      add_io(io, other.io);
      for (std::size_t r = 0; r < wire::kDropReasonCount; ++r) {
        rx_drops.by_reason[r] += other.rx_drops.by_reason[r];
      }
      add_tx(port_tx, other.scheduler.port_counters());
      add_tx(best_effort_tx, other.scheduler.best_effort_counters());
    }
    e.counter("detwan_gw_port_rx_packets_total", "Datagrams received on the WAN port", labels,
              io.rx_packets);
    e.counter("detwan_gw_port_rx_bytes_total", "Bytes received on the WAN port", labels,
              io.rx_bytes);
    e.counter("detwan_gw_port_tx_packets_total", "Datagrams sent on the WAN port", labels,
              io.tx_packets);
    e.counter("detwan_gw_port_tx_bytes_total", "Bytes sent on the WAN port", labels, io.tx_bytes);
    e.counter("detwan_gw_port_rx_errors_total", "Failed or truncated receives", labels,
              io.rx_errors);
    e.counter("detwan_gw_port_tx_errors_total", "Failed sends", labels, io.tx_errors);
    e.counter("detwan_gw_port_no_buffer_total", "Receives skipped for lack of a buffer", labels,
              io.no_buffer);
    e.counter("detwan_gw_port_tx_batches_total",
              "Sends that carried several frames (UDP GSO, io_uring backend)", labels,
              io.tx_batches);
    e.counter("detwan_gw_port_gso_refused_total",
              "GSO batches the route refused (their frames were sent one by one)", labels,
              io.gso_refused);
    e.counter("detwan_gw_port_rx_batches_total",
              "Receives that carried several frames (UDP GRO, io_uring backend)", labels,
              io.rx_batches);
    for (std::size_t r = 0; r < wire::kDropReasonCount; ++r) {
      Labels with_reason = labels;
      with_reason.emplace_back("reason", std::string(to_string(static_cast<wire::DropReason>(r))));
      e.counter("detwan_gw_port_rx_wire_drops_total",
                "Tunnel datagrams dropped by the wire checks, by reason", with_reason,
                rx_drops.by_reason[r]);
    }
    tx_counters(e, "detwan_gw_port_tx", "the WAN port", labels, port_tx);
    tx_counters(e, "detwan_gw_best_effort_tx", "the port's best effort", labels, best_effort_tx);
  }
}

void Engine::write_tunnel(common::prometheus::Exposition& e, const std::vector<Engine*>& shards,
                          uint32_t id) {
  const auto count = static_cast<uint32_t>(shards.size());
  {
    // Every shard holds every tunnel; only its owner's state counts (shard.h).
    const Impl& o = *shards[shard_of_tunnel(id, count)]->impl_;
    const uint32_t owned = o.find_tunnel(id);
    if (owned == kNoIndex) return;
    const TunnelState& t = o.tunnels[owned];
    const Labels labels{{"tunnel", std::to_string(t.id)},
                        {"port", o.config.wan_ports[t.port].name}};
    if (const sched::TxCounters* c = o.ports[t.port].scheduler.tunnel_counters(t.id)) {
      tx_counters(e, "detwan_gw_tunnel_tx", "the tunnel", labels, *c, false);
    }
    if (t.protected_path()) {  // its copies, on the protection port (label port says which)
      const Labels copy_labels{{"tunnel", std::to_string(t.id)},
                               {"port", o.config.wan_ports[t.protect_port].name}};
      if (const auto* c = o.ports[t.protect_port].scheduler.tunnel_counters(t.id)) {
        tx_counters(e, "detwan_gw_tunnel_tx", "the tunnel", copy_labels, *c, false);
      }
    }
    const TunnelCounters& tc = t.counters;
    e.counter("detwan_gw_tunnel_tx_replicas_sent_total",
              "Copies sent on the protection path (1+1 protection)", labels, tc.replicas_sent);
    e.counter("detwan_gw_tunnel_tx_replicas_not_made_total",
              "Copies the backend could not make (no buffer)", labels, tc.replicas_not_made);
    for (uint32_t path = 0; path < (t.protected_path() ? kMaxPaths : 1); ++path) {
      // Labelled with the path's own port.
      const uint32_t port = path == kPrimaryPathId ? t.port : t.protect_port;
      const Labels with_path{{"tunnel", std::to_string(t.id)},
                             {"port", o.config.wan_ports[port].name},
                             {"path", std::to_string(path)}};
      e.counter("detwan_gw_tunnel_rx_path_packets_total",
                "Data packets received on the path past the header checks", with_path,
                tc.path_rx_packets[path]);
      e.counter("detwan_gw_tunnel_rx_path_first_packets_total",
                "Data packets whose first copy came on the path (delivered)", with_path,
                tc.path_first_packets[path]);
      e.counter("detwan_gw_tunnel_rx_path_eliminated_packets_total",
                "Copies eliminated on the path: the other path's came first", with_path,
                tc.path_eliminated_packets[path]);
    }
    e.counter("detwan_gw_tunnel_rx_peer_restarts_total",
              "Replay window started again: the peer gateway restarted (new session epoch)", labels,
              tc.peer_restarts);
    if (t.auth) {  // authenticated tunnel (docs/wire-format.md, "Authenticated tunnels")
      const AuthCounters& ac = t.auth->counters;
      e.counter("detwan_gw_tunnel_auth_sealed_packets_total",
                "Packets sealed with the tunnel's transmit key (data and control)", labels,
                ac.sealed_packets);
      e.counter("detwan_gw_tunnel_auth_opened_packets_total",
                "Packets a key of the tunnel opened (data and control)", labels, ac.opened_packets);
      e.counter("detwan_gw_tunnel_auth_key_derivations_total",
                "Keys derived for a new peer epoch (HKDF; docs/wire-format.md, Key schedule)",
                labels, ac.key_derivations);
      e.counter("detwan_gw_tunnel_auth_candidate_derivations_total",
                "Control keys derived for a control packet from an unknown peer epoch", labels,
                ac.candidate_derivations);
      for (int r = 0; r < kAuthDropCount; ++r) {
        Labels with_reason = labels;
        with_reason.emplace_back("reason", std::string(to_string(static_cast<AuthDrop>(r))));
        e.counter("detwan_gw_tunnel_auth_drops_total",
                  "Packets refused before touching any state, by reason", with_reason,
                  ac.drops[static_cast<size_t>(r)]);
      }
    }
    e.gauge("detwan_gw_tunnel_tx_next_sequence", "Sequence number of the tunnel's next data frame",
            labels, static_cast<double>(t.next_sequence));
    e.counter("detwan_gw_tunnel_tx_best_effort_offered_packets_total",
              "Packets to the tunnel's prefixes outside its UDP ports, sent as best effort", labels,
              t.counters.best_effort_offered_packets);
    for (const bool best_effort : {false, true}) {
      Labels with_action = labels;
      with_action.emplace_back("action", best_effort ? "best_effort" : "dropped");
      e.counter(
          "detwan_gw_tunnel_tx_foreign_source_packets_total",
          "Packets to the tunnel's prefixes from a source outside its match.src (not its "
          "tenant), by what its foreign_source policy did",
          with_action,
          best_effort ? tc.foreign_source_best_effort_packets : tc.foreign_source_dropped_packets);
    }
    e.counter("detwan_gw_tunnel_rx_foreign_inner_packets_total",
              "Decapsulated packets dropped: source outside the tunnel's match.dst or destination "
              "outside its match.src",
              labels, tc.rx_foreign_inner_packets);
    for (const bool best_effort : {false, true}) {
      Labels with_class = labels;
      with_class.emplace_back("class", best_effort ? "best_effort" : "on_time");
      playout_counters(e, with_class,
                       best_effort ? t.best_effort.counters() : t.on_time.counters(), !best_effort);
    }
    for (const auto reason : {wire::DropReason::kDuplicate, wire::DropReason::kTooOld}) {
      Labels with_reason = labels;
      with_reason.emplace_back("reason", std::string(to_string(reason)));
      e.counter("detwan_gw_tunnel_rx_replay_drops_total",
                "Packets refused by the tunnel's replay window, by reason", with_reason,
                t.replay_drops[reason]);
    }
  }
}

void Engine::write_peers_and_host(common::prometheus::Exposition& e,
                                  const std::vector<Engine*>& shards, int64_t now_ns) {
  const auto count = static_cast<uint32_t>(shards.size());
  const Impl& m = *shards[0]->impl_;
  for (uint32_t i = 0; i < m.peers.size(); ++i) {
    // A peer's control state lives in its lead shard (shard.h).
    uint32_t lead = 0;
    for (uint32_t k = 0; k < count; ++k) {
      if (count > 1 && shards[k]->leads_peer(i)) lead = k;
    }
    const Impl& l = *shards[lead]->impl_;
    const PeerState& p = l.peers[i];
    const PeerConfig& config = l.peer_config(p);
    const Labels labels{{"peer", config.name}};
    const PeerCounters& c = p.counters;
    e.gauge("detwan_gw_peer_up", "1 if a packet came from the peer within dead_after", labels,
            p.up ? 1 : 0);
    if (p.last_rx_ns != kNeverNs) {
      e.gauge("detwan_gw_peer_last_rx_age_seconds", "Time since the last packet from the peer",
              labels, static_cast<double>(now_ns - p.last_rx_ns) * 1e-9);
    }
    e.gauge("detwan_gw_peer_clock_offset_seconds",
            "Local minus peer clock applied to the playouts (configured or estimated)", labels,
            static_cast<double>(p.playout_offset_ns) * 1e-9);
    if (p.clock.has_estimate()) {
      e.gauge("detwan_gw_peer_clock_rtt_seconds", "Round trip of the best time-exchange sample",
              labels, static_cast<double>(p.clock.best().rtt_ns) * 1e-9);
    }
    e.counter("detwan_gw_peer_clock_samples_total", "Time-exchange samples accepted", labels,
              p.clock.samples());
    e.counter("detwan_gw_peer_time_requests_sent_total", "Time requests sent", labels,
              c.time_requests_sent);
    e.counter("detwan_gw_peer_time_requests_received_total", "Time requests received", labels,
              c.time_requests_received);
    e.counter("detwan_gw_peer_time_responses_sent_total", "Time responses sent", labels,
              c.time_responses_sent);
    e.counter("detwan_gw_peer_time_responses_received_total", "Time responses received", labels,
              c.time_responses_received);
    e.counter("detwan_gw_peer_keepalives_sent_total", "Keepalives sent", labels, c.keepalives_sent);
    e.counter("detwan_gw_peer_keepalives_received_total", "Keepalives received", labels,
              c.keepalives_received);
    e.counter("detwan_gw_peer_restarts_total",
              "Keepalives with a new session epoch: the peer gateway restarted", labels,
              c.restarts);
    for (const auto& [reason, value] :
         {std::pair{"replayed", c.control_replayed}, std::pair{"reflected", c.control_reflected},
          std::pair{"stale", c.control_stale}}) {
      Labels with_reason = labels;
      with_reason.emplace_back("reason", reason);
      e.counter("detwan_gw_peer_control_refused_total",
                "Control packets refused: replayed in the epoch, our own sent back, or from an "
                "epoch not accepted (an earlier boot's)",
                with_reason, value);
    }
    e.counter("detwan_gw_peer_early_keepalives_total",
              "Keepalives sent ahead of the interval: the peer did not know our epoch", labels,
              c.early_keepalives);
  }
  LocalIo io = m.local;
  for (uint32_t k = 1; k < count; ++k) add_io(io, shards[k]->impl_->local);
  e.counter("detwan_gw_tun_rx_packets_total", "Packets read from the TUN device", {},
            io.tun_rx_packets);
  e.counter("detwan_gw_tun_tx_packets_total", "Packets written to the TUN device", {},
            io.tun_tx_packets);
  e.counter("detwan_gw_tun_rx_errors_total", "Failed TUN reads", {}, io.tun_rx_errors);
  e.counter("detwan_gw_tun_rx_batches_total",
            "TUN reads that carried several packets (UDP GSO, tun.offload)", {}, io.tun_rx_batches);
  e.counter("detwan_gw_tun_tx_batches_total",
            "TUN writes that carried several packets (UDP GSO, tun.offload)", {},
            io.tun_tx_batches);
  e.counter("detwan_gw_tun_gso_refused_total",
            "UDP GSO runs the TUN device refused (then written packet by packet)", {},
            io.tun_gso_refused);
  e.counter("detwan_gw_tun_tx_errors_total", "Failed TUN writes", {}, io.tun_tx_errors);
  e.counter("detwan_gw_service_rx_packets_total", "Datagrams received on service ports", {},
            io.service_rx_packets);
  e.counter("detwan_gw_service_tx_packets_total", "Datagrams sent from service ports", {},
            io.service_tx_packets);
  e.counter("detwan_gw_service_rx_errors_total", "Failed service receives", {},
            io.service_rx_errors);
  e.counter("detwan_gw_service_tx_errors_total", "Failed service sends", {}, io.service_tx_errors);
  e.counter("detwan_gw_loop_sleeps_total",
            "Sleeps of the datapath loop (io_uring, timing low-cpu)",
            {}, io.loop_sleeps);
  e.counter("detwan_gw_loop_coalesced_sleeps_total",
            "Sleeps that did not wake for a single arrival (gateway.rx_coalesce)", {},
            io.loop_coalesced_sleeps);
  e.counter("detwan_gw_loop_blind_sleeps_total",
            "Coalesced sleeps outside the ring: no arrival woke them before their end", {},
            io.loop_blind_sleeps);
  e.counter("detwan_gw_loop_wakeups_total", "How the loop's sleeps ended", {{"cause", "timer"}},
            io.loop_timer_wakeups);
  e.counter("detwan_gw_loop_wakeups_total", "How the loop's sleeps ended", {{"cause", "io"}},
            io.loop_io_wakeups);
}

}  // namespace detwan::dataplane::gw

// Engine::prometheus_text(): the engine's counters in the Prometheus text exposition format
// 0.0.4 (docs/gateway-stats.md, "Statistics"; written by common/prometheus.h). Counters end in
// _total;
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
#include "dataplane/gw/engine_counters.h"
#include "dataplane/gw/engine_impl.h"
#include "dataplane/gw/shard.h"

namespace detwan::dataplane::gw {
namespace {

using common::prometheus::Exposition;
using common::prometheus::kDelayBucketsSeconds;
using common::prometheus::kErrorBucketsSeconds;
using common::prometheus::Labels;

// The scheduler counters of one owner (a port, its best effort, or a tunnel) under `prefix`
// ("detwan_gw_port_tx_", ...). Per tunnel only the departure error is a histogram (queue_wait
// stays in stats and per port): a histogram is ~20 series, and a gateway may carry a thousand
// tunnels.
void tx_counters(Exposition& e, std::string_view prefix, const Labels& labels,
                 const sched::TxCounters& c, bool queue_wait = true) {
  const auto name = [&](std::string_view metric) { return fmt::format("{}{}", prefix, metric); };
  e.counters(prefix, labels, c, sched::kTxCounterFields);
  for (int i = 0; i < sched::kTxDropCount; ++i) {
    Labels with_reason = labels;
    with_reason.emplace_back("reason", std::string(to_string(static_cast<sched::TxDrop>(i))));
    e.counter(name("drops_total"), "Frames dropped by the scheduler, by reason", with_reason,
              c.dropped[i]);
  }
  e.histogram_ns(name("departure_error_seconds"), "Actual minus scheduled departure", labels,
                 c.departure_error_ns, kErrorBucketsSeconds);
  if (queue_wait) {
    e.histogram_ns(name("queue_wait_seconds"), "Scheduled departure minus enqueue time", labels,
                   c.queue_wait_ns, kErrorBucketsSeconds);
  }
}

// Best effort is released on receipt: its one-way delay is its WAN delay and it has no target,
// so only the on-time class has the one-way delay, lateness and playout error histograms.
void playout_counters(Exposition& e, const Labels& labels, const sched::PlayoutCounters& c,
                      bool on_time) {
  constexpr std::string_view p = "detwan_gw_tunnel_rx";
  e.counters("detwan_gw_tunnel_rx_", labels, c, sched::kPlayoutCounterFields);
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
  e.histogram_ns(fmt::format("{}_playout_error_seconds", p), "Actual minus target release", labels,
                 c.playout_error_ns, kErrorBucketsSeconds);
}

// Sums of the shards' counters (prometheus_text over shards).
void add_tx(sched::TxCounters& into, const sched::TxCounters& from) {
  common::add_counters(into, from, sched::kTxCounterFields);
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
      common::add_counters(io, other.io, kPortIoFields);
      for (std::size_t r = 0; r < wire::kDropReasonCount; ++r) {
        rx_drops.by_reason[r] += other.rx_drops.by_reason[r];
      }
      add_tx(port_tx, other.scheduler.port_counters());
      add_tx(best_effort_tx, other.scheduler.best_effort_counters());
    }
    e.counters(kPortIoPrefix, labels, io, kPortIoFields);
    for (std::size_t r = 0; r < wire::kDropReasonCount; ++r) {
      Labels with_reason = labels;
      with_reason.emplace_back("reason", std::string(to_string(static_cast<wire::DropReason>(r))));
      e.counter("detwan_gw_port_rx_wire_drops_total",
                "Tunnel datagrams dropped by the wire checks, by reason", with_reason,
                rx_drops.by_reason[r]);
    }
    tx_counters(e, "detwan_gw_port_tx_", labels, port_tx);
    tx_counters(e, "detwan_gw_best_effort_tx_", labels, best_effort_tx);
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
      tx_counters(e, "detwan_gw_tunnel_tx_", labels, *c, false);
    }
    if (t.protected_path()) {  // its copies, on the protection port (label port says which)
      const Labels copy_labels{{"tunnel", std::to_string(t.id)},
                               {"port", o.config.wan_ports[t.protect_port].name}};
      if (const auto* c = o.ports[t.protect_port].scheduler.tunnel_counters(t.id)) {
        tx_counters(e, "detwan_gw_tunnel_tx_", copy_labels, *c, false);
      }
    }
    const TunnelCounters& tc = t.counters;
    e.counters(kTunnelPrefix, labels, tc, kTunnelTxFields);
    e.counters(kTunnelPrefix, labels, tc, kTunnelRxFields);
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
    if (t.auth) {  // authenticated tunnel (docs/wire-format.md, "Authenticated tunnels")
      const AuthCounters& ac = t.auth->counters;
      e.counters(kAuthPrefix, labels, ac, kAuthFields);
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
    for (const bool best_effort : {false, true}) {
      Labels with_class = labels;
      with_class.emplace_back("class", best_effort ? "best_effort" : "on_time");
      playout_counters(e, with_class, best_effort ? t.best_effort.counters() : t.on_time.counters(),
                       !best_effort);
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
    e.counters(kPeerPrefix, labels, p.counters, kPeerFields);
  }
  LocalIo io = m.local;
  ControlIo control = m.control;
  for (uint32_t k = 1; k < count; ++k) {
    common::add_counters(io, shards[k]->impl_->local, kLocalIoFields);
    common::add_counters(control, shards[k]->impl_->control, kControlIoFields);
  }
  e.counters(kLocalIoPrefix, {}, io, kLocalIoFields);
  e.counters(kControlIoPrefix, {}, control, kControlIoFields);
}

}  // namespace detwan::dataplane::gw

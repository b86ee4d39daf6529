// Engine::stats_json(): everything the engine counts as one JSON document (schema in
// docs/gateway-stats.md, "Statistics"). Built with boost::json on the datapath thread between
// polls;
// the sched and wire libraries' own JSON (counters_json, summary_json, to_json) is parsed and
// embedded as is, so the document is valid JSON by construction.
#include <string>

#include <fmt/format.h>

#include <boost/json.hpp>

#include "common/x25519.h"
#include "dataplane/gw/engine.h"
#include "dataplane/gw/engine_counters.h"
#include "dataplane/gw/engine_impl.h"
#include "dataplane/sched/gate_control_list.h"

namespace detwan::dataplane::gw {
namespace {

namespace json = boost::json;

json::value parse_embedded(const std::string& text) {
  boost::system::error_code ec;
  json::value value = json::parse(text, ec);
  if (ec) return json::value(nullptr);  // never with the libraries' generators
  return value;
}

// The fields of a counter table into `into` (engine_counters.h); a key "a.b" goes to
// into["a"]["b"].
template <typename C, size_t N>
void put_counters(json::object& into, const C& c, const common::CounterField<C> (&fields)[N]) {
  for (const common::CounterField<C>& f : fields) {
    const size_t dot = f.key.find('.');
    if (dot == std::string_view::npos) {
      into[f.key] = c.*f.member;
      continue;
    }
    json::value& inner = into[f.key.substr(0, dot)];
    if (!inner.is_object()) inner = json::object{};
    inner.as_object()[f.key.substr(dot + 1)] = c.*f.member;
  }
}

template <typename C, size_t N>
json::object counters_object(const C& c, const common::CounterField<C> (&fields)[N]) {
  json::object out;
  put_counters(out, c, fields);
  return out;
}

// The windowed percentiles of one histogram (docs/gateway-stats.md, "Statistics": "windows").
json::object windows_json(const common::HistogramHistory& history,
                          const common::LogLinearHistogram& current, int64_t now_ns) {
  json::object out;
  for (const auto& [name, window_ns] :
       {std::pair{"10s", int64_t{10'000'000'000}}, std::pair{"1m", int64_t{60'000'000'000}},
        std::pair{"5m", int64_t{300'000'000'000}}}) {
    const common::HistogramWindow w = history.window(current, window_ns, now_ns);
    out[name] =
        json::object{{"span_ns", w.span_ns}, {"count", w.count}, {"p50", w.p50}, {"p90", w.p90},
                     {"p99", w.p99},         {"p99_9", w.p99_9}, {"max", w.max}};
  }
  return out;
}

json::value optional_ns(bool present, int64_t value) {
  return present ? json::value(value) : json::value(nullptr);
}

}  // namespace

std::string Engine::stats_json(int64_t now_ns) const {
  const Impl& m = *impl_;
  json::object root;
  root["gateway"] = m.config.name;
  root["now_ns"] = now_ns;
  root["start_ns"] = m.start_ns;
  root["uptime_ns"] = now_ns - m.start_ns;
  root["boot_id"] = m.boot_id;
  // The identity key's public half (base64 of 32 bytes), for the agent's topology; null: none.
  root["public_key"] =
      m.config.identity
          ? json::value(common::crypto::x25519_public_base64(m.config.identity->keys.public_key))
          : json::value(nullptr);
  root["generation"] = m.generation;

  json::object drops;
  for (int i = 0; i < kEngineDropCount; ++i) {
    drops[to_string(static_cast<EngineDrop>(i))] = m.drops[static_cast<std::size_t>(i)];
  }
  root["drops"] = std::move(drops);

  std::vector<json::value> scheduler_json;  // per port, for the tunnels' tx counters below
  json::array ports;
  for (uint32_t i = 0; i < m.ports.size(); ++i) {
    const PortState& port = m.ports[i];
    const WanPortConfig& config = m.port_config(port);
    scheduler_json.push_back(parse_embedded(port.scheduler.counters_json()));
    ports.push_back(json::object{
        {"name", config.name},
        {"index", i},
        {"ip_version", port.ip == wire::IpVersion::kV6 ? 6 : 4},
        {"mtu_bytes", config.mtu_bytes},
        {"max_payload_bytes", port.max_payload_bytes},
        {"line_rate_bps", config.line_rate_bps},
        {"io", counters_object(port.io, kPortIoFields)},
        {"rx_drops", parse_embedded(wire::to_json(port.rx_drops))},
        {"tx", scheduler_json.back()},
    });
  }
  root["ports"] = std::move(ports);

  json::array tunnels;
  for (uint32_t i = 0; i < m.tunnels.size(); ++i) {
    const TunnelState& t = m.tunnels[i];
    if (!t.active) continue;  // removed: its counters went with it (the port keeps totals)
    const TunnelConfig& config = m.tunnel_config(t);
    // The tunnel's counters in a port's scheduler (its peer's port; with protection also the
    // protection peer's).
    const auto port_counters = [&](uint32_t port) -> json::value {
      if (const auto* all = scheduler_json[port].if_object()) {
        if (const auto* by_id = all->if_contains("tunnels"); by_id && by_id->is_object()) {
          if (const auto* c = by_id->as_object().if_contains(std::to_string(t.id))) return *c;
        }
      }
      return nullptr;
    };
    json::value scheduler_counters = port_counters(t.port);
    const TunnelCounters& c = t.counters;
    json::object tx{{"scheduler", scheduler_counters}, {"next_sequence", t.next_sequence}};
    put_counters(tx, c, kTunnelTxFields);
    json::object rx{
        {"replay_drops", json::object{{"duplicate", t.replay_drops[wire::DropReason::kDuplicate]},
                                      {"too_old", t.replay_drops[wire::DropReason::kTooOld]}}},
        {"replay_top", nullptr},
        {"clock_offset_ns", t.on_time.config().clock_offset_ns},
        {"on_time", parse_embedded(t.on_time.counters_json())},
        {"best_effort", parse_embedded(t.best_effort.counters_json())},
    };
    put_counters(rx, c, kTunnelRxFields);
    if (!t.replay.empty()) rx["replay_top"] = t.replay.top();
    rx["windows"] = json::object{
        {"on_time",
         json::object{{"wan_delay_ns", windows_json(t.windows.on_time_wan_delay,
                                                    t.on_time.counters().wan_delay_ns, now_ns)},
                      {"lateness_ns", windows_json(t.windows.on_time_lateness,
                                                   t.on_time.counters().lateness_ns, now_ns)}}},
        {"best_effort",
         json::object{
             {"wan_delay_ns", windows_json(t.windows.best_effort_wan_delay,
                                           t.best_effort.counters().wan_delay_ns, now_ns)}}}};
    // Per path: the primary (0) and, on a protected tunnel, the protection path (1).
    json::array paths;
    for (uint32_t path = 0; path < (t.protected_path() ? kMaxPaths : 1); ++path) {
      const uint32_t peer = path == kPrimaryPathId ? t.peer : t.protect_peer;
      const uint32_t port = path == kPrimaryPathId ? t.port : t.protect_port;
      paths.push_back(json::object{
          {"path_id", path},
          {"peer", m.config.peers[m.peers[peer].config_index].name},
          {"port", m.config.wan_ports[m.ports[port].config_index].name},
          {"peer_up", m.peers[peer].up},
          {"rx_packets", c.path_rx_packets[path]},
          {"first_packets", c.path_first_packets[path]},
          {"eliminated_packets", c.path_eliminated_packets[path]},
      });
    }
    tx["protection_scheduler"] = t.protected_path() ? port_counters(t.protect_port) : nullptr;
    json::value auth = nullptr;  // null: not authenticated
    if (t.auth) {
      const AuthCounters& ac = t.auth->counters;
      json::array keys;
      for (const AuthKeySlot& key : t.auth->keys) {
        keys.push_back(json::object{{"id", key.id},
                                    {"fingerprint", aead::fingerprint(key.secret)},
                                    {"opened_packets", key.opened_packets}});
      }
      json::object drops;
      for (int r = 0; r < kAuthDropCount; ++r) {
        drops[to_string(static_cast<AuthDrop>(r))] = ac.drops[static_cast<size_t>(r)];
      }
      auth = json::object{
          {"cipher", aead::to_string(t.auth->cipher)},
          {"tx_key", t.auth->keys[t.auth->tx].id},
          {"tx_session", t.auth->tx_session},
          {"keys", std::move(keys)},
          {"peer_epoch", t.auth->peer_epoch == 0
                             ? json::value(nullptr)
                             : json::value(fmt::format("{:016x}", t.auth->peer_epoch))},
          {"drops", std::move(drops)}};
      put_counters(auth.as_object(), ac, kAuthFields);
    } else if (c.auth_unexpected_packets != 0) {
      auth = json::object{{"drops", json::object{{"auth_unexpected", c.auth_unexpected_packets}}}};
    }
    tunnels.push_back(json::object{
        {"id", t.id},
        {"index", i},
        {"peer", config.peer},
        {"owner", config.owner},
        {"port", m.config.wan_ports[t.port].name},
        {"rate_bps", config.rate_bps},
        {"slots", sched::format_slot_list(config.slots)},
        {"bound_ns", config.bound_ns},
        {"over_rate", config.over_rate == sched::OverRateAction::kDrop ? "drop" : "best_effort"},
        {"late", config.late == sched::LateAction::kDrop ? "drop" : "deliver"},
        {"protected", t.protected_path()},
        {"paths", std::move(paths)},
        {"auth", std::move(auth)},
        {"tx", std::move(tx)},
        {"rx", std::move(rx)},
    });
  }
  root["tunnels"] = std::move(tunnels);

  json::array peers;
  for (const PeerState& p : m.peers) {
    const PeerConfig& config = m.peer_config(p);
    const bool heard = p.last_rx_ns != kNeverNs;
    const bool estimated = p.clock.has_estimate();
    const wire::ClockSample best = p.clock.best();
    json::object peer{
        {"name", config.name},
        {"port", m.config.wan_ports[p.port].name},
        {"state", p.up ? "up" : "down"},
        {"control_tunnel", p.control_tunnel == kNoIndex
                               ? json::value(nullptr)
                               : json::value(m.tunnels[p.control_tunnel].id)},
        {"last_rx_age_ns", optional_ns(heard, heard ? now_ns - p.last_rx_ns : 0)},
        {"session_epoch",
         p.epoch == 0 ? json::value(nullptr) : json::value(fmt::format("{:016x}", p.epoch))},
        {"clock",
         json::object{
             {"source", config.clock_offset_ns ? "configured" : "auto"},
             {"offset_ns", p.playout_offset_ns},
             {"estimated_offset_ns", optional_ns(estimated, -best.offset_ns)},
             {"rtt_ns", optional_ns(estimated, best.rtt_ns)},
             {"samples", p.clock.samples()},
             {"last_sample_age_ns",
              optional_ns(estimated, estimated ? now_ns - p.clock.last_sample_ns() : 0)},
         }},
        {"keepalive", json::object{{"last_rx_counter", p.last_rx_keepalive},
                                   {"peer_last_rx_counter", p.peer_last_rx_counter}}},
    };
    put_counters(peer, p.counters, kPeerFields);
    peers.push_back(std::move(peer));
  }
  root["peers"] = std::move(peers);
  root["local"] = counters_object(m.local, kLocalIoFields);
  root["control"] = counters_object(m.control, kControlIoFields);
  return json::serialize(root);
}

}  // namespace detwan::dataplane::gw

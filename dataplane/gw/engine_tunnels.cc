// Engine::tunnels_json(): the configuration in force, as the control channel's "tunnels" answer
// (schema in docs/gateway.md, "Control channel"). Values in base units, names as in the file
// where they are words (over_rate "best-effort", missed_slot "next-window").
#include <string>

#include <boost/json.hpp>

#include "common/x25519.h"
#include "dataplane/gw/config_internal.h"
#include "dataplane/gw/engine.h"
#include "dataplane/gw/engine_impl.h"

namespace detwan::dataplane::gw {
namespace {

namespace json = boost::json;

json::object tunnel_json(const TunnelConfig& t, uint64_t guaranteed_bps) {
  json::array slots;
  for (const uint32_t slot : t.slots) slots.push_back(slot);
  json::array dst;
  for (const Prefix& prefix : t.dst_prefixes) dst.push_back(json::string(format_prefix(prefix)));
  json::array src;
  for (const Prefix& prefix : t.src_prefixes) src.push_back(json::string(format_prefix(prefix)));
  json::array ports;
  for (const PortRange& range : t.udp_ports) {
    ports.push_back(json::string(config_detail::format_port_range(range)));
  }
  json::object out{
      {"id", t.id},
      {"peer", t.peer},
      {"owner", t.owner},
      {"rate_bps", t.rate_bps},
      {"slots", std::move(slots)},
      {"burst_bytes", t.burst_bytes},
      {"over_rate", config_detail::over_rate_name(t.over_rate)},
      {"shaper_rate_bps", t.shaper_rate_bps},
      {"queue_frames", t.queue_frames},
      {"max_wait_ns", t.max_wait_ns},
      {"missed_slot", t.missed_slot == sched::MissedSlot::kDrop ? "drop" : "next-window"},
      {"bound_ns", t.bound_ns},
      {"late", config_detail::late_name(t.late)},
      {"max_hold_ns", t.max_hold_ns},
      {"playout_capacity_frames", t.playout_capacity_frames},
      {"dscp", t.dscp},
      {"replay_window_bits", t.replay_window_bits},
      {"match",
       json::object{
           {"dst", std::move(dst)}, {"src", std::move(src)}, {"udp_ports", std::move(ports)}}},
      {"foreign_source", t.foreign_source == ForeignSource::kBestEffort ? "best-effort" : "drop"},
      {"guaranteed_rate_bps", guaranteed_bps},
  };
  if (t.service_listen || t.service_deliver) {
    json::object service;
    if (t.service_listen) service["listen"] = format_endpoint(*t.service_listen);
    if (t.service_deliver) service["deliver"] = format_endpoint(*t.service_deliver);
    out["service"] = std::move(service);
  }
  if (t.protection) {
    json::array protection_slots;
    for (const uint32_t slot : t.protection->slots) protection_slots.push_back(slot);
    out["protection"] =
        json::object{{"peer", t.protection->peer}, {"slots", std::move(protection_slots)}};
  }
  if (t.auth) {
    json::array keys;
    for (const TunnelKey& key : t.auth->keys) {
      json::object item{{"id", key.id}, {"fingerprint", aead::fingerprint(key.secret)}};
      if (t.auth->peer_public_key) item["context"] = key.context;
      keys.push_back(std::move(item));
    }
    json::object auth{{"cipher", aead::to_string(t.auth->cipher)},
                      {"keys", std::move(keys)},
                      {"tx_key", t.auth->tx_key}};
    if (t.auth->peer_public_key) {
      auth["key_exchange"] = "x25519";
      auth["peer_public_key"] = common::crypto::x25519_public_base64(*t.auth->peer_public_key);
    }
    out["auth"] = std::move(auth);
  }
  return out;
}

}  // namespace

std::string Engine::tunnels_json() const {
  const Impl& m = *impl_;
  json::array tunnels;
  for (const TunnelConfig& config : m.config.tunnels) {
    const uint32_t index = m.find_tunnel(config.id);
    uint64_t guaranteed = 0;
    if (index != kNoIndex) {
      const sched::GateControlList& gcl = m.ports[m.tunnels[index].port].scheduler.gcl();
      const sched::OwnerIndex owner = gcl.find_owner(config.id);
      if (owner != sched::kNoOwner) guaranteed = gcl.guaranteed_rate_bps(owner);
    }
    tunnels.push_back(tunnel_json(config, guaranteed));
  }
  json::array peers;
  for (const PeerConfig& peer : m.config.peers) {
    peers.push_back(json::object{{"name", peer.name},
                                 {"wan_port", peer.wan_port},
                                 {"endpoint", format_endpoint(peer.endpoint)}});
  }
  json::array ports;
  for (const PortState& state : m.ports) {
    const WanPortConfig& port = m.port_config(state);
    ports.push_back(json::object{{"name", port.name},
                                 {"local", format_endpoint(port.local)},
                                 {"line_rate_bps", port.line_rate_bps},
                                 {"mtu_bytes", port.mtu_bytes},
                                 {"cycle_ns", port.cycle_ns},
                                 {"slot_count", port.slot_count},
                                 {"guard_ns", port.guard_ns},
                                 {"max_frame_bytes", max_frame_bytes(port)},
                                 {"max_payload_bytes", state.max_payload_bytes}});
  }
  json::object root{{"gateway", m.config.name},   {"boot_id", m.boot_id},
                    {"generation", m.generation}, {"tunnels", std::move(tunnels)},
                    {"peers", std::move(peers)},  {"wan_ports", std::move(ports)}};
  // The identity's public key (base64), which the agent checks against its topology.
  root["public_key"] =
      m.config.identity
          ? json::value(common::crypto::x25519_public_base64(m.config.identity->keys.public_key))
          : json::value(nullptr);
  return json::serialize(root);
}

}  // namespace detwan::dataplane::gw

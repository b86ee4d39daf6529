// describe(): the effective gateway configuration as YAML that load_gateway_config() reads back
// to an equal GatewayConfig, every default spelled out, with derived values as comments.
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/units.h"
#include "common/x25519.h"
#include "dataplane/gw/config.h"
#include "dataplane/gw/config_internal.h"
#include "dataplane/sched/gate_control_list.h"

namespace detwan::dataplane::gw {
namespace config_detail {

std::string_view backend_name(Backend backend) noexcept {
  return backend == Backend::kDpdk ? "dpdk" : "uring";
}
std::string_view timing_name(TimingMode timing) noexcept {
  return timing == TimingMode::kBusy ? "busy" : "low-cpu";
}
std::string_view over_rate_name(sched::OverRateAction action) noexcept {
  return action == sched::OverRateAction::kBestEffort ? "best-effort" : "drop";
}
std::string_view late_name(sched::LateAction action) noexcept {
  return action == sched::LateAction::kDrop ? "drop" : "deliver";
}

namespace {

using common::format_duration_ns;
using common::format_rate_bps;

// A YAML double-quoted scalar: reads back as exactly `text`.
std::string quoted(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20 || byte == 0x7F) {
      out += fmt::format("\\x{:02x}", byte);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

template <typename Item, typename Format>
std::string flow_list(const std::vector<Item>& items, Format format) {
  std::string out = "[";
  for (const Item& item : items) {
    if (out.size() > 1) out += ", ";
    out += quoted(format(item));
  }
  return out + "]";
}

std::string percent(double fraction) { return fmt::format("{:.1f}%", fraction * 100.0); }

// Comment lines, each "<indent># <line>".
void comment(std::string* out, std::string_view indent, std::string_view text) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    *out += fmt::format("{}# {}\n", indent, text.substr(start, end - start));
    start = end + 1;
  }
}

void describe_port(std::string* out, const GatewayConfig& config, const WanPortConfig& port) {
  *out += fmt::format("  - name: {}\n", quoted(port.name));
  *out += fmt::format("    local: {}\n", quoted(format_endpoint(port.local)));
  *out += fmt::format("    line_rate: {}\n", format_rate_bps(port.line_rate_bps));
  *out += fmt::format("    mtu: {}\n", port.mtu_bytes);
  *out += fmt::format("    cycle: {}\n", format_duration_ns(port.cycle_ns));
  *out += fmt::format("    slots: {}\n", port.slot_count);
  *out += fmt::format("    guard: {}\n", format_duration_ns(port.guard_ns));
  *out += fmt::format("    base_time: {}\n", format_duration_ns(port.base_time_ns));
  *out += fmt::format("    best_effort_dscp: {}\n", port.best_effort_dscp);
  *out += fmt::format("    capacity: {}\n", port.capacity_frames);
  if (port.dpdk) {
    *out += "    dpdk:\n";
    *out += fmt::format("      device: {}\n", quoted(port.dpdk->device));
    *out += fmt::format("      local_mac: {}\n", quoted(port.dpdk->local_mac));
    *out += fmt::format("      next_hop_mac: {}\n", quoted(port.dpdk->next_hop_mac));
    *out += fmt::format("      rx_queue: {}\n", port.dpdk->rx_queue_size);
    *out += fmt::format("      tx_queue: {}\n", port.dpdk->tx_queue_size);
  }
  const bool v6 = port.local.ipv6;
  comment(out, "    ",
          fmt::format("slot length {}; max frame {} bytes (mtu + {} Ethernet); max tunnel "
                      "payload {} bytes (mtu - {} bytes of {} encapsulation)",
                      format_duration_ns(port.cycle_ns / port.slot_count), max_frame_bytes(port),
                      kEthernetOverheadBytes, max_tunnel_payload_bytes(port),
                      wire::encap_overhead_bytes(ip_version(port.local)), v6 ? "IPv6" : "IPv4"));
  auto gcl = sched::GateControlList::create(port_gcl_config(config, port));
  if (!gcl) {
    comment(out, "    ", "schedule INVALID: " + gcl.error().message);
    return;
  }
  comment(out, "    ", "schedule: " + gcl->describe());
}

void describe_peer(std::string* out, const PeerConfig& peer) {
  *out += fmt::format("  - name: {}\n", quoted(peer.name));
  *out += fmt::format("    wan_port: {}\n", quoted(peer.wan_port));
  *out += fmt::format("    endpoint: {}\n", quoted(format_endpoint(peer.endpoint)));
  if (peer.clock_offset_ns) {
    *out += fmt::format("    clock_offset: {}\n", format_duration_ns(*peer.clock_offset_ns));
  } else {
    *out += "    clock_offset: auto  # estimated by two-way time exchange\n";
  }
  *out += fmt::format("    time_exchange_interval: {}\n",
                      format_duration_ns(peer.time_exchange_interval_ns));
  *out +=
      fmt::format("    keepalive_interval: {}\n", format_duration_ns(peer.keepalive_interval_ns));
  *out += fmt::format("    dead_after: {}\n", format_duration_ns(peer.dead_after_ns));
  *out += fmt::format("    min_path_delay: {}\n", format_duration_ns(peer.min_path_delay_ns));
}

std::string tunnel_derived(const GatewayConfig& config, const TunnelConfig& tunnel) {
  const PeerConfig* peer = find_peer(config, tunnel.peer);
  const WanPortConfig* port = peer != nullptr ? find_wan_port(config, peer->wan_port) : nullptr;
  if (port == nullptr) return "peer or WAN port unknown";
  std::string text = fmt::format(
      "on WAN port '{}': {}/{} slots ({} of the cycle), rate {} = {} of the line rate {}",
      port->name, tunnel.slots.size(), port->slot_count,
      percent(static_cast<double>(tunnel.slots.size()) / port->slot_count),
      rate_text(tunnel.rate_bps),
      percent(static_cast<double>(tunnel.rate_bps) / static_cast<double>(port->line_rate_bps)),
      rate_text(port->line_rate_bps));
  if (auto gcl = sched::GateControlList::create(port_gcl_config(config, *port))) {
    const uint64_t guaranteed = gcl->guaranteed_rate_bps(gcl->find_owner(tunnel.id));
    text += fmt::format(
        "\nguaranteed {} ({} of the port) after guard bands and {}-byte frames",
        rate_text(guaranteed),
        percent(static_cast<double>(guaranteed) / static_cast<double>(port->line_rate_bps)),
        max_frame_bytes(*port));
  }
  text += tunnel.bound_ns == 0
              ? std::string("\nno playout: packets are delivered on receipt")
              : fmt::format("\ndelivered at tx timestamp + {} (clock offset {})",
                            format_duration_ns(tunnel.bound_ns),
                            peer->clock_offset_ns ? format_duration_ns(*peer->clock_offset_ns)
                                                  : std::string("auto"));
  return text;
}

void describe_tunnel(std::string* out, const GatewayConfig& config, const TunnelConfig& tunnel) {
  *out += fmt::format("  - id: {}\n", tunnel.id);
  *out += fmt::format("    peer: {}\n", quoted(tunnel.peer));
  *out += fmt::format("    owner: {}\n", quoted(tunnel.owner));
  *out += fmt::format("    rate: {}\n", format_rate_bps(tunnel.rate_bps));
  *out += fmt::format("    slots: {}\n", quoted(sched::format_slot_list(tunnel.slots)));
  *out += fmt::format("    burst: {}\n", tunnel.burst_bytes == 0
                                             ? std::string("auto")
                                             : common::format_size_bytes(tunnel.burst_bytes));
  *out += fmt::format("    over_rate: {}\n", over_rate_name(tunnel.over_rate));
  *out += fmt::format("    shaper_rate: {}\n", tunnel.shaper_rate_bps == 0
                                                   ? std::string("0")
                                                   : format_rate_bps(tunnel.shaper_rate_bps));
  *out += fmt::format("    queue: {}\n", tunnel.queue_frames);
  *out += fmt::format("    max_wait: {}{}\n", format_duration_ns(tunnel.max_wait_ns),
                      tunnel.max_wait_ns == 0 ? "  # no limit" : "");
  *out += fmt::format("    missed_slot: {}\n",
                      tunnel.missed_slot == sched::MissedSlot::kDrop ? "drop" : "next-window");
  *out += fmt::format("    bound: {}{}\n", format_duration_ns(tunnel.bound_ns),
                      tunnel.bound_ns == 0 ? "  # deliver on receipt" : "");
  *out += fmt::format("    late: {}\n", late_name(tunnel.late));
  *out += fmt::format("    max_hold: {}\n", format_duration_ns(tunnel.max_hold_ns));
  *out += fmt::format("    playout_capacity: {}\n", tunnel.playout_capacity_frames);
  *out += fmt::format("    dscp: {}\n", tunnel.dscp);
  *out += fmt::format("    replay_window: {}\n", tunnel.replay_window_bits);
  *out += "    match:\n";
  *out += fmt::format("      dst: {}\n", flow_list(tunnel.dst_prefixes, format_prefix));
  *out += fmt::format("      src: {}{}\n", flow_list(tunnel.src_prefixes, format_prefix),
                      tunnel.src_prefixes.empty() ? "  # any source" : "");
  *out += fmt::format("      udp_ports: {}\n", flow_list(tunnel.udp_ports, format_port_range));
  *out += fmt::format("    foreign_source: {}\n",
                      tunnel.foreign_source == ForeignSource::kBestEffort ? "best-effort" : "drop");
  if (tunnel.service_listen || tunnel.service_deliver) {
    *out += "    service:\n";
    if (tunnel.service_listen) {
      *out += fmt::format("      listen: {}\n", quoted(format_endpoint(*tunnel.service_listen)));
    }
    if (tunnel.service_deliver) {
      *out += fmt::format("      deliver: {}\n", quoted(format_endpoint(*tunnel.service_deliver)));
    }
  }
  if (tunnel.protection) {
    *out += "    protection:\n";
    *out += fmt::format("      peer: {}\n", quoted(tunnel.protection->peer));
    *out +=
        fmt::format("      slots: {}\n", quoted(sched::format_slot_list(tunnel.protection->slots)));
  }
  if (tunnel.auth) {
    // Secrets are never printed: the keys by id and fingerprint (first 8 bytes of SHA-256).
    *out += "    auth:\n";
    *out += fmt::format("      cipher: {}\n", aead::to_string(tunnel.auth->cipher));
    if (tunnel.auth->peer_public_key) {
      *out += "      key_exchange: x25519\n";
      *out +=
          fmt::format("      peer_public_key: {}\n",
                      quoted(common::crypto::x25519_public_base64(*tunnel.auth->peer_public_key)));
    }
    *out += "      keys:\n";
    for (const TunnelKey& key : tunnel.auth->keys) {
      if (tunnel.auth->peer_public_key) {
        *out += fmt::format("        - id: {}\n          context: {}  # fingerprint {}\n", key.id,
                            quoted(key.context), aead::fingerprint(key.secret));
      } else {
        *out += fmt::format("        - id: {}\n          secret: \"(fingerprint {})\"\n", key.id,
                            aead::fingerprint(key.secret));
      }
    }
    *out += fmt::format("      tx_key: {}\n", tunnel.auth->tx_key);
  } else {
    *out += "    auth: none  # unauthenticated, in clear (asked for by name)\n";
  }
  comment(out, "    ", tunnel_derived(config, tunnel));
}

}  // namespace
}  // namespace config_detail

std::string describe(const GatewayConfig& config) {
  using namespace config_detail;  // NOLINT(google-build-using-namespace): this file's helpers
  std::string out;
  comment(&out, "",
          fmt::format("detwan-gw '{}': effective configuration (from {}), every default "
                      "spelled out.\nLines starting with '#' are derived values, not settings.",
                      config.name, config.source.empty() ? "<unknown>" : config.source));
  out += "gateway:\n";
  out += fmt::format("  name: {}\n", quoted(config.name));
  out += fmt::format("  backend: {}\n", backend_name(config.backend));
  out += fmt::format("  timing: {}\n", timing_name(config.timing));
  out += fmt::format("  cpu: {}{}\n", config.cpu, config.cpu < 0 ? "  # no pinning" : "");
  out += fmt::format("  control_socket: {}{}\n", quoted(config.control_socket),
                     config.control_socket.empty() ? "  # = @detwan-gw" : "");
  out += fmt::format("  admin_socket: {}{}\n", quoted(config.admin_socket),
                     config.admin_socket.empty() ? "  # none: no run-time changes" : "");
  out += fmt::format("  admin_mode: 0{:o}\n", config.admin_mode);
  out += "  admin_uids: [";
  for (size_t i = 0; i < config.admin_uids.size(); ++i) {
    out += fmt::format("{}{}", i == 0 ? "" : ", ", config.admin_uids[i]);
  }
  out += "]  # besides 0 and the gateway's own uid\n";
  out += fmt::format("  buffers: {}\n", config.buffer_count);
  out += fmt::format("  batch: {}\n", config.batch);
  out += fmt::format("  wan_gso: {}\n", config.wan_gso ? "true" : "false");
  out += fmt::format("  wan_gro: {}\n", config.wan_gro ? "true" : "false");
  out += fmt::format("  release_ahead: {}\n", format_duration_ns(config.release_ahead_ns));
  out += fmt::format("  playout_ahead: {}\n", format_duration_ns(config.playout_ahead_ns));
  out += fmt::format("  rx_coalesce: {}\n", format_duration_ns(config.rx_coalesce_ns));
  out += fmt::format("  shards: {}{}\n", config.shards,
                     config.shards > 1 ? "  # threads; tunnel id mod shards owns a tunnel" : "");
  if (!config.shard_cpus.empty()) {
    out += fmt::format("  shard_cpus: [{}]  # shard k on shard_cpus[k]\n",
                       fmt::join(config.shard_cpus, ", "));
  }
  if (config.identity) {
    out += "identity:\n";
    out += fmt::format("  private_key_file: {}\n", quoted(config.identity->private_key_file));
    out += fmt::format("  # public_key: {}  (register it with the agent: gateways[].public_key)\n",
                       common::crypto::x25519_public_base64(config.identity->keys.public_key));
  }
  out += "tun:\n";
  out += fmt::format("  enabled: {}\n", config.tun.enabled ? "true" : "false");
  out += fmt::format("  name: {}\n", quoted(config.tun.name));
  out += fmt::format("  mtu: {}\n", config.tun.mtu_bytes);
  out += fmt::format("  routes: {}\n", flow_list(config.tun.routes, format_prefix));
  out += fmt::format("  offload: {}\n", config.tun.offload ? "true" : "false");
  out += fmt::format("  queue: {}\n", config.tun.queue_packets);
  out += "dpdk:\n";
  out += fmt::format("  eal: {}\n",
                     flow_list(config.dpdk.eal_args, [](const std::string& s) { return s; }));
  out += fmt::format("  mbufs: {}\n", config.dpdk.mbuf_count);
  out += fmt::format("  lcore: {}{}\n", config.dpdk.lcore,
                     config.dpdk.lcore < 0 ? "  # the main lcore" : "");
  if (!config.dpdk.lcores.empty()) {
    out += fmt::format("  lcores: [{}]  # {} shards, shard k on lcores[k]\n",
                       fmt::join(config.dpdk.lcores, ", "), config.dpdk.lcores.size());
  }
  out += "metrics:\n";
  out += fmt::format("  listen: {}{}\n", quoted(config.metrics.listen),
                     config.metrics.listen.empty() ? "  # none: no HTTP exporter" : "");
  out += fmt::format("  allow: {}{}\n",
                     flow_list(config.metrics.allow, [](const std::string& s) { return s; }),
                     config.metrics.allow.empty() ? "  # loopback only" : "");
  out += fmt::format("  tokens_file: {}\n", quoted(config.metrics.tokens_file));
  out += fmt::format("  min_interval: {}\n", format_duration_ns(config.metrics.min_interval_ns));
  out += "wan_ports:\n";
  for (const WanPortConfig& port : config.wan_ports) describe_port(&out, config, port);
  out += config.peers.empty() ? "peers: []\n" : "peers:\n";
  for (const PeerConfig& peer : config.peers) describe_peer(&out, peer);
  out += config.tunnels.empty() ? "tunnels: []\n" : "tunnels:\n";
  for (const TunnelConfig& tunnel : config.tunnels) describe_tunnel(&out, config, tunnel);
  return out;
}

}  // namespace detwan::dataplane::gw

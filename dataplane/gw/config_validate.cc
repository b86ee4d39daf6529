// Cross-field rules of the gateway configuration: names and references, addresses and MTUs,
// backend sections, per-tunnel relations, and the traffic classifiers. The slot schedules are
// config_schedule.cc's. Every failure names the field (FieldLocator) and the other party.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "common/units.h"
#include "dataplane/gw/config_internal.h"

namespace detwan::dataplane::gw::config_detail {
namespace {

using common::format_duration_ns;

std::string port_path(size_t i) { return fmt::format("wan_ports[{}]", i); }

std::string ip_name(bool ipv6) { return ipv6 ? "IPv6" : "IPv4"; }

template <typename Item, typename NameOf>
std::string name_list(const std::vector<Item>& items, NameOf name_of) {
  std::string out;
  for (const Item& item : items) out += fmt::format("{}{}", out.empty() ? "" : ", ", name_of(item));
  return out.empty() ? "none" : out;
}

void validate_gateway(const GatewayConfig& config, const FieldLocator& at) {
  if (config.batch > config.buffer_count) {
    at.fail("gateway.batch", fmt::format("batch {} is larger than gateway.buffers {}", config.batch,
                                         config.buffer_count));
  }
  if (!config.admin_socket.empty() && config.admin_socket == config.control_socket) {
    at.fail("gateway.admin_socket",
            fmt::format("'{}' is also the control socket (gateway.control_socket): the admin "
                        "socket needs its own path",
                        config.admin_socket));
  }
  if (config.backend == Backend::kDpdk && (config.shards > 1 || !config.shard_cpus.empty())) {
    at.fail(config.shards > 1 ? "gateway.shards" : "gateway.shard_cpus",
            "a setting of the uring backend; backend dpdk runs its shards on dpdk.lcores");
  }
  if (!config.shard_cpus.empty() && config.shard_cpus.size() != config.shards) {
    at.fail("gateway.shard_cpus",
            fmt::format("{} CPUs for {} shards (gateway.shards): give one CPU per shard",
                        config.shard_cpus.size(), config.shards));
  }
  if (!config.shard_cpus.empty() && config.cpu >= 0) {
    at.fail(
        "gateway.shard_cpus",
        fmt::format("give either gateway.cpu ({}) or gateway.shard_cpus, not both", config.cpu));
  }
  if (config.backend != Backend::kDpdk) {
    if (config.dpdk.lcores.size() > 1) {
      at.fail("dpdk.lcores", "several lcores (shards) need backend dpdk");
    }
    return;
  }
  if (config.dpdk.eal_args.empty()) {
    at.fail("dpdk.eal",
            "backend dpdk needs the EAL arguments (e.g. [\"--no-huge\", "
            "\"--vdev=net_af_packet0,iface=veth0\"])");
  }
  for (size_t i = 0; i < config.wan_ports.size(); ++i) {
    if (!config.wan_ports[i].dpdk) {
      at.fail(port_path(i) + ".dpdk",
              fmt::format("backend dpdk needs a dpdk section (device, next_hop_mac) on WAN port "
                          "'{}'",
                          config.wan_ports[i].name));
    }
  }
}

void validate_ports(const GatewayConfig& config, const FieldLocator& at) {
  for (size_t i = 0; i < config.wan_ports.size(); ++i) {
    const WanPortConfig& port = config.wan_ports[i];
    const std::string path = port_path(i);
    for (size_t j = 0; j < i; ++j) {
      const WanPortConfig& other = config.wan_ports[j];
      if (other.name == port.name) {
        at.fail(path + ".name",
                fmt::format("duplicate WAN port name '{}' (also {})", port.name, port_path(j)));
      }
      if (port.local.port != 0 && other.local == port.local) {
        at.fail(path + ".local", fmt::format("{} is also the local endpoint of WAN port '{}'",
                                             format_endpoint(port.local), other.name));
      }
      if (port.dpdk && other.dpdk && port.dpdk->device == other.dpdk->device) {
        at.fail(path + ".dpdk.device", fmt::format("device '{}' is also used by WAN port '{}'",
                                                   port.dpdk->device, other.name));
      }
    }
    if (port.cycle_ns % port.slot_count != 0) {
      at.fail(path + ".cycle",
              fmt::format("cycle {} ({} ns) is not a multiple of the {} slots: the slot length "
                          "must be a whole number of ns",
                          format_duration_ns(port.cycle_ns), port.cycle_ns, port.slot_count));
    }
    const int64_t slot_ns = port.cycle_ns / port.slot_count;
    if (port.guard_ns >= slot_ns) {
      at.fail(path + ".guard",
              fmt::format("guard {} must be shorter than the slot length {} (cycle {} / {} "
                          "slots)",
                          format_duration_ns(port.guard_ns), format_duration_ns(slot_ns),
                          format_duration_ns(port.cycle_ns), port.slot_count));
    }
    if (port.local.ipv6 && port.mtu_bytes < kIpv6MinMtu) {
      at.fail(path + ".mtu", fmt::format("mtu {} is below IPv6's minimum link MTU {} (local {} "
                                         "is IPv6)",
                                         port.mtu_bytes, kIpv6MinMtu, format_endpoint(port.local)));
    }
  }
}

void validate_tun(const GatewayConfig& config, const FieldLocator& at) {
  const TunConfig& tun = config.tun;
  if (!tun.enabled) {
    if (!tun.routes.empty()) {
      at.fail("tun.routes",
              "routes need the TUN interface, which is disabled (tun.enabled: false)");
    }
    for (size_t i = 0; i < config.tunnels.size(); ++i) {
      if (!config.tunnels[i].dst_prefixes.empty()) {
        at.fail(tunnel_path(i) + ".match.dst",
                "match classifies traffic from the TUN interface, which is disabled "
                "(tun.enabled: false)");
      }
    }
    return;
  }
  // (An authenticated tunnel carries 16 bytes less: the AEAD tag. The TUN MTU is sized for
  // the unauthenticated ones; a larger packet into an authenticated tunnel is too_big.)
  for (size_t i = 0; i < config.wan_ports.size(); ++i) {
    const WanPortConfig& port = config.wan_ports[i];
    const auto overhead = static_cast<uint32_t>(wire::encap_overhead_bytes(ip_version(port.local)));
    if (tun.mtu_bytes + overhead > port.mtu_bytes) {
      at.fail(
          "tun.mtu",
          fmt::format("tun.mtu {} + {} bytes of {} encapsulation = {} exceeds the mtu {} of "
                      "WAN port '{}' ({}.mtu); use tun.mtu <= {}",
                      tun.mtu_bytes, overhead, ip_name(port.local.ipv6), tun.mtu_bytes + overhead,
                      port.mtu_bytes, port.name, port_path(i), port.mtu_bytes - overhead));
    }
  }
  if (tun.mtu_bytes >= kIpv6MinMtu) return;
  auto ipv6_in = [](const std::vector<Prefix>& prefixes) {
    for (const Prefix& prefix : prefixes) {
      if (prefix.ipv6) return true;
    }
    return false;
  };
  std::string user;
  if (ipv6_in(tun.routes)) user = "tun.routes";
  for (size_t i = 0; i < config.tunnels.size() && user.empty(); ++i) {
    if (ipv6_in(config.tunnels[i].dst_prefixes)) user = tunnel_path(i) + ".match.dst";
  }
  if (!user.empty()) {
    at.fail("tun.mtu", fmt::format("tun.mtu {} is below IPv6's minimum link MTU {}, but {} has "
                                   "IPv6 prefixes",
                                   tun.mtu_bytes, kIpv6MinMtu, user));
  }
}

void validate_peers(const GatewayConfig& config, const FieldLocator& at) {
  for (size_t i = 0; i < config.peers.size(); ++i) {
    const PeerConfig& peer = config.peers[i];
    const std::string path = peer_path(i);
    for (size_t j = 0; j < i; ++j) {
      if (config.peers[j].name == peer.name) {
        at.fail(path + ".name",
                fmt::format("duplicate peer name '{}' (also {})", peer.name, peer_path(j)));
      }
    }
    const WanPortConfig* port = find_wan_port(config, peer.wan_port);
    if (port == nullptr) {
      at.fail(path + ".wan_port",
              fmt::format("unknown WAN port '{}' (WAN ports: {})", peer.wan_port,
                          name_list(config.wan_ports, [](const auto& p) { return p.name; })));
    }
    if (peer.endpoint.ipv6 != port->local.ipv6) {
      at.fail(path + ".endpoint",
              fmt::format("{} is {}, but WAN port '{}' is {} (local {})",
                          format_endpoint(peer.endpoint), ip_name(peer.endpoint.ipv6), port->name,
                          ip_name(port->local.ipv6), format_endpoint(port->local)));
    }
    for (size_t j = 0; j < i; ++j) {
      const PeerConfig& other = config.peers[j];
      if (other.wan_port == peer.wan_port && other.endpoint == peer.endpoint) {
        at.fail(path + ".endpoint",
                fmt::format("{} on WAN port '{}' is also the endpoint of peer '{}'",
                            format_endpoint(peer.endpoint), peer.wan_port, other.name));
      }
    }
    if (peer.dead_after_ns <= peer.keepalive_interval_ns) {
      at.fail(path + ".dead_after",
              fmt::format("dead_after {} must be longer than keepalive_interval {}, or the peer "
                          "is declared down between two keepalives",
                          format_duration_ns(peer.dead_after_ns),
                          format_duration_ns(peer.keepalive_interval_ns)));
    }
  }
}

void validate_tunnels(const GatewayConfig& config, const FieldLocator& at) {
  for (size_t i = 0; i < config.tunnels.size(); ++i) {
    const TunnelConfig& tunnel = config.tunnels[i];
    const std::string path = tunnel_path(i);
    for (size_t j = 0; j < i; ++j) {
      if (config.tunnels[j].id == tunnel.id) {
        at.fail(path + ".id",
                fmt::format("duplicate tunnel id {} (also {})", tunnel.id, tunnel_path(j)));
      }
    }
    const auto peer_it = std::find_if(config.peers.begin(), config.peers.end(),
                                      [&](const PeerConfig& p) { return p.name == tunnel.peer; });
    if (peer_it == config.peers.end()) {
      at.fail(path + ".peer",
              fmt::format("unknown peer '{}' (peers: {})", tunnel.peer,
                          name_list(config.peers, [](const auto& p) { return p.name; })));
    }
    const PeerConfig& peer = *peer_it;
    if (tunnel.protection) {
      const PeerConfig* replica = find_peer(config, tunnel.protection->peer);
      if (replica == nullptr) {
        at.fail(path + ".protection.peer",
                fmt::format("unknown peer '{}' (peers: {})", tunnel.protection->peer,
                            name_list(config.peers, [](const auto& p) { return p.name; })));
      }
      if (replica->wan_port == peer.wan_port) {
        at.fail(path + ".protection.peer",
                fmt::format("peer '{}' is reached through WAN port '{}' like the tunnel's peer "
                            "'{}': protection needs a disjoint path (another WAN port)",
                            replica->name, replica->wan_port, peer.name));
      }
      if (tunnel.bound_ns != 0 && tunnel.bound_ns < replica->min_path_delay_ns) {
        at.fail(path + ".bound",
                fmt::format("bound {} is below the protection path's propagation delay {} "
                            "(min_path_delay of peer '{}'): its copies would all be late",
                            format_duration_ns(tunnel.bound_ns),
                            format_duration_ns(replica->min_path_delay_ns), replica->name));
      }
    }
    // A peer's tunnels share its control exchange (clock, keepalives, restart epochs), which
    // runs on one of them: either all are authenticated or none, or an unauthenticated one
    // would carry forged control packets that move the authenticated tunnels' state.
    for (size_t j = 0; j < i; ++j) {
      const TunnelConfig& other = config.tunnels[j];
      const auto peers_of = [](const TunnelConfig& t) {
        std::vector<std::string> names{t.peer};
        if (t.protection) names.push_back(t.protection->peer);
        return names;
      };
      bool shared = false;
      for (const std::string& a : peers_of(tunnel)) {
        for (const std::string& b : peers_of(other)) shared = shared || a == b;
      }
      if (shared && other.auth.has_value() != tunnel.auth.has_value()) {
        at.fail(path + ".auth",
                fmt::format("tunnel {} {} authenticated and tunnel {} to the same peer {}: a "
                            "peer's tunnels are all authenticated or none (they share one "
                            "control exchange)",
                            tunnel.id, tunnel.auth ? "is" : "is not", other.id,
                            other.auth ? "is" : "is not"));
      }
    }
    if (tunnel.shaper_rate_bps != 0 && tunnel.shaper_rate_bps < tunnel.rate_bps) {
      at.fail(path + ".shaper_rate",
              fmt::format("shaper_rate {} is below the tunnel's rate {}: traffic the policer "
                          "admits could never leave (it would fill the queue and be dropped)",
                          rate_text(tunnel.shaper_rate_bps), rate_text(tunnel.rate_bps)));
    }
    if (tunnel.bound_ns != 0 && tunnel.bound_ns < peer.min_path_delay_ns) {
      at.fail(path + ".bound",
              fmt::format(
                  "bound {} is below the path's propagation delay {} ({}.min_path_delay "
                  "of peer '{}'): every packet would be late",
                  format_duration_ns(tunnel.bound_ns), format_duration_ns(peer.min_path_delay_ns),
                  peer_path(static_cast<size_t>(peer_it - config.peers.begin())), peer.name));
    }
    if (tunnel.max_hold_ns < tunnel.bound_ns) {
      at.fail(
          path + ".max_hold",
          fmt::format("max_hold {} is shorter than bound {}: on-time packets would be "
                      "dropped as too early",
                      format_duration_ns(tunnel.max_hold_ns), format_duration_ns(tunnel.bound_ns)));
    }
    if (!tunnel.service_listen || tunnel.service_listen->port == 0) continue;
    for (size_t j = 0; j < i; ++j) {
      const auto& other = config.tunnels[j].service_listen;
      if (other && *other == *tunnel.service_listen) {
        at.fail(path + ".service.listen",
                fmt::format("{} is also the service endpoint of tunnel {}", format_endpoint(*other),
                            config.tunnels[j].id));
      }
    }
    for (const WanPortConfig& port : config.wan_ports) {
      if (port.local == *tunnel.service_listen) {
        at.fail(path + ".service.listen", fmt::format("{} is the local endpoint of WAN port '{}'",
                                                      format_endpoint(port.local), port.name));
      }
    }
  }
}

// Whether two tunnels' udp_ports can match one packet; *what says how.
bool ranges_overlap(const TunnelConfig& a, const TunnelConfig& b, std::string* what) {
  // An empty list matches every packet to the prefix (any protocol, any port).
  if (a.udp_ports.empty() || b.udp_ports.empty()) {
    const TunnelConfig& open = a.udp_ports.empty() ? a : b;
    *what =
        fmt::format("tunnel {} has no udp_ports (it matches every packet to the prefix)", open.id);
    return true;
  }
  for (const PortRange& x : a.udp_ports) {
    for (const PortRange& y : b.udp_ports) {
      if (x.first <= y.last && y.first <= x.last) {
        *what = fmt::format("their UDP ports {} and {} overlap", format_port_range(x),
                            format_port_range(y));
        return true;
      }
    }
  }
  return false;
}

}  // namespace

// Whether two tunnels' src_prefixes can match one packet's source (empty: any source); *what
// says how.
bool sources_overlap(const TunnelConfig& a, const TunnelConfig& b, std::string* what) {
  if (a.src_prefixes.empty() || b.src_prefixes.empty()) {
    const TunnelConfig& open = a.src_prefixes.empty() ? a : b;
    *what = fmt::format("tunnel {} has no match.src (any source)", open.id);
    return true;
  }
  for (const Prefix& x : a.src_prefixes) {
    for (const Prefix& y : b.src_prefixes) {
      if (prefixes_overlap(x, y)) {
        *what = fmt::format("their sources {} and {} overlap", format_prefix(x), format_prefix(y));
        return true;
      }
    }
  }
  return false;
}

// match.src names the tenant of every family match.dst carries, and no other: a family of dst
// without a source prefix would make all its traffic foreign, a source family without a
// destination would never match.
void validate_source_families(const TunnelConfig& tunnel, const std::string& path,
                              const FieldLocator& at) {
  if (tunnel.src_prefixes.empty()) return;
  for (const bool ipv6 : {false, true}) {
    const auto has = [ipv6](const std::vector<Prefix>& list) {
      return std::any_of(list.begin(), list.end(),
                         [ipv6](const Prefix& p) { return p.ipv6 == ipv6; });
    };
    const char* family = ipv6 ? "IPv6" : "IPv4";
    if (has(tunnel.dst_prefixes) && !has(tunnel.src_prefixes)) {
      at.fail(path + ".match.src",
              fmt::format("match.dst has {} prefixes but match.src has none: every {} packet "
                          "would be foreign; add the {} sources (or leave match.src out: any "
                          "source)",
                          family, family, family));
    }
    if (has(tunnel.src_prefixes) && !has(tunnel.dst_prefixes)) {
      at.fail(path + ".match.src",
              fmt::format("match.src has {} prefixes but match.dst has none: they would never "
                          "match",
                          family));
    }
  }
}

void validate_classifiers(const GatewayConfig& config, const FieldLocator& at) {
  for (size_t i = 0; i < config.tunnels.size(); ++i) {
    const TunnelConfig& tunnel = config.tunnels[i];
    validate_source_families(tunnel, tunnel_path(i), at);
    for (size_t j = 0; j < i; ++j) {
      const TunnelConfig& other = config.tunnels[j];
      for (size_t a = 0; a < tunnel.dst_prefixes.size(); ++a) {
        for (size_t b = 0; b < other.dst_prefixes.size(); ++b) {
          if (!prefixes_overlap(tunnel.dst_prefixes[a], other.dst_prefixes[b])) continue;
          std::string what;
          if (!ranges_overlap(tunnel, other, &what)) continue;
          std::string sources;
          if (!sources_overlap(tunnel, other, &sources)) continue;  // two tenants, one host
          what += "; " + sources;
          at.fail(
              fmt::format("{}.match.dst[{}]", tunnel_path(i), a),
              fmt::format("{} of tunnel {} overlaps {} of tunnel {} ({}.match.dst[{}]) and "
                          "{}: a packet could match both; give them disjoint udp_ports or "
                          "disjoint match.src",
                          format_prefix(tunnel.dst_prefixes[a]), tunnel.id,
                          format_prefix(other.dst_prefixes[b]), other.id, tunnel_path(j), b, what));
        }
      }
    }
  }
}

void validate(const GatewayConfig& config, const FieldLocator& at) {
  validate_gateway(config, at);
  validate_ports(config, at);
  validate_tun(config, at);
  validate_peers(config, at);
  validate_tunnels(config, at);
  validate_schedules(config, at);
  validate_classifiers(config, at);
}

}  // namespace detwan::dataplane::gw::config_detail

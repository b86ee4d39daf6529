// The topology model: lookups, derived values, and finish() (cross-references and indices).
#include "control/model/topology.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include <fmt/format.h>

namespace detwan::control::model {

const GatewayPort* Gateway::port_on_link(uint32_t link) const noexcept {
  for (const GatewayPort& port : ports) {
    if (port.link == link) return &port;
  }
  return nullptr;
}

const GatewayPeer* Gateway::peer_via(std::string_view port, uint32_t far) const noexcept {
  for (const GatewayPeer& peer : peers) {
    if (peer.port == port && peer.gateway == far) return &peer;
  }
  return nullptr;
}

uint64_t Link::reservable_bps() const noexcept {
  return static_cast<uint64_t>(std::floor(static_cast<double>(capacity_bps) * reservable));
}

uint32_t Link::reservable_slots() const noexcept {
  return static_cast<uint32_t>(std::floor(static_cast<double>(slot_count) * reservable + 1e-9));
}

uint32_t Link::other_end(uint32_t node) const noexcept {
  if (node == ends[0]) return ends[1];
  if (node == ends[1]) return ends[0];
  return kNone;
}

namespace {
uint32_t lookup(const std::unordered_map<std::string, uint32_t>& map, std::string_view name) {
  const auto it = map.find(std::string(name));
  return it == map.end() ? kNone : it->second;
}
}  // namespace

uint32_t Topology::find_node(std::string_view name) const noexcept {
  return lookup(node_index, name);
}
uint32_t Topology::find_site(std::string_view name) const noexcept {
  return lookup(site_index, name);
}
uint32_t Topology::find_link(std::string_view name) const noexcept {
  return lookup(link_index, name);
}
uint32_t Topology::find_gateway(std::string_view name) const noexcept {
  return lookup(gateway_index, name);
}
uint32_t Topology::gateway_at_node(uint32_t node) const noexcept {
  if (node >= nodes.size() || nodes[node].site == kNone) return kNone;
  return sites[nodes[node].site].gateway;
}

common::Result<void> finish(Topology& t) {
  auto error = [](std::string message) {
    return common::make_error(common::ErrorCode::kConfig, std::move(message));
  };
  t.node_index.clear();
  t.site_index.clear();
  t.link_index.clear();
  t.gateway_index.clear();
  for (uint32_t i = 0; i < t.nodes.size(); ++i) {
    t.nodes[i].links.clear();
    t.nodes[i].site = kNone;
    if (!t.node_index.emplace(t.nodes[i].name, i).second) {
      return error(fmt::format("node '{}' is named twice", t.nodes[i].name));
    }
  }
  for (uint32_t s = 0; s < t.sites.size(); ++s) {
    Site& site = t.sites[s];
    if (!t.site_index.emplace(site.name, s).second) {
      return error(fmt::format("site '{}' is named twice", site.name));
    }
    site.node = lookup(t.node_index, site.name);
    if (site.node == kNone) return error(fmt::format("site '{}' has no node", site.name));
    t.nodes[site.node].site = s;
    for (size_t i = 0; i < site.tunnel_prefixes.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (common::prefixes_overlap(site.tunnel_prefixes[i], site.tunnel_prefixes[j])) {
          return error(fmt::format("site '{}': tunnel prefixes {} and {} overlap", site.name,
                                   common::format_ip_prefix(site.tunnel_prefixes[j]),
                                   common::format_ip_prefix(site.tunnel_prefixes[i])));
        }
      }
    }
  }
  for (uint32_t s = 0; s < t.sites.size(); ++s) {
    for (uint32_t o = 0; o < s; ++o) {
      for (const auto& a : t.sites[s].tunnel_prefixes) {
        for (const auto& b : t.sites[o].tunnel_prefixes) {
          if (common::prefixes_overlap(a, b)) {
            return error(fmt::format(
                "sites '{}' and '{}' have overlapping tunnel prefixes {} and {}", t.sites[o].name,
                t.sites[s].name, common::format_ip_prefix(b), common::format_ip_prefix(a)));
          }
        }
      }
    }
  }
  for (uint32_t l = 0; l < t.links.size(); ++l) {
    Link& link = t.links[l];
    if (!t.link_index.emplace(link.name, l).second) {
      return error(fmt::format("link '{}' is named twice", link.name));
    }
    for (const uint32_t end : link.ends) {
      if (end >= t.nodes.size())
        return error(fmt::format("link '{}': an end is not a node", link.name));
    }
    if (link.ends[0] == link.ends[1])
      return error(fmt::format("link '{}' joins a node to itself", link.name));
    if (link.capacity_bps == 0)
      return error(fmt::format("link '{}': capacity must be > 0", link.name));
    if (link.slot_count == 0 || link.cycle_ns <= 0 || link.cycle_ns % link.slot_count != 0) {
      return error(fmt::format("link '{}': cycle must be a positive multiple of slots", link.name));
    }
    if (link.guard_ns < 0 || link.guard_ns >= link.cycle_ns / link.slot_count) {
      return error(fmt::format("link '{}': guard must be shorter than a slot", link.name));
    }
    if (!(link.reservable > 0 && link.reservable <= 1)) {
      return error(fmt::format("link '{}': reservable must be in (0, 1]", link.name));
    }
    if (!(link.loss >= 0 && link.loss < 1)) {
      return error(fmt::format("link '{}': loss must be in [0, 1)", link.name));
    }
    t.nodes[link.ends[0]].links.push_back(l);
    t.nodes[link.ends[1]].links.push_back(l);
  }
  for (uint32_t g = 0; g < t.gateways.size(); ++g) {
    Gateway& gateway = t.gateways[g];
    if (!t.gateway_index.emplace(gateway.name, g).second) {
      return error(fmt::format("gateway '{}' is named twice", gateway.name));
    }
    if (gateway.site >= t.sites.size()) {
      return error(fmt::format("gateway '{}': its site is not a site", gateway.name));
    }
    if (t.sites[gateway.site].gateway != g) {
      return error(fmt::format("gateway '{}' names site '{}', whose gateway is another one",
                               gateway.name, t.sites[gateway.site].name));
    }
    const uint32_t node = t.sites[gateway.site].node;
    std::set<std::string> port_names;
    for (const GatewayPort& port : gateway.ports) {
      if (!port_names.insert(port.name).second) {
        return error(fmt::format("gateway '{}': port '{}' listed twice", gateway.name, port.name));
      }
      if (port.link >= t.links.size() || t.links[port.link].other_end(node) == kNone) {
        return error(
            fmt::format("gateway '{}': port '{}' is attached to a link that does not "
                        "end at site '{}'",
                        gateway.name, port.name, t.sites[gateway.site].name));
      }
    }
    std::set<std::string> peer_names;
    for (const GatewayPeer& peer : gateway.peers) {
      if (!peer_names.insert(peer.name).second) {
        return error(fmt::format("gateway '{}': peer '{}' listed twice", gateway.name, peer.name));
      }
      if (port_names.count(peer.port) == 0) {
        return error(
            fmt::format("gateway '{}': peer '{}' is reached through port '{}', which is "
                        "not one of its ports",
                        gateway.name, peer.name, peer.port));
      }
      if (!peer.remote.empty() && peer.gateway == kNone) continue;  // another domain's
      if (peer.gateway >= t.gateways.size() || peer.gateway == g) {
        return error(fmt::format("gateway '{}': peer '{}' must name another gateway", gateway.name,
                                 peer.name));
      }
    }
  }
  for (const Site& site : t.sites) {
    if (site.gateway != kNone && site.gateway >= t.gateways.size()) {
      return error(fmt::format("site '{}': its gateway is not a gateway", site.name));
    }
  }
  // Every link end at a site with a gateway must be one of the gateway's ports: the slots of
  // that direction live there.
  for (const Link& link : t.links) {
    for (const uint32_t end : link.ends) {
      const uint32_t g = t.gateway_at_node(end);
      if (g == kNone) continue;
      if (t.gateways[g].port_on_link(t.link_index.at(link.name)) == nullptr) {
        return error(fmt::format("link '{}' ends at site '{}', but gateway '{}' has no port on it",
                                 link.name, t.nodes[end].name, t.gateways[g].name));
      }
    }
  }
  for (Border& border : t.borders) {
    border.site = t.find_site(border.name);
    if (border.site == kNone || t.sites[border.site].gateway != kNone) {
      return error(fmt::format("border '{}' must be a site without a gateway", border.name));
    }
  }
  return {};
}

const Border* Topology::border_at_site(uint32_t site) const noexcept {
  for (const Border& b : borders) {
    if (b.site == site) return &b;
  }
  return nullptr;
}

const FederationPeer* FederationSettings::peer(std::string_view domain) const noexcept {
  for (const FederationPeer& p : peers) {
    if (p.domain == domain) return &p;
  }
  return nullptr;
}

}  // namespace detwan::control::model

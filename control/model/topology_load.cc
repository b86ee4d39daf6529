// The topology file: YAML -> Topology, every error naming file, line and field; then finish().
#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "common/config.h"
#include "common/units.h"
#include "common/x25519.h"
#include "control/model/topology.h"
#include "control/model/topology_load_api.h"
#include "control/model/topology_load_federation.h"

namespace detwan::control::model {
namespace {

using common::ConfigNode;
using common::ErrorCode;

constexpr int64_t kMaxDelayNs = 10'000'000'000;  // 10 s
constexpr uint64_t kMaxCapacityBps = 10'000'000'000'000;

std::string name_of(const ConfigNode& node) {
  std::string name = node.as_string();
  if (!valid_name(name)) {
    node.fail(fmt::format("'{}' is not a valid name (1..64 of A-Z a-z 0-9 . _ -)", name));
  }
  return name;
}

common::IpPrefix prefix_of(const ConfigNode& node) {
  auto prefix = common::parse_ip_prefix(node.as_string());
  if (!prefix) node.fail(prefix.error().message);
  return *prefix;
}

void parse_agent(const ConfigNode& node, AgentSettings* agent) {
  node.check_keys({"name", "listen", "allow", "tokens_file", "max_connections", "max_body",
                   "request_timeout", "journal", "journal_sync", "hold_timeout",
                   "reconcile_interval", "provision_wait", "tunnel_ids", "tls", "archive_after"});
  if (const auto name = node.maybe_child("name")) agent->name = name_of(*name);
  if (const auto listen = node.maybe_child("listen")) {
    auto endpoint = common::parse_host_port(listen->as_string(), true);
    if (!endpoint) listen->fail(endpoint.error().message);
    agent->api.listen = *endpoint;
  }
  if (const auto allow = node.maybe_child("allow")) {
    agent->api.allow.clear();
    for (const ConfigNode& item : allow->items()) agent->api.allow.push_back(prefix_of(item));
  }
  agent->api.tokens_file = node.get_string("tokens_file", "");
  if (const auto tls = node.maybe_child("tls")) parse_agent_tls(*tls, &agent->api.tls);
  agent->api.max_connections =
      static_cast<uint32_t>(node.get_int("max_connections", 64, 1, 100'000));
  if (const auto body = node.maybe_child("max_body")) {
    agent->api.max_body_bytes = body->as_size_bytes();
    if (agent->api.max_body_bytes < 1024 || agent->api.max_body_bytes > (64u << 20)) {
      body->fail("must be in [1kb, 64mb]");
    }
  }
  agent->api.request_timeout_ns = duration_in(
      node, "request_timeout", agent->api.request_timeout_ns, 100'000'000, 600'000'000'000);
  agent->journal = node.get_string("journal", agent->journal);
  if (agent->journal.empty()) node.child("journal").fail("must not be empty");
  if (const auto sync = node.maybe_child("journal_sync")) {
    const std::string text = sync->as_string();
    if (text != "normal" && text != "full")
      sync->fail(fmt::format("'{}' is not one of: normal, full", text));
    agent->journal_sync_full = text == "full";
  }
  agent->hold_timeout_ns =
      duration_in(node, "hold_timeout", agent->hold_timeout_ns, 1'000'000'000, 86'400'000'000'000);
  // 0 = never; else at least a minute (a client may still read what it just ended).
  agent->archive_after_ns =
      duration_in(node, "archive_after", agent->archive_after_ns, 0, 3'650 * 86'400'000'000'000);
  if (agent->archive_after_ns != 0 && agent->archive_after_ns < 60'000'000'000) {
    node.child("archive_after").fail("must be 0 (never) or at least 1m");
  }
  agent->reconcile_interval_ns = duration_in(
      node, "reconcile_interval", agent->reconcile_interval_ns, 10'000'000, 3'600'000'000'000);
  agent->provision_wait_ns =
      duration_in(node, "provision_wait", agent->provision_wait_ns, 0, 600'000'000'000);
  if (const auto ids = node.maybe_child("tunnel_ids")) {
    const std::string text = ids->as_string();
    const size_t dash = text.find('-');
    uint64_t first = 0;
    uint64_t last = 0;
    // Whole decimal numbers only: sscanf("%lu-%lu") ignored trailing text ("2000-2999x").
    auto number = [](std::string_view digits, uint64_t* out) {
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), *out);
      return !digits.empty() && ec == std::errc() && end == digits.data() + digits.size();
    };
    const std::string_view view(text);
    const bool ok = dash != std::string::npos && number(view.substr(0, dash), &first) &&
                    number(view.substr(dash + 1), &last) && first >= 1 && first <= last &&
                    last <= UINT32_MAX;
    if (!ok)
      ids->fail(fmt::format("'{}' is not a range like 1000-65535 within 1..4294967295", text));
    agent->first_tunnel_id = static_cast<uint32_t>(first);
    agent->last_tunnel_id = static_cast<uint32_t>(last);
  }
}

void parse_link(const ConfigNode& node, Topology* topology,
                std::vector<std::pair<std::string, std::string>>* ends) {
  node.check_keys({"name", "ends", "capacity", "delay", "jitter", "loss", "reservable", "mtu",
                   "cycle", "slots", "guard"});
  Link link;
  link.name = name_of(node.child("name"));
  const ConfigNode end_list = node.child("ends");
  const auto items = end_list.items();
  if (items.size() != 2) end_list.fail("a link has exactly two ends: [NODE, NODE]");
  ends->emplace_back(name_of(items[0]), name_of(items[1]));
  const ConfigNode capacity = node.child("capacity");
  link.capacity_bps = capacity.as_rate_bps();
  if (link.capacity_bps < 1000 || link.capacity_bps > kMaxCapacityBps) {
    capacity.fail("must be in [1kbit, 10tbit]");
  }
  link.delay_ns = duration_in(node, "delay", 0, 0, kMaxDelayNs);
  link.jitter_ns = duration_in(node, "jitter", 0, 0, kMaxDelayNs);
  if (const auto loss = node.maybe_child("loss")) {
    link.loss = loss->as_fraction();
    if (link.loss >= 1.0) loss->fail("a link that loses everything cannot be reserved");
  }
  if (const auto share = node.maybe_child("reservable")) {
    link.reservable = share->as_fraction();
    if (link.reservable <= 0)
      share->fail("must be above 0 (a link nobody may reserve: leave it out)");
  }
  link.mtu_bytes = static_cast<uint32_t>(node.get_int("mtu", 1500, 576, 9216));
  link.cycle_ns = duration_in(node, "cycle", link.cycle_ns, 1'000, 10'000'000'000);
  link.slot_count = static_cast<uint32_t>(node.get_int("slots", 100, 1, 65536));
  if (link.cycle_ns % link.slot_count != 0) {
    // Point at what the file says: `slots` when given, else `cycle` (the default 100 slots).
    node.child(node.has("slots") ? "slots" : "cycle")
        .fail(fmt::format("cycle {} is not a multiple of {} slots",
                          common::format_duration_ns(link.cycle_ns), link.slot_count));
  }
  link.guard_ns = duration_in(node, "guard", 0, 0, link.cycle_ns / link.slot_count - 1);
  topology->links.push_back(std::move(link));
}

Topology parse(const ConfigNode& root) {
  root.check_keys({"domain", "agent", "policy", "sites", "gateways", "nodes", "links", "borders",
                   "federation"});
  Topology topology;
  topology.source = root.file();
  topology.domain = name_of(root.child("domain"));
  topology.agent.name = topology.domain;
  topology.agent.api.listen = *common::parse_host_port("127.0.0.1:7800");
  topology.agent.api.allow = {*common::parse_ip_prefix("127.0.0.0/8"),
                              *common::parse_ip_prefix("::1/128")};
  if (const auto agent = root.maybe_child("agent")) parse_agent(*agent, &topology.agent);
  if (const auto policy = root.maybe_child("policy")) parse_policy(*policy, &topology.policy);

  std::vector<std::string> site_gateways;
  const std::vector<ConfigNode> site_items =
      root.has("sites") ? root.child("sites").items() : std::vector<ConfigNode>{};
  for (const ConfigNode& item : site_items) {
    item.check_keys({"name", "gateway", "tunnel_prefixes"});
    Site site;
    site.name = name_of(item.child("name"));
    site_gateways.push_back(item.has("gateway") ? name_of(item.child("gateway")) : "");
    if (const auto prefixes = item.maybe_child("tunnel_prefixes")) {
      for (const ConfigNode& p : prefixes->items()) site.tunnel_prefixes.push_back(prefix_of(p));
    }
    topology.sites.push_back(std::move(site));
  }
  detail::parse_borders(root, &topology);  // planning-only sites after the sites
  site_gateways.resize(topology.sites.size());
  detail::parse_federation(root, &topology);
  std::vector<std::vector<std::pair<std::string, std::string>>> port_links;  // per gateway
  std::vector<std::vector<std::string>> peer_gateways;
  std::vector<std::string> gateway_sites;
  if (const auto gateways = root.maybe_child("gateways")) {
    for (const ConfigNode& item : gateways->items()) {
      item.check_keys({"name", "site", "admin_socket", "playout_error", "processing_delay",
                       "public_key", "ports", "peers"});
      Gateway gateway;
      gateway.name = name_of(item.child("name"));
      gateway_sites.push_back(name_of(item.child("site")));
      const ConfigNode socket = item.child("admin_socket");
      gateway.admin_socket = socket.as_string();
      if (gateway.admin_socket.empty() || gateway.admin_socket.front() != '/' ||
          gateway.admin_socket.size() > 107) {
        socket.fail(
            "must be the absolute path of detwan-gw's admin socket (gateway.admin_socket), "
            "at most 107 bytes");
      }
      gateway.playout_error_ns = duration_in(item, "playout_error", 100'000, 0, 1'000'000'000);
      gateway.processing_delay_ns = duration_in(item, "processing_delay", 50'000, 0, 1'000'000'000);
      if (const auto key = item.maybe_child("public_key")) {
        auto parsed = common::crypto::x25519_parse_public(key->as_string());
        if (!parsed) key->fail(parsed.error().message + " (detwan-gw keygen prints it)");
        gateway.public_key = common::crypto::x25519_public_base64(*parsed);
      }
      port_links.emplace_back();
      for (const ConfigNode& port : item.child("ports").items()) {
        port.check_keys({"name", "link"});
        gateway.ports.push_back(GatewayPort{name_of(port.child("name")), kNone});
        port_links.back().emplace_back(gateway.ports.back().name, name_of(port.child("link")));
      }
      peer_gateways.emplace_back();
      if (const auto peers = item.maybe_child("peers")) {
        for (const ConfigNode& peer : peers->items()) {
          peer.check_keys({"name", "port", "gateway", "remote"});
          gateway.peers.push_back(
              GatewayPeer{name_of(peer.child("name")), name_of(peer.child("port")), kNone, ""});
          if (peer.has("remote")) {  // a gateway of another domain (docs/federation.md)
            if (peer.has("gateway")) peer.child("remote").fail("give 'gateway' or 'remote', not both");
            gateway.peers.back().remote = name_of(peer.child("remote"));
            peer_gateways.back().emplace_back();
          } else {
            peer_gateways.back().push_back(name_of(peer.child("gateway")));
          }
        }
      }
      topology.gateways.push_back(std::move(gateway));
    }
  }
  std::vector<std::string> transit;
  if (const auto nodes = root.maybe_child("nodes")) {
    for (const ConfigNode& item : nodes->items()) transit.push_back(name_of(item));
  }
  std::vector<std::pair<std::string, std::string>> link_ends;
  for (const ConfigNode& item : root.child("links").items())
    parse_link(item, &topology, &link_ends);

  // Nodes: sites first (same order), then transit nodes.
  for (const Site& site : topology.sites) topology.nodes.push_back(Node{site.name, kNone, {}});
  for (const std::string& name : transit) topology.nodes.push_back(Node{name, kNone, {}});
  // Resolve names with positions for the messages: build indices, then check references.
  // Every check finish() makes is made here first, on the YAML node it concerns, so that the
  // message names file:line and field (finish() cannot: it sees no file).
  std::unordered_map<std::string, uint32_t> nodes;
  for (uint32_t i = 0; i < topology.nodes.size(); ++i) {
    if (nodes.emplace(topology.nodes[i].name, i).second) continue;
    const uint32_t first = nodes.at(topology.nodes[i].name);
    const bool site = i < topology.sites.size();
    const ConfigNode at =
        !site ? root.child("nodes").items()[i - topology.sites.size()]
        : i < site_items.size()
            ? site_items[i].child("name")
            : root.child("borders").items()[i - site_items.size()].child("name");
    at.fail(fmt::format("'{}' names two {}", topology.nodes[i].name,
                        site ? "sites"
                             : (first < topology.sites.size() ? "nodes (a site and a transit node)"
                                                              : "transit nodes")));
  }
  for (uint32_t l = 0; l < topology.links.size(); ++l) {
    for (uint32_t o = 0; o < l; ++o) {
      if (topology.links[o].name == topology.links[l].name) {
        root.child("links").items()[l].child("name").fail(
            fmt::format("'{}' names two links", topology.links[l].name));
      }
    }
  }
  for (uint32_t g = 0; g < topology.gateways.size(); ++g) {
    const ConfigNode item = root.child("gateways").items()[g];
    const Gateway& gateway = topology.gateways[g];
    for (uint32_t o = 0; o < g; ++o) {
      if (topology.gateways[o].name == gateway.name) {
        item.child("name").fail(fmt::format("'{}' names two gateways", gateway.name));
      }
    }
    for (size_t p = 0; p < gateway.ports.size(); ++p) {
      for (size_t o = 0; o < p; ++o) {
        if (gateway.ports[o].name == gateway.ports[p].name) {
          item.child("ports").items()[p].child("name").fail(fmt::format(
              "gateway '{}' has two ports named '{}'", gateway.name, gateway.ports[p].name));
        }
      }
    }
    for (size_t p = 0; p < gateway.peers.size(); ++p) {
      for (size_t o = 0; o < p; ++o) {
        if (gateway.peers[o].name == gateway.peers[p].name) {
          item.child("peers").items()[p].child("name").fail(fmt::format(
              "gateway '{}' has two peers named '{}'", gateway.name, gateway.peers[p].name));
        }
      }
      const bool has_port =
          std::any_of(gateway.ports.begin(), gateway.ports.end(),
                      [&](const GatewayPort& port) { return port.name == gateway.peers[p].port; });
      if (!has_port) {
        item.child("peers").items()[p].child("port").fail(fmt::format(
            "peer '{}' is reached through port '{}', which is not one of gateway '{}''s ports",
            gateway.peers[p].name, gateway.peers[p].port, gateway.name));
      }
      if (peer_gateways[g][p] == gateway.name) {
        item.child("peers").items()[p].child("gateway").fail(
            fmt::format("peer '{}' must name another gateway, not '{}' itself",
                        gateway.peers[p].name, gateway.name));
      }
    }
  }
  for (uint32_t s = 0; s < topology.sites.size(); ++s) {
    const Site& site = topology.sites[s];
    for (size_t i = 0; i < site.tunnel_prefixes.size(); ++i) {
      auto fail = [&](const std::string& message) {
        root.child("sites").items()[s].child("tunnel_prefixes").items()[i].fail(message);
      };
      for (size_t j = 0; j < i; ++j) {
        if (common::prefixes_overlap(site.tunnel_prefixes[i], site.tunnel_prefixes[j])) {
          fail(fmt::format("{} overlaps {} of the same site",
                           common::format_ip_prefix(site.tunnel_prefixes[i]),
                           common::format_ip_prefix(site.tunnel_prefixes[j])));
        }
      }
      for (uint32_t o = 0; o < s; ++o) {
        for (const common::IpPrefix& other : topology.sites[o].tunnel_prefixes) {
          if (common::prefixes_overlap(site.tunnel_prefixes[i], other)) {
            fail(fmt::format("{} of site '{}' overlaps {} of site '{}'",
                             common::format_ip_prefix(site.tunnel_prefixes[i]), site.name,
                             common::format_ip_prefix(other), topology.sites[o].name));
          }
        }
      }
    }
  }
  for (size_t i = 0; i < link_ends.size(); ++i) {
    for (int e = 0; e < 2; ++e) {
      const std::string& end = e == 0 ? link_ends[i].first : link_ends[i].second;
      const auto it = nodes.find(end);
      if (it == nodes.end()) {
        root.child("links").items()[i].child("ends").items()[static_cast<size_t>(e)].fail(
            fmt::format("'{}' is neither a site nor a transit node", end));
      }
      topology.links[i].ends[e] = it->second;
    }
    if (topology.links[i].ends[0] == topology.links[i].ends[1]) {
      root.child("links").items()[i].child("ends").fail("a link joins two different nodes");
    }
  }
  std::unordered_map<std::string, uint32_t> gateway_names;
  for (uint32_t g = 0; g < topology.gateways.size(); ++g)
    gateway_names.emplace(topology.gateways[g].name, g);
  std::unordered_map<std::string, uint32_t> link_names;
  for (uint32_t l = 0; l < topology.links.size(); ++l)
    link_names.emplace(topology.links[l].name, l);
  for (uint32_t s = 0; s < topology.sites.size(); ++s) {
    if (site_gateways[s].empty()) continue;
    const auto it = gateway_names.find(site_gateways[s]);
    if (it == gateway_names.end()) {
      root.child("sites").items()[s].child("gateway").fail(
          fmt::format("'{}' is not a gateway of the topology", site_gateways[s]));
    }
    topology.sites[s].gateway = it->second;
  }
  for (uint32_t g = 0; g < topology.gateways.size(); ++g) {
    const ConfigNode item = root.child("gateways").items()[g];
    Gateway& gateway = topology.gateways[g];
    const auto site = std::find_if(topology.sites.begin(), topology.sites.end(),
                                   [&](const Site& s) { return s.name == gateway_sites[g]; });
    if (site == topology.sites.end()) {
      item.child("site").fail(fmt::format("'{}' is not a site", gateway_sites[g]));
    }
    gateway.site = static_cast<uint32_t>(site - topology.sites.begin());
    for (size_t p = 0; p < gateway.ports.size(); ++p) {
      const auto link = link_names.find(port_links[g][p].second);
      if (link == link_names.end()) {
        item.child("ports").items()[p].child("link").fail(
            fmt::format("'{}' is not a link", port_links[g][p].second));
      }
      gateway.ports[p].link = link->second;
    }
    for (size_t p = 0; p < gateway.peers.size(); ++p) {
      if (!gateway.peers[p].remote.empty()) continue;
      const auto far = gateway_names.find(peer_gateways[g][p]);
      if (far == gateway_names.end()) {
        item.child("peers").items()[p].child("gateway").fail(
            fmt::format("'{}' is not a gateway", peer_gateways[g][p]));
      }
      gateway.peers[p].gateway = far->second;
    }
  }
  for (uint32_t g = 0; g < topology.gateways.size(); ++g) {
    const ConfigNode item = root.child("gateways").items()[g];
    const Gateway& gateway = topology.gateways[g];
    const Site& site = topology.sites[gateway.site];
    if (site.gateway != g) {
      item.child("site").fail(fmt::format(
          "site '{}' {}", site.name,
          site.gateway == kNone ? "names no gateway (add 'gateway: " + gateway.name + "' to it)"
                                : "names gateway '" + topology.gateways[site.gateway].name + "'"));
    }
    const uint32_t node = nodes.at(site.name);
    for (size_t p = 0; p < gateway.ports.size(); ++p) {
      const Link& link = topology.links[gateway.ports[p].link];
      if (link.other_end(node) == kNone) {
        item.child("ports").items()[p].child("link").fail(
            fmt::format("link '{}' does not end at site '{}' of gateway '{}'", link.name, site.name,
                        gateway.name));
      }
    }
  }
  // Every link end at a site with a gateway must be one of the gateway's ports.
  for (uint32_t l = 0; l < topology.links.size(); ++l) {
    for (int e = 0; e < 2; ++e) {
      const uint32_t end = topology.links[l].ends[e];
      if (end >= topology.sites.size() || topology.sites[end].gateway == kNone) continue;
      const Gateway& gateway = topology.gateways[topology.sites[end].gateway];
      if (gateway.port_on_link(l) == nullptr) {
        root.child("links").items()[l].child("ends").items()[static_cast<size_t>(e)].fail(
            fmt::format("link '{}' ends at site '{}', but gateway '{}' has no port on it",
                        topology.links[l].name, topology.sites[end].name, gateway.name));
      }
    }
  }
  return topology;
}

}  // namespace

common::Result<Topology> load_topology_string(const std::string& yaml, const std::string& source) {
  try {
    Topology topology = parse(ConfigNode::load_string(yaml, source));
    topology.source = source;
    if (auto ok = finish(topology); !ok) {
      return common::make_error(ErrorCode::kConfig, source + ": " + ok.error().message);
    }
    return topology;
  } catch (const common::Failure& failure) {
    return std::unexpected(failure.error());
  }
}

common::Result<Topology> load_topology(const std::string& path) {
  try {
    Topology topology = parse(ConfigNode::load_file(path));
    topology.source = path;
    if (auto ok = finish(topology); !ok) {
      return common::make_error(ErrorCode::kConfig, path + ": " + ok.error().message);
    }
    return topology;
  } catch (const common::Failure& failure) {
    return std::unexpected(failure.error());
  }
}

}  // namespace detwan::control::model

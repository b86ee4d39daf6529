// The federation sections of the topology file: `borders:` and `federation:`.
#include "control/model/topology_load_federation.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "common/units.h"
#include "control/model/topology_load_api.h"

namespace detwan::control::model::detail {
namespace {

using common::ConfigNode;

std::string checked_name(const ConfigNode& node) {
  std::string name = node.as_string();
  if (!valid_name(name)) node.fail(fmt::format("'{}' is not a valid name (1..64 of A-Z a-z 0-9 . _ -)", name));
  return name;
}

}  // namespace

void parse_borders(const ConfigNode& root, Topology* topology) {
  const auto borders = root.maybe_child("borders");
  if (!borders) return;
  for (const ConfigNode& item : borders->items()) {
    item.check_keys({"name", "domain"});
    Border border;
    border.name = checked_name(item.child("name"));
    border.domain = checked_name(item.child("domain"));
    if (border.domain == topology->domain) {
      item.child("domain").fail(fmt::format("border '{}' must meet another domain, not '{}' itself",
                                            border.name, border.domain));
    }
    for (const Site& site : topology->sites) {
      if (site.name == border.name) {
        item.child("name").fail(fmt::format("'{}' names a site and a border", border.name));
      }
    }
    border.site = static_cast<uint32_t>(topology->sites.size());
    Site site;
    site.name = border.name;  // planning only: no gateway, no tunnel prefixes
    topology->sites.push_back(std::move(site));
    topology->borders.push_back(std::move(border));
  }
}

void parse_federation(const ConfigNode& root, Topology* topology) {
  const auto node = root.maybe_child("federation");
  if (!node) return;
  node->check_keys({"peers", "cert", "key", "hold_timeout", "call_timeout", "tunnel_ids"});
  FederationSettings& f = topology->federation;
  f.cert = node->get_string("cert", "");
  f.key = node->get_string("key", "");
  f.hold_timeout_ns =
      duration_in(*node, "hold_timeout", f.hold_timeout_ns, 1'000'000'000, 3'600'000'000'000);
  f.call_timeout_ns =
      duration_in(*node, "call_timeout", f.call_timeout_ns, 10'000'000, 60'000'000'000);
  if (const auto peers = node->maybe_child("peers")) {
    for (const ConfigNode& item : peers->items()) {
      item.check_keys({"domain", "url", "ca", "token_file", "accept_token_file"});
      FederationPeer peer;
      peer.domain = checked_name(item.child("domain"));
      if (peer.domain == topology->domain || f.peer(peer.domain) != nullptr) {
        item.child("domain").fail(
            fmt::format("peer domain '{}' is ours or listed twice", peer.domain));
      }
      peer.url = item.child("url").as_string();
      if (peer.url.rfind("https://", 0) != 0 && peer.url.rfind("http://", 0) != 0) {
        item.child("url").fail(fmt::format("'{}' is not an http(s):// URL", peer.url));
      }
      peer.ca = item.get_string("ca", "");
      peer.token_file = item.get_string("token_file", "");
      peer.accept_token_file = item.get_string("accept_token_file", "");
      f.peers.push_back(std::move(peer));
    }
  }
  if (const auto ids = node->maybe_child("tunnel_ids")) {
    const std::string text = ids->as_string();
    const size_t dash = text.find('-');
    uint64_t first = 0;
    uint64_t last = 0;
    auto number = [](std::string_view digits, uint64_t* out) {
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), *out);
      return !digits.empty() && ec == std::errc() && end == digits.data() + digits.size();
    };
    const std::string_view view(text);
    if (!(dash != std::string::npos && number(view.substr(0, dash), &first) &&
          number(view.substr(dash + 1), &last) && first >= 1 && first <= last &&
          last <= UINT32_MAX)) {
      ids->fail(fmt::format("'{}' is not a range like 40000-65535", text));
    }
    f.first_tunnel_id = static_cast<uint32_t>(first);
    f.last_tunnel_id = static_cast<uint32_t>(last);
  }
  AgentSettings& a = topology->agent;
  const bool overlaps =
      a.first_tunnel_id <= f.last_tunnel_id && f.first_tunnel_id <= a.last_tunnel_id;
  if (!overlaps) return;
  const bool given = root.maybe_child("agent") && root.child("agent").has("tunnel_ids");
  if (given || f.first_tunnel_id <= a.first_tunnel_id) {
    node->fail(fmt::format(
        "federation.tunnel_ids {}-{} overlaps agent.tunnel_ids {}-{} (local tunnels must stay "
        "out of the federation's range)",
        f.first_tunnel_id, f.last_tunnel_id, a.first_tunnel_id, a.last_tunnel_id));
  }
  a.last_tunnel_id = f.first_tunnel_id - 1;
}

}  // namespace detwan::control::model::detail

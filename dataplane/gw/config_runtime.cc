// Run-time tunnel changes (config.h, "Run-time tunnel changes"): a request item read by the
// file's own tunnel parser, and the candidate configuration checked by the file's own validator,
// with every error translated to the request's names ("add[0] (tunnel 1001): field 'slots'").
// Setup tier: throws nothing out, returns Result.
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <boost/json.hpp>

#include "dataplane/gw/config.h"
#include "dataplane/gw/config_internal.h"

namespace detwan::dataplane::gw {
namespace {

namespace json = boost::json;

std::unexpected<common::Error> config_error(std::string message) {
  return common::make_error(common::ErrorCode::kConfig, std::move(message));
}

// The YAML map a JSON object spells. Built in memory, so its nodes have no position and the
// parser's messages start with the label alone (no line:column of a document that never was).
YAML::Node yaml_of(const json::value& value) {
  switch (value.kind()) {
    case json::kind::object: {
      YAML::Node map(YAML::NodeType::Map);
      for (const auto& field : value.as_object()) {
        map[std::string(field.key())] = yaml_of(field.value());
      }
      return map;
    }
    case json::kind::array: {
      YAML::Node sequence(YAML::NodeType::Sequence);
      for (const json::value& item : value.as_array()) sequence.push_back(yaml_of(item));
      return sequence;
    }
    case json::kind::string:
      return YAML::Node(std::string(value.as_string()));
    case json::kind::int64:
      return YAML::Node(std::to_string(value.as_int64()));
    case json::kind::uint64:
      return YAML::Node(std::to_string(value.as_uint64()));
    case json::kind::double_:
      return YAML::Node(json::serialize(value));
    case json::kind::bool_:
      return YAML::Node(std::string(value.as_bool() ? "true" : "false"));
    case json::kind::null:
      break;
  }
  return YAML::Node(YAML::NodeType::Null);
}

std::string id_list(const std::vector<TunnelConfig>& tunnels) {
  std::string out;
  for (const TunnelConfig& tunnel : tunnels) {
    out += fmt::format("{}{}", out.empty() ? "" : ", ", tunnel.id);
  }
  return out.empty() ? "none" : out;
}

std::string endpoint_text(const std::optional<Endpoint>& endpoint) {
  return endpoint ? format_endpoint(*endpoint) : std::string("none");
}

std::string service_text(const TunnelConfig& tunnel) {
  return fmt::format("listen {}, deliver {}", endpoint_text(tunnel.service_listen),
                     endpoint_text(tunnel.service_deliver));
}

// Fields a modify may not change: their state lives in the backends or was sized at start.
common::Result<void> check_immutable(const TunnelConfig& now, const TunnelConfig& next,
                                     const std::string& label) {
  const auto refuse = [&](std::string_view field, const std::string& was,
                          const std::string& wanted) {
    return config_error(fmt::format(
        "{}: field '{}': cannot change at run time ({} -> {}); remove the tunnel and add a new "
        "one",
        label, field, was, wanted));
  };
  if (next.peer != now.peer) return refuse("peer", "'" + now.peer + "'", "'" + next.peer + "'");
  const auto protection_peer = [](const TunnelConfig& t) {
    return t.protection ? "'" + t.protection->peer + "'" : std::string("none");
  };
  if (protection_peer(next) != protection_peer(now)) {
    return refuse("protection.peer", protection_peer(now), protection_peer(next));
  }
  // Keys and cipher may change (rotation); turning authentication on or off may not: frames
  // already queued were sized for the one or the other.
  const auto auth_text = [](const TunnelConfig& t) {
    return t.auth ? std::string(aead::to_string(t.auth->cipher)) : std::string("none");
  };
  if (next.auth.has_value() != now.auth.has_value()) {
    return refuse("auth", auth_text(now), auth_text(next));
  }
  if (next.replay_window_bits != now.replay_window_bits) {
    return refuse("replay_window", std::to_string(now.replay_window_bits),
                  std::to_string(next.replay_window_bits));
  }
  if (next.playout_capacity_frames != now.playout_capacity_frames) {
    return refuse("playout_capacity", std::to_string(now.playout_capacity_frames),
                  std::to_string(next.playout_capacity_frames));
  }
  if (next.service_listen != now.service_listen || next.service_deliver != now.service_deliver) {
    return config_error(fmt::format(
        "{}: field 'service': service ports are set in the configuration file only (is {}, "
        "the request has {})",
        label, service_text(now), service_text(next)));
  }
  return {};
}

}  // namespace

common::Result<TunnelConfig> parse_tunnel_item(std::string_view json_object,
                                               const std::string& label) {
  json::error_code error;
  const json::value value = json::parse(json_object, error);
  if (error || !value.is_object()) {
    return config_error(
        fmt::format("{}: expected a tunnel as a JSON object like {{\"id\":1001,\"peer\":\"site-b\","
                    "\"rate\":\"100mbit\",\"slots\":\"0-9\"}}",
                    label));
  }
  try {
    const common::ConfigNode node(yaml_of(value), label, "");
    return config_detail::parse_tunnel(node);
  } catch (const common::Failure& failure) {
    return std::unexpected(failure.error());
  } catch (const YAML::Exception& e) {
    return config_error(fmt::format("{}: {}", label, e.what()));
  }
}

common::Result<GatewayConfig> apply_tunnel_changes(const GatewayConfig& current,
                                                   const TunnelChanges& requested) {
  const auto item_label = [](std::string_view list, size_t k, uint32_t id) {
    return fmt::format("{}[{}] (tunnel {})", list, k, id);
  };
  // x25519 tunnels get their secrets from this gateway's identity (config_tunnels.cc).
  TunnelChanges changes = requested;
  for (auto* list : {&changes.add, &changes.modify}) {
    const char* name = list == &changes.add ? "add" : "modify";
    for (size_t k = 0; k < list->size(); ++k) {
      TunnelConfig& tunnel = (*list)[k];
      if (auto failed = config_detail::derive_exchanged_keys(tunnel, current.identity)) {
        return config_error(fmt::format("{}: field '{}': {}", item_label(name, k, tunnel.id),
                                        failed->field, failed->message));
      }
    }
  }
  std::map<uint32_t, size_t> existing;  // id -> index in current.tunnels
  for (size_t i = 0; i < current.tunnels.size(); ++i) existing[current.tunnels[i].id] = i;

  // Each id once per request.
  std::map<uint32_t, std::string> claimed;
  const auto claim = [&](uint32_t id, const std::string& short_label,
                         const std::string& label) -> common::Result<void> {
    const auto [it, fresh] = claimed.emplace(id, short_label);
    if (fresh) return {};
    return config_error(
        fmt::format("{}: field 'id': tunnel {} appears twice in this request "
                    "(also {}); an id may appear once",
                    label, id, it->second));
  };
  for (size_t k = 0; k < changes.add.size(); ++k) {
    const TunnelConfig& tunnel = changes.add[k];
    const std::string label = item_label("add", k, tunnel.id);
    if (auto ok = claim(tunnel.id, fmt::format("add[{}]", k), label); !ok) {
      return std::unexpected(ok.error());
    }
    if (existing.count(tunnel.id) != 0) {
      return config_error(
          fmt::format("{}: field 'id': tunnel {} exists already (modify changes "
                      "it, remove deletes it)",
                      label, tunnel.id));
    }
    if (tunnel.service_listen || tunnel.service_deliver) {
      return config_error(fmt::format(
          "{}: field 'service': service ports are set in the configuration file only", label));
    }
  }
  std::map<uint32_t, size_t> modified;  // id -> k
  for (size_t k = 0; k < changes.modify.size(); ++k) {
    const TunnelConfig& tunnel = changes.modify[k];
    const std::string label = item_label("modify", k, tunnel.id);
    if (auto ok = claim(tunnel.id, fmt::format("modify[{}]", k), label); !ok) {
      return std::unexpected(ok.error());
    }
    const auto it = existing.find(tunnel.id);
    if (it == existing.end()) {
      return config_error(fmt::format("{}: field 'id': no tunnel {} to modify (tunnels: {})", label,
                                      tunnel.id, id_list(current.tunnels)));
    }
    if (auto ok = check_immutable(current.tunnels[it->second], tunnel, label); !ok) {
      return std::unexpected(ok.error());
    }
    modified[tunnel.id] = k;
  }
  std::map<uint32_t, size_t> removed;
  for (size_t k = 0; k < changes.remove.size(); ++k) {
    const uint32_t id = changes.remove[k];
    const std::string label = fmt::format("remove[{}]", k);
    if (auto ok = claim(id, label, label); !ok) return std::unexpected(ok.error());
    if (existing.count(id) == 0) {
      return config_error(fmt::format("{}: no tunnel {} to remove (tunnels: {})", label, id,
                                      id_list(current.tunnels)));
    }
    removed[id] = k;
  }

  // The result, in the gateway's order: kept and modified tunnels in place, added ones last.
  GatewayConfig next = current;
  next.tunnels.clear();
  // The same, checked in an order that makes the validator (which reports a conflict at the
  // later of two tunnels) point at the request: untouched tunnels, modified ones, added ones.
  GatewayConfig checked = current;
  checked.tunnels.clear();
  std::vector<std::string> where, text;
  for (size_t i = 0; i < current.tunnels.size(); ++i) {
    const TunnelConfig& tunnel = current.tunnels[i];
    if (removed.count(tunnel.id) != 0) continue;
    const auto m = modified.find(tunnel.id);
    if (m != modified.end()) {
      next.tunnels.push_back(changes.modify[m->second]);
      continue;
    }
    next.tunnels.push_back(tunnel);
    checked.tunnels.push_back(tunnel);
    where.push_back(fmt::format("tunnels[{}] (tunnel {})", i, tunnel.id));
    text.push_back(fmt::format("tunnels[{}]", i));
  }
  for (size_t k = 0; k < changes.modify.size(); ++k) {
    checked.tunnels.push_back(changes.modify[k]);
    where.push_back(item_label("modify", k, changes.modify[k].id));
    text.push_back(fmt::format("modify[{}]", k));
  }
  for (size_t k = 0; k < changes.add.size(); ++k) {
    next.tunnels.push_back(changes.add[k]);
    checked.tunnels.push_back(changes.add[k]);
    where.push_back(item_label("add", k, changes.add[k].id));
    text.push_back(fmt::format("add[{}]", k));
  }
  try {
    const auto locator =
        config_detail::FieldLocator::for_request(std::move(where), std::move(text));
    config_detail::validate(checked, locator);
  } catch (const common::Failure& failure) {
    return std::unexpected(failure.error());
  }
  return next;
}

}  // namespace detwan::dataplane::gw

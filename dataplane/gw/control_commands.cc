// The control channel's requests (control_server.h): reads answered from the engine, writes
// (apply and its one-item forms) parsed into TunnelChanges and handed to Engine::apply_st. Setup
// tier on the datapath thread between polls: may allocate, never throws out.
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <boost/json.hpp>

#include "common/json_number.h"
#include "dataplane/gw/config.h"
#include "dataplane/gw/control_server.h"
#include "dataplane/gw/engine.h"

namespace detwan::dataplane::gw {
namespace {

namespace json = boost::json;

constexpr std::string_view kReadCommands = "stats, prometheus, config, tunnels";
constexpr std::string_view kCommands =
    "stats, prometheus, config, tunnels, apply, add_tunnel, modify_tunnel, remove_tunnel or "
    "reload";


// A refused write: the message and the generation in force (nothing changed).
std::string refusal_json(std::string_view message, const Engine& engine) {
  json::object object;
  object["error"] = message;
  object["generation"] = engine.generation();
  return json::serialize(object);
}

bool is_write(std::string_view command) {
  return command == "apply" || command == "add_tunnel" || command == "modify_tunnel" ||
         command == "remove_tunnel" || command == "reload";
}

// Keys of `object` must be among `allowed`; else the refusal names the first other one.
std::string unknown_key(const json::object& object, std::initializer_list<std::string_view> allowed,
                        std::string_view command) {
  for (const auto& field : object) {
    bool known = false;
    for (const std::string_view key : allowed) known = known || field.key() == key;
    if (known) continue;
    std::string list;
    for (const std::string_view key : allowed)
      list += fmt::format("{}{}", list.empty() ? "" : ", ", key);
    return fmt::format("unknown field \"{}\" in {} (allowed: {})", std::string_view(field.key()),
                       command, list);
  }
  return "";
}

// A tunnel id: an integer in [1, 2^32-1].
bool tunnel_id_of(const json::value& value, uint32_t* id) {
  const std::optional<uint64_t> n = common::json_uint64_in(value, 1, UINT32_MAX);
  if (n) *id = static_cast<uint32_t>(*n);
  return n.has_value();
}

// One add/modify item: "add[0] (tunnel 1001)" once its id can be read.
common::Result<TunnelConfig> item(const json::value& value, std::string_view list, size_t k) {
  std::string label = fmt::format("{}[{}]", list, k);
  uint32_t id = 0;
  if (const auto* object = value.if_object()) {
    if (const auto* field = object->if_contains("id"); field && tunnel_id_of(*field, &id)) {
      label += fmt::format(" (tunnel {})", id);
    }
  }
  return parse_tunnel_item(json::serialize(value), label);
}

common::Result<std::vector<TunnelConfig>> items(const json::object& request,
                                                std::string_view list) {
  std::vector<TunnelConfig> out;
  const json::value* value = request.if_contains(list);
  if (value == nullptr) return out;
  if (!value->is_array()) {
    return common::make_error(common::ErrorCode::kConfig,
                              fmt::format("\"{}\" must be a list of tunnels", list));
  }
  const json::array& array = value->as_array();
  for (size_t k = 0; k < array.size(); ++k) {
    auto tunnel = item(array[k], list, k);
    if (!tunnel) return std::unexpected(tunnel.error());
    out.push_back(std::move(*tunnel));
  }
  return out;
}

// The request's changes; a refusal message if it is malformed.
common::Result<TunnelChanges> changes_of(const json::object& request, std::string_view command) {
  const auto refuse = [](std::string message) {
    return common::make_error(common::ErrorCode::kConfig, std::move(message));
  };
  TunnelChanges changes;
  if (command == "apply") {
    if (auto key =
            unknown_key(request, {"cmd", "if_generation", "add", "modify", "remove"}, command);
        !key.empty()) {
      return refuse(std::move(key));
    }
    auto add = items(request, "add");
    if (!add) return std::unexpected(add.error());
    auto modify = items(request, "modify");
    if (!modify) return std::unexpected(modify.error());
    changes.add = std::move(*add);
    changes.modify = std::move(*modify);
    if (const json::value* remove = request.if_contains("remove")) {
      if (!remove->is_array()) return refuse("\"remove\" must be a list of tunnel ids");
      for (size_t k = 0; k < remove->as_array().size(); ++k) {
        uint32_t id = 0;
        const json::value& value = remove->as_array()[k];
        if (!tunnel_id_of(value, &id)) {
          return refuse(
              fmt::format("remove[{}]: expected a tunnel id (an integer 1..4294967295), "
                          "got {}",
                          k, json::serialize(value)));
        }
        changes.remove.push_back(id);
      }
    }
    if (changes.add.empty() && changes.modify.empty() && changes.remove.empty()) {
      return refuse("apply changes nothing: give \"add\", \"modify\" or \"remove\"");
    }
    return changes;
  }
  if (command == "remove_tunnel") {
    if (auto key = unknown_key(request, {"cmd", "if_generation", "id"}, command); !key.empty()) {
      return refuse(std::move(key));
    }
    const json::value* id_value = request.if_contains("id");
    uint32_t id = 0;
    if (id_value == nullptr || !tunnel_id_of(*id_value, &id)) {
      return refuse("remove_tunnel needs \"id\": a tunnel id (an integer 1..4294967295)");
    }
    changes.remove.push_back(id);
    return changes;
  }
  // add_tunnel / modify_tunnel: {"tunnel": {...}}, the same as apply with one item.
  if (auto key = unknown_key(request, {"cmd", "if_generation", "tunnel"}, command); !key.empty()) {
    return refuse(std::move(key));
  }
  const json::value* tunnel = request.if_contains("tunnel");
  if (tunnel == nullptr) return refuse(fmt::format("{} needs \"tunnel\": {{...}}", command));
  const bool add = command == "add_tunnel";
  auto parsed = item(*tunnel, add ? "add" : "modify", 0);
  if (!parsed) return std::unexpected(parsed.error());
  (add ? changes.add : changes.modify).push_back(std::move(*parsed));
  return changes;
}

std::string apply(Engine& engine, const json::object& request, std::string_view command,
                  int64_t now_ns) {
  ControlIo& io = engine.control_io();
  const auto refused = [&](std::string message) {
    ++io.refused_writes;
    return refusal_json(message, engine);
  };
  if (const json::value* expected = request.if_contains("if_generation")) {
    if (!expected->is_int64() && !expected->is_uint64()) {
      return refused("\"if_generation\" must be the integer generation read from tunnels");
    }
    const std::optional<uint64_t> wanted = common::json_uint64(*expected);  // none: negative
    if (!wanted || *wanted != engine.generation()) {
      return refused(
          fmt::format("if_generation {} does not match the gateway's generation {}: "
                      "it changed since it was read (read tunnels again)",
                      json::serialize(*expected), engine.generation()));
    }
  }
  const auto ids = [](const std::vector<uint32_t>& list) {
    json::array out;
    for (const uint32_t id : list) out.push_back(id);
    return out;
  };
  // reload: the configuration file read again, its tunnel changes applied (config.h).
  std::vector<uint32_t> file_ids;
  common::Result<TunnelChanges> changes = TunnelChanges{};
  if (command == "reload") {
    if (auto key = unknown_key(request, {"cmd", "if_generation"}, command); !key.empty()) {
      return refused(std::move(key));
    }
    const std::string& path = engine.config().source;
    if (path.empty() || path == "<string>") {
      return refused("reload: this gateway's configuration did not come from a file");
    }
    auto file = load_gateway_config(path);
    if (!file) return refused("reload: " + file.error().message + " (nothing was changed)");
    changes = reload_changes(engine.config(), engine.file_tunnel_ids(), *file);
    if (!changes) return refused("reload: " + changes.error().message);
    for (const TunnelConfig& t : file->tunnels) file_ids.push_back(t.id);
    if (changes->add.empty() && changes->modify.empty() && changes->remove.empty()) {
      engine.set_file_tunnel_ids(std::move(file_ids));
      return json::serialize(json::object{{"ok", true},
                                          {"generation", engine.generation()},
                                          {"added", json::array{}},
                                          {"modified", json::array{}},
                                          {"removed", json::array{}},
                                          {"source", path}});
    }
  } else {
    changes = changes_of(request, command);
    if (!changes) return refused(changes.error().message);
  }
  auto result = engine.apply_st(*changes, now_ns);
  if (!result) return refused(result.error().message);
  ++io.applied;
  if (command == "reload") engine.set_file_tunnel_ids(std::move(file_ids));
  json::object out{{"ok", true},
                   {"generation", result->generation},
                   {"added", ids(result->added)},
                   {"modified", ids(result->modified)},
                   {"removed", ids(result->removed)}};
  if (command == "reload") out["source"] = engine.config().source;
  return json::serialize(out);
}

std::string answer(Engine& engine, std::string_view request, int64_t now_ns,
                   const ControlChannel& channel) {
  json::error_code parse_error;
  const json::value parsed = json::parse(request, parse_error);
  if (parse_error) {
    return control_error_json("request is not JSON (" + parse_error.message() +
                      "); send one line like {\"cmd\":\"stats\"}");
  }
  if (!parsed.is_object())
    return control_error_json("request must be a JSON object like {\"cmd\":\"stats\"}");
  const json::object& object = parsed.as_object();
  const json::value* command = object.if_contains("cmd");
  if (command == nullptr)
    return control_error_json(fmt::format("request has no \"cmd\" (use {})", kCommands));
  if (!command->is_string())
    return control_error_json(fmt::format("\"cmd\" must be a string ({})", kCommands));
  const std::string_view name = command->as_string();
  if (is_write(name)) {
    if (!channel.admin) {
      ++engine.control_io().refused_writes;
      return control_error_json(fmt::format(
          "'{}' changes the gateway: send it to the admin socket{} (gateway.admin_socket), not {}",
          name, channel.admin_socket.empty() ? "" : " " + channel.admin_socket,
          channel.name.empty() ? std::string(kDefaultControlSocket) : channel.name));
    }
    return apply(engine, object, name, now_ns);
  }
  if (name == "prometheus") {
    return prometheus_answer({&engine}, boost::json::serialize(object), now_ns);
  }
  if (name != "stats" && name != "config" && name != "tunnels") {
    return control_error_json(fmt::format("unknown cmd \"{}\" (use {})", name, kCommands));
  }
  for (const auto& field : object) {
    if (field.key() != "cmd") {
      return control_error_json(fmt::format("unknown field \"{}\" (only \"cmd\" for {})",
                                    std::string_view(field.key()), kReadCommands));
    }
  }
  if (name == "stats") return engine.stats_json(now_ns);
  if (name == "tunnels") return engine.tunnels_json();
  return describe(engine.config());
}

}  // namespace

std::string prometheus_answer(const std::vector<Engine*>& shards, std::string_view request,
                              int64_t now_ns) {
  boost::system::error_code error;
  const boost::json::value parsed = boost::json::parse(request, error);
  if (error || !parsed.is_object()) return control_error_json("request is not a JSON object");
  Engine::PrometheusPart part;
  bool parted = false;
  for (const auto& field : parsed.as_object()) {
    if (field.key() == "cmd") continue;
    if (field.key() != "part" || !field.value().is_object()) {
      return control_error_json(fmt::format(
          "unknown field \"{}\" (prometheus takes \"cmd\" and an optional \"part\" object)",
          std::string_view(field.key())));
    }
    parted = true;
    for (const auto& item : field.value().as_object()) {
      const boost::json::value& v = item.value();
      if (item.key() == "head" && v.is_bool()) {
        part.head = v.as_bool();
      } else if (item.key() == "after_tunnel" && v.is_int64() && v.as_int64() >= -1 &&
                 v.as_int64() <= UINT32_MAX) {
        part.after_tunnel = v.as_int64();
      } else if (item.key() == "max_tunnels" && v.is_int64() && v.as_int64() >= 1 &&
                 v.as_int64() <= UINT32_MAX) {
        part.max_tunnels = static_cast<uint32_t>(v.as_int64());
      } else {
        return control_error_json(fmt::format(
            "part.{}: not one of head (true/false), after_tunnel (-1 or a tunnel id), "
            "max_tunnels (>= 1)",
            std::string_view(item.key())));
      }
    }
  }
  if (!parted) return Engine::prometheus_text(shards, now_ns);
  int64_t next_after = -1;
  std::string text = Engine::prometheus_text(shards, now_ns, part, &next_after);
  if (next_after >= 0) text += fmt::format("{}{}\n", kPrometheusMore, next_after);
  return text;
}

std::string answer_control_request(Engine& engine, std::string_view request, int64_t now_ns,
                                   const ControlChannel& channel) {
  ++engine.control_io().requests;
  try {
    return answer(engine, request, now_ns, channel);
  } catch (const std::exception& e) {  // bad_alloc and the like: the gateway goes on
    return control_error_json(fmt::format("internal error: {}", e.what()));
  }
}

std::string control_error_json(std::string_view message) {
  json::object object;
  object["error"] = message;
  return json::serialize(object);
}

}  // namespace detwan::dataplane::gw

// The control channel of a sharded gateway (shard_control.h).
#include "dataplane/gw/shard_control.h"

#include <algorithm>
#include <exception>
#include <map>

#include <fmt/format.h>

#include <boost/json.hpp>

#include "dataplane/gw/shard.h"

namespace detwan::dataplane::gw {
namespace {

namespace json = boost::json;

bool is_histogram(const json::object& object) {
  return object.contains("count") && object.contains("p50") && object.contains("max");
}

// Adds `from` into `into`, key by key: numbers summed, objects recursively, histograms merged
// (see shard_control.h); anything else (names, configuration values) kept from `into`.
void add_counters(json::object& into, const json::object& from);

void merge_histogram(json::object& into, const json::object& from) {
  const auto count_of = [](const json::object& h) { return h.at("count").to_number<double>(); };
  const double a = count_of(into), b = count_of(from);
  if (b == 0) return;
  json::object merged = a >= b ? into : from;  // percentiles of the larger
  merged["count"] = static_cast<uint64_t>(a + b);
  if (a > 0) {
    merged["min"] =
        std::min(into.at("min").to_number<int64_t>(), from.at("min").to_number<int64_t>());
    merged["max"] =
        std::max(into.at("max").to_number<int64_t>(), from.at("max").to_number<int64_t>());
    const double mean =
        (into.at("mean").to_number<double>() * a + from.at("mean").to_number<double>() * b) /
        (a + b);
    merged["mean"] = static_cast<int64_t>(mean + (mean < 0 ? -0.5 : 0.5));
  }
  into = std::move(merged);
}

void add_value(json::value& into, const json::value& from) {
  if (into.is_object() && from.is_object()) {
    json::object& a = into.as_object();
    if (is_histogram(a)) {
      merge_histogram(a, from.as_object());
    } else {
      add_counters(a, from.as_object());
    }
  } else if ((into.is_uint64() || into.is_int64()) && (from.is_uint64() || from.is_int64())) {
    const bool negative =
        (into.is_int64() && into.as_int64() < 0) || (from.is_int64() && from.as_int64() < 0);
    if (negative) {
      into = into.to_number<int64_t>() + from.to_number<int64_t>();
    } else {
      into = into.to_number<uint64_t>() + from.to_number<uint64_t>();
    }
  }
}

void add_counters(json::object& into, const json::object& from) {
  for (auto& [key, value] : into) {
    if (const json::value* other = from.if_contains(key)) add_value(value, *other);
  }
}

// Port entries: configuration values from shard 0, counters summed; the scheduler's per-tunnel
// counters from the tunnel's owner; the closed runs of other shards' best effort (owner 0) out.
void merge_port(json::object& port, const json::object& other, uint32_t shard, uint32_t count) {
  for (const char* key : {"io", "rx_drops"}) {
    add_value(port[key], other.at(key));
  }
  json::object& tx = port["tx"].as_object();
  const json::object& other_tx = other.at("tx").as_object();
  add_value(tx["port"], other_tx.at("port"));
  add_value(tx["best_effort"], other_tx.at("best_effort"));
  add_value(tx["held_frames"], other_tx.at("held_frames"));
  json::object& tunnels = tx["tunnels"].as_object();
  for (const auto& [id, counters] : other_tx.at("tunnels").as_object()) {
    const auto tunnel_id =
        static_cast<uint32_t>(std::strtoul(std::string(id).c_str(), nullptr, 10));
    if (tunnel_id != kClosedSlotOwner && shard_of_tunnel(tunnel_id, count) == shard) {
      tunnels[id] = counters;
    }
  }
  tunnels.erase(std::to_string(kClosedSlotOwner));
}

}  // namespace

TunnelChanges tunnel_difference(const std::vector<TunnelConfig>& from,
                                const std::vector<TunnelConfig>& to) {
  std::map<uint32_t, const TunnelConfig*> before;
  for (const TunnelConfig& tunnel : from) before[tunnel.id] = &tunnel;
  TunnelChanges changes;
  std::map<uint32_t, bool> kept;
  for (const TunnelConfig& tunnel : to) {
    const auto it = before.find(tunnel.id);
    if (it == before.end()) {
      changes.add.push_back(tunnel);
    } else {
      kept[tunnel.id] = true;
      if (!(*it->second == tunnel)) changes.modify.push_back(tunnel);
    }
  }
  for (const TunnelConfig& tunnel : from) {
    if (!kept.contains(tunnel.id)) changes.remove.push_back(tunnel.id);
  }
  return changes;
}

std::string merge_shard_stats(const std::vector<Engine*>& shards, int64_t now_ns) {
  const auto count = static_cast<uint32_t>(shards.size());
  std::vector<json::value> docs;
  docs.reserve(count);
  for (const Engine* engine : shards) docs.push_back(json::parse(engine->stats_json(now_ns)));
  json::object merged = docs[0].as_object();
  for (uint32_t k = 1; k < count; ++k) {
    const json::object& doc = docs[k].as_object();
    add_value(merged["drops"], doc.at("drops"));
    add_value(merged["local"], doc.at("local"));
    json::array& ports = merged["ports"].as_array();
    const json::array& other_ports = doc.at("ports").as_array();
    for (std::size_t p = 0; p < ports.size() && p < other_ports.size(); ++p) {
      merge_port(ports[p].as_object(), other_ports[p].as_object(), k, count);
    }
  }
  for (json::value& port : merged["ports"].as_array()) {  // shard 0's own view, filtered
    json::object& tunnels = port.as_object()["tx"].as_object()["tunnels"].as_object();
    for (auto it = tunnels.begin(); it != tunnels.end();) {
      const auto id =
          static_cast<uint32_t>(std::strtoul(std::string(it->key()).c_str(), nullptr, 10));
      if (id == kClosedSlotOwner) {
        it = tunnels.erase(it);
      } else {
        ++it;
      }
    }
  }
  json::array& tunnels = merged["tunnels"].as_array();
  for (std::size_t i = 0; i < tunnels.size(); ++i) {
    const auto id = tunnels[i].as_object().at("id").to_number<uint32_t>();
    const uint32_t owner = shard_of_tunnel(id, count);
    tunnels[i] = docs[owner].as_object().at("tunnels").as_array().at(i);
  }
  json::array& peers = merged["peers"].as_array();
  for (uint32_t i = 0; i < peers.size(); ++i) {
    for (uint32_t k = 0; k < count; ++k) {
      if (shards[k]->leads_peer(i)) peers[i] = docs[k].as_object().at("peers").as_array().at(i);
    }
  }
  merged["shards"] = count;
  return json::serialize(merged);
}

std::string answer_sharded_request(const std::vector<Engine*>& shards, std::string_view request,
                                   int64_t now_ns, const ControlChannel& channel,
                                   const std::function<std::string()>& backend) {
  Engine& lead = *shards[0];
  json::error_code error;
  const json::value parsed = json::parse(request, error);
  const json::value* command =
      !error && parsed.is_object() ? parsed.as_object().if_contains("cmd") : nullptr;
  const std::string_view name =
      command != nullptr && command->is_string() ? std::string_view(command->as_string()) : "";
  if (name == "stats" && parsed.as_object().size() == 1) {
    ++lead.control_io().requests;
    try {
      if (!backend) return merge_shard_stats(shards, now_ns);
      json::value merged = json::parse(merge_shard_stats(shards, now_ns));
      merged.as_object()["backend_shards"] = json::parse(backend());
      return json::serialize(merged);
    } catch (const std::exception& e) {
      return control_error_json(fmt::format("internal error: {}", e.what()));
    }
  }
  if (name == "prometheus") {
    ++lead.control_io().requests;
    try {
      return prometheus_answer(shards, request, now_ns);
    } catch (const std::exception& e) {
      return control_error_json(fmt::format("internal error: {}", e.what()));
    }
  }
  const uint64_t generation = lead.generation();
  std::string answer = answer_control_request(lead, request, now_ns, channel);
  if (lead.generation() == generation) return answer;
  try {
    for (std::size_t k = 1; k < shards.size(); ++k) {
      const TunnelChanges changes =
          tunnel_difference(shards[k]->config().tunnels, lead.config().tunnels);
      auto applied = shards[k]->apply_st(changes, now_ns);
      if (!applied) {  // cannot differ from shard 0's checks; said loudly if it ever does
        return control_error_json(fmt::format("shard {} refused the change shard 0 applied: {}", k,
                                              applied.error().message));
      }
    }
  } catch (const std::exception& e) {
    return control_error_json(fmt::format("internal error: {}", e.what()));
  }
  return answer;
}

}  // namespace detwan::dataplane::gw

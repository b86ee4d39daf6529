#include "control/gateway/tunnel_spec.h"

#include <algorithm>
#include <optional>
#include <vector>

#include <fmt/format.h>

namespace detwan::control::gateway {
namespace json = boost::json;
namespace {

bool get_u64(const json::object& o, std::string_view key, uint64_t* out) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return false;
  if (v->is_uint64()) {
    *out = v->as_uint64();
    return true;
  }
  if (v->is_int64() && v->as_int64() >= 0) {
    *out = static_cast<uint64_t>(v->as_int64());
    return true;
  }
  return false;
}

// A JSON array of slot numbers, sorted; nullopt if it is not one.
std::optional<std::vector<uint32_t>> sorted_slots(const json::value* v) {
  if (v == nullptr || !v->is_array()) return std::nullopt;
  std::vector<uint32_t> out;
  for (const json::value& item : v->as_array()) {
    if (!item.is_int64() && !item.is_uint64()) return std::nullopt;
    out.push_back(static_cast<uint32_t>(item.to_number<uint64_t>()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

json::object TunnelSpec::to_request() const {
  json::array slot_list;
  for (const uint32_t s : slots) slot_list.push_back(s);
  json::array dst;
  for (const std::string& p : match_dst) dst.push_back(json::string(p));
  json::object request{{"id", id},
                      {"peer", peer},
                      {"owner", owner},
                      {"rate", fmt::format("{}bit", rate_bps)},
                      {"slots", std::move(slot_list)},
                      {"burst", fmt::format("{}b", burst_bytes)},
                      {"over_rate", "drop"},
                      {"bound", fmt::format("{}ns", bound_ns)},
                      {"late", "deliver"},
                      {"max_hold", fmt::format("{}ns", max_hold_ns)},
                      {"dscp", dscp},
                      {"match", json::object{{"dst", std::move(dst)}}}};
  if (!protect_peer.empty()) {
    json::array protect_list;
    for (const uint32_t s : protect_slots) protect_list.push_back(s);
    request["protection"] =
        json::object{{"peer", protect_peer}, {"slots", std::move(protect_list)}};
  }
  return request;
}

bool TunnelSpec::matches(const json::object& a, std::string* difference) const {
  auto differ = [&](std::string_view field) {
    if (difference != nullptr) *difference = std::string(field);
    return false;
  };
  uint64_t value = 0;
  if (!get_u64(a, "id", &value) || value != id) return differ("id");
  const json::value* p = a.if_contains("peer");
  if (p == nullptr || !p->is_string() || p->as_string() != peer) return differ("peer");
  const json::value* o = a.if_contains("owner");
  if (o == nullptr || !o->is_string() || o->as_string() != owner) return differ("owner");
  if (!get_u64(a, "rate_bps", &value) || value != rate_bps) return differ("rate");
  if (!get_u64(a, "burst_bytes", &value) || value != burst_bytes) return differ("burst");
  if (!get_u64(a, "bound_ns", &value) || value != static_cast<uint64_t>(bound_ns))
    return differ("bound");
  if (!get_u64(a, "max_hold_ns", &value) || value != static_cast<uint64_t>(max_hold_ns)) {
    return differ("max_hold");
  }
  if (!get_u64(a, "dscp", &value) || value != dscp) return differ("dscp");
  if (sorted_slots(a.if_contains("slots")) != slots) return differ("slots");
  const json::value* m = a.if_contains("match");
  if (m == nullptr || !m->is_object()) return differ("match");
  const json::value* dst = m->as_object().if_contains("dst");
  std::vector<std::string> actual_dst;
  if (dst != nullptr && dst->is_array()) {
    for (const json::value& v : dst->as_array()) {
      if (v.is_string()) actual_dst.emplace_back(v.as_string());
    }
  }
  if (actual_dst != match_dst) return differ("match.dst");
  const json::value* protection = a.if_contains("protection");
  if (protect_peer.empty()) return protection == nullptr ? true : differ("protection");
  if (protection == nullptr || !protection->is_object()) return differ("protection");
  const json::value* pp = protection->as_object().if_contains("peer");
  if (pp == nullptr || !pp->is_string() || pp->as_string() != protect_peer) {
    return differ("protection.peer");
  }
  if (sorted_slots(protection->as_object().if_contains("slots")) != protect_slots) {
    return differ("protection.slots");
  }
  return true;
}

}  // namespace detwan::control::gateway

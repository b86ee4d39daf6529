#include "control/gateway/tunnel_spec.h"

#include <algorithm>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "common/json_number.h"
#include "control/reservation/tunnel_keys.h"

namespace detwan::control::gateway {
namespace json = boost::json;
namespace {

bool get_u64(const json::object& o, std::string_view key, uint64_t* out) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return false;
  const std::optional<uint64_t> n = common::json_uint64(*v);
  if (n) *out = *n;
  return n.has_value();
}

// A JSON array of slot numbers, sorted; nullopt if it is not one.
std::optional<std::vector<uint32_t>> sorted_slots(const json::value* v) {
  if (v == nullptr || !v->is_array()) return std::nullopt;
  std::vector<uint32_t> out;
  for (const json::value& item : v->as_array()) {
    const auto slot = common::json_uint64_in(item, 0, UINT32_MAX);
    if (!slot) return std::nullopt;
    out.push_back(static_cast<uint32_t>(*slot));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

bool TunnelSpec::auth_matches(const json::value* auth) const {
  if (cipher.empty()) return auth == nullptr || auth->is_null();
  if (auth == nullptr || !auth->is_object()) return false;
  const json::object& o = auth->as_object();
  const json::value* c = o.if_contains("cipher");
  uint64_t tx = 0;
  if (c == nullptr || !c->is_string() || c->as_string() != cipher) return false;
  if (!get_u64(o, "tx_key", &tx) || tx != tx_key) return false;
  const json::value* list = o.if_contains("keys");
  if (list == nullptr || !list->is_array() || list->as_array().size() != keys.size()) return false;
  const auto text_is = [](const json::object& in, std::string_view key, std::string_view want) {
    const json::value* v = in.if_contains(key);
    return want.empty() ? v == nullptr : v != nullptr && v->is_string() && v->as_string() == want;
  };
  if (!text_is(o, "key_exchange", key_exchange) ||
      !text_is(o, "peer_public_key", peer_public_key)) {
    return false;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    const json::value& item = list->as_array()[i];
    if (!item.is_object()) return false;
    uint64_t id = 0;
    if (!key_exchange.empty()) {  // no secret to fingerprint: the key is its context
      if (!get_u64(item.as_object(), "id", &id) || id != keys[i].id ||
          !text_is(item.as_object(), "context", keys[i].context)) {
        return false;
      }
      continue;
    }
    const json::value* f = item.as_object().if_contains("fingerprint");
    if (!get_u64(item.as_object(), "id", &id) || id != keys[i].id || f == nullptr ||
        !f->is_string() || f->as_string() != reservation::key_fingerprint(keys[i].secret_hex)) {
      return false;
    }
  }
  return true;
}

json::object TunnelSpec::to_request() const {
  json::array slot_list;
  for (const uint32_t s : slots) slot_list.push_back(s);
  json::array dst;
  for (const std::string& p : match_dst) dst.push_back(json::string(p));
  json::object match{{"dst", std::move(dst)}};
  if (!match_src.empty()) {
    json::array src;
    for (const std::string& p : match_src) src.push_back(json::string(p));
    match["src"] = std::move(src);
  }
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
                       {"match", std::move(match)}};
  if (!protect_peer.empty()) {
    json::array protect_list;
    for (const uint32_t s : protect_slots) protect_list.push_back(s);
    request["protection"] =
        json::object{{"peer", protect_peer}, {"slots", std::move(protect_list)}};
  }
  if (!cipher.empty()) {
    json::array key_list;
    for (const Key& key : keys) {
      key_list.push_back(key_exchange.empty()
                             ? json::object{{"id", key.id}, {"secret", key.secret_hex}}
                             : json::object{{"id", key.id}, {"context", key.context}});
    }
    json::object auth{{"cipher", cipher}, {"keys", std::move(key_list)}, {"tx_key", tx_key}};
    if (!key_exchange.empty()) {
      auth["key_exchange"] = key_exchange;
      auth["peer_public_key"] = peer_public_key;
    }
    request["auth"] = std::move(auth);
  } else {
    request["auth"] = "none";  // the gateway refuses a tunnel that does not say it
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
  const auto prefixes = [&](std::string_view key) {
    std::vector<std::string> out;
    const json::value* list = m->as_object().if_contains(key);
    if (list != nullptr && list->is_array()) {
      for (const json::value& v : list->as_array()) {
        if (v.is_string()) out.emplace_back(v.as_string());
      }
    }
    return out;
  };
  if (prefixes("dst") != match_dst) return differ("match.dst");
  if (prefixes("src") != match_src) return differ("match.src");
  if (!auth_matches(a.if_contains("auth"))) return differ("auth");
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

void set_auth(TunnelSpec& spec, const std::string& cipher, const reservation::TunnelKeys& keys,
              int end) {
  if (cipher.empty() || cipher == reservation::kNoCipher) return;
  spec.cipher = cipher;
  spec.keys.clear();
  for (const reservation::TunnelKey& key : keys.keys) {
    spec.keys.emplace_back(key.id, key.secret_hex, key.context);
  }
  spec.tx_key = keys.tx_key;
  spec.key_exchange = keys.key_exchange;
  spec.peer_public_key =
      keys.key_exchange.empty() ? std::string() : keys.public_keys[end == 0 ? 1 : 0];
}

}  // namespace detwan::control::gateway

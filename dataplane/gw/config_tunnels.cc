// Loading one tunnel of the gateway configuration (the `tunnels:` list items).
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "common/secret_file.h"
#include "common/units.h"
#include "common/x25519.h"
#include "dataplane/aead/key_exchange.h"
#include "dataplane/gw/config_internal.h"
#include "dataplane/sched/gate_control_list.h"
#include "dataplane/wire/status.h"

namespace detwan::dataplane::gw::config_detail {
namespace {

using common::ConfigNode;

// "0-9,20" or a YAML list of slot numbers; sorted, each slot once. The range against the
// peer's port is checked by validate_schedules() (the port is not known yet).
std::vector<uint32_t> parse_slots(const ConfigNode& node) {
  std::vector<uint32_t> slots;
  if (node.is_sequence()) {
    for (const ConfigNode& item : node.items()) {
      slots.push_back(static_cast<uint32_t>(item.as_int(0, kMaxSlotCount - 1)));
    }
  } else {
    auto parsed = sched::parse_slot_list(node.as_string(), kMaxSlotCount);
    if (!parsed) node.fail(parsed.error().message + " (write slots like \"0-9,20\")");
    slots = std::move(*parsed);
  }
  std::sort(slots.begin(), slots.end());
  const auto twice = std::adjacent_find(slots.begin(), slots.end());
  if (twice != slots.end()) node.fail(fmt::format("slot {} is listed twice", *twice));
  return slots;
}

PortRange parse_port_range(const ConfigNode& node) {
  const std::string text = node.as_string();
  const size_t dash = text.find('-');
  PortRange range;
  auto number = [&](std::string_view digits, uint16_t* out) {
    uint32_t value = 0;
    if (digits.empty() || digits.size() > 5) return false;
    for (const char c : digits) {
      if (c < '0' || c > '9') return false;
      value = value * 10 + static_cast<uint32_t>(c - '0');
    }
    if (value == 0 || value > 65535) return false;
    *out = static_cast<uint16_t>(value);
    return true;
  };
  const bool ok = dash == std::string::npos
                      ? number(text, &range.first) && (range.last = range.first, true)
                      : number(std::string_view(text).substr(0, dash), &range.first) &&
                            number(std::string_view(text).substr(dash + 1), &range.last);
  if (!ok) {
    node.fail(
        fmt::format("'{}': expected a UDP port in [1, 65535] or a range like \"5201-5210\"", text));
  }
  if (range.last < range.first) node.fail(fmt::format("'{}': range ends before it starts", text));
  return range;
}

void parse_match(const ConfigNode& node, TunnelConfig* tunnel) {
  node.check_keys({"dst", "src", "udp_ports"});
  if (const auto dst = node.maybe_child("dst")) tunnel->dst_prefixes = prefix_list(*dst);
  if (const auto src = node.maybe_child("src")) {
    tunnel->src_prefixes = prefix_list(*src);
    if (!tunnel->src_prefixes.empty() && tunnel->dst_prefixes.empty()) {
      src->fail("src narrows match.dst, which is empty: list the destination prefixes too");
    }
  }
  const auto ports = node.maybe_child("udp_ports");
  if (!ports) return;
  for (const ConfigNode& item : ports->items()) {
    const PortRange range = parse_port_range(item);
    for (const PortRange& seen : tunnel->udp_ports) {
      if (range.first <= seen.last && seen.first <= range.last) {
        item.fail(fmt::format("UDP ports {} overlap {} listed before", format_port_range(range),
                              format_port_range(seen)));
      }
    }
    tunnel->udp_ports.push_back(range);
  }
  if (!tunnel->udp_ports.empty() && tunnel->dst_prefixes.empty()) {
    ports->fail("udp_ports narrows match.dst, which is empty: list the destination prefixes too");
  }
}

void parse_service(const ConfigNode& node, TunnelConfig* tunnel) {
  node.check_keys({"listen", "deliver"});
  if (const auto listen = node.maybe_child("listen")) {
    tunnel->service_listen = endpoint_value(*listen);
  }
  if (const auto deliver = node.maybe_child("deliver")) {
    tunnel->service_deliver = endpoint_value(*deliver);
    if (tunnel->service_deliver->port == 0) deliver->fail("the delivery UDP port must not be 0");
    if (is_unspecified(*tunnel->service_deliver)) {
      deliver->fail(fmt::format("'{}': cannot deliver to the unspecified address",
                                format_endpoint(*tunnel->service_deliver)));
    }
  }
  if (!tunnel->service_listen && !tunnel->service_deliver) {
    node.fail("a service needs 'listen' (send side), 'deliver' (receive side) or both");
  }
}

void parse_protection(const ConfigNode& node, TunnelConfig* tunnel) {
  node.check_keys({"peer", "slots"});
  TunnelProtection protection;
  protection.peer = name_value(node.child("peer"));
  protection.slots = parse_slots(node.child("slots"));
  if (protection.peer == tunnel->peer) {
    node.child("peer").fail(fmt::format(
        "'{}' is the tunnel's own peer: protection needs the peer entry of a disjoint path",
        protection.peer));
  }
  tunnel->protection = std::move(protection);
}

// A key file holds the 64 hex digits (surrounding white space ignored). It must belong to root
// or to the gateway's user and be private to its owner (common/secret_file.h: checked on the
// opened descriptor; docs/gateway.md, "auth").
std::string read_secret_file(const ConfigNode& node) {
  const std::string path = node.as_string();
  auto read = common::read_secret_file(path, "key file");
  if (!read) node.fail(read.error().message);
  const std::string& text = *read;
  const auto first = text.find_first_not_of(" \t\r\n");
  const auto last = text.find_last_not_of(" \t\r\n");
  return first == std::string::npos ? std::string() : text.substr(first, last - first + 1);
}

// auth: {cipher, keys: [{id, secret | secret_file}], tx_key}, or by key exchange:
// auth: {cipher, key_exchange: x25519, peer_public_key, context, key_id} (one key), or
// auth: {cipher, key_exchange: x25519, peer_public_key, keys: [{id, context}], tx_key}.
// An x25519 key's secret is derived later (derive_exchanged_keys: needs the identity).
void parse_auth(const ConfigNode& node, TunnelConfig* tunnel) {
  node.check_keys(
      {"cipher", "keys", "tx_key", "key_exchange", "peer_public_key", "context", "key_id"});
  TunnelAuth auth;
  if (const auto cipher = node.maybe_child("cipher")) {
    const auto parsed = aead::cipher_from_string(cipher->as_string());
    if (!parsed) {
      cipher->fail(fmt::format("'{}' is not a cipher (aes-256-gcm, chacha20-poly1305)",
                               cipher->as_string()));
    }
    auth.cipher = *parsed;
  }
  const auto exchange = node.maybe_child("key_exchange");
  if (exchange && exchange->as_string() != "x25519") {
    exchange->fail(fmt::format("'{}' is not a key exchange (x25519)", exchange->as_string()));
  }
  if (!exchange) {
    for (const char* only : {"peer_public_key", "context", "key_id"}) {
      if (const auto field = node.maybe_child(only)) {
        field->fail("only with 'key_exchange: x25519' (keys given by secret have none)");
      }
    }
  } else {
    const ConfigNode peer = node.child("peer_public_key");
    auto key = common::crypto::x25519_parse_public(peer.as_string());
    if (!key) peer.fail(key.error().message);
    auth.peer_public_key = *key;
  }
  const auto read_context = [](const ConfigNode& field) {
    std::string context = field.as_string();
    if (!aead::valid_key_context(context)) {
      field.fail(fmt::format("'{}': a key context is 1..{} printable ASCII characters, no spaces",
                             context, aead::kMaxKeyContextBytes));
    }
    return context;
  };
  const auto single = node.maybe_child("context");
  if (exchange && single) {
    if (const auto keys = node.maybe_child("keys")) {
      keys->fail("give either 'context' (one key) or 'keys', not both");
    }
    TunnelKey key;
    key.id = static_cast<uint8_t>(node.get_int("key_id", 1, 1, 255));
    key.context = read_context(*single);
    auth.keys.push_back(std::move(key));
  } else {
    if (const auto id = node.maybe_child("key_id")) id->fail("only with 'context' (one key)");
    const ConfigNode keys = node.child("keys");
    if (!keys.is_sequence() || keys.items().empty() || keys.items().size() > 2) {
      keys.fail("expected a list of one key, or two while a key is rotated");
    }
    for (const ConfigNode& item : keys.items()) {
      TunnelKey key;
      if (exchange) {
        item.check_keys({"id", "context"});
        key.context = read_context(item.child("context"));
      } else {
        item.check_keys({"id", "secret", "secret_file"});
      }
      key.id = static_cast<uint8_t>(item.child("id").as_int(1, 255));
      for (const TunnelKey& other : auth.keys) {
        if (other.id == key.id) item.child("id").fail(fmt::format("key id {} twice", key.id));
        if (exchange && other.context == key.context) {
          item.child("context").fail(
              fmt::format("context '{}' twice: each key needs its own", key.context));
        }
      }
      if (exchange) {
        auth.keys.push_back(std::move(key));
        continue;
      }
      const auto secret = item.maybe_child("secret");
      const auto file = item.maybe_child("secret_file");
      if (secret.has_value() == file.has_value()) {
        item.fail("a key needs exactly one of 'secret' (64 hex digits) or 'secret_file'");
      }
      std::string hex;
      if (secret) {
        hex = secret->as_string();
      } else {
        hex = read_secret_file(*file);
      }
      const auto parsed = aead::key_from_hex(hex);
      if (!parsed) {
        (secret ? *secret : *file)
            .fail(fmt::format("a key is 64 hex digits (32 bytes), got {} characters", hex.size()));
      }
      key.secret = *parsed;
      auth.keys.push_back(key);
    }
  }
  if (const auto tx = node.maybe_child("tx_key")) {
    auth.tx_key = static_cast<uint8_t>(tx->as_int(1, 255));
    const bool held = std::any_of(auth.keys.begin(), auth.keys.end(),
                                  [&](const TunnelKey& k) { return k.id == auth.tx_key; });
    if (!held) tx->fail(fmt::format("key {} is not one of the tunnel's keys", auth.tx_key));
  } else if (auth.keys.size() == 1) {
    auth.tx_key = auth.keys.front().id;
  } else {
    node.fail("two keys: say which one seals with 'tx_key'");
  }
  tunnel->auth = std::move(auth);
}

}  // namespace

TunnelConfig parse_tunnel(const ConfigNode& node) {
  node.check_keys(
      {"id",          "peer",          "owner",       "rate",           "slots",
       "burst",       "over_rate",     "shaper_rate", "queue",          "max_wait",
       "missed_slot", "bound",         "late",        "max_hold",       "playout_capacity",
       "dscp",        "replay_window", "match",       "foreign_source", "service",
       "protection",  "auth"});
  TunnelConfig tunnel;
  tunnel.id = static_cast<uint32_t>(node.child("id").as_int(1, UINT32_MAX));
  tunnel.peer = name_value(node.child("peer"));
  if (const auto owner = node.maybe_child("owner")) {
    tunnel.owner = owner->as_string();
    if (tunnel.owner.size() > kMaxOwnerBytes) {
      owner->fail(
          fmt::format("{} bytes: an owner is at most {}", tunnel.owner.size(), kMaxOwnerBytes));
    }
    for (const char c : tunnel.owner) {
      const auto byte = static_cast<unsigned char>(c);
      if (byte < 0x20 || byte == 0x7F) owner->fail("contains a control character");
    }
  }
  tunnel.rate_bps = rate_value(node.child("rate"), kMinLineRateBps, kMaxLineRateBps);
  tunnel.slots = parse_slots(node.child("slots"));
  if (const auto burst = node.maybe_child("burst")) {
    if (!(burst->is_scalar() && burst->as_string() == "auto")) {
      tunnel.burst_bytes = burst->as_size_bytes();
      if (tunnel.burst_bytes == 0 || tunnel.burst_bytes > (uint64_t{1} << 30)) {
        burst->fail(fmt::format("{} is out of range [1b, 1gb] (write 'auto' for the default)",
                                burst->as_string()));
      }
    }
  }
  if (const auto over = node.maybe_child("over_rate")) {
    const std::string text = over->as_string();
    if (text == "drop") {
      tunnel.over_rate = sched::OverRateAction::kDrop;
    } else if (text == "best-effort") {
      tunnel.over_rate = sched::OverRateAction::kBestEffort;
    } else {
      over->fail(fmt::format("'{}' is not one of: drop, best-effort", text));
    }
  }
  if (const auto shaper = node.maybe_child("shaper_rate")) {
    // 0 (with or without a unit) = no shaper.
    if (!(shaper->is_scalar() && shaper->as_string() == "0") && shaper->as_rate_bps() != 0) {
      tunnel.shaper_rate_bps = rate_value(*shaper, kMinLineRateBps, kMaxLineRateBps);
    }
  }
  tunnel.queue_frames = static_cast<uint32_t>(node.get_int("queue", 1024, 1, kMaxQueueFrames));
  tunnel.max_wait_ns = duration_field(node, "max_wait", 0, 0, kMaxWaitNs);
  if (const auto missed = node.maybe_child("missed_slot")) {
    const std::string text = missed->as_string();
    if (text == "next-window") {
      tunnel.missed_slot = sched::MissedSlot::kNextWindow;
    } else if (text == "drop") {
      tunnel.missed_slot = sched::MissedSlot::kDrop;
    } else {
      missed->fail(fmt::format("'{}' is not one of: next-window, drop", text));
    }
  }
  tunnel.bound_ns = duration_field(node, "bound", 0, 0, kMaxBoundNs);
  if (const auto late = node.maybe_child("late")) {
    const std::string text = late->as_string();
    if (text == "deliver") {
      tunnel.late = sched::LateAction::kDeliver;
    } else if (text == "drop") {
      tunnel.late = sched::LateAction::kDrop;
    } else {
      late->fail(fmt::format("'{}' is not one of: deliver, drop", text));
    }
  }
  tunnel.max_hold_ns = duration_field(node, "max_hold", 1'000'000'000, 1'000, kMaxHoldNs);
  tunnel.playout_capacity_frames =
      static_cast<uint32_t>(node.get_int("playout_capacity", 4096, 1, kMaxQueueFrames));
  tunnel.dscp = static_cast<uint8_t>(node.get_int("dscp", 46, 0, 63));
  if (const auto window = node.maybe_child("replay_window")) {
    const int64_t bits = window->as_int(0, INT64_MAX);
    const auto made = wire::make_replay_window(static_cast<uint64_t>(bits));
    if (!made) window->fail(made.error().message);
    tunnel.replay_window_bits = static_cast<uint32_t>(bits);
  }
  if (const auto match = node.maybe_child("match")) parse_match(*match, &tunnel);
  if (const auto foreign = node.maybe_child("foreign_source")) {
    const std::string text = foreign->as_string();
    if (text == "drop") {
      tunnel.foreign_source = ForeignSource::kDrop;
    } else if (text == "best-effort") {
      tunnel.foreign_source = ForeignSource::kBestEffort;
    } else {
      foreign->fail(fmt::format("'{}' is not one of: drop, best-effort", text));
    }
  }
  if (const auto service = node.maybe_child("service")) parse_service(*service, &tunnel);
  if (const auto protection = node.maybe_child("protection")) {
    parse_protection(*protection, &tunnel);
  }
  // Secure by default: a tunnel without keys must say so by name.
  const auto auth = node.maybe_child("auth");
  if (!auth) {
    node.fail(
        "field 'auth' is missing: a tunnel carries keys (auth: {cipher, keys: [{id, "
        "secret_file}], tx_key}) or says 'auth: none' to run unauthenticated and in clear");
  }
  if (auth->is_scalar()) {
    if (auth->as_string() != "none") {
      auth->fail(fmt::format("'{}': expected keys (a map) or 'none'", auth->as_string()));
    }
  } else {
    parse_auth(*auth, &tunnel);
  }
  return tunnel;
}

std::optional<KeyExchangeError> derive_exchanged_keys(
    TunnelConfig& tunnel, const std::optional<GatewayIdentity>& identity) {
  if (!tunnel.auth || !tunnel.auth->peer_public_key) return std::nullopt;
  TunnelAuth& auth = *tunnel.auth;
  if (!identity) {
    return KeyExchangeError{
        "auth.key_exchange",
        fmt::format("tunnel {}: x25519 needs the gateway's own key pair: add 'identity: "
                    "{{private_key_file: PATH}}' (detwan-gw keygen --out PATH makes one)",
                    tunnel.id)};
  }
  for (TunnelKey& key : auth.keys) {
    auto secret = aead::x25519_tunnel_secret(identity->keys, *auth.peer_public_key, tunnel.id,
                                             auth.cipher, key.context);
    if (!secret) {
      return KeyExchangeError{"auth.peer_public_key",
                              fmt::format("tunnel {}: {}", tunnel.id, secret.error().message)};
    }
    key.secret = *secret;
  }
  return std::nullopt;
}

}  // namespace detwan::dataplane::gw::config_detail

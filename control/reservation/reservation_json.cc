#include "control/reservation/reservation_json.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "common/json_number.h"

namespace detwan::control::reservation {
namespace json = boost::json;
namespace {

json::object direction_to_json(const admission::DirectionBound& d) {
  return {{"egress_ns", d.egress_ns},
          {"links_ns", d.links_ns},
          {"transit_ns", d.transit_ns},
          {"processing_ns", d.processing_ns},
          {"max_ns", d.max_ns},
          {"min_ns", d.min_ns},
          {"playout_error_ns", d.playout_error_ns}};
}

json::array slots_json(const std::vector<uint32_t>& slots) {
  json::array out;
  for (const uint32_t s : slots) out.push_back(s);
  return out;
}

json::array strings_json(const std::vector<std::string>& items) {
  json::array out;
  for (const std::string& s : items) out.push_back(json::string(s));
  return out;
}

// Reading: every accessor throws common::Failure naming the field.
struct Reader {
  const json::object& o;
  std::string where;
  [[noreturn]] void fail(std::string_view key, std::string_view what) const {
    throw common::Failure(common::Error{common::ErrorCode::kInvalidArgument,
                                        fmt::format("{}: field '{}' {}", where, key, what)});
  }
  const json::value& at(std::string_view key) const {
    const json::value* v = o.if_contains(key);
    if (v == nullptr) fail(key, "is missing");
    return *v;
  }
  int64_t i64(std::string_view key) const {
    if (const auto n = common::json_int64(at(key))) return *n;
    fail(key, "is not an integer");
  }
  uint64_t u64(std::string_view key) const {
    if (const auto n = common::json_uint64(at(key))) return *n;
    fail(key, "is not a non-negative integer");
  }
  double number(std::string_view key) const {
    const json::value& v = at(key);
    if (v.is_double()) return v.as_double();
    if (v.is_int64()) return static_cast<double>(v.as_int64());
    if (v.is_uint64()) return static_cast<double>(v.as_uint64());
    fail(key, "is not a number");
  }
  std::string str(std::string_view key) const {
    const json::value& v = at(key);
    if (!v.is_string()) fail(key, "is not a string");
    return std::string(v.as_string());
  }
  bool boolean(std::string_view key) const {
    const json::value& v = at(key);
    if (!v.is_bool()) fail(key, "is not true/false");
    return v.as_bool();
  }
  Reader object(std::string_view key) const {
    const json::value& v = at(key);
    if (!v.is_object()) fail(key, "is not an object");
    return Reader{v.as_object(), fmt::format("{}.{}", where, key)};
  }
  const json::array& array(std::string_view key) const {
    const json::value& v = at(key);
    if (!v.is_array()) fail(key, "is not an array");
    return v.as_array();
  }
};

admission::DirectionBound direction_from(const Reader& r) {
  admission::DirectionBound d;
  d.egress_ns = r.i64("egress_ns");
  d.links_ns = r.i64("links_ns");
  d.transit_ns = r.i64("transit_ns");
  d.processing_ns = r.i64("processing_ns");
  d.max_ns = r.i64("max_ns");
  d.min_ns = r.i64("min_ns");
  d.playout_error_ns = r.i64("playout_error_ns");
  return d;
}

admission::Bound bound_from(const Reader& r) {
  admission::Bound b;
  b.on_time = r.str("delivery") == "on_time";
  b.playout_bound_ns = r.i64("playout_bound_ns");
  b.max_latency_ns = r.i64("max_latency_ns");
  b.max_latency_variation_ns = r.i64("max_latency_variation_ns");
  b.min_latency_ns = r.i64("min_latency_ns");
  b.propagation_ns = r.i64("propagation_ns");
  b.max_loss = r.number("max_loss");
  b.forward = direction_from(r.object("forward"));
  b.reverse = direction_from(r.object("reverse"));
  return b;
}

std::vector<std::string> strings_from(const Reader& r, std::string_view key) {
  std::vector<std::string> out;
  for (const json::value& v : r.array(key)) {
    if (!v.is_string()) r.fail(key, "has an item that is not a string");
    out.emplace_back(v.as_string());
  }
  return out;
}

std::vector<uint32_t> slots_from(const Reader& r) {
  std::vector<uint32_t> out;
  for (const json::value& v : r.array("slots")) {
    // Parsed text holds int64; to_json() stores the uint32_t slots as uint64.
    const auto slot = common::json_uint64_in(v, 0, 65535);
    if (!slot) r.fail("slots", "has a bad slot");
    out.push_back(static_cast<uint32_t>(*slot));
  }
  return out;
}

}  // namespace

json::object bound_to_json(const admission::Bound& b) {
  return {{"max_latency_ns", b.max_latency_ns},
          {"max_latency_variation_ns", b.max_latency_variation_ns},
          {"min_latency_ns", b.min_latency_ns},
          {"max_loss", b.max_loss},
          {"delivery", b.on_time ? "on_time" : "in_time"},
          {"playout_bound_ns", b.playout_bound_ns},
          {"propagation_ns", b.propagation_ns},
          {"forward", direction_to_json(b.forward)},
          {"reverse", direction_to_json(b.reverse)}};
}

json::object keys_to_json(const TunnelKeys& k, Secrets secrets) {
  json::array keys;
  const bool exchanged = !k.key_exchange.empty();
  for (const TunnelKey& key : k.keys) {
    if (exchanged) {  // no secret exists here: the key is named by its context
      keys.push_back(json::object{{"id", key.id}, {"context", key.context}});
      continue;
    }
    json::object item{{"id", key.id}, {"fingerprint", key_fingerprint(key.secret_hex)}};
    if (secrets == Secrets::kInclude) item["secret"] = key.secret_hex;
    keys.push_back(std::move(item));
  }
  json::object out{{"keys", std::move(keys)},
                   {"tx_key", k.tx_key},
                   {"rotation", to_string(k.rotation)},
                   {"rotations", k.rotations},
                   {"step_unix_ns", k.step_unix_ns}};
  if (k.paced) {
    out["paced"] = true;
    out["permitted"] = to_string(k.permitted);
  }
  if (exchanged) {
    out["key_exchange"] = k.key_exchange;
    out["cipher"] = k.cipher;
    out["context"] = k.context;
    out["public_keys"] =
        json::array{json::string(k.public_keys[0]), json::string(k.public_keys[1])};
  }
  return out;
}

json::object to_json(const Reservation& r, Secrets secrets) {
  json::object spec{{"src", r.spec.src},
                    {"dst", r.spec.dst},
                    {"min_bandwidth_bps", r.spec.min_bandwidth_bps},
                    {"max_burst_bytes", r.spec.max_burst_bytes},
                    {"max_latency_ns", r.spec.max_latency_ns},
                    {"max_latency_variation_ns", r.spec.max_latency_variation_ns},
                    {"max_loss", r.spec.max_loss},
                    {"paths", r.spec.paths},
                    {"protect", r.spec.protect ? "1+1" : "none"},
                    {"encrypt", r.spec.encrypt},
                    {"src_prefixes", strings_json(r.spec.src_prefixes)},
                    {"dst_prefixes", strings_json(r.spec.dst_prefixes)},
                    {"asap", r.spec.asap},
                    {"start_unix_ns", r.spec.start_ns},
                    {"end_unix_ns", r.spec.end_ns},
                    {"duration_ns", r.spec.duration_ns}};
  json::array paths;
  for (const PathPlacement& p : r.paths) {
    json::array ends;
    for (const EndPlacement& e : p.ends) {
      ends.push_back(json::object{{"gateway", e.gateway},
                                  {"link", e.link},
                                  {"from", e.from},
                                  {"port", e.port},
                                  {"peer", e.peer},
                                  {"slots", slots_json(e.slots)},
                                  {"guaranteed_bps", e.guaranteed_bps}});
    }
    paths.push_back(json::object{{"nodes", strings_json(p.nodes)},
                                 {"links", strings_json(p.links)},
                                 {"ends", std::move(ends)},
                                 {"bound", bound_to_json(p.bound)}});
  }
  json::array history;
  for (const Transition& t : r.history) {
    history.push_back(json::object{
        {"at_unix_ns", t.at_ns}, {"from", t.from}, {"to", t.to}, {"reason", t.reason}});
  }
  json::array gateways;
  for (const GatewayStatus& g : r.gateways) {
    gateways.push_back(json::object{{"gateway", g.gateway},
                                    {"programmed", g.programmed},
                                    {"generation", g.generation},
                                    {"error", g.error}});
  }
  json::object out{
      {"id", r.id},
      {"version", r.version},
      {"client_request_id", r.client_request_id},
      {"tenant", r.tenant},
      {"requester_domain", r.requester_domain},
      {"state", to_string(r.state)},
      {"reason", r.reason},
      {"nsi", json::object{{"reservation_state", nsi_reservation_state(r.state)},
                           {"provision_state", nsi_provision_state(r.state)},
                           {"lifecycle_state", nsi_lifecycle_state(r.state, r.reason)}}},
      {"src", r.spec.src},
      {"dst", r.spec.dst},
      {"min_bandwidth_bps", r.spec.min_bandwidth_bps},
      {"spec", std::move(spec)},
      {"hold_expires_unix_ns", r.hold_expires_ns},
      {"tunnel_id", r.tunnel_id},
      {"burst_bytes", r.burst_bytes},
      {"path", r.paths.empty() ? json::array{} : strings_json(r.paths.front().nodes)},
      {"links", r.paths.empty() ? json::array{} : strings_json(r.paths.front().links)},
      {"paths", std::move(paths)},
      {"bound", bound_to_json(r.bound)},
      {"tunnel_keys", keys_to_json(r.keys, secrets)},
      {"created_unix_ns", r.created_ns},
      {"updated_unix_ns", r.updated_ns},
      {"history", std::move(history)},
      {"dataplane",
       json::object{{"active", r.dataplane_active}, {"gateways", std::move(gateways)}}}};
  return out;
}

common::Result<Reservation> from_json(const json::object& object) {
  try {
    Reader r{object, "reservation"};
    Reservation out;
    out.id = r.str("id");
    r.where = "reservation " + out.id;
    out.version = r.u64("version");
    out.client_request_id = r.str("client_request_id");
    // Journals written before tenants existed have neither: the domain's operator, local.
    if (r.o.contains("tenant")) out.tenant = r.str("tenant");
    if (r.o.contains("requester_domain")) out.requester_domain = r.str("requester_domain");
    const auto state = state_from_string(r.str("state"));
    if (!state) r.fail("state", "is not a state");
    out.state = *state;
    out.reason = r.str("reason");
    const Reader spec = r.object("spec");
    out.spec.src = spec.str("src");
    out.spec.dst = spec.str("dst");
    out.spec.min_bandwidth_bps = spec.u64("min_bandwidth_bps");
    out.spec.max_burst_bytes = spec.u64("max_burst_bytes");
    out.spec.max_latency_ns = spec.i64("max_latency_ns");
    out.spec.max_latency_variation_ns = spec.i64("max_latency_variation_ns");
    out.spec.max_loss = spec.number("max_loss");
    out.spec.paths = static_cast<uint32_t>(spec.u64("paths"));
    // Journals written before protection existed have no "protect": none.
    out.spec.protect = spec.o.contains("protect") && spec.str("protect") == "1+1";
    // Journals written before encryption existed have no "encrypt": they keep running as they
    // were admitted, unencrypted (only a new request gets the secure default).
    out.spec.encrypt = spec.o.contains("encrypt") ? spec.str("encrypt") : "none";
    if (!is_cipher_name(out.spec.encrypt)) spec.fail("encrypt", "is not a cipher name");
    out.spec.src_prefixes = strings_from(spec, "src_prefixes");
    out.spec.dst_prefixes = strings_from(spec, "dst_prefixes");
    out.spec.asap = spec.boolean("asap");
    out.spec.start_ns = spec.i64("start_unix_ns");
    out.spec.end_ns = spec.i64("end_unix_ns");
    out.spec.duration_ns = spec.i64("duration_ns");
    out.hold_expires_ns = r.i64("hold_expires_unix_ns");
    out.tunnel_id = static_cast<uint32_t>(r.u64("tunnel_id"));
    out.burst_bytes = r.u64("burst_bytes");
    for (const json::value& v : r.array("paths")) {
      if (!v.is_object()) r.fail("paths", "has an item that is not an object");
      const Reader p{v.as_object(), r.where + ".paths[]"};
      PathPlacement placement;
      placement.nodes = strings_from(p, "nodes");
      placement.links = strings_from(p, "links");
      const json::array& ends = p.array("ends");
      if (ends.size() != 2) p.fail("ends", "must have two items");
      for (size_t e = 0; e < 2; ++e) {
        if (!ends[e].is_object()) p.fail("ends", "has an item that is not an object");
        const Reader er{ends[e].as_object(), p.where + ".ends[]"};
        EndPlacement& end = placement.ends[e];
        end.gateway = er.str("gateway");
        end.link = er.str("link");
        end.from = er.str("from");
        end.port = er.str("port");
        end.peer = er.str("peer");
        end.slots = slots_from(er);
        end.guaranteed_bps = er.u64("guaranteed_bps");
      }
      placement.bound = bound_from(p.object("bound"));
      out.paths.push_back(std::move(placement));
    }
    out.bound = bound_from(r.object("bound"));
    if (r.o.contains("tunnel_keys")) {
      const Reader k = r.object("tunnel_keys");
      if (k.o.contains("key_exchange")) {
        out.keys.key_exchange = k.str("key_exchange");
        if (out.keys.key_exchange != kKeyExchangeX25519) {
          k.fail("key_exchange", "is not x25519");
        }
        out.keys.cipher = k.str("cipher");
        out.keys.context = k.str("context");
        const json::array& public_keys = k.array("public_keys");
        if (public_keys.size() != 2 || !public_keys[0].is_string() || !public_keys[1].is_string()) {
          k.fail("public_keys", "is not a list of two public keys");
        }
        for (size_t i = 0; i < 2; ++i) {
          out.keys.public_keys[i] = std::string(public_keys[i].as_string());
        }
      }
      for (const json::value& v : k.array("keys")) {
        if (!v.is_object()) k.fail("keys", "has an item that is not an object");
        const Reader kr{v.as_object(), k.where + ".keys[]"};
        TunnelKey key;
        key.id = static_cast<uint8_t>(kr.u64("id"));
        if (!out.keys.key_exchange.empty()) {
          key.context = kr.str("context");
          out.keys.keys.push_back(std::move(key));
          continue;
        }
        // The journal's reservation rows hold the secret (the API never shows it); its events
        // keep the fingerprint only (docs/control.md, "Journal"): then secret_hex stays empty.
        if (kr.o.contains("secret")) {
          key.secret_hex = kr.str("secret");
          if (key_fingerprint(key.secret_hex).empty()) kr.fail("secret", "is not 64 hex digits");
        }
        out.keys.keys.push_back(std::move(key));
      }
      out.keys.tx_key = static_cast<uint8_t>(k.u64("tx_key"));
      const auto rotation = key_rotation_from_string(k.str("rotation"));
      if (!rotation) k.fail("rotation", "is not a rotation step");
      out.keys.rotation = *rotation;
      out.keys.rotations = k.u64("rotations");
      out.keys.step_unix_ns = k.i64("step_unix_ns");
      if (k.o.contains("paced")) {  // older rows have neither
        out.keys.paced = k.o.at("paced").is_bool() && k.o.at("paced").as_bool();
        const auto permitted = key_rotation_from_string(k.str("permitted"));
        if (!permitted) k.fail("permitted", "is not a rotation step");
        out.keys.permitted = *permitted;
      }
    }
    out.created_ns = r.i64("created_unix_ns");
    out.updated_ns = r.i64("updated_unix_ns");
    for (const json::value& v : r.array("history")) {
      if (!v.is_object()) r.fail("history", "has an item that is not an object");
      const Reader h{v.as_object(), r.where + ".history[]"};
      out.history.push_back(
          Transition{h.i64("at_unix_ns"), h.str("from"), h.str("to"), h.str("reason")});
    }
    const std::string& id = out.id;
    const bool digits =
        id.size() >= 3 && id.size() <= 22 && id.rfind("r-", 0) == 0 &&
        std::all_of(id.begin() + 2, id.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits) r.fail("id", "is not like r-<number>");
    const auto [end, ec] = std::from_chars(id.data() + 2, id.data() + id.size(), out.key);
    if (ec != std::errc() || end != id.data() + id.size()) r.fail("id", "is not like r-<number>");
    return out;
  } catch (const common::Failure& failure) {
    return std::unexpected(failure.error());
  } catch (const std::exception& e) {
    return common::make_error(common::ErrorCode::kInvalidArgument,
                              fmt::format("reservation: {}", e.what()));
  }
}

}  // namespace detwan::control::reservation

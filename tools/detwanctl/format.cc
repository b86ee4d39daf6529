#include "tools/detwanctl/format.h"

#include <ctime>

#include <fmt/format.h>

#include "common/units.h"

namespace detwan::tools::ctl {
namespace json = boost::json;
namespace {

int64_t i64(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return 0;
  if (v->is_int64()) return v->as_int64();
  if (v->is_uint64()) return static_cast<int64_t>(v->as_uint64());
  if (v->is_double()) return static_cast<int64_t>(v->as_double());
  return 0;
}

std::string str(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string();
}

const json::object& obj(const json::object& o, std::string_view key) {
  static const json::object empty;
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_object() ? v->as_object() : empty;
}

const json::array& arr(const json::object& o, std::string_view key) {
  static const json::array empty;
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_array() ? v->as_array() : empty;
}

std::string join(const json::array& a, std::string_view sep) {
  std::string out;
  for (const json::value& v : a) {
    out += out.empty() ? "" : std::string(sep);
    out += v.is_string() ? std::string(v.as_string()) : json::serialize(v);
  }
  return out;
}

std::string slot_ranges(const json::array& slots) {
  std::string out;
  int64_t first = -1;
  int64_t last = -1;
  auto flush = [&] {
    if (first < 0) return;
    out += out.empty() ? "" : ",";
    out += first == last ? fmt::format("{}", first) : fmt::format("{}-{}", first, last);
  };
  for (const json::value& v : slots) {
    const int64_t s = v.is_int64() ? v.as_int64() : static_cast<int64_t>(v.to_number<uint64_t>());
    if (first >= 0 && s == last + 1) {
      last = s;
      continue;
    }
    flush();
    first = last = s;
  }
  flush();
  return out.empty() ? "none" : out;
}

std::string duration(int64_t ns) { return common::format_duration_ns(ns); }
std::string rate(int64_t bps) { return common::format_rate_bps(static_cast<uint64_t>(bps)); }

}  // namespace

std::string format_time(int64_t unix_ns) {
  const time_t seconds = static_cast<time_t>(unix_ns / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char text[64];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return text;
}

std::string format_reservation(const json::object& r) {
  const json::object& bound = obj(r, "bound");
  const json::object& spec = obj(r, "spec");
  const json::object& dataplane = obj(r, "dataplane");
  std::string out =
      fmt::format("{}  {}{}  {} -> {}  {}  tunnel {}\n", str(r, "id"), str(r, "state"),
                  str(r, "reason").empty() ? "" : " (" + str(r, "reason") + ")", str(r, "src"),
                  str(r, "dst"), rate(i64(r, "min_bandwidth_bps")), i64(r, "tunnel_id"));
  out += fmt::format("  path      {} (links {})\n", join(arr(r, "path"), "-"),
                     join(arr(r, "links"), ", "));
  const bool on_time = str(bound, "delivery") == "on_time";
  out += fmt::format("  bound     max latency {}, variation {}, loss {:g} ({}{})\n",
                     duration(i64(bound, "max_latency_ns")),
                     duration(i64(bound, "max_latency_variation_ns")),
                     bound.contains("max_loss") ? bound.at("max_loss").to_number<double>() : 0.0,
                     on_time ? "on-time delivery, playout " : "in-time delivery",
                     on_time ? duration(i64(bound, "playout_bound_ns")) : "");
  out += fmt::format("  window    {} .. {}\n", format_time(i64(spec, "start_unix_ns")),
                     format_time(i64(spec, "end_unix_ns")));
  if (str(r, "state") == "held") {
    out += fmt::format("  hold      until {}\n", format_time(i64(r, "hold_expires_unix_ns")));
  }
  // The tunnel's path, and with 1+1 protection the disjoint path its copies take.
  const bool protect = spec.contains("protect") && str(spec, "protect") == "1+1";
  size_t path_index = 0;
  for (const json::value& p : arr(r, "paths")) {
    if (!p.is_object()) continue;
    if (path_index++ > 0 && !protect) break;
    for (const json::value& e : arr(p.as_object(), "ends")) {
      if (!e.is_object() || str(e.as_object(), "gateway").empty()) continue;
      const json::object& end = e.as_object();
      out += fmt::format("  {} gateway {} port {} -> peer {}: {} (guaranteed {})\n",
                         path_index == 1 ? "slots    " : "protect  ", str(end, "gateway"),
                         str(end, "port"), str(end, "peer"), slot_ranges(arr(end, "slots")),
                         rate(i64(end, "guaranteed_bps")));
    }
    if (path_index == 2) break;
  }
  // Encryption: the cipher and the keys by fingerprint (the agent never shows a secret); an
  // unencrypted tunnel says so loudly (it exists only because its request asked by name).
  const std::string cipher = spec.contains("encrypt") ? str(spec, "encrypt") : "";
  if (cipher == "none") {
    out +=
        "  encrypt   NONE: the tunnel is neither authenticated nor encrypted (requested "
        "\"encrypt\": \"none\")\n";
  } else if (!cipher.empty() && r.contains("tunnel_keys") && r.at("tunnel_keys").is_object()) {
    const json::object& k = r.at("tunnel_keys").as_object();
    std::string keys;
    for (const json::value& key : arr(k, "keys")) {
      if (!key.is_object()) continue;
      // x25519 keys have no fingerprint at the agent (it holds no secret): their context.
      const std::string name = str(key.as_object(), "fingerprint");
      keys += fmt::format("{}{} ({})", keys.empty() ? "" : ", ", i64(key.as_object(), "id"),
                          name.empty() ? str(key.as_object(), "context") : name);
    }
    out += fmt::format(
        "  encrypt   {}, keys {}, sealing with {}{}\n", cipher, keys, i64(k, "tx_key"),
        str(k, "rotation") == "none" ? std::string() : ", rotating: " + str(k, "rotation"));
  }
  std::string gateways;
  for (const json::value& g : arr(dataplane, "gateways")) {
    if (!g.is_object()) continue;
    const json::object& gw = g.as_object();
    gateways += fmt::format("{}{} {}{}", gateways.empty() ? "" : ", ", str(gw, "gateway"),
                            gw.contains("programmed") && gw.at("programmed").as_bool()
                                ? fmt::format("gen {}", i64(gw, "generation"))
                                : "not programmed",
                            str(gw, "error").empty() ? "" : " (" + str(gw, "error") + ")");
  }
  const bool active = dataplane.contains("active") && dataplane.at("active").as_bool();
  out += fmt::format("  dataplane {}{}\n", active ? "active" : "inactive",
                     gateways.empty() ? "" : " (" + gateways + ")");
  return out;
}

std::string format_reservation_list(const json::array& list) {
  std::string out =
      fmt::format("{:<8} {:<12} {:<6} {:<6} {:>10} {:<23} {:<23} {:>10} {:>7}\n", "ID", "STATE",
                  "SRC", "DST", "RATE", "START", "END", "MAXLAT", "TUNNEL");
  for (const json::value& v : list) {
    if (!v.is_object()) continue;
    const json::object& r = v.as_object();
    const json::object& spec = obj(r, "spec");
    out += fmt::format("{:<8} {:<12} {:<6} {:<6} {:>10} {:<23} {:<23} {:>10} {:>7}\n", str(r, "id"),
                       str(r, "state"), str(r, "src"), str(r, "dst"),
                       rate(i64(r, "min_bandwidth_bps")), format_time(i64(spec, "start_unix_ns")),
                       format_time(i64(spec, "end_unix_ns")),
                       duration(i64(obj(r, "bound"), "max_latency_ns")), i64(r, "tunnel_id"));
  }
  return out;
}

std::string format_paths(const json::object& answer) {
  std::string out;
  const json::array& paths = arr(answer, "paths");
  if (paths.empty()) return "no path with the capacity asked for\n";
  int n = 1;
  for (const json::value& v : paths) {
    const json::object& p = v.as_object();
    const json::object& bound = obj(p, "bound");
    std::string free;
    for (const json::value& f : arr(p, "free_bps"))
      free += (free.empty() ? "" : ", ") + rate(f.to_number<int64_t>());
    out += fmt::format(
        "{}. {}  links {}  free {}\n   max latency {} ({}), variation {}, "
        "propagation {}{}\n",
        n++, join(arr(p, "nodes"), "-"), join(arr(p, "links"), ", "), free,
        duration(i64(bound, "max_latency_ns")), str(bound, "delivery"),
        duration(i64(bound, "max_latency_variation_ns")), duration(i64(bound, "propagation_ns")),
        p.contains("meets_requirements") && !p.at("meets_requirements").as_bool()
            ? "  (does not meet the requirements)"
            : "");
  }
  return out;
}

std::string format_topology(const json::object& t) {
  std::string out = fmt::format("domain {} (agent {})\n", str(t, "domain"), str(t, "agent"));
  for (const json::value& v : arr(t, "gateways")) {
    const json::object& g = v.as_object();
    out += fmt::format(
        "gateway {:<8} site {:<6} {} generation {}{}\n", str(g, "name"), str(g, "site"),
        g.at("reachable").as_bool() ? (g.at("in_sync").as_bool() ? "in sync," : "out of sync,")
                                    : "unreachable,",
        i64(g, "generation"), str(g, "error").empty() ? "" : "  (" + str(g, "error") + ")");
  }
  out += fmt::format("{:<10} {:<14} {:>10} {:>8} {:>8} {:>11} {:>11}\n", "LINK", "ENDS", "CAPACITY",
                     "DELAY", "JITTER", "RESERVED>", "RESERVED<");
  for (const json::value& v : arr(t, "links")) {
    const json::object& l = v.as_object();
    const json::array& dirs = arr(l, "directions");
    auto reserved = [&](size_t i) {
      return i < dirs.size() ? rate(i64(dirs[i].as_object(), "reserved_bps_now"))
                             : std::string("-");
    };
    out += fmt::format("{:<10} {:<14} {:>10} {:>8} {:>8} {:>11} {:>11}\n", str(l, "name"),
                       join(arr(l, "ends"), "-"), rate(i64(l, "capacity_bps")),
                       duration(i64(l, "delay_ns")), duration(i64(l, "jitter_ns")), reserved(0),
                       reserved(1));
  }
  return out;
}

std::string format_error(const json::object& body) {
  const json::object& e = obj(body, "error");
  return fmt::format("{} ({}{})", str(e, "message"), str(e, "code"),
                     str(e, "field").empty() ? "" : ", field " + str(e, "field"));
}

}  // namespace detwan::tools::ctl

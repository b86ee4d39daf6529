// CommConfig: defaults, the DETWAN_* environment, and the one-line description logged at start.
#include <cstdlib>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "collectives/comm/communicator.h"
#include "common/units.h"

namespace detwan::collectives {
namespace {

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && *value != '\0') ? value : nullptr;
}

std::unexpected<Error> bad(const char* name, std::string_view value, std::string_view why) {
  return make_error(ErrorCode::kConfig, fmt::format("{}='{}': {}", name, value, why));
}

// A non-negative decimal integer; anything else (sign, suffix, overflow) is an error.
Result<int64_t> parse_count(const char* name, std::string_view text) {
  if (text.empty() || text.size() > 18) return bad(name, text, "expected a non-negative integer");
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return bad(name, text, "expected a non-negative integer");
    value = value * 10 + (c - '0');
  }
  return value;
}

Result<bool> parse_bool(const char* name, std::string_view text) {
  if (text == "1" || text == "true" || text == "yes" || text == "on") return true;
  if (text == "0" || text == "false" || text == "no" || text == "off") return false;
  return bad(name, text, "expected 0/1, true/false, yes/no or on/off");
}

}  // namespace

Result<CommConfig> CommConfig::from_environment() {
  CommConfig config;
  if (const char* v = env("DETWAN_SITE")) config.site = v;
  if (const char* v = env("DETWAN_TIMEOUT_MS")) {
    auto ms = parse_count("DETWAN_TIMEOUT_MS", v);
    if (!ms) return std::unexpected(ms.error());
    if (*ms == 0) return bad("DETWAN_TIMEOUT_MS", v, "must be > 0");
    config.timeout_ns = *ms * 1'000'000;
  }
  if (const char* v = env("DETWAN_WAN_RATE")) {
    // "200mbit", "1gbit", or "0" for best effort (common/units.h grammar, as tools/lab).
    if (std::string_view(v) != "0") {
      auto rate = common::parse_rate_bps(v);
      if (!rate) return bad("DETWAN_WAN_RATE", v, rate.error().message);
      config.wan_rate_bps = static_cast<int64_t>(*rate);
    }
  }
  if (const char* v = env("DETWAN_WAN_RTT")) {
    auto rtt = common::parse_duration_ns(v);
    if (!rtt) return bad("DETWAN_WAN_RTT", v, rtt.error().message);
    config.wan_rtt_ns = *rtt;
  }
  if (const char* v = env("DETWAN_ALGO")) {
    auto algorithm = parse_algorithm(v);
    if (!algorithm) return bad("DETWAN_ALGO", v, algorithm.error().message);
    config.algorithm = *algorithm;
  }
  if (const char* v = env("DETWAN_CHUNK_BYTES")) {
    auto bytes = common::parse_size_bytes(v);
    if (!bytes) return bad("DETWAN_CHUNK_BYTES", v, bytes.error().message);
    config.chunk_bytes = static_cast<int64_t>(*bytes);
  }
  if (const char* v = env("DETWAN_DETERMINISTIC")) {
    auto on = parse_bool("DETWAN_DETERMINISTIC", v);
    if (!on) return std::unexpected(on.error());
    config.deterministic = *on;
  }
  if (const char* v = env("DETWAN_ENCRYPT")) {
    auto on = parse_bool("DETWAN_ENCRYPT", v);
    if (!on) return std::unexpected(on.error());
    if (*on) config.channel_security = transport::SecurityMode::kEncrypt;
  }
  if (const char* v = env("DETWAN_CHANNEL_SECURITY")) {
    const std::string_view mode = v;
    if (mode == "authenticate") {
      config.channel_security = transport::SecurityMode::kAuthenticate;
    } else if (mode == "encrypt") {
      config.channel_security = transport::SecurityMode::kEncrypt;
    } else if (mode == "none") {
      config.channel_security = transport::SecurityMode::kNone;
    } else {
      return bad("DETWAN_CHANNEL_SECURITY", v, "must be authenticate, encrypt or none");
    }
  }
  if (const char* v = env("DETWAN_INTRA_BACKEND")) {
    // A transport (shm, tcp, ...; "NAME:CONFIG") is this library's; any other name is a site's
    // own collective library for detwan.torch's hybrid groups (gloo, nccl, ...), which leaves
    // this library's transport inside the site at its default.
    const std::string_view name = std::string_view(v).substr(0, std::string_view(v).find(':'));
    if (name == "shm" || name == "tcp" || name == "udp" || name == "loopback" ||
        name == "verbs") {
      config.intra_backend = v;
    }
  }
  if (const char* v = env("DETWAN_INTER_BACKEND")) config.inter_backend = v;
  if (const char* v = env("DETWAN_LISTEN_HOST")) config.listen_host = v;
  if (const char* v = env("DETWAN_MTU")) {
    auto mtu = parse_count("DETWAN_MTU", v);
    if (!mtu) return std::unexpected(mtu.error());
    if (*mtu < 576 || *mtu > 65535) return bad("DETWAN_MTU", v, "must be in [576, 65535]");
    config.mtu_bytes = static_cast<int32_t>(*mtu);
  }
  if (const char* v = env("DETWAN_INFLIGHT_OPS")) {
    auto n = parse_count("DETWAN_INFLIGHT_OPS", v);
    if (!n) return std::unexpected(n.error());
    if (*n < 1 || *n > 8) return bad("DETWAN_INFLIGHT_OPS", v, "must be in [1, 8]");
    config.inflight_ops = static_cast<int>(*n);
  }
  if (const char* v = env("DETWAN_PEER_TIMEOUT_MS")) {
    auto ms = parse_count("DETWAN_PEER_TIMEOUT_MS", v);
    if (!ms) return std::unexpected(ms.error());
    if (*ms == 0) return bad("DETWAN_PEER_TIMEOUT_MS", v, "must be > 0");
    config.peer_timeout_ns = *ms * 1'000'000;
  }
  if (const char* v = env("DETWAN_RESERVATION")) config.reservation = v;
  if (const char* v = env("DETWAN_AGENT")) config.agent_url = v;
  if (const char* v = env("DETWAN_AGENT_TOKEN")) config.agent_token = v;
  if (const char* v = env("DETWAN_RESERVATION_POLL_MS")) {
    auto ms = parse_count("DETWAN_RESERVATION_POLL_MS", v);
    if (!ms) return std::unexpected(ms.error());
    if (*ms == 0) return bad("DETWAN_RESERVATION_POLL_MS", v, "must be > 0");
    config.reservation_poll_ns = *ms * 1'000'000;
  }
  return config;
}

std::string CommConfig::describe() const {
  return fmt::format(
      "site={} timeout={} wan_rate={} wan_rtt={}{} algorithm={} chunk={} deterministic={} "
      "intra={}{} inter={}{} channels={} listen_host={} mtu={} peer_timeout={} setup_timeout={} inflight={}{}",
      site, common::format_duration_ns(timeout_ns),
      wan_rate_bps > 0 ? common::format_rate_bps(static_cast<uint64_t>(wan_rate_bps))
                       : std::string("best-effort"),
      common::format_duration_ns(wan_rtt_ns), deterministic ? "" : "(measured)",
      to_string(algorithm),
      chunk_bytes > 0 ? common::format_size_bytes(static_cast<uint64_t>(chunk_bytes))
                      : std::string("model"),
      deterministic ? 1 : 0, intra_backend,
      intra_backend_config.empty() ? "" : "[" + intra_backend_config + "]", inter_backend,
      inter_backend_config.empty() ? "" : "[" + inter_backend_config + "]",
      channel_security == transport::SecurityMode::kEncrypt ? "encrypted"
      : channel_security == transport::SecurityMode::kNone  ? "UNAUTHENTICATED"
                                                             : "authenticated",
      listen_host.empty() ? "auto" : listen_host,
      mtu_bytes, common::format_duration_ns(peer_timeout_ns),
      common::format_duration_ns(setup_timeout_ns), inflight_ops,
      reservation.empty() ? std::string()
                          : fmt::format(" reservation={} agent={}", reservation, agent_url));
}

}  // namespace detwan::collectives

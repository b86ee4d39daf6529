#include "control/client/reservation_client.h"

#include <cstdlib>

#include <fmt/format.h>

#include <boost/json.hpp>

#include "common/json_number.h"
#include "common/secret_file.h"
#include "common/units.h"
#include "control/client/http_client.h"

namespace detwan::control::client {
namespace json = boost::json;
using common::ErrorCode;
using common::make_error;

namespace {

// Field access that names what is missing or mistyped ("tunnel.mtu_bytes").
class Fields {
 public:
  Fields(const json::object& object, std::string prefix)
      : object_(&object), prefix_(std::move(prefix)) {}

  common::Result<const json::value*> at(std::string_view key) const {
    const json::value* v = object_->if_contains(key);
    if (v == nullptr) return bad(key, "missing");
    return v;
  }
  common::Result<std::string> text(std::string_view key) const {
    auto v = at(key);
    if (!v) return std::unexpected(v.error());
    if (!(*v)->is_string()) return bad(key, "not a string");
    return std::string((*v)->as_string());
  }
  common::Result<int64_t> integer(std::string_view key, bool optional = false) const {
    const json::value* v = object_->if_contains(key);
    if (v == nullptr) return optional ? common::Result<int64_t>(0) : bad(key, "missing");
    if (const auto n = common::json_int64(*v)) return *n;
    return bad(key, "not an integer");
  }
  common::Result<std::vector<std::string>> strings(std::string_view key) const {
    auto v = at(key);
    if (!v) return std::unexpected(v.error());
    if (!(*v)->is_array()) return bad(key, "not an array");
    std::vector<std::string> out;
    for (const json::value& item : (*v)->as_array()) {
      if (!item.is_string()) return bad(key, "holds a non-string");
      out.emplace_back(item.as_string());
    }
    return out;
  }
  common::Result<Fields> object(std::string_view key) const {
    auto v = at(key);
    if (!v) return std::unexpected(v.error());
    if (!(*v)->is_object()) return bad(key, "not an object");
    return Fields((*v)->as_object(), prefix_ + std::string(key) + ".");
  }

 private:
  std::unexpected<common::Error> bad(std::string_view key, std::string_view why) const {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("reservation field '{}{}': {}", prefix_, key, why));
  }
  const json::object* object_;
  std::string prefix_;
};

#define DETWAN_TRY_ASSIGN(target, expr)              \
  do {                                               \
    auto detwan_value_ = (expr);                     \
    if (!detwan_value_) {                            \
      return std::unexpected(detwan_value_.error()); \
    }                                                \
    target = std::move(*detwan_value_);              \
  } while (false)

// An error answer of the agent: {"error": {"code", "message", "field"}}.
std::string error_text(const std::string& body) {
  boost::system::error_code ec;
  const json::value v = json::parse(body, ec);
  if (!ec && v.is_object()) {
    if (const json::value* e = v.as_object().if_contains("error"); e && e->is_object()) {
      const json::value* m = e->as_object().if_contains("message");
      if (m != nullptr && m->is_string()) return std::string(m->as_string());
    }
  }
  return body.substr(0, 200);
}

}  // namespace

const std::vector<std::string>& TunnelGrant::prefixes_of(std::string_view site) const {
  return site == src ? src_prefixes : dst_prefixes;
}

std::string TunnelGrant::describe() const {
  return fmt::format("{} ({}<->{}, {}, {})", id, src, dst,
                     common::format_rate_bps(static_cast<uint64_t>(rate_bps)), state);
}

common::Result<TunnelGrant> parse_grant(std::string_view json_text) {
  boost::system::error_code ec;
  const json::value doc = json::parse(json_text, ec);
  if (ec || !doc.is_object()) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("the agent's answer is not a JSON object ({})",
                                  ec ? ec.message() : std::string("other JSON")));
  }
  const Fields top(doc.as_object(), "");
  TunnelGrant g;
  DETWAN_TRY_ASSIGN(g.id, top.text("id"));
  DETWAN_TRY_ASSIGN(g.version, top.integer("version"));
  DETWAN_TRY_ASSIGN(g.state, top.text("state"));
  DETWAN_TRY_ASSIGN(g.reason, top.text("reason"));
  DETWAN_TRY_ASSIGN(g.src, top.text("src"));
  DETWAN_TRY_ASSIGN(g.dst, top.text("dst"));
  DETWAN_TRY_ASSIGN(g.rate_bps, top.integer("min_bandwidth_bps"));
  DETWAN_TRY_ASSIGN(g.burst_bytes, top.integer("burst_bytes"));
  Fields spec = top;
  DETWAN_TRY_ASSIGN(spec, top.object("spec"));
  DETWAN_TRY_ASSIGN(g.end_unix_ns, spec.integer("end_unix_ns"));
  // A reservation that never got a path (failed, or refused then terminated) has no bound.
  if (doc.as_object().if_contains("bound") != nullptr) {
    Fields bound = top;
    DETWAN_TRY_ASSIGN(bound, top.object("bound"));
    DETWAN_TRY_ASSIGN(g.max_latency_ns, bound.integer("max_latency_ns"));
    DETWAN_TRY_ASSIGN(g.max_latency_variation_ns, bound.integer("max_latency_variation_ns"));
    DETWAN_TRY_ASSIGN(g.min_latency_ns, bound.integer("min_latency_ns"));
    DETWAN_TRY_ASSIGN(g.delivery, bound.text("delivery"));
  }
  Fields tunnel = top;
  DETWAN_TRY_ASSIGN(tunnel, top.object("tunnel"));
  DETWAN_TRY_ASSIGN(g.src_prefixes, tunnel.strings("src_prefixes"));
  DETWAN_TRY_ASSIGN(g.dst_prefixes, tunnel.strings("dst_prefixes"));
  int64_t mtu = 0;
  int64_t overhead = 0;
  DETWAN_TRY_ASSIGN(mtu, tunnel.integer("mtu_bytes"));
  DETWAN_TRY_ASSIGN(overhead, tunnel.integer("frame_overhead_bytes"));
  if (mtu < 0 || mtu > 65535 || overhead < 0 || overhead > 1024) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("reservation field 'tunnel.mtu_bytes' {} or "
                                  "'tunnel.frame_overhead_bytes' {} out of range",
                                  mtu, overhead));
  }
  g.mtu_bytes = static_cast<int32_t>(mtu);
  g.frame_overhead_bytes = static_cast<int32_t>(overhead);
  if (const json::value* dp = doc.as_object().if_contains("dataplane"); dp && dp->is_object()) {
    if (const json::value* a = dp->as_object().if_contains("active"); a && a->is_bool()) {
      g.dataplane_active = a->as_bool();
    }
  }
  if (g.rate_bps <= 0) {
    return make_error(
        ErrorCode::kInvalidArgument,
        fmt::format("reservation {}: min_bandwidth_bps {} is not positive", g.id, g.rate_bps));
  }
  return g;
}

common::Result<TunnelGrant> fetch_grant(const AgentAddress& agent, const std::string& id) {
  auto urls = parse_urls(agent.url);  // an agent, or its replicas "URL1,URL2,..."
  if (!urls) return std::unexpected(urls.error());
  const Url* url = &urls->front();
  if (id.empty() || id.find_first_of("/?# ") != std::string::npos) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("'{}' is not a reservation id (like r-3)", id));
  }
  auto env = [](const char* name) {
    const char* value = std::getenv(name);
    return std::string(value != nullptr ? value : "");
  };
  std::string token = agent.token;
  if (token.empty() && !env("DETWAN_AGENT_TOKEN_FILE").empty()) {
    const std::string file = env("DETWAN_AGENT_TOKEN_FILE");
    auto text = common::read_secret_file(file, "token file (DETWAN_AGENT_TOKEN_FILE)", 4096);
    if (!text) return std::unexpected(text.error());
    const size_t first = text->find_first_not_of(" \t\r\n");
    const size_t last = text->find_last_not_of(" \t\r\n");
    if (first != std::string::npos) token = text->substr(first, last - first + 1);
  }
  const TlsClientOptions tls{env("DETWAN_AGENT_CA"), env("DETWAN_AGENT_CERT"),
                             env("DETWAN_AGENT_KEY")};
  auto answer = http_call_replicas(*urls, "GET", "/v1/reservations/" + id, "", token,
                                   agent.timeout_ms, agent.timeout_ms, "detwan-collectives",
                                   url->https ? &tls : nullptr);
  if (!answer) {
    return make_error(answer.error().code, fmt::format("asking the agent for reservation {}: {}",
                                                       id, answer.error().message));
  }
  if (answer->status == 404) {
    return make_error(ErrorCode::kNotFound,
                      fmt::format("the agent at {} has no reservation '{}'", agent.url, id));
  }
  if (answer->status == 401 || answer->status == 403) {
    return make_error(ErrorCode::kConfig,
                      fmt::format("the agent at {} refused to show reservation {} (HTTP {}): {}",
                                  agent.url, id, answer->status, error_text(answer->body)));
  }
  if (answer->status != 200) {
    return make_error(ErrorCode::kUnavailable,
                      fmt::format("the agent at {} answered HTTP {} for reservation {}: {}",
                                  agent.url, answer->status, id, error_text(answer->body)));
  }
  auto grant = parse_grant(answer->body);
  if (!grant) {
    return make_error(grant.error().code,
                      fmt::format("the agent at {}: {}", agent.url, grant.error().message));
  }
  return grant;
}

}  // namespace detwan::control::client

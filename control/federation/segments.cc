// /v1/federation/segments on the participant's side.
#include "control/federation/segments.h"

#include <charconv>

#include <span>

#include <fmt/format.h>

#include "common/crypto.h"
#include "common/secret_file.h"
#include "common/strings.h"
#include "control/reservation/tunnel_keys.h"

namespace detwan::control::federation {
namespace json = boost::json;
using agent::ApiError;

namespace {

Answer error_answer(const ApiError& e) { return Answer{e.status, e.to_json()}; }
Answer outcome_answer(const agent::Outcome<json::object>& o) {
  return o ? Answer{200, *o} : error_answer(o.error());
}


// "%40" and "%2F" in a client_request_id ("r-3@x/w") as a query value.
std::string percent_decode(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned value = 0;
    if (text[i] == '%' && i + 2 < text.size() &&
        std::from_chars(text.data() + i + 1, text.data() + i + 3, value, 16).ptr ==
            text.data() + i + 3) {
      out += static_cast<char>(value);
      i += 2;
    } else {  // not an escape (a peer's "%zz"): kept as sent, the lookup then finds nothing
      out += text[i];
    }
  }
  return out;
}

agent::Outcome<agent::ReserveRequest> parse_segment(const json::object& o,
                                                    const std::string& caller) {
  agent::ReserveRequest r;
  auto fail = [](const std::string& field, const std::string& why) {
    return std::unexpected(
        ApiError{400, "invalid_field", fmt::format("{}: {}", field, why), field});
  };
  try {
    r.client_request_id = std::string(o.at("client_request_id").as_string());
    r.spec.src = std::string(o.at("from").as_string());
    r.spec.dst = std::string(o.at("to").as_string());
    r.spec.min_bandwidth_bps = o.at("rate_bps").to_number<uint64_t>();
    if (const auto* b = o.if_contains("burst_bytes"))
      r.spec.max_burst_bytes = b->to_number<uint64_t>();
    r.spec.start_ns = o.at("start_unix_ns").to_number<int64_t>();
    r.spec.end_ns = o.at("end_unix_ns").to_number<int64_t>();
    if (const auto* h = o.if_contains("hold_timeout_ns"))
      r.hold_timeout_ns = h->to_number<int64_t>();
    const int64_t tunnel = o.at("tunnel_id").to_number<int64_t>();
    if (tunnel <= 0 || tunnel > UINT32_MAX) return fail("tunnel_id", "must be in 1..4294967295");
    r.tunnel_id = static_cast<uint32_t>(tunnel);
    r.spec.encrypt = o.contains("encrypt") ? std::string(o.at("encrypt").as_string())
                                           : std::string(reservation::kDefaultCipher);
    for (const char* key : {"src_prefixes", "dst_prefixes"}) {
      if (const auto* list = o.if_contains(key)) {
        auto& out = std::string(key) == "src_prefixes" ? r.spec.src_prefixes : r.spec.dst_prefixes;
        for (const json::value& p : list->as_array()) out.emplace_back(p.as_string());
      }
    }
  } catch (const std::exception& e) {
    return fail("body", fmt::format("a segment request needs client_request_id, from, to, "
                                    "rate_bps, start_unix_ns, end_unix_ns, tunnel_id ({})",
                                    e.what()));
  }
  if (r.spec.min_bandwidth_bps == 0) return fail("rate_bps", "must be > 0");
  if (!reservation::is_cipher_name(r.spec.encrypt)) {
    return fail("encrypt", fmt::format("'{}' is not aes-256-gcm, chacha20-poly1305 or none",
                                       r.spec.encrypt));
  }
  r.requester_domain = caller;
  json::object canonical = o;
  canonical.erase("client_request_id");
  r.fingerprint = json::serialize(canonical);
  return r;
}

}  // namespace

Answer handle_segment_call(agent::Agent& agent, const std::string& caller,
                           const std::string& method, const std::string& rest,
                           const std::string& query, const std::string& body) {
  if (rest.empty()) {
    if (method == "GET") {
      const std::string request = percent_decode(common::query_value(query, "client_request_id"));
      const std::string id = request.empty() ? "" : agent.reservation_of_request(request);
      if (id.empty() || agent.segment_requester(id) != caller) {
        return error_answer(ApiError{404, "not_found",
                                     fmt::format("no segment for client_request_id '{}'", request),
                                     "client_request_id"});
      }
      return outcome_answer(agent.segment(id));
    }
    if (method != "POST") {
      return error_answer(ApiError{405, "method_not_allowed", "allowed: GET, POST", ""});
    }
    boost::system::error_code ec;
    json::value parsed = json::parse(body, ec);
    if (ec || !parsed.is_object()) {
      return error_answer(ApiError{400, "invalid_json", "the body is not a JSON object", ""});
    }
    auto request = parse_segment(parsed.as_object(), caller);
    if (!request) return error_answer(request.error());
    json::object federation;
    if (const auto* a = parsed.as_object().if_contains("aggregate")) federation["aggregate"] = *a;
    if (const auto* g = parsed.as_object().if_contains("remote_gateways")) {
      federation["remote_gateways"] = *g;
    }
    auto reserved = agent.reserve_segment(*request, std::move(federation));
    if (!reserved) return error_answer(reserved.error());
    return Answer{201, *reserved};
  }
  const std::string tail = rest.substr(1);
  const size_t slash = tail.find('/');
  const std::string id = tail.substr(0, slash);
  const std::string action = slash == std::string::npos ? "" : tail.substr(slash + 1);
  if (agent.segment_requester(id) != caller) {
    return error_answer(
        ApiError{agent.segment(id) ? 403 : 404, agent.segment(id) ? "forbidden" : "not_found",
                 fmt::format("{} is not a segment reserved by domain '{}'", id, caller), ""});
  }
  if (action.empty()) {
    if (method == "GET") return outcome_answer(agent.segment(id));
    if (method == "PATCH") {
      boost::system::error_code ec;
      json::value parsed = json::parse(body, ec);
      if (ec || !parsed.is_object()) {
        return error_answer(ApiError{400, "invalid_json", "the body is not a JSON object", ""});
      }
      agent::ModifyRequest m;
      boost::system::error_code number_ec;
      if (const auto* r = parsed.as_object().if_contains("min_bandwidth_bps")) {
        m.min_bandwidth_bps = r->to_number<uint64_t>(number_ec);
        if (number_ec || !r->is_number()) {
          return error_answer(ApiError{400, "invalid_field",
                                       "min_bandwidth_bps: must be a non-negative integer",
                                       "min_bandwidth_bps"});
        }
      }
      if (const auto* e = parsed.as_object().if_contains("end_unix_ns")) {
        m.end_ns = e->to_number<int64_t>(number_ec);
        if (number_ec || !e->is_number()) {
          return error_answer(ApiError{400, "invalid_field", "end_unix_ns: must be an integer",
                                       "end_unix_ns"});
        }
      }
      auto modified = agent.modify(id, m);
      if (!modified) return error_answer(modified.error());
      return outcome_answer(agent.segment(id));
    }
    return error_answer(ApiError{405, "method_not_allowed", "allowed: GET, PATCH", ""});
  }
  if (method != "POST") {
    return error_answer(ApiError{405, "method_not_allowed", "allowed: POST", ""});
  }
  agent::Outcome<json::object> done = std::unexpected(ApiError{
      404, "not_found",
      fmt::format("no action '{}' (commit, abort, provision, release, terminate, rotate-key)",
                  action),
      ""});
  if (action == "commit") {
    boost::system::error_code ec;
    json::value parsed = json::parse(body.empty() ? "{}" : body, ec);
    if (ec || !parsed.is_object()) {
      return error_answer(ApiError{400, "invalid_json", "the body is not a JSON object", ""});
    }
    return outcome_answer(agent.commit_segment(id, parsed.as_object()));
  }
  if (action == "abort") {
    // Repeated (or the hold expired meanwhile): nothing is held any more, say so with 200.
    auto now = agent.segment(id);
    if (now && now->at("state").as_string() == "terminated") return Answer{200, *now};
    done = agent.abort(id);
  }
  if (action == "provision") done = agent.provision(id);
  if (action == "release") done = agent.release(id);
  if (action == "terminate") done = agent.terminate(id);
  if (action == "rotate-key") done = agent.rotate_key(id);
  if (!done) return error_answer(done.error());
  return outcome_answer(agent.segment(id));
}

common::Result<std::map<std::string, std::string>> load_accept_tokens(
    const model::FederationSettings& settings) {
  std::map<std::string, std::string> tokens;
  for (const model::FederationPeer& peer : settings.peers) {
    if (peer.accept_token_file.empty()) continue;
    auto text = common::read_secret_file(peer.accept_token_file, "token file");
    if (!text) return std::unexpected(text.error());
    std::string token = *text;
    while (!token.empty() && (token.back() == '\n' || token.back() == ' ')) token.pop_back();
    if (token.size() < 16) {
      return common::make_error(
          common::ErrorCode::kConfig,
          fmt::format("federation.peers[{}].accept_token_file {}: a token of at least 16 "
                      "characters",
                      peer.domain, peer.accept_token_file));
    }
    tokens[token] = peer.domain;
  }
  return tokens;
}

std::string domain_of_token(const std::map<std::string, std::string>& tokens,
                            const std::string& bearer) {
  std::string domain;
  if (bearer.empty()) return domain;
  for (const auto& [token, d] : tokens) {
    if (common::crypto::equal_ct(std::as_bytes(std::span(token)),
                                 std::as_bytes(std::span(bearer)))) {
      domain = d;
    }
  }
  return domain;
}

}  // namespace detwan::control::federation

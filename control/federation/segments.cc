// /v1/federation/segments on the participant's side.
#include "control/federation/segments.h"

#include <optional>
#include <span>

#include <fmt/format.h>

#include "common/crypto.h"
#include "common/secret_file.h"
#include "common/strings.h"
#include "control/federation/json_fields.h"
#include "control/reservation/tunnel_keys.h"

namespace detwan::control::federation {
namespace json = boost::json;
using agent::ApiError;

namespace {

Answer error_answer(const ApiError& e) { return Answer{e.status, e.to_json()}; }
Answer outcome_answer(const agent::Outcome<json::object>& o) {
  return o ? Answer{200, *o} : error_answer(o.error());
}


int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "%40" and "%2F" in a client_request_id ("r-3@x/w") as a query value; nothing for a '%' not
// followed by two hex digits (a peer's query: refused, not guessed at).
std::optional<std::string> percent_decode(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size()) return std::nullopt;
    const int high = hex_digit(text[i + 1]);
    const int low = hex_digit(text[i + 2]);
    if (high < 0 || low < 0) return std::nullopt;
    out += static_cast<char>(high * 16 + low);
    i += 2;
  }
  return out;
}

// A segment id as the agents make them ("r-" and a key that fits 64 bits): anything else in a
// peer's path is refused before it is looked up.
bool is_segment_id(const std::string& id) {
  if (id.size() < 3 || id.size() > 22 || id.rfind("r-", 0) != 0) return false;
  uint64_t key = 0;
  for (size_t i = 2; i < id.size(); ++i) {
    if (id[i] < '0' || id[i] > '9') return false;
    const auto digit = static_cast<uint64_t>(id[i] - '0');
    if (key > (UINT64_MAX - digit) / 10) return false;
    key = key * 10 + digit;
  }
  return true;
}

ApiError field_error(const std::string& field, const std::string& why) {
  return ApiError{400, "invalid_field", fmt::format("{}: {}", field, why), field};
}
ApiError field_error(const fields::Reader& r) { return field_error(r.field(), r.why()); }

agent::Outcome<agent::ReserveRequest> parse_segment(const json::object& o,
                                                    const std::string& caller) {
  agent::ReserveRequest r;
  auto fail = [](const std::string& field, const std::string& why) {
    return std::unexpected(field_error(field, why));
  };
  fields::Reader in(o);
  r.client_request_id = in.text("client_request_id");
  r.spec.src = in.text("from");
  r.spec.dst = in.text("to");
  r.spec.min_bandwidth_bps = in.integer<uint64_t>("rate_bps");
  r.spec.max_burst_bytes = in.integer<uint64_t>("burst_bytes", fields::Need::kOptional);
  r.spec.start_ns = in.integer<int64_t>("start_unix_ns");
  r.spec.end_ns = in.integer<int64_t>("end_unix_ns");
  r.hold_timeout_ns =
      in.integer<int64_t>("hold_timeout_ns", fields::Need::kOptional, r.hold_timeout_ns);
  const auto tunnel = in.integer<uint32_t>("tunnel_id");
  r.spec.encrypt =
      o.contains("encrypt") ? in.text("encrypt") : std::string(reservation::kDefaultCipher);
  r.spec.src_prefixes = in.texts("src_prefixes", fields::Need::kOptional);
  r.spec.dst_prefixes = in.texts("dst_prefixes", fields::Need::kOptional);
  // Kept in the segment's journal row and shown back: what they must be, or refused.
  if (const json::object* a = in.object("aggregate", fields::Need::kOptional)) {
    fields::Reader aggregate(*a, "aggregate.");
    (void)aggregate.text("id", fields::Need::kOptional);
    (void)aggregate.text("domain", fields::Need::kOptional);
    in.take(aggregate);
  }
  (void)in.string_object("remote_gateways", fields::Need::kOptional);
  if (!in.ok()) return std::unexpected(field_error(in));
  if (tunnel == 0) return fail("tunnel_id", "must be in 1..4294967295");
  r.tunnel_id = tunnel;
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

// The aggregator's commit (its far end, journaled with the segment and programmed on our
// gateway): every field it may carry must have its type, or the commit is refused naming it
// (the segment stays held; the aggregator compensates).
std::optional<ApiError> check_commit(const json::object& o) {
  fields::Reader in(o);
  if (const json::object* a = in.object("aggregate", fields::Need::kOptional)) {
    fields::Reader aggregate(*a, "aggregate.");
    (void)aggregate.text("id", fields::Need::kOptional);
    (void)aggregate.text("domain", fields::Need::kOptional);
    in.take(aggregate);
  }
  (void)in.integer<uint32_t>("tunnel_id", fields::Need::kOptional);
  (void)in.text("far_domain", fields::Need::kOptional);
  (void)in.text("far_gateway", fields::Need::kOptional);
  (void)in.text("far_public_key", fields::Need::kOptional);
  (void)in.texts("far_prefixes", fields::Need::kOptional);
  (void)in.integer<int64_t>("playout_bound_ns", fields::Need::kOptional);
  if (const json::object* b = in.object("bound", fields::Need::kOptional)) {
    fields::Reader bound(*b, "bound.");
    (void)bound.text("delivery", fields::Need::kOptional);
    (void)bound.integer<int64_t>("playout_bound_ns", fields::Need::kOptional);
    in.take(bound);
  }
  if (!in.ok()) return field_error(in);
  return std::nullopt;
}

}  // namespace

Answer handle_segment_call(agent::Agent& agent, const std::string& caller,
                           const std::string& method, const std::string& rest,
                           const std::string& query, const std::string& body) {
  if (rest.empty()) {
    if (method == "GET") {
      const std::optional<std::string> decoded =
          percent_decode(common::query_value(query, "client_request_id"));
      if (!decoded) {
        return error_answer(
            field_error("client_request_id", "a '%' not followed by two hex digits"));
      }
      const std::string& request = *decoded;
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
  if (!is_segment_id(id)) {
    return error_answer(field_error(
        "id", fmt::format("'{:.64}' is not a segment id (r-<number of at most 64 bits>)", id)));
  }
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
      fields::Reader in(parsed.as_object());
      if (parsed.as_object().contains("min_bandwidth_bps")) {
        m.min_bandwidth_bps = in.integer<uint64_t>("min_bandwidth_bps");
      }
      if (parsed.as_object().contains("end_unix_ns")) {
        m.end_ns = in.integer<int64_t>("end_unix_ns");
      }
      if (!in.ok()) return error_answer(field_error(in));
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
    if (auto bad = check_commit(parsed.as_object())) return error_answer(*bad);
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
  if (action == "rotate-key") {
    // No body: start a rotation; {"step": "switching"|"dropping"}: the aggregator's permit to go
    // on (docs/federation.md, "Rotation across domains").
    boost::system::error_code ec;
    json::value parsed = json::parse(body.empty() ? "{}" : body, ec);
    if (ec || !parsed.is_object()) {
      return error_answer(ApiError{400, "invalid_json", "the body is not a JSON object", ""});
    }
    fields::Reader in(parsed.as_object());
    const std::string step = in.text("step", fields::Need::kOptional);
    if (!in.ok()) return error_answer(field_error(in));
    if (step.empty()) {
      done = agent.rotate_key(id);
    } else {
      const auto s = reservation::key_rotation_from_string(step);
      if (!s || (*s != reservation::KeyRotation::kSwitching &&
                 *s != reservation::KeyRotation::kDropping)) {
        return error_answer(field_error("step", fmt::format("'{:.32}' is not switching or dropping", step)));
      }
      done = agent.permit_rotation(id, *s);
    }
  }
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

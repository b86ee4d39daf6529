// The aggregator's calls to peers (the own domain's in-process), their errors, and what a
// peer's answer must hold before it is used (docs/federation.md, "A peer's malformed answer"):
// a peer is another owner's agent, so its JSON is checked here field by field instead of being
// trusted by accessors that throw.
#include <thread>

#include <fmt/format.h>

#include "common/logging.h"
#include "control/federation/coordinator.h"
#include "control/federation/json_fields.h"
#include "control/federation/segments.h"
#include "control/reservation/reservation.h"

namespace detwan::control::federation {
namespace json = boost::json;
using agent::ApiError;
using agent::Outcome;
using fields::Need;
using fields::object;
using fields::Reader;
using fields::text;

namespace {

// Latencies a peer adds to the composed bound: a negative one would hide another domain's.
void non_negative(Reader& in, const char* key) {
  if (in.integer<int64_t>(key) < 0) in.fail(key, "must be >= 0");
}

void check_direction(Reader& bound, const char* key) {
  const json::object* d = bound.object(key);
  if (d == nullptr) return;
  Reader in(*d, fmt::format("bound.{}.", key));
  for (const char* field : {"egress_ns", "links_ns", "transit_ns", "processing_ns", "max_ns",
                            "min_ns", "playout_error_ns"}) {
    non_negative(in, field);
  }
  bound.take(in);
}

}  // namespace

PeerAnswer Coordinator::call(const std::string& domain, const std::string& method,
                             const std::string& path, const json::object* body) {
  const std::string phase = phase_of(method, path);
  const std::string text = body != nullptr ? json::serialize(*body) : "";
  PeerAnswer answer;
  const auto fault = faults_.match(domain, phase);
  if (fault == FaultKind::kRefuse) {
    answer.status = 409;
    answer.body =
        ApiError{409, "injected_refusal", fmt::format("{} refused (fault injection)", phase), ""}
            .to_json();
    return answer;
  }
  if (fault == FaultKind::kDrop) {
    answer.error = fmt::format("domain {}: connection dropped (fault injection)", domain);
    return answer;
  }
  if (domain == domain_) {
    const std::string base = "/v1/federation/segments";
    std::string rest = path.substr(base.size());
    std::string query;
    if (const size_t q = rest.find('?'); q != std::string::npos) {
      query = rest.substr(q + 1);
      rest = rest.substr(0, q);
    }
    const Answer a = handle_segment_call(agent_, domain_, method, rest, query, text);
    answer.status = a.status;
    answer.body = a.body;
  } else {
    answer = options_.client->call(domain, method, path, text);
  }
  if (fault == FaultKind::kTimeout) {  // it happened there, the answer came too late
    PeerAnswer lost;
    lost.timed_out = true;
    lost.error =
        fmt::format("domain {}: no answer within the call timeout (fault injection)", domain);
    return lost;
  }
  return answer;
}

std::vector<PeerAnswer> Coordinator::call_all(const std::vector<CallSpec>& calls) {
  std::vector<PeerAnswer> answers(calls.size());
  const auto one = [&](size_t i) {
    const CallSpec& c = calls[i];
    try {
      answers[i] = call(c.domain, c.method, c.path, c.body ? &*c.body : nullptr);
    } catch (const std::exception& e) {  // an answer of a shape nobody foresaw: no answer
      answers[i] = PeerAnswer{};
      answers[i].error = fmt::format("domain {}: {}", c.domain, e.what());
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(calls.size());
  for (size_t i = 1; i < calls.size(); ++i) threads.emplace_back(one, i);
  if (!calls.empty()) one(0);
  for (std::thread& t : threads) t.join();
  return answers;
}

ApiError Coordinator::peer_error(const std::string& domain, const PeerAnswer& answer) const {
  ApiError e;
  if (answer.status == 0) {
    e.status = answer.timed_out ? 504 : 502;
    e.code = answer.timed_out ? "peer_timeout" : "peer_unreachable";
    e.message = answer.error.rfind("domain ", 0) == 0
                    ? answer.error
                    : fmt::format("domain {}: {}", domain, answer.error);
    return e;
  }
  // The peer's error object ({"error": {"code", "message", "field"}}), kept but for the domain.
  const json::object error = object(answer.body, "error");
  e.status = answer.status;
  e.code = text(error, "code");
  if (e.code.empty()) e.code = "peer_error";
  const std::string message = text(error, "message");
  e.message = fmt::format("domain {}: {}", domain,
                          message.empty() ? fmt::format("HTTP {}", answer.status) : message);
  e.field = text(error, "field");
  return e;
}

ApiError Coordinator::protocol_error(const std::string& domain, const std::string& field,
                                     const std::string& why) {
  {
    std::lock_guard lock(counters_mutex_);
    ++counters_.peer_protocol_errors[domain];
  }
  ApiError e{502, "peer_protocol",
             field.empty() ? fmt::format("domain {}: the answer {}", domain, why)
                           : fmt::format("domain {}: answer field '{}' {}", domain, field, why),
             ""};
  common::logger("detwan-agent")->warn("federation: {}", e.message);
  return e;
}

std::optional<ApiError> Coordinator::check_hold_answer(const std::string& domain,
                                                       const PeerAnswer& answer) {
  if (!answer.body_error.empty()) return protocol_error(domain, "", answer.body_error);
  Reader in(answer.body);
  if (in.text("id").empty() && in.ok()) in.fail("id", "must not be empty");
  (void)in.text("state");
  (void)in.integer<int64_t>("hold_expires_unix_ns");
  // The segment's bound, composed with the others' (compose() reads these).
  if (const json::object* b = in.object("bound")) {
    Reader bound(*b, "bound.");
    check_direction(bound, "forward");
    check_direction(bound, "reverse");
    non_negative(bound, "propagation_ns");
    (void)bound.real("max_loss", 0.0, 1.0);
    in.take(bound);
  }
  // Sent on to the other domains in the commit (far_gateway, far_public_key, far_prefixes).
  (void)in.texts("gateways");
  (void)in.string_object("public_keys");
  (void)in.texts("prefixes");
  if (!in.ok()) return protocol_error(domain, in.field(), in.why());
  return std::nullopt;
}

Outcome<std::string> Coordinator::answer_state(const std::string& domain,
                                               const PeerAnswer& answer) {
  if (!answer.body_error.empty()) {
    return std::unexpected(protocol_error(domain, "", answer.body_error));
  }
  Reader in(answer.body);
  std::string state = in.text("state");
  if (in.ok() && !reservation::state_from_string(state)) {
    in.fail("state", fmt::format("is '{:.32}', not a state of a segment", state));
  }
  (void)in.boolean("dataplane_active", Need::kOptional);
  if (!in.ok()) return std::unexpected(protocol_error(domain, in.field(), in.why()));
  return state;
}

CoordinatorCounters Coordinator::counters() const {
  std::lock_guard lock(counters_mutex_);
  return counters_;
}

}  // namespace detwan::control::federation

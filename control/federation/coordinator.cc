// The aggregator: open, calls to peers, phase 1 (hold) and phase 2 (commit).
#include "control/federation/coordinator.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/crypto.h"
#include "common/link_time.h"
#include "common/logging.h"
#include "common/units.h"
#include "control/admission/bounds.h"
#include "control/federation/domain_path.h"
#include "control/federation/json_fields.h"

namespace detwan::control::federation {
namespace json = boost::json;
using agent::ApiError;
using agent::Outcome;
using fields::array;
using fields::number;
using fields::object;
using fields::text;

Coordinator::Coordinator(agent::Agent& agent, CoordinatorOptions options)
    : agent_(agent), options_(options), domain_(agent.topology().domain) {
  if (options_.realtime == nullptr) options_.realtime = &own_realtime_;
}

common::Result<std::unique_ptr<Coordinator>> Coordinator::open(agent::Agent& agent,
                                                               CoordinatorOptions options) {
  std::unique_ptr<Coordinator> c(new Coordinator(agent, options));
  if (c->options_.client == nullptr) {
    auto client = HttpPeerClient::create(agent.topology());
    if (!client) return std::unexpected(client.error());
    c->own_client_ = std::move(*client);
    c->options_.client = c->own_client_.get();
  }
  for (const auto& [id, body] : agent.federation_rows("aggregate")) {
    // A row we cannot read is skipped, not fatal: the other reservations still recover, and
    // the segments of this one expire by their domains' own hold timers (a committed one stays
    // until its end or an operator terminates it there).
    boost::system::error_code ec;
    json::value v = json::parse(body, ec);
    auto a = ec || !v.is_object()
                 ? common::make_error(common::ErrorCode::kInvalidArgument, "not a JSON object")
                 : aggregate_from_json(v.as_object());
    if (a && a->id != id) {
      a = common::make_error(common::ErrorCode::kInvalidArgument,
                             fmt::format("field 'id': '{:.64}' is not the row's", a->id));
    }
    if (!a) {
      ++c->counters_.journal_rows_skipped;
      common::logger("detwan-agent")
          ->warn(
              "journal: federated reservation {}: unreadable row skipped ({}); its segments "
              "at other domains are not recovered by this aggregator",
              id, a.error().message);
      continue;
    }
    if (!a->client_request_id.empty() && a->state != "terminated" && a->state != "failed") {
      c->by_request_[a->client_request_id] = a->id;
    } else if (!a->client_request_id.empty() && a->reason.rfind("refused", 0) != 0) {
      c->by_request_[a->client_request_id] = a->id;
    }
    c->aggregates_[a->id] = std::move(*a);
  }
  c->recover();
  if (c->options_.start_threads) c->loop_ = std::thread([p = c.get()] { p->run_loop(); });
  return c;
}

Coordinator::~Coordinator() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (loop_.joinable()) loop_.join();
}

bool Coordinator::is_federated(const agent::ReserveRequest& request) const {
  const model::Topology& t = agent_.topology();
  for (const std::string& site : {request.spec.src, request.spec.dst}) {
    const uint32_t s = t.find_site(site);
    if (s == model::kNone || t.border_at_site(s) != nullptr) return true;
  }
  return false;
}

bool Coordinator::owns(const std::string& id) const {
  std::lock_guard lock(mutex_);
  return aggregates_.count(id) != 0;
}

std::string Coordinator::tenant_of(const std::string& id) const {
  std::lock_guard lock(mutex_);
  const auto it = aggregates_.find(id);
  if (it == aggregates_.end()) return "";
  const json::value* t = it->second.request.if_contains("tenant");
  return t != nullptr && t->is_string() ? std::string(t->as_string()) : "";
}

Aggregate* Coordinator::find(const std::string& id) {
  const auto it = aggregates_.find(id);
  return it == aggregates_.end() ? nullptr : &it->second;
}

Outcome<void> Coordinator::save(Aggregate& a) {
  a.updated_ns = options_.realtime->now_ns();
  return agent_.journal_federation("aggregate", a.id, json::serialize(to_json(a)));
}

Outcome<std::vector<ParsedView>> Coordinator::views(bool refresh, std::string* looked_at,
                                                    std::map<std::string, std::string>* failed) {
  std::vector<ParsedView> out;
  const int64_t now = options_.realtime->now_ns();
  auto own = parse_view(agent_.federation_view());
  if (!own) return std::unexpected(ApiError{500, "internal", own.error().message, ""});
  out.push_back(std::move(*own));
  *looked_at = domain_;
  // The views to fetch, every peer at once; a peer whose fetch timed out earlier in this
  // request (`failed`) is not asked again: a hung peer costs one call timeout, not one per look.
  std::vector<CallSpec> calls;
  for (const model::FederationPeer& peer : agent_.topology().federation.peers) {
    const auto cached = view_cache_.find(peer.domain);
    const bool fresh = cached != view_cache_.end() &&
                       now - view_fetched_ns_[peer.domain] < options_.view_max_age_ns;
    if ((!refresh && fresh) || (failed != nullptr && failed->contains(peer.domain))) continue;
    calls.push_back(CallSpec{peer.domain, "GET", "/v1/federation/view", {}});
  }
  std::vector<PeerAnswer> answers = call_all(calls);
  std::map<std::string, PeerAnswer> by_domain;
  for (size_t i = 0; i < calls.size(); ++i) by_domain[calls[i].domain] = std::move(answers[i]);
  for (const model::FederationPeer& peer : agent_.topology().federation.peers) {
    *looked_at += ", " + peer.domain;
    const auto answered = by_domain.find(peer.domain);
    if (answered == by_domain.end()) {
      if (failed != nullptr && failed->contains(peer.domain)) {
        *looked_at += " (" + failed->at(peer.domain) + ")";
      } else {
        out.push_back(view_cache_.at(peer.domain));
      }
      continue;
    }
    const PeerAnswer& answer = answered->second;
    std::string problem;
    if (answer.status != 200) {
      problem = "view unavailable: " +
                (answer.status == 0 ? answer.error : text(answer.body, "message"));
    } else if (auto parsed = parse_view(answer.body); !parsed || parsed->domain != peer.domain) {
      problem = "view malformed";
    } else {
      view_cache_[peer.domain] = *parsed;
      view_fetched_ns_[peer.domain] = now;
      out.push_back(std::move(*parsed));
      continue;
    }
    *looked_at += " (" + problem + ")";
    // One that timed out is not waited for twice; one that refused or was unreachable (an
    // answer within milliseconds) is asked again by the next look.
    if (failed != nullptr && answer.timed_out) (*failed)[peer.domain] = problem;
  }
  return out;
}

Outcome<json::object> Coordinator::reserve(const agent::ReserveRequest& request) {
  auto reserved = reserve_and_commit(request);
  if (!reserved || !request.provision) return reserved;
  const std::string state = text(*reserved, "state");
  const std::string id = text(*reserved, "id");
  // A repeated request (its client_request_id) for a provisioned one answers as the first did:
  // once the dataplane carries it, with its segments' state (two nodes of a job ask alike).
  if (state == "provisioned") return wait_active(id);
  if (state != "committed" && state != "released") return reserved;
  return provision(id);
}

Outcome<json::object> Coordinator::reserve_and_commit(const agent::ReserveRequest& request) {
  std::lock_guard lock(mutex_);
  if (!request.client_request_id.empty()) {
    const auto seen = by_request_.find(request.client_request_id);
    if (seen != by_request_.end()) {
      Aggregate* a = find(seen->second);
      if (a != nullptr && a->fingerprint != request.fingerprint) {
        return std::unexpected(ApiError{
            409, "idempotency_conflict",
            fmt::format("client_request_id '{}' was used for a different request (reservation {})",
                        request.client_request_id, a->id),
            "client_request_id"});
      }
      if (a != nullptr) return api_json(*a);
    }
  }
  const reservation::Spec& spec = request.spec;
  if (spec.paths > 1 || spec.protect) {
    return std::unexpected(ApiError{422, "invalid_field",
                                    "a federated reservation has one path (no paths > 1, protect)",
                                    "paths"});
  }
  const int64_t now = options_.realtime->now_ns();
  Aggregate a;
  a.client_request_id = request.client_request_id;
  a.fingerprint = request.fingerprint;
  a.state = "reserving";
  a.created_ns = now;
  int64_t start = spec.start_ns;
  if (spec.asap || request.start_now || start == 0) start = now;
  const int64_t end = spec.duration_ns > 0 ? start + spec.duration_ns : spec.end_ns;
  if (end <= start || end <= now) {
    return std::unexpected(ApiError{400, "invalid_field",
                                    "the reservation must end after it starts and after now",
                                    "end_unix_ns"});
  }
  json::array src_prefixes, dst_prefixes;
  for (const auto& p : spec.src_prefixes) src_prefixes.push_back(json::string(p));
  for (const auto& p : spec.dst_prefixes) dst_prefixes.push_back(json::string(p));
  a.request = json::object{{"src", spec.src},
                           {"dst", spec.dst},
                           {"min_bandwidth_bps", spec.min_bandwidth_bps},
                           {"max_burst_bytes", spec.max_burst_bytes},
                           {"max_latency_ns", spec.max_latency_ns},
                           {"max_latency_variation_ns", spec.max_latency_variation_ns},
                           {"max_loss", spec.max_loss},
                           {"start_unix_ns", start},
                           {"end_unix_ns", end},
                           {"encrypt", spec.encrypt},
                           {"src_prefixes", std::move(src_prefixes)},
                           {"dst_prefixes", std::move(dst_prefixes)},
                           {"tenant", request.tenant}};  // who holds it ("" = the owner's)
  // The policer depth the whole path uses: given, or detwan-gw's auto rule on a default link.
  a.burst_bytes = spec.max_burst_bytes > 0
                      ? spec.max_burst_bytes
                      : admission::auto_burst_bytes(model::Link{}, spec.min_bandwidth_bps);
  std::string looked_at;
  std::map<std::string, std::string> unavailable;  // peers whose view could not be had
  auto graph = views(false, &looked_at, &unavailable);
  if (!graph) return std::unexpected(graph.error());
  DomainPath path =
      find_domain_path(*graph, spec.src, spec.dst, spec.min_bandwidth_bps, start, end);
  if (path.segments.empty()) {  // a stale view may hide a path: look again
    graph = views(true, &looked_at, &unavailable);
    if (!graph) return std::unexpected(graph.error());
    path = find_domain_path(*graph, spec.src, spec.dst, spec.min_bandwidth_bps, start, end);
  }
  if (path.segments.empty()) {
    return std::unexpected(ApiError{
        422, "no_path",
        fmt::format("no path from '{}' to '{}' with {} bit/s free over the window through the "
                    "domains looked at: {}",
                    spec.src, spec.dst, spec.min_bandwidth_bps, looked_at),
        "dst"});
  }
  for (const SegmentPlan& p : path.segments) {
    SegmentRecord s;
    s.domain = p.domain;
    s.from = p.from;
    s.to = p.to;
    a.segments.push_back(std::move(s));
  }
  // Journaled (state reserving, segments planned) before the first call.
  auto id = agent_.new_federated_id("aggregate", json::serialize(to_json(a)));
  if (!id) return std::unexpected(id.error());
  a.id = *id;
  for (SegmentRecord& s : a.segments) {
    s.client_request_id = fmt::format("{}@{}/{}", a.id, domain_, s.domain);
  }
  Outcome<void> held = std::unexpected(ApiError{});
  for (uint32_t attempt = 0; attempt < std::max<uint32_t>(1, options_.tunnel_id_attempts);
       ++attempt) {
    const model::FederationSettings& f = agent_.topology().federation;
    auto r = common::crypto::random_u64();
    const uint64_t span = uint64_t{f.last_tunnel_id} - f.first_tunnel_id + 1;
    a.tunnel_id = options_.draw_tunnel_id
                      ? options_.draw_tunnel_id()
                      : f.first_tunnel_id + static_cast<uint32_t>((r ? *r : attempt) % span);
    for (SegmentRecord& s : a.segments) {  // a new attempt: new segment requests
      SegmentRecord fresh;
      fresh.domain = s.domain;
      fresh.from = s.from;
      fresh.to = s.to;
      s = std::move(fresh);
      s.client_request_id = attempt == 0
                                ? fmt::format("{}@{}/{}", a.id, domain_, s.domain)
                                : fmt::format("{}@{}/{}#{}", a.id, domain_, s.domain, attempt);
    }
    held = hold_segments(a);
    if (held || held.error().code != "tunnel_id_taken") break;
    // Retry only when every segment of this attempt is released (none left to the loop).
    if (std::any_of(a.segments.begin(), a.segments.end(),
                    [](const SegmentRecord& s) { return s.cleanup; })) {
      break;
    }
  }
  if (!held) {
    a.state = "terminated";
    a.reason = "refused: " + held.error().message;
    (void)save(a);
    aggregates_[a.id] = a;  // kept for audit (and the retries of what could not be aborted)
    ApiError e = held.error();
    return std::unexpected(e);
  }
  compose(a);
  // Check the composed bound against the request.
  std::string unmet;
  const int64_t max_ns = number(a.bound, "max_latency_ns");
  const int64_t variation_ns = number(a.bound, "max_latency_variation_ns");
  if (spec.max_latency_ns > 0 && max_ns > spec.max_latency_ns) {
    unmet = fmt::format("the composed max latency {} ns exceeds max_latency_ns {}", max_ns,
                        spec.max_latency_ns);
  } else if (spec.max_latency_variation_ns >= 0 && variation_ns > spec.max_latency_variation_ns) {
    unmet = fmt::format("the composed latency variation {} ns exceeds max_latency_variation_ns {}",
                        variation_ns, spec.max_latency_variation_ns);
  } else if (fields::real(a.bound, "max_loss") > spec.max_loss) {
    unmet = fmt::format("the composed loss exceeds max_loss {}", spec.max_loss);
  }
  if (!unmet.empty()) {
    release_all(a);
    a.state = "terminated";
    a.reason = "refused: " + unmet;
    (void)save(a);
    aggregates_[a.id] = a;
    return std::unexpected(ApiError{422, "latency_unachievable", unmet, "max_latency_ns"});
  }
  a.state = "held";
  a.hold_expires_ns = INT64_MAX;
  for (const SegmentRecord& s : a.segments)
    a.hold_expires_ns = std::min(a.hold_expires_ns, s.hold_expires_ns);
  if (auto ok = save(a); !ok) {
    release_all(a);
    return std::unexpected(ok.error());
  }
  if (!a.client_request_id.empty()) by_request_[a.client_request_id] = a.id;
  aggregates_[a.id] = a;
  if (request.commit || request.provision) {
    Aggregate& stored = aggregates_[a.id];
    if (auto ok = commit_segments(stored); !ok) return std::unexpected(ok.error());
  }
  return api_json(aggregates_[a.id]);
}

Outcome<void> Coordinator::hold_segments(Aggregate& a) {
  const model::FederationSettings& f = agent_.topology().federation;
  const std::string src = text(a.request, "src");
  const std::string dst = text(a.request, "dst");
  // Every domain is asked at once: each admits its own segment independently, so the phase
  // takes the slowest domain's time, not the sum.
  std::vector<CallSpec> calls;
  for (const SegmentRecord& s : a.segments) {
    json::object body{{"client_request_id", s.client_request_id},
                      {"aggregate", json::object{{"id", a.id}, {"domain", domain_}}},
                      {"from", s.from},
                      {"to", s.to},
                      {"rate_bps", a.request.at("min_bandwidth_bps")},
                      {"burst_bytes", a.burst_bytes},
                      {"start_unix_ns", a.request.at("start_unix_ns")},
                      {"end_unix_ns", a.request.at("end_unix_ns")},
                      {"hold_timeout_ns", f.hold_timeout_ns},
                      {"tunnel_id", a.tunnel_id},
                      {"encrypt", a.request.at("encrypt")}};
    if (s.from == src) body["src_prefixes"] = a.request.at("src_prefixes");
    if (s.to == dst) body["dst_prefixes"] = a.request.at("dst_prefixes");
    calls.push_back(CallSpec{s.domain, "POST", "/v1/federation/segments", std::move(body)});
  }
  std::vector<PeerAnswer> answers = call_all(calls);
  // Every answer is recorded before anything is released: a refusal from one domain must not
  // leave another's hold unknown to us.
  std::optional<ApiError> first_error;
  std::vector<bool> unanswered(a.segments.size(), false);
  for (size_t i = 0; i < a.segments.size(); ++i) {
    SegmentRecord& s = a.segments[i];
    PeerAnswer& answer = answers[i];
    unanswered[i] = answer.status == 0;
    if (answer.status == 200 || answer.status == 201) {
      if (auto bad = check_hold_answer(s.domain, answer)) {
        // It answered, so it may hold a segment, in a form we cannot use: as for a lost
        // answer, find it by our client_request_id and abort it, until its hold passes.
        s.error = bad->message;
        s.state = "unknown";
        s.cleanup = true;
        s.hold_expires_ns = options_.realtime->now_ns() + f.hold_timeout_ns + f.call_timeout_ns;
        view_fetched_ns_.erase(s.domain);
        if (!first_error) first_error = *bad;
        continue;
      }
    }
    if ((answer.status == 200 || answer.status == 201) && text(answer.body, "state") != "held") {
      // A repeated request id whose segment is gone (aborted, expired): not a hold.
      s.id = text(answer.body, "id");
      s.state = text(answer.body, "state");
      answer.status = 409;
      answer.body =
          ApiError{409, "wrong_state", fmt::format("segment {} is {}, not held", s.id, s.state), ""}
              .to_json();
    }
    if (answer.status == 200 || answer.status == 201) {  // checked: every field has its type
      s.id = text(answer.body, "id");
      s.state = text(answer.body, "state");
      s.hold_expires_ns = number(answer.body, "hold_expires_unix_ns");
      s.bound = object(answer.body, "bound");
      s.gateways = array(answer.body, "gateways");
      s.public_keys = object(answer.body, "public_keys");
      s.prefixes = array(answer.body, "prefixes");
      continue;
    }
    ApiError e = peer_error(s.domain, answer);
    s.error = e.message;
    s.state = answer.status == 0 ? "unknown" : "refused";
    view_fetched_ns_.erase(s.domain);  // its view misled us: fetch it again next time
    // A call without an answer may have held it there (now, or when a late request arrives):
    // look it up and abort it, until its hold would have passed anyway.
    s.cleanup = answer.status == 0;
    if (s.cleanup) {
      s.hold_expires_ns = options_.realtime->now_ns() + f.hold_timeout_ns + f.call_timeout_ns;
    }
    // The cause the client gets: a refusal names what was refused, before a lost answer.
    if (!first_error || (first_error->status >= 502 && answer.status != 0)) first_error = e;
  }
  if (auto ok = save(a); !ok && !first_error) first_error = ok.error();
  if (first_error) {
    // The domains that answered are released now; one that did not is left to tick(): the
    // requester is answered after one call timeout, not a second spent on the same domain.
    release_all(a, unanswered);
    return std::unexpected(*first_error);
  }
  return {};
}

Outcome<json::object> Coordinator::commit(const std::string& id) {
  std::lock_guard lock(mutex_);
  Aggregate* a = find(id);
  if (a == nullptr) return std::unexpected(not_found(id));
  if (a->state == "committed" || a->state == "provisioned" || a->state == "released") {
    return api_json(*a);
  }
  if (a->state != "held" && a->state != "committing") {
    return std::unexpected(
        ApiError{409, "wrong_state", fmt::format("{} is {}; commit needs held", id, a->state), ""});
  }
  if (auto ok = commit_segments(*a); !ok) return std::unexpected(ok.error());
  return api_json(*a);
}

Outcome<void> Coordinator::commit_segments(Aggregate& a) {
  a.decision = "commit";
  a.state = "committing";
  if (auto ok = save(a); !ok) return ok;  // the decision, before the first commit call
  const SegmentRecord& first = a.segments.front();
  const SegmentRecord& last = a.segments.back();
  auto far_of = [&](const SegmentRecord& s) -> const SegmentRecord& {
    return &s == &first ? last : first;
  };
  std::vector<CallSpec> calls;
  std::vector<SegmentRecord*> asked;
  for (SegmentRecord& s : a.segments) {
    if (s.state == "committed") continue;  // a re-sent decision (recovery)
    const SegmentRecord& far = far_of(s);
    // Checked when the far domain answered (or its journal row was read); read leniently all
    // the same: a mistyped one is no gateway, never an exception.
    const std::string far_gateway = !far.gateways.empty() && far.gateways.front().is_string()
                                        ? std::string(far.gateways.front().as_string())
                                        : "";
    const std::string far_public_key = fields::text(far.public_keys, far_gateway.c_str());
    json::object body{{"aggregate", json::object{{"id", a.id}, {"domain", domain_}}},
                      {"tunnel_id", a.tunnel_id},
                      {"far_domain", far.domain},
                      {"far_gateway", far_gateway},
                      {"far_public_key", far_public_key},
                      {"far_prefixes", far.prefixes},
                      {"bound", a.bound},
                      {"playout_bound_ns", number(a.bound, "playout_bound_ns")}};
    calls.push_back(CallSpec{s.domain, "POST",
                             fmt::format("/v1/federation/segments/{}/commit", s.id),
                             std::move(body)});
    asked.push_back(&s);
  }
  // The decision is journaled: every domain is told at once.
  const std::vector<PeerAnswer> answers = call_all(calls);
  std::optional<ApiError> first_error;
  std::vector<bool> unanswered(a.segments.size(), false);
  for (size_t i = 0; i < asked.size(); ++i) {
    SegmentRecord& s = *asked[i];
    const PeerAnswer& answer = answers[i];
    unanswered[static_cast<size_t>(&s - a.segments.data())] = answer.status == 0;
    // A 200 whose state is not one a commit leads to is treated like a failed commit: the
    // compensation below terminates every segment, that one included.
    Outcome<std::string> state = std::unexpected(ApiError{});
    if (answer.status == 200) {
      state = answer_state(s.domain, answer);
      if (state && *state != "committed" && *state != "provisioned" && *state != "released") {
        state = std::unexpected(
            protocol_error(s.domain, "state", fmt::format("is '{}' after a commit", *state)));
      }
      if (state) {
        s.state = *state;
        s.error.clear();
        continue;
      }
    }
    const ApiError e = answer.status == 200 ? state.error() : peer_error(s.domain, answer);
    s.error = e.message;
    if (answer.status == 0) {
      // No answer: it may have committed (now, or when the request arrives late). Terminated
      // by tick() until that domain answers, whatever its hold says (hold_expires 0).
      s.state = "unknown";
      s.cleanup = true;
      s.hold_expires_ns = 0;
    }
    // The cause the client gets: a refusal names what was refused, before a lost answer.
    if (!first_error || (first_error->status >= 502 && answer.status != 0)) first_error = e;
  }
  if (first_error) {
    // Compensate: every segment terminated (one whose domain did not answer, by tick()).
    release_all(a, unanswered);
    a.state = "failed";
    a.reason = first_error->message;
    (void)save(a);
    return std::unexpected(*first_error);
  }
  a.state = "committed";
  a.hold_expires_ns = 0;
  return save(a);
}

}  // namespace detwan::control::federation

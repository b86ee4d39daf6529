// The aggregator after phase 1: abort, provision, release, terminate, rotate-key, modify, get;
// releasing segments, the retry loop and recovery after a restart.
#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "common/logging.h"
#include "control/federation/coordinator.h"
#include "control/federation/json_fields.h"

namespace detwan::control::federation {
namespace json = boost::json;
using agent::ApiError;
using agent::Outcome;
using fields::text;

bool Coordinator::release_segment(SegmentRecord& s, bool* unanswered) {
  if (unanswered != nullptr) *unanswered = false;
  if (is_final(s.state) || s.state == "refused" || s.state == "planned") {
    s.cleanup = false;
    return true;
  }
  if (s.id.empty()) {  // it may exist there without our knowing its id: ask by request id
    std::string query;
    for (const char c : s.client_request_id) {
      if (c == '@')
        query += "%40";
      else if (c == '/')
        query += "%2F";
      else if (c == '#')
        query += "%23";
      else
        query += c;
    }
    const PeerAnswer found =
        call(s.domain, "GET", "/v1/federation/segments?client_request_id=" + query, nullptr);
    if (found.status == 404) {
      // Not there (yet): a request that timed out may still arrive late; keep looking until
      // its hold would have passed (tick drops it then).
      if (s.state == "unknown" && options_.realtime->now_ns() < s.hold_expires_ns) {
        s.cleanup = true;
        return false;
      }
      s.state = "terminated";
      s.cleanup = false;
      return true;
    }
    if (found.status != 200) {
      s.cleanup = true;
      if (unanswered != nullptr) *unanswered = found.status == 0;
      return false;
    }
    // The id we abort by, from the peer: unusable, it is asked again at the next retry.
    auto state = answer_state(s.domain, found);
    fields::Reader in(found.body);
    const std::string id = in.text("id");
    if (in.ok() && id.empty()) in.fail("id", "must not be empty");
    if (state && !in.ok()) state = std::unexpected(protocol_error(s.domain, in.field(), in.why()));
    if (!state) {
      s.error = state.error().message;
      s.cleanup = true;
      return false;
    }
    s.id = id;
    s.state = *state;
    if (is_final(s.state)) {
      s.cleanup = false;
      return true;
    }
  }
  const std::string action = s.state == "held" ? "abort" : "terminate";
  PeerAnswer answer =
      call(s.domain, "POST", fmt::format("/v1/federation/segments/{}/{}", s.id, action), nullptr);
  if (answer.status == 409 && action == "abort") {  // committed meanwhile: terminate it
    answer =
        call(s.domain, "POST", fmt::format("/v1/federation/segments/{}/terminate", s.id), nullptr);
  }
  if (answer.status == 200 || answer.status == 404) {
    // It said it holds nothing: believed even if the rest of its answer is malformed (counted).
    const auto state =
        answer.status == 200 ? answer_state(s.domain, answer) : Outcome<std::string>("terminated");
    s.state = state ? *state : "terminated";
    s.cleanup = false;
    return true;
  }
  s.cleanup = true;
  s.error = answer.status == 0 ? answer.error : peer_error(s.domain, answer).message;
  if (unanswered != nullptr) *unanswered = answer.status == 0;
  return false;
}

void Coordinator::release_all(Aggregate& a, const std::vector<bool>& deferred) {
  bool any_deferred = false;
  for (size_t i = 0; i < a.segments.size(); ++i) {
    SegmentRecord& s = a.segments[i];
    if (i < deferred.size() && deferred[i] && !is_final(s.state)) {
      s.cleanup = true;  // tick() retries it, outside mutex_
      any_deferred = true;
      continue;
    }
    (void)release_segment(s);
  }
  (void)save(a);
  if (any_deferred) wake_.notify_all();
}

Outcome<json::object> Coordinator::abort(const std::string& id) {
  std::lock_guard lock(mutex_);
  Aggregate* a = find(id);
  if (a == nullptr) return std::unexpected(not_found(id));
  if (a->state == "terminated" && a->reason == "aborted") return api_json(*a);
  if (a->state != "held") {
    return std::unexpected(
        ApiError{409, "wrong_state", fmt::format("{} is {}; abort needs held", id, a->state), ""});
  }
  release_all(*a);
  a->state = "terminated";
  a->reason = "aborted";
  if (auto ok = save(*a); !ok) return std::unexpected(ok.error());
  return api_json(*a);
}

Outcome<json::object> Coordinator::propagate(const std::string& id, const std::string& action,
                                             const std::string& target) {
  std::lock_guard lock(mutex_);
  Aggregate* a = find(id);
  if (a == nullptr) return std::unexpected(not_found(id));
  if (a->state == target) return api_json(*a);
  const bool allowed = action == "terminate"   ? !is_final(a->state)
                       : action == "provision" ? a->state == "committed" || a->state == "released"
                                           : /* release */ a->state == "provisioned";
  if (!allowed) {
    return std::unexpected(ApiError{
        409, "wrong_state", fmt::format("{} is {}; {} is not allowed", id, a->state, action), ""});
  }
  std::optional<ApiError> first_error;
  if (action == "terminate") {
    for (SegmentRecord& s : a->segments) {
      if (!release_segment(s) && !first_error) {
        first_error = ApiError{
            502, "peer_unreachable",
            fmt::format("domain {}: {} (retried in the background)", s.domain, s.error), ""};
      }
    }
  } else {
    std::vector<CallSpec> calls;
    for (const SegmentRecord& s : a->segments) {
      calls.push_back(CallSpec{s.domain, "POST",
                               fmt::format("/v1/federation/segments/{}/{}", s.id, action), {}});
    }
    const std::vector<PeerAnswer> answers = call_all(calls);  // every domain at once
    for (size_t i = 0; i < a->segments.size(); ++i) {
      SegmentRecord& s = a->segments[i];
      const PeerAnswer& answer = answers[i];
      auto state = answer.status == 200
                       ? answer_state(s.domain, answer)
                       : Outcome<std::string>(std::unexpected(peer_error(s.domain, answer)));
      if (state) {
        s.state = *state;
        s.error.clear();
      } else {
        const ApiError e = state.error();
        s.error = e.message;
        if (!first_error) first_error = e;
      }
    }
  }
  if (action == "terminate") {
    a->state = "terminated";
    a->reason = "terminated_by_client";
  } else if (!first_error) {
    a->state = target;
  }
  if (auto ok = save(*a); !ok) return std::unexpected(ok.error());
  if (first_error && action != "terminate") return std::unexpected(*first_error);
  return api_json(*a);
}

Outcome<json::object> Coordinator::provision(const std::string& id) {
  auto done = propagate(id, "provision", "provisioned");
  if (!done) return done;
  return wait_active(id);
}

Outcome<json::object> Coordinator::wait_active(const std::string& id) {
  // Answer once every domain reports its dataplane active, or the provision wait passed.
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::nanoseconds(agent_.topology().agent.provision_wait_ns);
  while (true) {
    auto now = get(id);
    if (!now) return now;
    const bool active = now->at("dataplane_active").as_bool();  // get() set it: a bool
    if (active || std::chrono::steady_clock::now() >= deadline) return now;
    // Each poll asks every domain (one HTTPS call each); 5 ms keeps the answer within a few ms
    // of the last gateway reporting its tunnel (50 ms added up to 50 ms to every provision).
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Outcome<json::object> Coordinator::release(const std::string& id) {
  return propagate(id, "release", "released");
}
Outcome<json::object> Coordinator::terminate(const std::string& id) {
  return propagate(id, "terminate", "terminated");
}

Outcome<json::object> Coordinator::modify(const std::string& id,
                                          const agent::ModifyRequest& request) {
  std::lock_guard lock(mutex_);
  Aggregate* a = find(id);
  if (a == nullptr) return std::unexpected(not_found(id));
  if (is_final(a->state) || a->state == "reserving" || a->state == "committing") {
    return std::unexpected(ApiError{
        409, "wrong_state", fmt::format("{} is {}; modify is not allowed", id, a->state), ""});
  }
  json::object body;
  if (request.min_bandwidth_bps) body["min_bandwidth_bps"] = *request.min_bandwidth_bps;
  if (request.end_ns) body["end_unix_ns"] = *request.end_ns;
  // Every segment or none: a refusal puts the ones already changed back.
  std::vector<size_t> changed;
  for (size_t i = 0; i < a->segments.size(); ++i) {
    SegmentRecord& s = a->segments[i];
    const PeerAnswer answer =
        call(s.domain, "PATCH", fmt::format("/v1/federation/segments/{}", s.id), &body);
    if (answer.status == 200) {
      changed.push_back(i);
      continue;
    }
    const ApiError e = peer_error(s.domain, answer);
    json::object back{{"min_bandwidth_bps", fields::number(a->request, "min_bandwidth_bps")},
                      {"end_unix_ns", fields::number(a->request, "end_unix_ns")}};
    for (const size_t c : changed) {
      (void)call(a->segments[c].domain, "PATCH",
                 fmt::format("/v1/federation/segments/{}", a->segments[c].id), &back);
    }
    return std::unexpected(e);
  }
  if (request.min_bandwidth_bps) a->request["min_bandwidth_bps"] = *request.min_bandwidth_bps;
  if (request.end_ns) a->request["end_unix_ns"] = *request.end_ns;
  if (auto ok = save(*a); !ok) return std::unexpected(ok.error());
  return api_json(*a);
}

Outcome<json::object> Coordinator::get(const std::string& id) {
  std::lock_guard lock(mutex_);
  Aggregate* a = find(id);
  if (a == nullptr) return std::unexpected(not_found(id));
  json::object out = api_json(*a);
  json::array segments = out.at("segments").as_array();
  bool active = !a->segments.empty();  // every domain's dataplane carries it
  int64_t mtu_bytes = -1;              // the least over the segments' links
  int64_t overhead_bytes = 0;
  // Every domain at once (a client polling until active asks this every few ms).
  std::vector<CallSpec> calls;
  for (const SegmentRecord& s : a->segments) {
    if (!s.id.empty()) {
      calls.push_back(
          CallSpec{s.domain, "GET", fmt::format("/v1/federation/segments/{}", s.id), {}});
    }
  }
  const std::vector<PeerAnswer> answers = call_all(calls);
  size_t next_answer = 0;
  for (size_t i = 0; i < a->segments.size(); ++i) {
    SegmentRecord& s = a->segments[i];
    if (s.id.empty()) continue;
    const PeerAnswer& answer = answers[next_answer++];
    json::object& item = segments[i].as_object();
    auto state = answer.status == 200
                     ? answer_state(s.domain, answer)
                     : Outcome<std::string>(std::unexpected(peer_error(s.domain, answer)));
    if (state) {  // checked: dataplane_active, if there, is a boolean
      s.state = *state;
      item["state"] = s.state;
      const json::value* d = answer.body.if_contains("dataplane_active");
      const bool segment_active = d != nullptr && d->is_bool() && d->as_bool();
      item["dataplane_active"] = segment_active;
      active = active && segment_active;
      if (const json::value* t = answer.body.if_contains("tunnel"); t != nullptr && t->is_object()) {
        const json::value* m = t->as_object().if_contains("mtu_bytes");
        const json::value* o = t->as_object().if_contains("frame_overhead_bytes");
        if (m != nullptr && m->is_int64() && (mtu_bytes < 0 || m->as_int64() < mtu_bytes)) {
          mtu_bytes = m->as_int64();
        }
        if (o != nullptr && o->is_int64()) overhead_bytes = std::max(overhead_bytes, o->as_int64());
      }
    } else {
      item["dataplane_active"] = false;
      item["error"] = state.error().message;
      active = false;
    }
  }
  // A provision or release that failed at one domain is not rolled back at the others; once
  // every domain reports the same state (a retried call, or a hung domain that carried out the
  // late request when it ran again), the aggregate says so too.
  if (a->state == "committed" || a->state == "provisioned" || a->state == "released") {
    const std::string& first = a->segments.empty() ? a->state : a->segments.front().state;
    const bool same = std::all_of(a->segments.begin(), a->segments.end(),
                                  [&](const SegmentRecord& s) { return s.state == first; });
    if (same && first != a->state &&
        (first == "provisioned" || first == "released" || first == "committed")) {
      a->state = first;
      if (auto ok = save(*a); ok) out["state"] = a->state;
    }
  }
  out["segments"] = std::move(segments);
  out["dataplane_active"] = active;
  // The shape a job's reservation client reads (control/client/reservation_client.h, as a
  // local reservation's): the version, the request as "spec", the tunnel (its id, each end
  // site's prefixes from its domain's segment, the least MTU and the gateways' overhead) and
  // whether the dataplane carries it.
  out["version"] = a->updated_ns;
  out["spec"] = a->request;
  json::array src_prefixes, dst_prefixes;
  if (!a->segments.empty()) {
    src_prefixes = a->segments.front().prefixes;
    dst_prefixes = a->segments.back().prefixes;
  }
  out["tunnel"] = json::object{
      {"id", a->tunnel_id},
      {"src_prefixes", std::move(src_prefixes)},
      {"dst_prefixes", std::move(dst_prefixes)},
      {"mtu_bytes", std::max<int64_t>(mtu_bytes, 0)},
      {"frame_overhead_bytes", overhead_bytes},
      {"playout_bound_ns", a->bound.contains("playout_bound_ns") ? a->bound.at("playout_bound_ns")
                                                                 : json::value(0)}};
  out["dataplane"] = json::object{{"active", active}};
  return out;
}

json::array Coordinator::list() const {
  std::lock_guard lock(mutex_);
  json::array out;
  for (const auto& [id, a] : aggregates_) out.push_back(api_json(a));
  return out;
}

void Coordinator::tick() {
  // What is owed (an abort or terminate a domain has not answered yet) is retried outside
  // mutex_, one thread per domain: a domain that hangs delays neither the clients nor the
  // other domains' retries, only its own (one call timeout per tick: after a call without an
  // answer, that domain's other owed segments wait for the next tick).
  struct Owed {
    std::string aggregate_id;
    size_t index = 0;
    SegmentRecord segment;  // a copy; merged back if nobody changed it meanwhile
  };
  std::map<std::string, std::vector<Owed>> owed;  // by domain
  {
    std::lock_guard lock(mutex_);
    const int64_t now = options_.realtime->now_ns();
    for (auto& [id, a] : aggregates_) {
      bool changed = false;
      if (a.state == "held" && a.hold_expires_ns > 0 && now >= a.hold_expires_ns) {
        for (SegmentRecord& s : a.segments) s.cleanup = !is_final(s.state);
        a.state = "terminated";
        a.reason = "hold_timeout";
        changed = true;
      }
      for (size_t i = 0; i < a.segments.size(); ++i) {
        SegmentRecord& s = a.segments[i];
        if (!s.cleanup) continue;
        // A hold that passed releases itself there; a committed segment is retried until it
        // answers.
        if ((s.state == "held" || s.state == "unknown") && s.hold_expires_ns > 0 &&
            now >= s.hold_expires_ns) {
          s.cleanup = false;
          s.state = "terminated";
          changed = true;
          continue;
        }
        owed[s.domain].push_back(Owed{id, i, s});
      }
      if (changed) (void)save(a);
      if (!a.rotation.empty()) step_rotation(a, now);
    }
  }
  if (owed.empty()) return;
  const auto retry = [this](std::vector<Owed>& list) {
    for (Owed& o : list) {
      bool unanswered = false;
      try {
        (void)release_segment(o.segment, &unanswered);
      } catch (const std::exception& e) {  // an answer of a shape nobody foresaw: next tick
        o.segment.error = fmt::format("domain {}: {}", o.segment.domain, e.what());
      }
      if (unanswered) break;  // the rest of this domain's wait for the next tick
    }
  };
  std::vector<std::thread> threads;
  for (auto& [domain, list] : owed) threads.emplace_back(retry, std::ref(list));
  for (std::thread& t : threads) t.join();
  std::lock_guard lock(mutex_);
  std::set<Aggregate*> changed;
  for (auto& [domain, list] : owed) {
    for (const Owed& o : list) {
      Aggregate* a = find(o.aggregate_id);
      if (a == nullptr || o.index >= a->segments.size()) continue;
      SegmentRecord& s = a->segments[o.index];
      // A client's terminate may have released it meanwhile: what it recorded stands.
      if (s.client_request_id != o.segment.client_request_id || !s.cleanup) continue;
      s = o.segment;
      changed.insert(a);
    }
  }
  for (Aggregate* a : changed) (void)save(*a);
}

void Coordinator::recover() {
  std::lock_guard lock(mutex_);
  for (auto& [id, a] : aggregates_) {
    if (a.state == "reserving") {
      release_all(a);
      a.state = "terminated";
      a.reason = "aggregator_restart";
      (void)save(a);
      common::logger("detwan-agent")
          ->warn("{}: federated reservation interrupted while reserving: segments aborted", id);
    } else if (a.state == "committing" && a.decision == "commit") {
      if (auto ok = commit_segments(a); !ok) {
        common::logger("detwan-agent")
            ->warn("{}: commit after restart failed ({}): every segment terminated", id,
                   ok.error().message);
      }
    }
  }
}

void Coordinator::run_loop() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    // A key rotation under way is stepped as soon as its ends have a step in place.
    const bool rotating = std::any_of(aggregates_.begin(), aggregates_.end(),
                                      [](const auto& item) { return !item.second.rotation.empty(); });
    wake_.wait_for(lock, rotating ? std::chrono::milliseconds(100) : std::chrono::seconds(1));
    if (stopping_) break;
    lock.unlock();
    try {
      tick();
    } catch (const std::exception& e) {  // a peer's answer of a shape nobody foresaw
      common::logger("detwan-agent")->error("federation: the aggregator's tick: {}", e.what());
    }
    lock.lock();
  }
}

}  // namespace detwan::control::federation

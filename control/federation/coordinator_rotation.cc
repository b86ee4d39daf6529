// Key rotation across domains (docs/federation.md, "Rotation across domains"). The two ends of
// a federated tunnel belong to two owners, each stepping its own gateway; stepped separately,
// one end would seal with the new key before the other can open it, or drop the old key while
// the other still seals with it. So the end segments' rotations are paced (TunnelKeys::paced)
// and the aggregator permits each step once every end has the one before in place:
//
//   adding    every end holds {old, new}, seals old      -> permit switching
//   switching every end seals new (opens both)           -> grace (1 s + the composed bound)
//   switched  grace over                                  -> permit dropping
//   dropping  every end finished (its rotations counted)  -> done
//
// An end that answers nothing is asked again at the next tick (every call here is idempotent);
// an end that never started (its start was lost) is started again; an end that was not on a
// gateway replaced its key at once and counts as done at every step.
#include <fmt/format.h>

#include "common/logging.h"
#include "control/federation/coordinator.h"
#include "control/federation/json_fields.h"

namespace detwan::control::federation {
namespace json = boost::json;
using agent::ApiError;
using agent::Outcome;

namespace {

// As an agent keeps an old key after its own switch (agent_impl.h, kKeyDropGraceNs).
constexpr int64_t kOldKeyGraceNs = 1'000'000'000;

struct EndRotation {
  std::string step;  // the end's rotation step ("none" when stable)
  bool in_place = false;
  uint64_t rotations = 0;
};

int64_t bound_latency_ns(const json::object& bound) {
  const json::value* v = bound.if_contains("max_latency_ns");
  const auto n = v != nullptr ? fields::integer_of<int64_t>(*v) : std::nullopt;
  return n ? std::max<int64_t>(*n, 0) : 0;
}

}  // namespace

Outcome<json::object> Coordinator::rotate_key(const std::string& id) {
  std::lock_guard lock(mutex_);
  Aggregate* a = find(id);
  if (a == nullptr) return std::unexpected(not_found(id));
  if (a->state != "committed" && a->state != "provisioned") {
    return std::unexpected(ApiError{
        409, "wrong_state", fmt::format("{} is {}; rotate-key is not allowed", id, a->state), ""});
  }
  if (!a->rotation.empty()) {
    return std::unexpected(ApiError{
        409, "rotation_in_progress",
        fmt::format("{}: a key rotation is under way (step '{}')", id, a->rotation), ""});
  }
  std::optional<ApiError> first_error;
  for (SegmentRecord& s : a->segments) {
    if (s.gateways.empty()) continue;  // a carrier's transit carries ciphertext: no key
    const PeerAnswer answer = call(
        s.domain, "POST", fmt::format("/v1/federation/segments/{}/rotate-key", s.id), nullptr);
    auto state = answer.status == 200
                     ? answer_state(s.domain, answer)
                     : Outcome<std::string>(std::unexpected(peer_error(s.domain, answer)));
    if (!state && !first_error) first_error = state.error();
  }
  // Stepped from here by tick(), also when an end missed its start (started again there).
  a->rotation = "adding";
  a->rotation_step_ns = options_.realtime->now_ns();
  if (auto ok = save(*a); !ok) return std::unexpected(ok.error());
  wake_.notify_all();
  if (first_error) return std::unexpected(*first_error);
  return api_json(*a);
}

void Coordinator::step_rotation(Aggregate& a, int64_t now_ns) {
  if (is_final(a.state)) {
    a.rotation.clear();
    (void)save(a);
    return;
  }
  // Every end's rotation as it stands (a transit segment has no gateway and no key).
  std::vector<std::pair<SegmentRecord*, EndRotation>> ends;
  for (SegmentRecord& s : a.segments) {
    if (s.gateways.empty()) continue;
    const PeerAnswer answer =
        call(s.domain, "GET", fmt::format("/v1/federation/segments/{}", s.id), nullptr);
    if (answer.status != 200 || !answer.body_error.empty()) return;  // asked again next tick
    EndRotation end;
    const json::value* k = answer.body.if_contains("key_rotation");
    if (k == nullptr || !k->is_object()) {
      (void)protocol_error(s.domain, "key_rotation", "is missing from an encrypted end segment");
      return;
    }
    fields::Reader in(k->as_object(), "key_rotation.");
    end.step = in.text("step");
    end.in_place = in.boolean("in_place");
    end.rotations = in.integer<uint64_t>("rotations");
    if (!in.ok()) {
      (void)protocol_error(s.domain, in.field(), in.why());
      return;
    }
    ends.emplace_back(&s, std::move(end));
  }
  const auto done = [&](const EndRotation& e) { return e.rotations > a.rotations; };
  const auto all_at = [&](const char* step) {
    for (const auto& [s, e] : ends) {
      if (!done(e) && !(e.step == step && e.in_place)) return false;
    }
    return true;
  };
  // Sends `body` to every end not done yet; false if one did not take it (retried next tick).
  const auto to_ends = [&](const std::string& body_text) {
    bool all = true;
    for (const auto& [s, e] : ends) {
      if (done(e)) continue;
      const json::object body = body_text.empty() ? json::object{} : json::object{{"step", body_text}};
      const PeerAnswer answer =
          call(s->domain, "POST", fmt::format("/v1/federation/segments/{}/rotate-key", s->id),
               body_text.empty() ? nullptr : &body);
      all = all && answer.status == 200;
    }
    return all;
  };
  const auto next = [&](const char* step) {
    common::logger("detwan-agent")->info("{}: key rotation across domains: {}", a.id, step);
    a.rotation = step;
    a.rotation_step_ns = now_ns;
    (void)save(a);
  };
  if (a.rotation == "adding") {
    for (const auto& [s, e] : ends) {
      if (!done(e) && e.step == "none") {  // its start was lost: start it again
        (void)call(s->domain, "POST", fmt::format("/v1/federation/segments/{}/rotate-key", s->id),
                   nullptr);
      }
    }
    if (all_at("adding") && to_ends("switching")) next("switching");
  } else if (a.rotation == "switching") {
    if (all_at("switching")) next("switched");
  } else if (a.rotation == "switched") {
    // Packets sealed with the old key just before the last end switched are still arriving.
    const int64_t grace_ns = kOldKeyGraceNs + bound_latency_ns(a.bound);
    if (now_ns - a.rotation_step_ns >= grace_ns && to_ends("dropping")) next("dropping");
  } else if (a.rotation == "dropping") {
    bool all_done = true;
    for (const auto& [s, e] : ends) all_done = all_done && done(e);
    if (all_done) {
      ++a.rotations;
      a.rotation.clear();
      a.rotation_step_ns = now_ns;
      common::logger("detwan-agent")->info("{}: key rotation across domains done", a.id);
      (void)save(a);
    }
  }
}

}  // namespace detwan::control::federation

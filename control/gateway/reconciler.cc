#include "control/gateway/reconciler.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "common/json_number.h"
#include "common/unix_request.h"

namespace detwan::control::gateway {
namespace json = boost::json;
namespace {

struct Answer {
  json::object object;
  std::string error;  // the gateway's {"error":...}, or why the answer is unusable
};

Answer parse_answer(const std::string& text) {
  Answer out;
  boost::system::error_code ec;
  json::value value = json::parse(text, ec);
  if (ec || !value.is_object()) {
    out.error = fmt::format("malformed answer: {}", text.substr(0, 200));
    return out;
  }
  out.object = std::move(value.as_object());
  if (const json::value* e = out.object.if_contains("error")) {
    out.error = e->is_string() ? std::string(e->as_string()) : json::serialize(*e);
  }
  return out;
}

uint64_t u64_of(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return 0;
  return common::json_uint64(*v).value_or(0);
}

std::string apply_line(const std::vector<const TunnelSpec*>& add,
                       const std::vector<const TunnelSpec*>& modify,
                       const std::vector<uint32_t>& remove, const uint64_t* if_generation) {
  json::object request{{"cmd", "apply"}};
  if (if_generation != nullptr) request["if_generation"] = *if_generation;
  json::array a;
  for (const TunnelSpec* s : add) a.push_back(s->to_request());
  json::array m;
  for (const TunnelSpec* s : modify) m.push_back(s->to_request());
  json::array r;
  for (const uint32_t id : remove) r.push_back(id);
  request["add"] = std::move(a);
  request["modify"] = std::move(m);
  request["remove"] = std::move(r);
  return json::serialize(request);
}

}  // namespace

common::Result<std::string> UnixGatewayClient::request(const std::string& socket,
                                                       const std::string& line) {
  return common::unix_request(socket, line, timeout_ms_);
}

Reconciler::Reconciler(std::vector<GatewayTarget> gateways, std::string owner,
                       GatewayClient& client, Observer observer, int64_t interval_ns,
                       const common::Clock& monotonic)
    : gateways_(std::move(gateways)),
      owner_(std::move(owner)),
      client_(client),
      observer_(std::move(observer)),
      interval_ns_(interval_ns),
      clock_(monotonic),
      slots_(gateways_.size()) {}

Reconciler::~Reconciler() { stop(); }

void Reconciler::start() {
  std::lock_guard lock(mutex_);
  if (worker_.joinable()) return;
  stopping_ = false;
  worker_ = std::thread([this] { run(); });
}

void Reconciler::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
}

uint64_t Reconciler::set_desired(uint32_t gateway, std::vector<TunnelSpec> tunnels) {
  if (gateway >= slots_.size()) return 0;
  std::sort(tunnels.begin(), tunnels.end(),
            [](const TunnelSpec& a, const TunnelSpec& b) { return a.id < b.id; });
  uint64_t version = 0;
  {
    std::lock_guard lock(mutex_);
    Slot& slot = slots_[gateway];
    if (slot.desired == tunnels && slot.version != 0) return slot.version;
    slot.desired = std::move(tunnels);
    version = ++slot.version;
  }
  wake_.notify_all();
  return version;
}

void Reconciler::poke() {
  {
    std::lock_guard lock(mutex_);
    forced_ = true;
  }
  wake_.notify_all();
}

std::vector<ReconcilerCounters> Reconciler::counters() const {
  std::lock_guard lock(mutex_);
  std::vector<ReconcilerCounters> out;
  for (const Slot& slot : slots_) out.push_back(slot.counters);
  return out;
}

void Reconciler::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    const int64_t now = clock_.now_ns();
    int64_t next = now + interval_ns_;
    bool due = forced_;
    for (const Slot& slot : slots_) {
      if (slot.version != slot.done_version || now >= slot.next_pass_ns) due = true;
      next = std::min(next, slot.next_pass_ns);
    }
    if (!due) {
      const int64_t wait_ns = std::max<int64_t>(next - now, 1'000'000);
      wake_.wait_for(lock, std::chrono::nanoseconds(wait_ns));
      continue;
    }
    lock.unlock();
    reconcile_now(false);
    lock.lock();
  }
}

void Reconciler::reconcile_now(bool force) {
  bool forced = force;
  {
    std::lock_guard lock(mutex_);
    forced = forced || forced_;
    forced_ = false;
  }
  for (uint32_t g = 0; g < gateways_.size(); ++g) {
    std::vector<TunnelSpec> desired;
    uint64_t version = 0;
    std::string boot_id;
    {
      std::lock_guard lock(mutex_);
      Slot& slot = slots_[g];
      const int64_t now = clock_.now_ns();
      if (!forced && slot.version == slot.done_version && now < slot.next_pass_ns) continue;
      desired = slot.desired;
      version = slot.version;
      boot_id = slot.boot_id;
    }
    GatewayReport report = reconcile(g, desired, version, boot_id);
    {
      std::lock_guard lock(mutex_);
      Slot& slot = slots_[g];
      ReconcilerCounters& c = slot.counters;
      ++c.passes;
      if (!report.reachable) ++c.unreachable;
      if (report.restarted) ++c.restarts_seen;
      if (report.applied) ++c.applies;
      c.refusals += report.refused.size();
      if (report.reachable) {
        slot.boot_id = report.boot_id;
        c.generation = report.generation;
      }
      c.in_sync = report.reachable && report.error.empty() && report.refused.empty();
      // A pass that left the gateway out of sync is retried at the next interval; one in sync
      // is repeated at the interval anyway (a restarted gateway is found that way).
      if (c.in_sync || !report.refused.empty()) slot.done_version = version;
      slot.next_pass_ns = clock_.now_ns() + interval_ns_;
      if (!report.reachable) slot.done_version = version;  // retry at the interval, not in a spin
    }
    if (observer_) observer_(report);
  }
}

GatewayReport Reconciler::reconcile(uint32_t g, const std::vector<TunnelSpec>& desired,
                                    uint64_t version, const std::string& last_boot_id) {
  GatewayReport report;
  report.gateway = g;
  report.desired_version = version;
  const GatewayTarget& target = gateways_[g];
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto listed = client_.request(target.socket, R"({"cmd":"tunnels"})");
    if (!listed) {
      report.reachable = false;
      report.error = listed.error().message;
      return report;
    }
    Answer answer = parse_answer(*listed);
    if (!answer.error.empty()) {
      report.reachable = false;
      report.error = fmt::format("gateway '{}' ({}): {}", target.name, target.socket, answer.error);
      return report;
    }
    report.reachable = true;
    const json::value* boot = answer.object.if_contains("boot_id");
    report.boot_id = boot != nullptr && boot->is_string() ? std::string(boot->as_string()) : "";
    report.restarted = !last_boot_id.empty() && report.boot_id != last_boot_id;
    const uint64_t generation = u64_of(answer.object, "generation");
    report.generation = generation;
    // A registered key the gateway does not hold: its x25519 tunnels could not open, and it may
    // not be the gateway the operator registered. Nothing is programmed until they agree.
    if (!target.public_key.empty()) {
      const json::value* key = answer.object.if_contains("public_key");
      const std::string reported =
          key != nullptr && key->is_string() ? std::string(key->as_string()) : "";
      if (reported != target.public_key) {
        report.error = fmt::format(
            "gateway '{}' ({}) has public key {} but the topology registers {} "
            "(gateways[].public_key): not programmed until they agree",
            target.name, target.socket, reported.empty() ? "none (no identity)" : reported,
            target.public_key);
        return report;
      }
    }
    std::map<uint32_t, const json::object*> actual;
    if (const json::value* tunnels = answer.object.if_contains("tunnels");
        tunnels != nullptr && tunnels->is_array()) {
      for (const json::value& t : tunnels->as_array()) {
        if (t.is_object())
          actual[static_cast<uint32_t>(u64_of(t.as_object(), "id"))] = &t.as_object();
      }
    }
    std::vector<const TunnelSpec*> add;
    std::vector<const TunnelSpec*> modify;
    std::vector<uint32_t> remove;
    report.in_place.clear();
    report.refused.clear();
    std::set<uint32_t> wanted;
    for (const TunnelSpec& spec : desired) {
      wanted.insert(spec.id);
      const auto it = actual.find(spec.id);
      if (it == actual.end()) {
        add.push_back(&spec);
        continue;
      }
      const json::value* owner = it->second->if_contains("owner");
      if (owner == nullptr || !owner->is_string() || owner->as_string() != owner_) {
        report.refused[spec.id] = fmt::format(
            "gateway '{}' already has tunnel {} and it is not ours (owner '{}')", target.name,
            spec.id, owner != nullptr && owner->is_string() ? std::string(owner->as_string()) : "");
        continue;
      }
      std::string difference;
      if (spec.matches(*it->second, &difference)) {
        report.in_place.insert(spec.id);
      } else if (difference == "peer") {
        remove.push_back(spec.id);  // the peer cannot change in place: re-added next pass
      } else {
        modify.push_back(&spec);
      }
    }
    for (const auto& [id, object] : actual) {
      const json::value* owner = object->if_contains("owner");
      if (wanted.count(id) == 0 && owner != nullptr && owner->is_string() &&
          owner->as_string() == owner_) {
        remove.push_back(id);
      }
    }
    if (add.empty() && modify.empty() && remove.empty()) return report;

    auto sent = client_.request(target.socket, apply_line(add, modify, remove, &generation));
    if (!sent) {
      report.reachable = false;
      report.error = sent.error().message;
      return report;
    }
    Answer applied = parse_answer(*sent);
    if (applied.error.empty()) {
      report.applied = true;
      report.generation = u64_of(applied.object, "generation");
      for (const TunnelSpec* s : add) report.in_place.insert(s->id);
      for (const TunnelSpec* s : modify) report.in_place.insert(s->id);
      if (std::any_of(remove.begin(), remove.end(),
                      [&](uint32_t id) { return wanted.count(id) != 0; })) {
        continue;  // a peer change: the re-add goes in the next attempt
      }
      return report;
    }
    if (applied.object.contains("generation") &&
        u64_of(applied.object, "generation") != generation) {
      continue;  // another writer changed the gateway between our two requests: start over
    }
    // Refused as a batch: one item at a time, so one bad tunnel does not hold up the others.
    // A request that gets no answer is not a refusal: the gateway went away mid-way, and what
    // is left is retried on the next pass (as when the batch itself got no answer).
    const auto went_away = [&](const common::Error& e) {
      report.reachable = false;
      report.error = e.message;
      return report;
    };
    for (const uint32_t id : remove) {
      auto one = client_.request(target.socket, apply_line({}, {}, {id}, nullptr));
      if (!one) return went_away(one.error());
      const Answer a = parse_answer(*one);
      if (a.error.empty()) report.applied = true;
    }
    for (const auto* list : {&modify, &add}) {
      for (const TunnelSpec* s : *list) {
        auto one = client_.request(target.socket, list == &add ? apply_line({s}, {}, {}, nullptr)
                                                               : apply_line({}, {s}, {}, nullptr));
        if (!one) return went_away(one.error());
        const Answer a = parse_answer(*one);
        if (a.error.empty()) {
          report.applied = true;
          report.in_place.insert(s->id);
          report.generation = u64_of(a.object, "generation");
        } else {
          report.refused[s->id] =
              fmt::format("gateway '{}' refused tunnel {}: {}", target.name, s->id, a.error);
        }
      }
    }
    return report;
  }
  report.error = fmt::format("gateway '{}' kept changing under us (another writer?)", target.name);
  return report;
}

}  // namespace detwan::control::gateway

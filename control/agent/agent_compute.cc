// Compute pools and the placement planner behind the agent's API (docs/control.md,
// "Co-scheduling"): pools are journaled like reservations; plan() asks the admission planner
// how much each site pair can take in the job's window and lets compute::place() decide.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "common/units.h"
#include "control/admission/planner.h"
#include "control/agent/agent_impl.h"
#include "control/gateway/tunnel_spec.h"
#include "control/reservation/reservation_json.h"

namespace detwan::control::agent {
namespace json = boost::json;

namespace {

ApiError no_pool(const std::string& name) {
  return ApiError{404, "not_found", fmt::format("no pool '{}'", name), "name"};
}

// What the admission planner is asked for a pair of sites in the job's window.
admission::Request pair_request(uint32_t a, uint32_t b, int64_t start_ns, int64_t end_ns,
                                uint64_t rate_bps) {
  admission::Request q;
  q.src_site = a;
  q.dst_site = b;
  q.start_ns = start_ns;
  q.end_ns = end_ns;
  q.rate_bps = rate_bps;
  return q;
}

// The most the domain admits between two sites in [start, end) on one path (whole Mbit/s), its
// latency bound and the payload share of the rate, from the admission planner.
compute::WanOffer wan_offer(const model::Topology& t, const calendar::Ledger& ledger,
                            uint32_t a, uint32_t b, int64_t start_ns, int64_t end_ns) {
  admission::Request q = pair_request(a, b, start_ns, end_ns, 0);
  // One path leaves a's node on one of its links and enters b's on one of its: it carries at
  // most the least of the two sides' freest link (the search's upper end, often the answer).
  const auto freest = [&](uint32_t node, bool leaving) {
    uint64_t most = 0;
    for (const uint32_t l : t.nodes[node].links) {
      const int from_node = t.links[l].direction_from(node);
      most = std::max(most, ledger.free_bps(l, leaving ? from_node : 1 - from_node, start_ns,
                                            end_ns));
    }
    return most;
  };
  const uint64_t hi = std::min(freest(t.sites[a].node, true), freest(t.sites[b].node, false));
  constexpr uint64_t kStep = 1'000'000;
  std::optional<admission::Plan> best;  // the plan at `lo`, the most admitted so far
  std::string refusal;
  auto admitted = [&](uint64_t units) {
    q.rate_bps = units * kStep;
    admission::Decision d = admission::plan(t, ledger, q);
    if (auto* plan = std::get_if<admission::Plan>(&d)) {
      best = std::move(*plan);
      return true;
    }
    refusal = std::get<admission::Refusal>(d).message;
    return false;
  };
  compute::WanOffer offer;
  uint64_t lo = 1;
  uint64_t top = std::max<uint64_t>(1, hi / kStep);
  if (admitted(top)) {
    lo = top;  // the bound is admitted: it is the most
  } else if (top == 1 || !admitted(1)) {
    offer.refusal = refusal;
    return offer;
  } else {
    --top;  // refused: the most is below
  }
  while (lo < top) {  // the largest admitted multiple of kStep
    const uint64_t mid = lo + (top - lo + 1) / 2;
    if (admitted(mid)) {
      lo = mid;
    } else {
      top = mid - 1;
    }
  }
  const admission::Plan& plan = *best;
  offer.max_rate_bps = lo * kStep;
  offer.latency_ns = plan.bound.max_latency_ns;
  uint32_t mtu = 1500;
  if (!plan.paths.empty()) {
    for (const uint32_t l : plan.paths.front().links) mtu = std::min(mtu, t.links[l].mtu_bytes);
  }
  // A datagram of the tunnel's MTU carries mtu - 28 bytes of payload and costs the MTU plus
  // the gateway's framing against the reservation (as the collective library counts it).
  const double inner = static_cast<double>(mtu - gateway::kEncapOverheadBytes);
  offer.payload_fraction =
      (inner - 28) / (inner + gateway::kFrameOverheadBytes);
  return offer;
}

}  // namespace

Outcome<json::object> Agent::register_pool(compute::Pool pool) {
  std::lock_guard lock(impl_->mutex);
  Impl& m = *impl_;
  if (m.topology.find_site(pool.site) == model::kNone) {
    return std::unexpected(ApiError{400, "unknown_site",
                                    fmt::format("'{}' is not a site of domain '{}'", pool.site,
                                                m.topology.domain),
                                    "site"});
  }
  if (m.pools.size() >= 1024 && m.pools.count(pool.name) == 0) {
    return std::unexpected(
        ApiError{409, "too_many_pools", "the agent holds 1024 pools; remove one first", "name"});
  }
  pool.registered_unix_ns = m.realtime->now_ns();
  const json::object body = compute::to_json(pool);
  const std::string text = json::serialize(body);
  if (auto ok = m.journal->put_pool(pool.name, &text); !ok) {
    ++m.counters.journal_failures;
    return std::unexpected(ApiError{503, "journal_failed", ok.error().message, ""});
  }
  m.pools[pool.name] = std::move(pool);
  return body;
}

Outcome<json::object> Agent::pool(const std::string& name) const {
  std::lock_guard lock(impl_->mutex);
  const auto it = impl_->pools.find(name);
  if (it == impl_->pools.end()) return std::unexpected(no_pool(name));
  return compute::to_json(it->second);
}

json::array Agent::pools() const {
  std::lock_guard lock(impl_->mutex);
  json::array out;
  for (const auto& [name, p] : impl_->pools) out.push_back(compute::to_json(p));
  return out;
}

Outcome<json::object> Agent::remove_pool(const std::string& name) {
  std::lock_guard lock(impl_->mutex);
  Impl& m = *impl_;
  const auto it = m.pools.find(name);
  if (it == m.pools.end()) return std::unexpected(no_pool(name));
  if (auto ok = m.journal->put_pool(name, nullptr); !ok) {
    ++m.counters.journal_failures;
    return std::unexpected(ApiError{503, "journal_failed", ok.error().message, ""});
  }
  json::object out = compute::to_json(it->second);
  m.pools.erase(it);
  return out;
}

Outcome<json::object> Agent::plan(const PlanRequest& request) {
  json::object out;
  std::vector<compute::WanNeed> needs;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  {
    std::lock_guard lock(impl_->mutex);
    const Impl& m = *impl_;
    const model::Topology& t = m.topology;
    for (const std::string& s : request.sites) {
      if (t.find_site(s) == model::kNone) {
        return std::unexpected(ApiError{
            400, "unknown_site", fmt::format("'{}' is not a site of domain '{}'", s, t.domain),
            "sites"});
      }
    }
    start_ns = request.start_ns != 0 ? request.start_ns : m.realtime->now_ns();
    end_ns = start_ns + request.duration_ns;

    // What each pool offers this job: ranks free for the whole window, and one step's compute.
    std::vector<compute::PoolOffer> offers;
    json::array skipped;
    for (const auto& [name, p] : m.pools) {
      const auto skip = [&](std::string why) {
        skipped.push_back(json::object{{"pool", name}, {"why", std::move(why)}});
      };
      if (!request.sites.empty() &&
          std::find(request.sites.begin(), request.sites.end(), p.site) == request.sites.end()) {
        continue;
      }
      if (t.find_site(p.site) == model::kNone) {
        skip(fmt::format("site '{}' is not in the topology", p.site));
        continue;
      }
      const uint32_t ranks = p.ranks_during(start_ns, end_ns);
      if (ranks == 0) {
        skip("not available for the whole window");
        continue;
      }
      int64_t step_ns = 0;
      if (const auto k = request.step_compute_ns_by_kind.find(p.kind);
          k != request.step_compute_ns_by_kind.end()) {
        step_ns = k->second;
      } else if (request.step_compute_ns > 0) {
        step_ns = request.step_compute_ns;
      } else if (p.reference && p.reference->gradient_bytes > 0) {
        step_ns = std::llround(static_cast<double>(p.reference->step_ns) *
                               static_cast<double>(request.job.gradient_bytes) /
                               static_cast<double>(p.reference->gradient_bytes));
      } else {
        skip(fmt::format("no compute time for kind '{}' (give step_compute_ns or "
                         "step_compute_ns_by_kind, or measure a reference step)",
                         p.kind));
        continue;
      }
      const double backward_fraction =
          p.reference && p.reference->backward_ns > 0
              ? static_cast<double>(p.reference->backward_ns) /
                    static_cast<double>(p.reference->step_ns)
              : 0.0;
      offers.push_back(
          {name, p.site, p.kind, ranks, std::max<int64_t>(1, step_ns), backward_fraction});
    }

    const compute::WanLookup wan = [&](const std::string& a, const std::string& b) {
      return wan_offer(t, *m.ledger, t.find_site(a), t.find_site(b), start_ns, end_ns);
    };
    const compute::Decision decision = compute::place(request.job, offers, wan);
    if (const auto* refusal = std::get_if<compute::Refusal>(&decision)) {
      ApiError e{422, refusal->cause, refusal->message, ""};
      if (refusal->cause == compute::kInvalidJob) e.status = 400;
      if (!skipped.empty() && refusal->cause == compute::kNotEnoughCompute) {
        e.message += fmt::format(" ({} pool(s) left out: {})", skipped.size(),
                                 json::serialize(skipped));
      }
      return std::unexpected(e);
    }
    const compute::Placement& p = std::get<compute::Placement>(decision);
    json::array placement = compute::sites_json(p);
    json::array reservations;
    for (const compute::WanNeed& w : p.reservations) {
      // The path and bound the admission planner gives at the planned rate (the offer was at
      // the most the pair admits; a smaller rate may take a shorter path).
      const admission::Decision decided = admission::plan(
          t, *m.ledger,
          pair_request(t.find_site(w.from), t.find_site(w.to), start_ns, end_ns, w.rate_bps));
      reservation::PathPlacement path;  // node and link names, as a reservation shows them
      int64_t bound_ns = w.latency_ns;
      if (const auto* at = std::get_if<admission::Plan>(&decided);
          at != nullptr && !at->paths.empty()) {
        path = reservation::placement_of(t, *at).front();
        bound_ns = at->bound.max_latency_ns;
      }
      reservations.push_back(json::object{{"from", w.from},
                                          {"to", w.to},
                                          {"rate_bps", w.rate_bps},
                                          {"max_latency_ns", bound_ns},
                                          {"path", json::value_from(path.nodes)},
                                          {"links", json::value_from(path.links)}});
    }
    needs = p.reservations;
    out = json::object{
        {"placement", std::move(placement)},
        {"reservations", std::move(reservations)},
        {"predicted_step_s", static_cast<double>(p.step_ns) / 1e9},
        {"predicted_efficiency", p.efficiency},
        {"predicted",
         json::object{{"step_ns", p.step_ns},
                      {"compute_ns", p.compute_ns},
                      {"allreduce_ns", p.allreduce_ns},
                      {"exposed_allreduce_ns", p.exposed_ns},
                      {"buckets", p.buckets},
                      {"backward_fraction", p.backward_fraction},
                      {"algorithm", p.algorithm}}},
        {"job", json::object{{"gradient_bytes", request.job.gradient_bytes},
                             {"ranks", request.job.ranks},
                             {"bucket_bytes", request.job.bucket_bytes},
                             {"first_bucket_bytes", request.job.first_bucket_bytes},
                             {"backward_fraction", request.job.backward_fraction},
                             {"shares", request.job.speed_shares ? "speed" : "equal"},
                             {"target_step_ns", request.job.target_step_ns},
                             {"min_efficiency", request.job.min_efficiency}}},
        {"start_unix_ns", start_ns},
        {"end_unix_ns", end_ns},
        {"candidates", p.candidates},
        {"pools_left_out", std::move(skipped)}};
  }

  if (!request.reserve) return out;
  // Hold what the plan needs (outside the lock: reserve() takes it). Another request may have
  // taken the capacity meanwhile: then nothing stays held and the refusal says so.
  json::array held;
  for (size_t i = 0; i < needs.size(); ++i) {
    ReserveRequest r;
    r.spec.src = needs[i].from;
    r.spec.dst = needs[i].to;
    r.spec.min_bandwidth_bps = needs[i].rate_bps;
    r.spec.start_ns = start_ns;
    r.spec.end_ns = end_ns;
    r.start_now = request.start_ns == 0;
    r.tenant = request.tenant;
    if (!request.client_request_id.empty()) {
      r.client_request_id = fmt::format("{}-{}", request.client_request_id, i);
    }
    r.fingerprint = fmt::format("plan;src={};dst={};rate={};start={};end={}", r.spec.src,
                                r.spec.dst, r.spec.min_bandwidth_bps, start_ns, end_ns);
    auto reserved = reserve(r);
    if (!reserved) {
      for (const json::value& h : held) (void)abort(std::string(h.at("id").as_string()));
      ApiError e = reserved.error();
      e.message = "the plan's reservation " + needs[i].from + "-" + needs[i].to +
                  " was refused: " + e.message;
      return std::unexpected(e);
    }
    held.push_back(std::move(*reserved));
  }
  out["reserved"] = std::move(held);
  return out;
}

}  // namespace detwan::control::agent

// Co-scheduling across domains (docs/federation.md, "Co-scheduling"): placement over the pools
// every domain's view lists, with the WAN between two sites estimated from the domain path, and
// with `reserve`, the reservations it needs held through the federated reserve.
#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "control/compute/placement.h"
#include "control/federation/coordinator.h"
#include "control/federation/domain_path.h"

namespace detwan::control::federation {
namespace json = boost::json;
using agent::ApiError;
using agent::Outcome;

namespace {

// What the views say two sites can carry over the window: the largest rate every transit of
// the least-latency path has free, and that path's worst-case latency.
compute::WanOffer wan_between(const std::vector<ParsedView>& views, const std::string& a,
                              const std::string& b, int64_t start_ns, int64_t end_ns) {
  compute::WanOffer offer;
  const DomainPath path = find_domain_path(views, a, b, 1, start_ns, end_ns);
  if (path.segments.empty()) {
    offer.refusal = fmt::format("no path between '{}' and '{}' in the domains' views", a, b);
    return offer;
  }
  // The transits along the path, to take the least available rate.
  uint64_t rate = std::numeric_limits<uint64_t>::max();
  for (const SegmentPlan& s : path.segments) {
    for (const ParsedView& v : views) {
      if (v.domain != s.domain) continue;
      // The segment's transit (one per domain on a least-latency path; a run of several is
      // bounded by the transits that leave its start and reach its end).
      const Transit* direct = nullptr;
      for (const Transit& t : v.transits) {
        if (t.from == s.from && t.to == s.to) direct = &t;
      }
      for (const Transit& t : v.transits) {
        if (direct != nullptr ? &t == direct : (t.from == s.from || t.to == s.to)) {
          rate = std::min(rate, t.available_bps(start_ns, end_ns));
        }
      }
    }
  }
  offer.max_rate_bps = rate == std::numeric_limits<uint64_t>::max() ? 0 : rate;
  offer.latency_ns = path.max_latency_ns;
  if (offer.max_rate_bps == 0) offer.refusal = "no capacity left on the path";
  return offer;
}

}  // namespace

Outcome<json::object> Coordinator::plan(const agent::PlanRequest& request) {
  std::vector<ParsedView> graph;
  std::string looked_at;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  {
    std::lock_guard lock(mutex_);
    auto got = views(false, &looked_at);
    if (!got) return std::unexpected(got.error());
    graph = std::move(*got);
    start_ns = request.start_ns != 0 ? request.start_ns : options_.realtime->now_ns();
    end_ns = start_ns + request.duration_ns;
  }
  std::vector<compute::PoolOffer> offers;
  json::array skipped;
  for (const ParsedView& v : graph) {
    for (const json::value& item : v.pools) {
      const json::object& p = item.as_object();
      const std::string name(p.at("name").as_string());
      const std::string site(p.at("site").as_string());
      const std::string kind(p.at("kind").as_string());
      if (!request.sites.empty() &&
          std::find(request.sites.begin(), request.sites.end(), site) == request.sites.end()) {
        continue;
      }
      int64_t step_ns = request.step_compute_ns;
      if (const auto k = request.step_compute_ns_by_kind.find(kind);
          k != request.step_compute_ns_by_kind.end()) {
        step_ns = k->second;
      }
      if (step_ns <= 0) {  // a peer's reference steps are not in its view
        skipped.push_back(json::object{
            {"pool", name},
            {"why", fmt::format("no compute time for kind '{}' (give step_compute_ns or "
                                "step_compute_ns_by_kind)",
                                kind)}});
        continue;
      }
      const auto ranks = static_cast<uint32_t>(
          p.at(end_ns - start_ns <= 3'600'000'000'000 ? "ranks_next_hour" : "ranks")
              .to_number<int64_t>());
      if (ranks == 0) continue;
      offers.push_back({name, site, kind, ranks, step_ns, 0.0});
    }
  }
  const compute::WanLookup wan = [&](const std::string& a, const std::string& b) {
    return wan_between(graph, a, b, start_ns, end_ns);
  };
  const compute::Decision decision = compute::place(request.job, offers, wan);
  if (const auto* refusal = std::get_if<compute::Refusal>(&decision)) {
    ApiError e{refusal->cause == compute::kInvalidJob ? 400 : 422, refusal->cause,
               refusal->message + " (domains looked at: " + looked_at + ")", ""};
    return std::unexpected(e);
  }
  const compute::Placement& p = std::get<compute::Placement>(decision);
  json::array placement = compute::sites_json(p);
  json::array needs;
  for (const compute::WanNeed& w : p.reservations) {
    needs.push_back(json::object{{"from", w.from},
                                 {"to", w.to},
                                 {"rate_bps", w.rate_bps},
                                 {"max_latency_ns", w.latency_ns}});
  }
  json::object out{{"federated", true},
                   {"placement", std::move(placement)},
                   {"reservations", needs},
                   {"predicted_step_s", static_cast<double>(p.step_ns) / 1e9},
                   {"predicted_efficiency", p.efficiency},
                   {"start_unix_ns", start_ns},
                   {"end_unix_ns", end_ns},
                   {"pools_left_out", std::move(skipped)}};
  if (!request.reserve) return out;
  // Each reservation the plan needs, through the federated reserve (or the agent's, between
  // two of our own sites); one refused: the ones held are aborted.
  json::array held;
  for (size_t i = 0; i < p.reservations.size(); ++i) {
    const compute::WanNeed& w = p.reservations[i];
    agent::ReserveRequest r;
    r.spec.src = w.from;
    r.spec.dst = w.to;
    r.spec.min_bandwidth_bps = w.rate_bps;
    r.spec.start_ns = start_ns;
    r.spec.end_ns = end_ns;
    r.spec.encrypt = reservation::kNoCipher;  // cross-domain keys: not yet (see reserve)
    r.start_now = request.start_ns == 0;
    if (!request.client_request_id.empty()) {
      r.client_request_id = fmt::format("{}-{}", request.client_request_id, i);
    }
    r.fingerprint = fmt::format("plan;src={};dst={};rate={};start={};end={}", r.spec.src,
                                r.spec.dst, r.spec.min_bandwidth_bps, start_ns, end_ns);
    const bool federated = is_federated(r);
    auto reserved = federated ? reserve(r) : agent_.reserve(r);
    if (!reserved) {
      for (const json::value& h : held) {
        const std::string id(h.at("id").as_string());
        (void)(owns(id) ? abort(id) : agent_.abort(id));
      }
      ApiError e = reserved.error();
      e.message = "the plan's reservation " + w.from + "-" + w.to + " was refused: " + e.message;
      return std::unexpected(e);
    }
    held.push_back(std::move(*reserved));
  }
  out["reserved"] = std::move(held);
  return out;
}

}  // namespace detwan::control::federation

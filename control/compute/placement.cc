#include "control/compute/placement.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "collectives/topology/cost_model.h"
#include "collectives/topology/topology.h"
#include "common/units.h"

namespace detwan::control::compute {
namespace {

// A site's pools, fastest first, and how many ranks it can host.
struct SiteCapacity {
  std::string site;
  std::vector<const PoolOffer*> pools;
  uint32_t ranks = 0;
};

// `n` ranks on `site`, fastest pools first; compute_ns = the slowest pool used.
SitePlacement assign(const SiteCapacity& site, uint32_t n, int64_t* compute_ns) {
  SitePlacement out{site.site, n, {}};
  uint32_t left = n;
  for (const PoolOffer* p : site.pools) {
    if (left == 0) break;
    const uint32_t take = std::min(left, p->ranks);
    if (take == 0) continue;
    out.pools.push_back({p->pool, p->kind, take, p->step_compute_ns, p->backward_fraction});
    *compute_ns = std::max(*compute_ns, p->step_compute_ns);
    left -= take;
  }
  return out;
}

struct Candidate {
  Placement placement;
  uint64_t total_rate_bps = 0;
  bool meets_target = true;
};

std::string describe(const Placement& p) {
  std::string s;
  for (const SitePlacement& site : p.sites) {
    s += fmt::format("{}{}: {}", s.empty() ? "" : ", ", site.site, site.ranks);
  }
  for (const WanNeed& w : p.reservations) {
    s += fmt::format(" at {}", common::format_rate_bps(w.rate_bps));
  }
  return s;
}

// Whether a candidate {site: ranks} is the job's fixed placement (always, when none is fixed).
bool allowed(const Job& job, std::vector<std::pair<std::string, uint32_t>> candidate) {
  if (job.fixed.empty()) return true;
  auto fixed = job.fixed;
  std::sort(fixed.begin(), fixed.end());
  std::sort(candidate.begin(), candidate.end());
  return fixed == candidate;
}

// The overlap a placement gets: the job's backward share, else the slowest pool's measured one.
Overlap overlap_of(const Job& job, const Placement& p) {
  Overlap o{job.bucket_bytes, job.backward_fraction, job.first_bucket_bytes};
  if (o.backward_fraction <= 0) {
    int64_t slowest = -1;
    for (const SitePlacement& s : p.sites) {
      for (const auto& share : s.pools) {
        if (share.step_compute_ns > slowest) {
          slowest = share.step_compute_ns;
          o.backward_fraction = share.backward_fraction;
        }
      }
    }
  }
  return o;
}

void apply(const StepPrediction& s, Placement* p) {
  p->allreduce_ns = s.allreduce_ns;
  p->exposed_ns = s.exposed_ns;
  p->buckets = s.buckets;
  p->algorithm = s.algorithm;
}

std::string seconds(int64_t ns) { return fmt::format("{:.3g} s", static_cast<double>(ns) / 1e9); }

}  // namespace

Prediction predict_allreduce(uint64_t gradient_bytes, const std::vector<uint32_t>& ranks_per_site,
                             uint64_t payload_rate_bps, int64_t latency_ns) {
  std::vector<std::string> site_of_rank;
  for (size_t i = 0; i < ranks_per_site.size(); ++i) {
    site_of_rank.insert(site_of_rank.end(), ranks_per_site[i], "s" + std::to_string(i));
  }
  if (site_of_rank.size() <= 1 || gradient_bytes == 0) return {0, "none"};
  auto topology = collectives::Topology::build(site_of_rank);
  if (!topology) return {std::numeric_limits<int64_t>::max(), "none"};
  collectives::NetworkModel model;
  model.intra = collectives::kDefaultIntraLink;
  const int sites = topology->num_sites();
  model.inter.assign(sites, std::vector<collectives::LinkModel>(sites, model.intra));
  for (int s = 0; s < sites; ++s) {
    const auto local = static_cast<int64_t>(topology->ranks_of_site(s).size());
    for (int t = 0; t < sites; ++t) {
      if (s == t) continue;
      // As the communicator does: each local rank drives its share of the tunnel.
      model.inter[s][t] = collectives::LinkModel{
          std::max<int64_t>(1, latency_ns),
          std::max<int64_t>(1, static_cast<int64_t>(payload_rate_bps) / local)};
    }
  }
  const collectives::Plan plan =
      collectives::choose_plan(collectives::Collective::kAllReduce,
                               static_cast<int64_t>(gradient_bytes), *topology, model, {});
  return {std::isfinite(plan.predicted_ns) ? std::llround(plan.predicted_ns)
                                           : std::numeric_limits<int64_t>::max(),
          std::string(collectives::to_string(plan.algorithm))};
}

StepPrediction predict_step(uint64_t gradient_bytes, int64_t compute_ns, const Overlap& overlap,
                            const std::vector<uint32_t>& ranks_per_site, uint64_t payload_rate_bps,
                            int64_t latency_ns) {
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max() / 4;
  const auto clamp = [&](int64_t ns) { return std::min(ns, kNever); };
  StepPrediction out;
  const double fraction = std::clamp(overlap.backward_fraction, 0.0, 1.0);
  const uint64_t bucket = overlap.bucket_bytes;
  const uint64_t first =
      std::min(overlap.first_bucket_bytes != 0 ? overlap.first_bucket_bytes : bucket,
               gradient_bytes);
  if (bucket == 0 || first >= gradient_bytes || fraction <= 0) {
    // One allreduce when the compute has ended (also: a single bucket, ready at the end).
    const Prediction whole = predict_allreduce(gradient_bytes, ranks_per_site, payload_rate_bps,
                                               latency_ns);
    out.allreduce_ns = clamp(whole.allreduce_ns);
    out.exposed_ns = out.allreduce_ns;
    out.step_ns = compute_ns + out.exposed_ns;
    out.algorithm = whole.algorithm;
    return out;
  }
  // Buckets: the first (`first` bytes), M full ones, then the rest (1..bucket bytes). A bucket
  // is ready when the backward pass has produced its last byte - at F + B * bytes_so_far / G
  // (F = forward part, B = backward part of the compute) - the last one when the compute ends.
  // Allreduces run in order, one at a time: finish_j = max(finish_{j-1}, ready_j) + c_j.
  // Unrolled over the M full buckets (equal durations c, ready every d from r0 = the first's
  // ready time): finish_M = max(finish_0 + M c, max_j (r0 + j d + (M - j + 1) c)), the inner max
  // at j = 1 when c >= d (the network is the bottleneck), else at j = M.
  const uint64_t rest = gradient_bytes - first;          // >= 1
  const uint64_t m_full = (rest - 1) / bucket;            // full buckets after the first
  const uint64_t last_bytes = rest - m_full * bucket;     // 1..bucket
  const auto time_of = [&](uint64_t bytes) {
    return static_cast<double>(
        clamp(predict_allreduce(bytes, ranks_per_site, payload_rate_bps, latency_ns).allreduce_ns));
  };
  const Prediction full = predict_allreduce(bucket, ranks_per_site, payload_rate_bps, latency_ns);
  const double c = static_cast<double>(clamp(full.allreduce_ns));
  const double c_first = first == bucket ? c : time_of(first);
  const double c_last = last_bytes == bucket ? c : time_of(last_bytes);
  const double compute = static_cast<double>(compute_ns);
  const double backward = fraction * compute;
  const double forward = compute - backward;
  const double g = static_cast<double>(gradient_bytes);
  const double r0 = forward + backward * static_cast<double>(first) / g;
  const double d = backward * static_cast<double>(bucket) / g;
  const double m = static_cast<double>(m_full);
  double finish = r0 + c_first;
  if (m_full > 0) {
    finish = std::max(finish + m * c, c >= d ? r0 + d + m * c : r0 + m * d + c);
  }
  finish = std::max(finish, compute) + c_last;
  out.buckets = static_cast<uint32_t>(std::min<uint64_t>(m_full + 2, UINT32_MAX));
  out.allreduce_ns =
      clamp(std::llround(std::min(c_first + m * c + c_last, static_cast<double>(kNever))));
  out.step_ns = clamp(std::llround(std::min(finish, static_cast<double>(kNever))));
  out.exposed_ns = out.step_ns - compute_ns;
  out.algorithm = full.algorithm;
  return out;
}

Decision place(const Job& job, const std::vector<PoolOffer>& pools, const WanLookup& wan) {
  if (job.ranks == 0 || job.ranks > kMaxRanks) {
    return Refusal{kInvalidJob, fmt::format("ranks must be 1..{}, got {}", kMaxRanks, job.ranks)};
  }
  if (job.max_sites < 1 || job.max_sites > 2) {
    return Refusal{kInvalidJob, fmt::format("max_sites must be 1 or 2, got {}", job.max_sites)};
  }
  if (job.min_efficiency < 0 || job.min_efficiency >= 1) {
    return Refusal{kInvalidJob, "min_efficiency must be in [0, 1)"};
  }
  if (!job.fixed.empty()) {
    uint32_t sum = 0;
    for (const auto& [site, n] : job.fixed) sum += n;
    if (sum != job.ranks || job.fixed.size() > job.max_sites ||
        (job.fixed.size() == 2 && job.fixed[0].first == job.fixed[1].first)) {
      return Refusal{kInvalidJob,
                     fmt::format("placement must name at most {} different sites whose ranks "
                                 "sum to {}",
                                 job.max_sites, job.ranks)};
    }
  }

  // Sites and their capacity, in a stable order (by name).
  std::map<std::string, SiteCapacity> by_site;
  uint32_t total = 0;
  for (const PoolOffer& p : pools) {
    if (p.ranks == 0) continue;
    SiteCapacity& s = by_site[p.site];
    s.site = p.site;
    s.pools.push_back(&p);
    s.ranks += p.ranks;
    total += p.ranks;
  }
  for (auto& [name, s] : by_site) {
    std::stable_sort(s.pools.begin(), s.pools.end(), [](const PoolOffer* a, const PoolOffer* b) {
      return a->step_compute_ns < b->step_compute_ns;
    });
  }
  if (total < job.ranks) {
    std::string offered;
    for (const auto& [name, s] : by_site) {
      offered += fmt::format("{}{} {}", offered.empty() ? "" : ", ", name, s.ranks);
    }
    return Refusal{kNotEnoughCompute,
                   fmt::format("the job needs {} ranks; the pools offer {} in its window ({})",
                               job.ranks, total, offered.empty() ? "no pool" : offered)};
  }

  std::vector<Candidate> candidates;
  uint32_t considered = 0;
  // Single sites.
  for (const auto& [name, s] : by_site) {
    if (s.ranks < job.ranks || !allowed(job, {{name, job.ranks}})) continue;
    ++considered;
    Candidate c;
    Placement& p = c.placement;
    p.sites.push_back(assign(s, job.ranks, &p.compute_ns));
    apply(predict_step(job.gradient_bytes, p.compute_ns, overlap_of(job, p), {job.ranks}, 0, 0),
          &p);
    candidates.push_back(std::move(c));
  }

  // Pairs of sites: every split, the smallest rate that meets the target (or the default
  // efficiency), under what the domain admits.
  std::string wan_refusals;
  if (job.max_sites >= 2 && job.ranks >= 2) {
    for (auto a = by_site.begin(); a != by_site.end(); ++a) {
      for (auto b = std::next(a); b != by_site.end(); ++b) {
        const SiteCapacity& sa = a->second;
        const SiteCapacity& sb = b->second;
        if (sa.ranks + sb.ranks < job.ranks) continue;
        const WanOffer offer = wan(sa.site, sb.site);
        if (offer.max_rate_bps == 0) {
          wan_refusals += fmt::format("{}{}-{}: {}", wan_refusals.empty() ? "" : "; ", sa.site,
                                      sb.site, offer.refusal);
          continue;
        }
        for (uint32_t ra = 1; ra < job.ranks; ++ra) {
          const uint32_t rb = job.ranks - ra;
          if (ra > sa.ranks || rb > sb.ranks) continue;
          if (!allowed(job, {{sa.site, ra}, {sb.site, rb}})) continue;
          ++considered;
          Candidate c;
          Placement& p = c.placement;
          p.sites.push_back(assign(sa, ra, &p.compute_ns));
          p.sites.push_back(assign(sb, rb, &p.compute_ns));
          const Overlap overlap = overlap_of(job, p);
          const auto at = [&](uint64_t rate) {
            return predict_step(job.gradient_bytes, p.compute_ns, overlap, {ra, rb},
                                static_cast<uint64_t>(static_cast<double>(rate) *
                                                      offer.payload_fraction),
                                offer.latency_ns);
          };
          int64_t target = job.target_step_ns;
          if (target == 0 && job.min_efficiency > 0) {
            target = std::llround(static_cast<double>(p.compute_ns) / job.min_efficiency);
          }
          const bool explicit_target = target != 0;
          if (!explicit_target) {
            target = std::llround(static_cast<double>(p.compute_ns) / kDefaultEfficiency);
          }
          uint64_t rate = offer.max_rate_bps;
          StepPrediction best = at(rate);
          if (best.step_ns <= target) {
            // The smallest multiple of rate_step that still meets it (time falls with rate).
            const uint64_t step = std::max<uint64_t>(1, job.rate_step_bps);
            uint64_t lo = 1;
            uint64_t hi = std::max<uint64_t>(1, offer.max_rate_bps / step);
            while (lo < hi) {
              const uint64_t mid = lo + (hi - lo) / 2;
              if (at(mid * step).step_ns <= target) {
                hi = mid;
              } else {
                lo = mid + 1;
              }
            }
            if (lo * step <= offer.max_rate_bps) {
              rate = lo * step;
              best = at(rate);
            }
          } else {
            c.meets_target = !explicit_target;  // without a target: the most it can admit
          }
          apply(best, &p);
          p.reservations.push_back({sa.site, sb.site, rate, offer.latency_ns});
          c.total_rate_bps = rate;
          candidates.push_back(std::move(c));
        }
      }
    }
  }

  int64_t target = job.target_step_ns;
  for (Candidate& c : candidates) {
    Placement& p = c.placement;
    p.step_ns = p.compute_ns + p.exposed_ns;
    p.backward_fraction = p.exposed_ns < p.allreduce_ns ? overlap_of(job, p).backward_fraction : 0;
    p.efficiency = p.step_ns > 0 ? static_cast<double>(p.compute_ns) / static_cast<double>(p.step_ns)
                                 : 1.0;
    int64_t t = target;
    if (t == 0 && job.min_efficiency > 0) {
      t = std::llround(static_cast<double>(p.compute_ns) / job.min_efficiency);
    }
    if (t != 0 && p.step_ns > t) c.meets_target = false;
  }
  if (candidates.empty()) {
    uint32_t largest = 0;
    std::string where;
    for (const auto& [name, s] : by_site) {
      if (s.ranks > largest) {
        largest = s.ranks;
        where = name;
      }
    }
    return Refusal{kNotEnoughWan,
                   fmt::format("no site hosts {} ranks alone (largest: {} with {}){}", job.ranks,
                               where, largest,
                               wan_refusals.empty()
                                   ? (job.max_sites < 2 ? " and max_sites is 1" : "")
                                   : fmt::format(" and the WAN admits nothing between the "
                                                 "sites that could share them: {}",
                                                 wan_refusals))};
  }
  const bool with_target = target != 0 || job.min_efficiency > 0;
  const auto better = [&](const Candidate& x, const Candidate& y) {
    const Placement& a = x.placement;
    const Placement& b = y.placement;
    if (x.meets_target != y.meets_target) return x.meets_target;
    if (with_target && x.meets_target) {
      if (a.sites.size() != b.sites.size()) return a.sites.size() < b.sites.size();
      if (x.total_rate_bps != y.total_rate_bps) return x.total_rate_bps < y.total_rate_bps;
      return a.step_ns < b.step_ns;
    }
    if (a.step_ns != b.step_ns) return a.step_ns < b.step_ns;
    if (a.sites.size() != b.sites.size()) return a.sites.size() < b.sites.size();
    return x.total_rate_bps < y.total_rate_bps;
  };
  const Candidate& chosen = *std::min_element(candidates.begin(), candidates.end(), better);
  if (!chosen.meets_target) {
    const Placement& p = chosen.placement;
    const int64_t t = target != 0 ? target
                                  : std::llround(static_cast<double>(p.compute_ns) /
                                                 job.min_efficiency);
    return Refusal{kBoundTooTight,
                   fmt::format("the best placement ({}) predicts {} per step (compute {}, "
                               "allreduce {}, {} not hidden by compute), above the target {}{}",
                               describe(p), seconds(p.step_ns), seconds(p.compute_ns),
                               seconds(p.allreduce_ns), seconds(p.exposed_ns), seconds(t),
                               wan_refusals.empty() ? "" : "; WAN: " + wan_refusals)};
  }
  Placement out = chosen.placement;
  out.candidates = considered;
  return out;
}

}  // namespace detwan::control::compute

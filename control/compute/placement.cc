#include "control/compute/placement.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include <fmt/format.h>

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

// Each rank's fraction of the global batch, and with speed shares the step's compute: every
// rank's share in proportion to 1 / its step (equal shares: 1 / ranks each, the slowest's step).
void share_batch(const Job& job, Placement* p) {
  double speed_sum = 0;
  uint32_t ranks = 0;
  for (const SitePlacement& s : p->sites) {
    for (const auto& share : s.pools) {
      speed_sum += share.ranks / static_cast<double>(share.step_compute_ns);
      ranks += share.ranks;
    }
  }
  if (ranks == 0 || speed_sum <= 0) return;
  for (SitePlacement& s : p->sites) {
    for (auto& share : s.pools) {
      share.batch_fraction =
          job.speed_shares ? 1.0 / static_cast<double>(share.step_compute_ns) / speed_sum
                           : 1.0 / ranks;
    }
  }
  if (job.speed_shares) p->compute_ns = std::llround(ranks / speed_sum);
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

// The overlap a placement gets: the job's backward share, else the slowest pool's measured one,
// else (the job overlaps, nothing says how much) the rule of thumb.
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
  if (o.backward_fraction <= 0 && o.bucket_bytes > 0)
    o.backward_fraction = kDefaultBackwardFraction;
  return o;
}

// A prediction into the placement: the step, its parts and the efficiency.
void apply(const StepPrediction& s, const Overlap& overlap, Placement* p) {
  p->allreduce_ns = s.allreduce_ns;
  p->exposed_ns = s.exposed_ns;
  p->step_ns = s.step_ns;
  p->buckets = s.buckets;
  p->algorithm = s.algorithm;
  p->backward_fraction = s.exposed_ns < s.allreduce_ns ? overlap.backward_fraction : 0;
  p->efficiency =
      p->step_ns > 0 ? static_cast<double>(p->compute_ns) / static_cast<double>(p->step_ns) : 1.0;
}

std::string seconds(int64_t ns) { return fmt::format("{:.3g} s", static_cast<double>(ns) / 1e9); }

// The candidates of one search, and what the WAN refused on the way.
struct Search {
  const Job& job;
  const WanLookup& wan;
  std::vector<Candidate> candidates;
  std::string wan_refusals;
  uint32_t considered = 0;
  // What the WAN offers each pair, asked once per search (every split of the ranks between two
  // sites, every set holding the pair, reads the same answer: one lookup is ~17 path searches).
  std::map<std::pair<std::string, std::string>, WanOffer> offers;

  const WanOffer& offer(const std::string& a, const std::string& b) {
    if (const auto known = offers.find({a, b}); known != offers.end()) return known->second;
    static const WanOffer kNotAsked{0, 0, 0,
                                    fmt::format("not asked (the plan asked the WAN about {} "
                                                "pairs, its most)",
                                                kMaxWanPairs)};
    if (offers.size() >= kMaxWanPairs) return kNotAsked;
    return offers.emplace(std::make_pair(a, b), wan(a, b)).first->second;
  }
};

// The job gives a target (a step time, or an efficiency): then the fewest sites meeting it win.
bool has_target(const Job& job) { return job.target_step_ns != 0 || job.min_efficiency > 0; }

// The target a placement with this compute must meet (0: none; explicit = the job gave one).
int64_t target_for(const Job& job, int64_t compute_ns, bool* explicit_target) {
  int64_t target = job.target_step_ns;
  if (target == 0 && job.min_efficiency > 0) {
    target = std::llround(static_cast<double>(compute_ns) / job.min_efficiency);
  }
  *explicit_target = target != 0;
  if (target == 0) target = std::llround(static_cast<double>(compute_ns) / kDefaultEfficiency);
  return target;
}

// One candidate: `ranks[i]` ranks on `sites[i]`. Between sites, one reservation per pair at a
// common rate: the smallest whole multiple of rate_step that meets the target (time falls with
// rate), under the least the domain admits over the pairs; the model takes the pairs' largest
// latency bound (a collective waits for its slowest hop).
void evaluate(Search& search, const std::vector<const SiteCapacity*>& sites,
              const std::vector<uint32_t>& ranks) {
  const Job& job = search.job;
  ++search.considered;
  Candidate c;
  Placement& p = c.placement;
  for (size_t i = 0; i < sites.size(); ++i)
    p.sites.push_back(assign(*sites[i], ranks[i], &p.compute_ns));
  share_batch(job, &p);
  const Overlap overlap = overlap_of(job, p);
  bool explicit_target = false;
  const int64_t target = target_for(job, p.compute_ns, &explicit_target);
  if (sites.size() == 1) {
    apply(predict_step(job.gradient_bytes, p.compute_ns, overlap, ranks, 0, 0), overlap, &p);
    c.meets_target = !explicit_target || p.step_ns <= target;
    search.candidates.push_back(std::move(c));
    return;
  }
  WanOffer worst{UINT64_MAX, 0, 1.0, ""};
  for (size_t i = 0; i < sites.size(); ++i) {
    for (size_t j = i + 1; j < sites.size(); ++j) {
      const WanOffer& offer = search.offer(sites[i]->site, sites[j]->site);
      if (offer.max_rate_bps == 0) {
        search.wan_refusals += fmt::format("{}{}-{}: {}", search.wan_refusals.empty() ? "" : "; ",
                                           sites[i]->site, sites[j]->site, offer.refusal);
        return;
      }
      worst.max_rate_bps = std::min(worst.max_rate_bps, offer.max_rate_bps);
      worst.latency_ns = std::max(worst.latency_ns, offer.latency_ns);
      worst.payload_fraction = std::min(worst.payload_fraction, offer.payload_fraction);
    }
  }
  const auto at = [&](uint64_t rate) {
    return predict_step(job.gradient_bytes, p.compute_ns, overlap, ranks,
                        static_cast<uint64_t>(static_cast<double>(rate) * worst.payload_fraction),
                        worst.latency_ns);
  };
  uint64_t rate = worst.max_rate_bps;
  StepPrediction best = at(rate);
  if (best.step_ns <= target) {
    const uint64_t step = std::max<uint64_t>(1, job.rate_step_bps);
    uint64_t lo = 1;
    uint64_t hi = std::max<uint64_t>(1, worst.max_rate_bps / step);
    while (lo < hi) {
      const uint64_t mid = lo + (hi - lo) / 2;
      if (at(mid * step).step_ns <= target) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    if (lo * step <= worst.max_rate_bps) {
      rate = lo * step;
      best = at(rate);
    }
  }  // else: the most it can admit (without a target, that is the answer)
  apply(best, overlap, &p);
  c.meets_target = !explicit_target || p.step_ns <= target;
  for (size_t i = 0; i < sites.size(); ++i) {
    for (size_t j = i + 1; j < sites.size(); ++j) {
      p.reservations.push_back({sites[i]->site, sites[j]->site, rate, worst.latency_ns});
    }
  }
  c.total_rate_bps = rate * p.reservations.size();
  search.candidates.push_back(std::move(c));
}

// Ranks spread as evenly as the sites' capacities allow (water filling, largest capacity first
// for the remainder); empty if they cannot hold them.
std::vector<uint32_t> balanced(const std::vector<const SiteCapacity*>& sites, uint32_t ranks) {
  std::vector<uint32_t> out(sites.size(), 0);
  uint32_t left = ranks;
  while (left > 0) {
    uint32_t open = 0;
    for (size_t i = 0; i < sites.size(); ++i) open += out[i] < sites[i]->ranks ? 1 : 0;
    if (open == 0) return {};
    const uint32_t share = std::max<uint32_t>(1, left / open);
    for (size_t i = 0; i < sites.size() && left > 0; ++i) {
      const uint32_t take = std::min({share, sites[i]->ranks - out[i], left});
      out[i] += take;
      left -= take;
    }
  }
  return out;
}

// The pairs of sites worth asking the WAN about, in name order, given the single-site
// candidates found: pairs that can hold the job, but none that cannot beat the best single site
// whatever the WAN gives -- with a target that one meets, a pair never wins (fewer sites first);
// without one, a pair's step is at least its compute, at least its sites' fastest pool's step.
// Of the rest, the kMaxSitePairs with the fastest pools (at 1,000 sites there are ~500,000).
std::vector<std::pair<size_t, size_t>> promising_pairs(
    const Job& job, const std::vector<const SiteCapacity*>& sites,
    const std::vector<Candidate>& singles) {
  const bool with_target = has_target(job);
  int64_t best_step = std::numeric_limits<int64_t>::max();
  for (const Candidate& c : singles) {
    if (with_target && c.meets_target) return {};
    best_step = std::min(best_step, c.placement.step_ns);
  }
  struct Ranked {
    int64_t compute_bound_ns;
    size_t a;
    size_t b;
  };
  std::vector<Ranked> pairs;
  for (size_t a = 0; a < sites.size(); ++a) {
    for (size_t b = a + 1; b < sites.size(); ++b) {
      if (sites[a]->ranks + sites[b]->ranks < job.ranks) continue;
      const int64_t bound = std::min(sites[a]->pools.front()->step_compute_ns,
                                     sites[b]->pools.front()->step_compute_ns);
      if (!with_target && bound >= best_step) continue;
      pairs.push_back({bound, a, b});
    }
  }
  const auto by_name = [](const Ranked& x, const Ranked& y) {
    return std::tie(x.a, x.b) < std::tie(y.a, y.b);
  };
  if (pairs.size() > kMaxSitePairs) {
    std::nth_element(pairs.begin(), pairs.begin() + kMaxSitePairs, pairs.end(),
                     [&](const Ranked& x, const Ranked& y) {
                       return x.compute_bound_ns != y.compute_bound_ns
                                  ? x.compute_bound_ns < y.compute_bound_ns
                                  : by_name(x, y);
                     });
    pairs.resize(kMaxSitePairs);
    std::sort(pairs.begin(), pairs.end(), by_name);
  }
  std::vector<std::pair<size_t, size_t>> out;
  for (const Ranked& r : pairs) out.emplace_back(r.a, r.b);
  return out;
}

// Every subset of `k` of the sites (by name order), until `visit` returns false.
template <typename Visit>
void subsets(const std::vector<const SiteCapacity*>& all, size_t k, Visit&& visit) {
  std::vector<size_t> index(k);
  for (size_t i = 0; i < k; ++i) index[i] = i;
  while (true) {
    std::vector<const SiteCapacity*> pick;
    for (size_t i : index) pick.push_back(all[i]);
    if (!visit(pick)) return;
    size_t i = k;
    while (i > 0 && index[i - 1] == all.size() - k + i - 1) --i;
    if (i == 0) return;
    ++index[i - 1];
    for (size_t j = i; j < k; ++j) index[j] = index[j - 1] + 1;
  }
}

}  // namespace

Decision place(const Job& job, const std::vector<PoolOffer>& pools, const WanLookup& wan) {
  if (job.ranks == 0 || job.ranks > kMaxRanks) {
    return Refusal{kInvalidJob, fmt::format("ranks must be 1..{}, got {}", kMaxRanks, job.ranks)};
  }
  if (job.max_sites < 1 || job.max_sites > kMaxSites) {
    return Refusal{kInvalidJob,
                   fmt::format("max_sites must be 1..{}, got {}", kMaxSites, job.max_sites)};
  }
  if (job.min_efficiency < 0 || job.min_efficiency >= 1) {
    return Refusal{kInvalidJob, "min_efficiency must be in [0, 1)"};
  }
  if (!job.fixed.empty()) {
    uint32_t sum = 0;
    for (const auto& [site, n] : job.fixed) sum += n;
    bool repeated = false;
    for (size_t i = 0; i < job.fixed.size(); ++i) {
      for (size_t j = i + 1; j < job.fixed.size(); ++j) {
        repeated = repeated || job.fixed[i].first == job.fixed[j].first;
      }
    }
    if (sum != job.ranks || job.fixed.size() > job.max_sites || repeated) {
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
  std::vector<const SiteCapacity*> sites;
  for (auto& [name, s] : by_site) {
    std::stable_sort(s.pools.begin(), s.pools.end(), [](const PoolOffer* a, const PoolOffer* b) {
      return a->step_compute_ns < b->step_compute_ns;
    });
    sites.push_back(&s);
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

  Search search{job, wan, {}, "", 0, {}};
  if (!job.fixed.empty()) {
    // Only the job's placement (its sites in name order, as everywhere else).
    auto fixed = job.fixed;
    std::sort(fixed.begin(), fixed.end());
    std::vector<const SiteCapacity*> chosen;
    std::vector<uint32_t> ranks;
    for (const auto& [site, n] : fixed) {
      const auto it = by_site.find(site);
      if (it == by_site.end() || it->second.ranks < n) {
        return Refusal{kNotEnoughCompute,
                       fmt::format("the placement puts {} ranks on {}, whose pools offer {} in "
                                   "the window",
                                   n, site, it == by_site.end() ? 0 : it->second.ranks)};
      }
      chosen.push_back(&it->second);
      ranks.push_back(n);
    }
    evaluate(search, chosen, ranks);
  } else {
    // Single sites; pairs of sites with every split of the ranks.
    for (const SiteCapacity* s : sites) {
      if (s->ranks >= job.ranks) evaluate(search, {s}, {job.ranks});
    }
    if (job.max_sites >= 2 && job.ranks >= 2) {
      for (const auto& [a, b] : promising_pairs(job, sites, search.candidates)) {
        for (uint32_t ra = 1; ra < job.ranks; ++ra) {
          const uint32_t rb = job.ranks - ra;
          if (ra <= sites[a]->ranks && rb <= sites[b]->ranks) {
            evaluate(search, {sites[a], sites[b]}, {ra, rb});
          }
        }
      }
    }
    // Three or more sites only when fewer cannot host the job (every extra site adds WAN hops
    // to each step): the fewest sites that can, every such set, the ranks spread evenly.
    for (size_t k = 3; search.candidates.empty() &&
                       k <= std::min<size_t>(job.max_sites, sites.size()) && k <= job.ranks;
         ++k) {
      uint32_t budget = kMaxSiteSets;
      subsets(sites, k, [&](const std::vector<const SiteCapacity*>& pick) {
        const std::vector<uint32_t> ranks = balanced(pick, job.ranks);
        if (!ranks.empty()) evaluate(search, pick, ranks);
        return --budget > 0;
      });
    }
  }
  const std::vector<Candidate>& candidates = search.candidates;
  const std::string& wan_refusals = search.wan_refusals;
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
                                   ? (job.max_sites < 2 ? " and max_sites is 1"
                                                        : fmt::format(" and no {} sites can share "
                                                                      "them",
                                                                      job.max_sites))
                                   : fmt::format(" and the WAN admits nothing between the "
                                                 "sites that could share them: {}",
                                                 wan_refusals))};
  }
  const bool with_target = has_target(job);
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
    bool explicit_target = false;  // true: only an explicit target can be missed
    const int64_t t = target_for(job, p.compute_ns, &explicit_target);
    return Refusal{kBoundTooTight,
                   fmt::format("the best placement ({}) predicts {} per step (compute {}, "
                               "allreduce {}, {} not hidden by compute), above the target {}{}",
                               describe(p), seconds(p.step_ns), seconds(p.compute_ns),
                               seconds(p.allreduce_ns), seconds(p.exposed_ns), seconds(t),
                               wan_refusals.empty() ? "" : "; WAN: " + wan_refusals)};
  }
  Placement out = chosen.placement;
  out.candidates = search.considered;
  return out;
}

boost::json::array sites_json(const Placement& placement) {
  boost::json::array out;
  for (const SitePlacement& s : placement.sites) {
    boost::json::array shares;
    for (const auto& share : s.pools) {
      shares.push_back(boost::json::object{{"pool", share.pool},
                                           {"kind", share.kind},
                                           {"ranks", share.ranks},
                                           {"step_compute_ns", share.step_compute_ns},
                                           {"batch_fraction", share.batch_fraction}});
    }
    out.push_back(
        boost::json::object{{"site", s.site}, {"ranks", s.ranks}, {"pools", std::move(shares)}});
  }
  return out;
}

}  // namespace detwan::control::compute

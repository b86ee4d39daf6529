// The placement planner (control/compute/placement.h): where a job goes, the smallest WAN rate
// that meets its target, and every refusal cause, against the collective cost model's own
// predictions.
#include "control/compute/placement.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace detwan::control::compute {
namespace {

using testing::HasSubstr;

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kS = 1'000'000'000;

PoolOffer pool(std::string name, std::string site, uint32_t ranks, int64_t step_ns,
               std::string kind = "cpu") {
  return PoolOffer{std::move(name), std::move(site), std::move(kind), ranks, step_ns};
}

Job make_job(uint64_t gradient_bytes, uint32_t ranks) {
  Job job;
  job.gradient_bytes = gradient_bytes;
  job.ranks = ranks;
  return job;
}

// A WAN that admits up to `max_bps` between any two sites at 10 ms.
WanLookup wan_up_to(uint64_t max_bps, int* calls = nullptr) {
  return [=](const std::string&, const std::string&) {
    if (calls != nullptr) ++*calls;
    WanOffer o;
    o.max_rate_bps = max_bps;
    o.latency_ns = 10 * kMs;
    o.payload_fraction = 0.9;
    if (max_bps == 0) o.refusal = "link ab1 has 0 bit/s free";
    return o;
  };
}

// By value: the Decision is a temporary of the caller's expression.
Placement placed(const Decision& d) {
  if (const auto* r = std::get_if<Refusal>(&d)) ADD_FAILURE() << r->cause << ": " << r->message;
  const auto* p = std::get_if<Placement>(&d);
  return p != nullptr ? *p : Placement{};
}

Refusal refused(const Decision& d) {
  const auto* r = std::get_if<Refusal>(&d);
  EXPECT_NE(r, nullptr) << "placed";
  return r != nullptr ? *r : Refusal{"", ""};
}

TEST(Placement, ASiteThatHoldsEveryRankNeedsNoWan) {
  int calls = 0;
  Job job = make_job(400'000'000, 4);
  const Placement& p = placed(place(job, {pool("a1", "a", 4, 2 * kS), pool("b1", "b", 4, 2 * kS)},
                                    wan_up_to(100'000'000, &calls)));
  ASSERT_EQ(p.sites.size(), 1u);
  EXPECT_EQ(p.sites[0].ranks, 4u);
  EXPECT_TRUE(p.reservations.empty());
  EXPECT_EQ(p.compute_ns, 2 * kS);
  // Inside a site: the intra model (10 Gbit/s), well under a second for 400 MB.
  EXPECT_EQ(p.allreduce_ns, predict_allreduce(400'000'000, {4}, 0, 0).allreduce_ns);
  EXPECT_GT(p.allreduce_ns, 0);
  EXPECT_EQ(p.step_ns, p.compute_ns + p.allreduce_ns);
  EXPECT_NEAR(p.efficiency, 2.0 * kS / static_cast<double>(p.step_ns), 1e-9);
}

TEST(Placement, ASingleSiteMeetingTheTargetLeavesEveryPairUnasked) {
  int calls = 0;
  Job job = make_job(40'000'000, 4);
  job.target_step_ns = 10 * kS;  // one site alone meets it: no pair can win (fewer sites first)
  const Placement& p = placed(place(
      job, {pool("a1", "a", 4, 2 * kS), pool("b1", "b", 4, 2 * kS), pool("c1", "c", 4, 2 * kS)},
      wan_up_to(900'000'000, &calls)));
  ASSERT_EQ(p.sites.size(), 1u);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(p.candidates, 3u);  // the three single sites
}

TEST(Placement, ManySitesAskTheWanOncePerPairAndOnlyOfTheFastestPairs) {
  // 100 sites of 3 ranks (none holds the job's 4 alone): 4,950 pairs could, 3 splits each.
  std::vector<PoolOffer> pools;
  for (int i = 0; i < 100; ++i) {
    pools.push_back(pool(fmt::format("p{:03d}", i), fmt::format("s{:03d}", (i * 37) % 100), 3,
                         (1000 + 10 * ((i * 37) % 100)) * kMs));
  }
  int calls = 0;
  const Placement& p = placed(place(make_job(40'000'000, 4), pools,
                                    wan_up_to(900'000'000, &calls)));
  EXPECT_EQ(calls, static_cast<int>(kMaxSitePairs));  // each pair asked once, the budget's worth
  EXPECT_EQ(p.candidates, 3 * kMaxSitePairs);
  // The fastest sites' pair wins (s000 at 1 s a step, s001 at 1.01 s).
  ASSERT_EQ(p.sites.size(), 2u);
  EXPECT_EQ(p.sites[0].site, "s000");
  EXPECT_EQ(p.sites[1].site, "s001");
}

TEST(Placement, SplitsOverTwoSitesWithTheSmallestRateThatMeetsTheTarget) {
  Job job = make_job(40'000'000, 4);
  job.target_step_ns = 3 * kS;
  const Placement& p = placed(
      place(job, {pool("a1", "a", 2, 2 * kS), pool("b1", "b", 2, 2 * kS)}, wan_up_to(900'000'000)));
  ASSERT_EQ(p.sites.size(), 2u);
  ASSERT_EQ(p.reservations.size(), 1u);
  const uint64_t rate = p.reservations[0].rate_bps;
  EXPECT_EQ(rate % 1'000'000, 0u);
  EXPECT_LE(p.step_ns, job.target_step_ns);
  // One Mbit/s less would miss the target: the rate is the smallest that meets it.
  const int64_t slower =
      predict_allreduce(40'000'000, {2, 2}, static_cast<uint64_t>((rate - 1'000'000) * 0.9),
                        10 * kMs)
          .allreduce_ns;
  EXPECT_GT(2 * kS + slower, job.target_step_ns);
  EXPECT_EQ(p.allreduce_ns,
            predict_allreduce(40'000'000, {2, 2}, static_cast<uint64_t>(rate * 0.9), 10 * kMs)
                .allreduce_ns);
  EXPECT_FALSE(p.algorithm.empty());
}

TEST(Placement, UnevenCapacityGivesAnUnevenSplit) {
  Job job = make_job(10'000'000, 4);
  const Placement& p = placed(
      place(job, {pool("a1", "a", 3, kS), pool("b1", "b", 1, kS)}, wan_up_to(500'000'000)));
  ASSERT_EQ(p.sites.size(), 2u);
  EXPECT_EQ(p.sites[0].site, "a");
  EXPECT_EQ(p.sites[0].ranks, 3u);
  EXPECT_EQ(p.sites[1].ranks, 1u);
}

TEST(Placement, FastestPoolsFirstAndTheSlowestRankSetsTheComputeTime) {
  Job job = make_job(1'000'000, 3);
  const Placement& p = placed(place(
      job, {pool("slow", "a", 4, 3 * kS), pool("fast", "a", 2, kS, "gpu")}, wan_up_to(0)));
  ASSERT_EQ(p.sites.size(), 1u);
  ASSERT_EQ(p.sites[0].pools.size(), 2u);
  EXPECT_EQ(p.sites[0].pools[0].pool, "fast");
  EXPECT_EQ(p.sites[0].pools[0].ranks, 2u);
  EXPECT_EQ(p.sites[0].pools[1].ranks, 1u);
  EXPECT_EQ(p.compute_ns, 3 * kS);
}

TEST(Placement, SpeedSharesMakeTheStepTheRanksTogetherNotTheSlowest) {
  // 2 fast ranks (1 s per step) and 2 slow (4 s): equal shares run at the slow ranks' pace,
  // speed shares at 4 / (2/1 + 2/4) = 1.6 s, each fast rank taking 4/10 of the batch.
  Job job = make_job(1'000'000, 4);
  const auto pools = std::vector<PoolOffer>{pool("fast", "a", 2, kS, "a100"),
                                            pool("slow", "a", 2, 4 * kS, "cpu")};
  const Placement equal = placed(place(job, pools, wan_up_to(0)));
  EXPECT_EQ(equal.compute_ns, 4 * kS);
  ASSERT_EQ(equal.sites[0].pools.size(), 2u);
  EXPECT_DOUBLE_EQ(equal.sites[0].pools[0].batch_fraction, 0.25);
  job.speed_shares = true;
  const Placement weighted = placed(place(job, pools, wan_up_to(0)));
  EXPECT_EQ(weighted.compute_ns, 1'600 * kMs);
  ASSERT_EQ(weighted.sites[0].pools.size(), 2u);
  EXPECT_EQ(weighted.sites[0].pools[0].pool, "fast");
  EXPECT_DOUBLE_EQ(weighted.sites[0].pools[0].batch_fraction, 0.4);
  EXPECT_DOUBLE_EQ(weighted.sites[0].pools[1].batch_fraction, 0.1);
  EXPECT_GT(weighted.efficiency, 0);
  EXPECT_LT(weighted.step_ns, equal.step_ns);
}

TEST(Placement, SpeedSharesKeepASlowPoolAtHomeInsteadOfCrossingTheWan) {
  // 4 ranks: site a has 2 fast ranks (1 s) and 2 slower ones (1.5 s), site b 2 fast ones; the
  // 4 MB gradient takes about 0.36 s over the WAN's 100 Mbit/s. Equal shares: a alone runs at
  // the slower ranks' 1.5 s, so a+b (1 s + the WAN) wins. Speed shares: a alone is
  // 4 / (2 + 2/1.5) = 1.2 s, faster than a+b: the job stays home.
  Job job = make_job(4'000'000, 4);
  const auto pools = std::vector<PoolOffer>{
      pool("fast-a", "a", 2, kS), pool("slow-a", "a", 2, 1'500 * kMs), pool("fast-b", "b", 2, kS)};
  const Placement equal = placed(place(job, pools, wan_up_to(100'000'000)));
  EXPECT_EQ(equal.sites.size(), 2u);
  EXPECT_EQ(equal.compute_ns, kS);
  job.speed_shares = true;
  const Placement weighted = placed(place(job, pools, wan_up_to(100'000'000)));
  ASSERT_EQ(weighted.sites.size(), 1u);
  EXPECT_EQ(weighted.sites[0].site, "a");
  EXPECT_EQ(weighted.compute_ns, 1'200 * kMs);
  EXPECT_LT(weighted.step_ns, equal.step_ns);
}

TEST(Placement, WithATargetFewerSitesWinEvenWhenTwoWouldBeFaster) {
  // Site a: 4 slow ranks that meet the target alone; a+b: faster compute but needs the WAN.
  Job job = make_job(1'000'000, 4);
  job.target_step_ns = 5 * kS;
  const Placement& p = placed(place(
      job, {pool("a1", "a", 4, 4 * kS), pool("b1", "b", 2, kS)}, wan_up_to(1'000'000'000)));
  EXPECT_EQ(p.sites.size(), 1u);
  EXPECT_TRUE(p.reservations.empty());
}

TEST(Placement, WithoutATargetTheShortestStepWins) {
  Job job = make_job(1'000'000, 4);
  const Placement& p = placed(place(
      job, {pool("a1", "a", 4, 4 * kS), pool("a2", "a", 0, kS), pool("b1", "b", 2, kS),
            pool("c1", "c", 2, kS)},
      wan_up_to(1'000'000'000)));
  // b + c (2 + 2 fast ranks) beats a alone (slow) and any split with a.
  ASSERT_EQ(p.sites.size(), 2u);
  EXPECT_EQ(p.sites[0].site, "b");
  EXPECT_EQ(p.sites[1].site, "c");
  EXPECT_EQ(p.compute_ns, kS);
}

TEST(Placement, RefusesWhatThePoolsCannotHost) {
  const Refusal& r = refused(
      place(make_job(1'000, 9), {pool("a1", "a", 4, kS), pool("b1", "b", 4, kS)}, wan_up_to(1'000'000)));
  EXPECT_EQ(r.cause, kNotEnoughCompute);
  EXPECT_THAT(r.message, HasSubstr("needs 9 ranks"));
  EXPECT_THAT(r.message, HasSubstr("offer 8"));
}

TEST(Placement, RefusesWhenTheSitesThatCouldShareHaveNoWan) {
  const Refusal& r = refused(
      place(make_job(1'000, 6), {pool("a1", "a", 4, kS), pool("b1", "b", 4, kS)}, wan_up_to(0)));
  EXPECT_EQ(r.cause, kNotEnoughWan);
  EXPECT_THAT(r.message, HasSubstr("link ab1 has 0 bit/s free"));
  EXPECT_THAT(r.message, HasSubstr("largest: a with 4"));
}

TEST(Placement, RefusesATargetNoPlacementMeetsAndNamesTheBest) {
  Job job = make_job(400'000'000, 4);
  job.target_step_ns = 2 * kS + 100 * kMs;  // 400 MB over 50 Mbit/s takes far longer
  const Refusal& r = refused(
      place(job, {pool("a1", "a", 2, 2 * kS), pool("b1", "b", 2, 2 * kS)}, wan_up_to(50'000'000)));
  EXPECT_EQ(r.cause, kBoundTooTight);
  EXPECT_THAT(r.message, HasSubstr("above the target 2.1 s"));
  EXPECT_THAT(r.message, HasSubstr("a: 2, b: 2 at 50mbit"));
}

TEST(Placement, MinEfficiencyIsATargetRelativeToCompute) {
  Job job = make_job(40'000'000, 4);
  job.min_efficiency = 0.8;
  const Placement& p = placed(
      place(job, {pool("a1", "a", 2, 2 * kS), pool("b1", "b", 2, 2 * kS)}, wan_up_to(900'000'000)));
  EXPECT_GE(p.efficiency, 0.8);
  ASSERT_EQ(p.reservations.size(), 1u);
  job.min_efficiency = 0.9999;
  EXPECT_EQ(refused(place(job, {pool("a1", "a", 2, 2 * kS), pool("b1", "b", 2, 2 * kS)},
                          wan_up_to(900'000'000)))
                .cause,
            kBoundTooTight);
}

TEST(Placement, AFixedPlacementIsTheOnlyCandidate) {
  Job job = make_job(10'000'000, 3);
  job.fixed = {{"b", 1}, {"a", 2}};
  const Placement p = placed(
      place(job, {pool("a1", "a", 4, kS), pool("b1", "b", 4, kS)}, wan_up_to(500'000'000)));
  ASSERT_EQ(p.sites.size(), 2u);
  EXPECT_EQ(p.sites[0].ranks, 2u);  // a would host all 3 alone; the fixed split is what counts
  EXPECT_EQ(p.sites[1].ranks, 1u);
  EXPECT_EQ(p.candidates, 1u);
  job.fixed = {{"a", 2}};  // does not sum to 3
  EXPECT_EQ(refused(place(job, {pool("a1", "a", 4, kS)}, wan_up_to(0))).cause, kInvalidJob);
}

TEST(Placement, RefusesMalformedJobs) {
  EXPECT_EQ(refused(place(make_job(1, 0), {}, wan_up_to(0))).cause, kInvalidJob);
  Job five = make_job(1, 2);
  five.max_sites = kMaxSites + 1;
  EXPECT_EQ(refused(place(five, {}, wan_up_to(0))).cause, kInvalidJob);
  Job twice = make_job(1, 2);
  twice.fixed = {{"a", 1}, {"a", 1}};
  EXPECT_EQ(refused(place(twice, {pool("a1", "a", 4, kS)}, wan_up_to(0))).cause, kInvalidJob);
}

TEST(Placement, ThreeSitesOnlyWhenNoTwoCanHostTheJob) {
  const std::vector<PoolOffer> pools = {pool("a1", "a", 2, 10 * kS), pool("b1", "b", 2, 10 * kS),
                                        pool("c1", "c", 2, 10 * kS)};
  // Four ranks fit on two sites: three are never tried.
  const Placement two = placed(place(make_job(10'000'000, 4), pools, wan_up_to(500'000'000)));
  EXPECT_EQ(two.sites.size(), 2u);
  EXPECT_EQ(two.reservations.size(), 1u);
  // Five do not: all three sites, the ranks spread evenly, a reservation for every pair at one
  // rate, the prediction the model's for that spread.
  const Placement three = placed(place(make_job(10'000'000, 5), pools, wan_up_to(500'000'000)));
  ASSERT_EQ(three.sites.size(), 3u);
  EXPECT_EQ(three.sites[0].ranks + three.sites[1].ranks + three.sites[2].ranks, 5u);
  for (const SitePlacement& site : three.sites) EXPECT_GE(site.ranks, 1u);
  ASSERT_EQ(three.reservations.size(), 3u);
  EXPECT_EQ(three.reservations[0].from, "a");
  EXPECT_EQ(three.reservations[0].to, "b");
  EXPECT_EQ(three.reservations[2].from, "b");
  EXPECT_EQ(three.reservations[2].to, "c");
  const uint64_t rate = three.reservations[0].rate_bps;
  for (const WanNeed& w : three.reservations) EXPECT_EQ(w.rate_bps, rate);
  EXPECT_EQ(three.allreduce_ns,
            predict_allreduce(10'000'000,
                              {three.sites[0].ranks, three.sites[1].ranks, three.sites[2].ranks},
                              static_cast<uint64_t>(rate * 0.9), 10 * kMs)
                .allreduce_ns);
  EXPECT_GE(three.efficiency, kDefaultEfficiency);
  EXPECT_LT(rate, 500'000'000u);  // the smallest rate that reaches it, not the most admitted
  // Limited to two sites, the job does not fit: the refusal says so.
  Job at_most_two = make_job(10'000'000, 5);
  at_most_two.max_sites = 2;
  const Refusal r = refused(place(at_most_two, pools, wan_up_to(500'000'000)));
  EXPECT_EQ(r.cause, kNotEnoughWan);
  EXPECT_THAT(r.message, HasSubstr("no 2 sites can share them"));
}

TEST(Placement, AMultiSitePlacementNeedsEveryPairOfItsSites) {
  const std::vector<PoolOffer> pools = {pool("a1", "a", 2, kS), pool("b1", "b", 2, kS),
                                        pool("c1", "c", 2, kS)};
  // b-c has no WAN: the only set of three sites is refused, naming that pair.
  const WanLookup no_bc = [](const std::string& from, const std::string& to) {
    WanOffer o;
    o.latency_ns = 10 * kMs;
    o.payload_fraction = 0.9;
    if (from == "b" && to == "c") {
      o.refusal = "link bc1 is down";
    } else {
      o.max_rate_bps = 500'000'000;
    }
    return o;
  };
  const Refusal r = refused(place(make_job(10'000'000, 5), pools, no_bc));
  EXPECT_EQ(r.cause, kNotEnoughWan);
  EXPECT_THAT(r.message, HasSubstr("b-c: link bc1 is down"));
  // A fixed three-site placement is evaluated as given.
  Job fixed = make_job(10'000'000, 4);
  fixed.fixed = {{"c", 2}, {"a", 1}, {"b", 1}};
  const Placement p = placed(place(fixed, pools, wan_up_to(500'000'000)));
  ASSERT_EQ(p.sites.size(), 3u);
  EXPECT_EQ(p.sites[0].site, "a");
  EXPECT_EQ(p.sites[2].ranks, 2u);
  EXPECT_EQ(p.reservations.size(), 3u);
  EXPECT_EQ(p.candidates, 1u);
  // More ranks on a site than its pools offer: refused for compute, naming the site.
  fixed.fixed = {{"a", 3}, {"b", 1}};
  EXPECT_THAT(refused(place(fixed, pools, wan_up_to(500'000'000))).message,
              HasSubstr("3 ranks on a"));
}

}  // namespace
}  // namespace detwan::control::compute

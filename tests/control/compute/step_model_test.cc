// The planner's step model with overlap (control/compute/placement.h, predict_step): gradient
// buckets allreduced while the backward pass still runs. The closed form against a bucket-by-bucket
// simulation written here, its bounds, and what the planner does with it.
#include <algorithm>
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "control/compute/placement.h"

namespace detwan::control::compute {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kS = 1'000'000'000;
constexpr int64_t kLatencyNs = 10 * kMs;

// The pipeline one bucket at a time: bucket k is ready when the backward pass (the last
// `fraction` of the compute, producing the gradient evenly) has produced its last byte, the last
// bucket when the compute ends; allreduces run in order, one at a time.
int64_t simulate(uint64_t gradient, uint64_t bucket, double fraction, int64_t compute,
                 const std::vector<uint32_t>& ranks, uint64_t rate, uint64_t first_bucket = 0) {
  const double backward = fraction * static_cast<double>(compute);
  const double forward = static_cast<double>(compute) - backward;
  double finish = 0;
  for (uint64_t done = 0; done < gradient;) {
    const uint64_t cap = done == 0 && first_bucket != 0 ? first_bucket : bucket;
    const uint64_t size = std::min(cap, gradient - done);
    done += size;
    const double ready =
        done == gradient ? static_cast<double>(compute)
                         : forward + backward * static_cast<double>(done) /
                                         static_cast<double>(gradient);
    finish = std::max(finish, ready) +
             static_cast<double>(predict_allreduce(size, ranks, rate, kLatencyNs).allreduce_ns);
  }
  return std::llround(std::max(finish, static_cast<double>(compute)));
}

TEST(StepModel, WithoutOverlapTheWholeAllreduceFollowsTheCompute) {
  const int64_t whole = predict_allreduce(40'000'000, {2, 2}, 100'000'000, kLatencyNs).allreduce_ns;
  for (const Overlap o : {Overlap{0, 0.6}, Overlap{1'000'000, 0}, Overlap{80'000'000, 0.6}}) {
    const StepPrediction s = predict_step(40'000'000, 2 * kS, o, {2, 2}, 100'000'000, kLatencyNs);
    EXPECT_EQ(s.allreduce_ns, whole);
    EXPECT_EQ(s.exposed_ns, whole);
    EXPECT_EQ(s.step_ns, 2 * kS + whole);
    EXPECT_EQ(s.buckets, 1u);
  }
}

TEST(StepModel, TheClosedFormIsTheBucketByBucketPipeline) {
  struct Case {
    uint64_t gradient, bucket;
    double fraction;
    int64_t compute;
    std::vector<uint32_t> ranks;
    uint64_t rate;
    uint64_t first = 0;
  };
  const std::vector<Case> cases = {
      {3'469'312, 262'144, 0.55, 823 * kMs, {1, 1}, 100'000'000},  // the lab's model: network-bound
      {3'469'312, 262'144, 0.55, 823 * kMs, {1, 1}, 2'000'000'000},  // compute-bound
      {400'000'000, 25 << 20, 0.66, 2 * kS, {2, 2}, 1'000'000'000},
      {400'000'000, 25 << 20, 0.66, 2 * kS, {2, 1}, 10'000'000'000},
      {10'000'000, 1'000'000, 0.5, 100 * kMs, {4}, 0},  // one site
      {10'000'000, 3'000'000, 1.0, kS, {3, 3}, 50'000'000},  // a partial last bucket
      // DDP's smaller first bucket (1 MiB), ready early: network- and compute-bound.
      {3'469'312, 262'144, 0.55, 823 * kMs, {2, 1}, 100'000'000, 1 << 20},
      {3'469'312, 262'144, 0.55, 823 * kMs, {2, 1}, 5'000'000'000, 1 << 20},
      {400'000'000, 25 << 20, 0.66, 2 * kS, {2, 2}, 1'000'000'000, 1 << 20},
      {3'000'000, 1'000'000, 0.5, kS, {1, 1}, 20'000'000, 2'000'000},  // first + the rest
  };
  for (const Case& c : cases) {
    const StepPrediction s = predict_step(c.gradient, c.compute, {c.bucket, c.fraction, c.first},
                                          c.ranks, c.rate, kLatencyNs);
    EXPECT_NEAR(static_cast<double>(s.step_ns),
                static_cast<double>(simulate(c.gradient, c.bucket, c.fraction, c.compute, c.ranks,
                                             c.rate, c.first)),
                2.0)
        << c.gradient << " B in " << c.bucket << " B buckets (first " << c.first << ") at "
        << c.rate << " bit/s";
    const uint64_t first = c.first != 0 ? c.first : c.bucket;
    EXPECT_EQ(s.buckets, 1 + (c.gradient - first + c.bucket - 1) / c.bucket);
    EXPECT_EQ(s.exposed_ns, s.step_ns - c.compute);
  }
}

TEST(StepModel, AnEarlySmallFirstBucketStartsTheNetworkSooner) {
  // Network-bound: the step is the first bucket's ready time + the allreduces, so a first bucket
  // ready earlier gives a shorter step.
  const Overlap even{262'144, 0.55, 0};
  const Overlap ddp{262'144, 0.55, 131'072};
  EXPECT_LT(predict_step(3'469'312, 823 * kMs, ddp, {1, 1}, 50'000'000, kLatencyNs).step_ns,
            predict_step(3'469'312, 823 * kMs, even, {1, 1}, 50'000'000, kLatencyNs).step_ns);
  // A large first bucket is ready late: longer.
  const Overlap late{262'144, 0.55, 1 << 20};
  EXPECT_GT(predict_step(3'469'312, 823 * kMs, late, {1, 1}, 50'000'000, kLatencyNs).step_ns,
            predict_step(3'469'312, 823 * kMs, even, {1, 1}, 50'000'000, kLatencyNs).step_ns);
}

TEST(StepModel, OverlapHidesAtMostTheBackwardPassAndNeverTheLastBucket) {
  const uint64_t gradient = 400'000'000;
  const uint64_t bucket = 25 << 20;
  const uint64_t last = gradient - (gradient / bucket) * bucket;
  int64_t previous = INT64_MAX;
  for (const uint64_t rate : {100'000'000ULL, 400'000'000ULL, 1'000'000'000ULL, 10'000'000'000ULL,
                              100'000'000'000ULL}) {
    const StepPrediction s = predict_step(gradient, 2 * kS, {bucket, 0.6}, {2, 2}, rate, kLatencyNs);
    const int64_t last_ns = predict_allreduce(last, {2, 2}, rate, kLatencyNs).allreduce_ns;
    EXPECT_GE(s.step_ns, 2 * kS + last_ns) << rate;  // the last bucket waits for the compute
    EXPECT_LE(s.step_ns, 2 * kS + s.allreduce_ns) << rate;  // never worse than no overlap
    // At best the backward pass (1.2 s) hides the allreduce: the forward part never does.
    EXPECT_GE(s.step_ns, std::llround(0.4 * 2 * kS) + s.allreduce_ns) << rate;
    EXPECT_LE(s.step_ns, previous) << "a faster WAN made the step longer at " << rate;
    previous = s.step_ns;
  }
  // Fast enough, all but the last buckets hide behind the backward pass: the last full one (it
  // becomes ready just before the compute ends) and the rest may follow it.
  const uint64_t fast_bps = 100'000'000'000ULL;
  const StepPrediction fast = predict_step(gradient, 2 * kS, {bucket, 0.6}, {2, 2}, fast_bps,
                                           kLatencyNs);
  const int64_t c_full = predict_allreduce(bucket, {2, 2}, fast_bps, kLatencyNs).allreduce_ns;
  const int64_t c_last = predict_allreduce(last, {2, 2}, fast_bps, kLatencyNs).allreduce_ns;
  EXPECT_GE(fast.step_ns, 2 * kS + c_last);
  EXPECT_LE(fast.step_ns, 2 * kS + c_full + c_last);
  EXPECT_LT(fast.exposed_ns * 4, fast.allreduce_ns);
}

PoolOffer offer(std::string site, double backward_fraction) {
  return PoolOffer{site + "1", site, "cpu", 2, 2 * kS, backward_fraction};
}

WanLookup wan(uint64_t max_bps) {
  return [=](const std::string&, const std::string&) {
    return WanOffer{max_bps, kLatencyNs, 0.9, ""};
  };
}

TEST(StepModel, ThePlannerReservesLessWhenTheJobOverlaps) {
  Job job;
  job.gradient_bytes = 400'000'000;
  job.ranks = 4;
  job.fixed = {{"a", 2}, {"b", 2}};
  job.target_step_ns = 3 * kS;
  const auto rate_of = [&](const Job& j, double pools_fraction) {
    const Decision d = place(j, {offer("a", pools_fraction), offer("b", pools_fraction)},
                             wan(10'000'000'000));
    const auto* p = std::get_if<Placement>(&d);
    EXPECT_NE(p, nullptr);
    return p == nullptr ? 0 : p->reservations.at(0).rate_bps;
  };
  const uint64_t without = rate_of(job, 0.6);  // no bucket size: no overlap
  job.bucket_bytes = 25 << 20;
  const uint64_t with_pools = rate_of(job, 0.6);  // the pools' measured backward share
  EXPECT_LT(with_pools, without);
  job.backward_fraction = 0.6;  // the job's own share
  EXPECT_EQ(rate_of(job, 0), with_pools);
  // Nothing measured, nothing given: the rule of thumb (a backward pass is 2/3 of the step).
  Job rule = job;
  rule.backward_fraction = 0;
  Job two_thirds = job;
  two_thirds.backward_fraction = kDefaultBackwardFraction;
  EXPECT_EQ(rate_of(rule, 0), rate_of(two_thirds, 0));
  EXPECT_LT(rate_of(rule, 0), without);

  const Decision d = place(job, {offer("a", 0), offer("b", 0)}, wan(10'000'000'000));
  const Placement& p = std::get<Placement>(d);
  EXPECT_LT(p.exposed_ns, p.allreduce_ns);
  EXPECT_EQ(p.step_ns, p.compute_ns + p.exposed_ns);
  EXPECT_LE(p.step_ns, job.target_step_ns);
  EXPECT_EQ(p.buckets, 16u);
  EXPECT_DOUBLE_EQ(p.backward_fraction, 0.6);
}

}  // namespace
}  // namespace detwan::control::compute

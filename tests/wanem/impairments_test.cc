// Delay, jitter, loss, duplication and reordering, checked exactly or against theory with
// fixed seeds and bounds of 5 standard errors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "tests/wanem/engine_driver.h"
#include "tools/wanem/engine/jitter.h"
#include "tools/wanem/engine/loss.h"

namespace detwan::wanem {
namespace {

using testing::Driver;
using testing::kMs;
using testing::kSec;
using testing::kUs;
using testing::spec_of;

struct Moments {
  double mean = 0;
  double stddev = 0;
  int64_t min = INT64_MAX;
  int64_t max = INT64_MIN;
};

Moments moments(const std::vector<int64_t>& values) {
  Moments m;
  double sum = 0;
  for (int64_t v : values) {
    sum += static_cast<double>(v);
    m.min = std::min(m.min, v);
    m.max = std::max(m.max, v);
  }
  m.mean = sum / static_cast<double>(values.size());
  double sq = 0;
  for (int64_t v : values)
    sq += (static_cast<double>(v) - m.mean) * (static_cast<double>(v) - m.mean);
  m.stddev = std::sqrt(sq / static_cast<double>(values.size() - 1));
  return m;
}

// Offers n frames `spacing_ns` apart starting at t0 and returns each frame's sojourn (release
// time - offer time), indexed by handle. Frames are far enough apart that the FIFO clamp never
// binds when spacing_ns exceeds twice the jitter range.
std::vector<int64_t> sojourns(const ImpairmentSpec& spec, int n, int64_t spacing_ns,
                              int64_t t0 = 0) {
  Emulator emulator(spec, t0);
  Driver driver(emulator, t0);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(driver.offer(static_cast<uint64_t>(i), 100, t0 + i * spacing_ns),
              common::Status::kOk);
  }
  driver.drain();
  std::vector<int64_t> out(static_cast<size_t>(n), -1);
  for (const auto& r : driver.released())
    out[r.handle] = r.at_ns - (t0 + static_cast<int64_t>(r.handle) * spacing_ns);
  return out;
}

TEST(Delay, ConstantDelayIsExactForEveryFrame) {
  const auto s = sojourns(spec_of("delay=10ms"), 5000, 137 * kUs, 1'700'000'000 * kSec);
  for (int64_t v : s) ASSERT_EQ(v, 10 * kMs);
}

TEST(Delay, SojournHistogramMatches) {
  Emulator emulator(spec_of("delay=3ms"), 0);
  Driver driver(emulator);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(driver.offer(i, 1500, i * kMs), common::Status::kOk);
  driver.drain();
  const auto& h = emulator.counters().sojourn_ns[static_cast<int>(TrafficClass::kBestEffort)];
  EXPECT_EQ(h.count(), 100u);
  EXPECT_EQ(h.min(), 3 * kMs);
  EXPECT_EQ(h.max(), 3 * kMs);
  EXPECT_EQ(driver.empty_wakeups(), 0u);  // next_event_ns() named exactly each release
}

TEST(Jitter, UniformWithinBoundsWithTheoreticalMoments) {
  constexpr int kFrames = 100'000;
  const auto s = sojourns(spec_of("delay=10ms,jitter=1ms"), kFrames, 3 * kMs);
  const Moments m = moments(s);
  EXPECT_GE(m.min, 9 * kMs);
  EXPECT_LE(m.max, 11 * kMs);
  EXPECT_LT(m.min, 9 * kMs + 50 * kUs);  // the whole range is used
  EXPECT_GT(m.max, 11 * kMs - 50 * kUs);
  const double sigma = 1e6 / std::sqrt(3.0);  // U[-J, J]
  EXPECT_NEAR(m.mean, 10e6, 5 * sigma / std::sqrt(kFrames));
  EXPECT_NEAR(m.stddev, sigma, 0.01 * sigma);
}

TEST(Jitter, NeverReordersEvenWhenFramesAreDense) {
  Emulator emulator(spec_of("delay=10ms,jitter=2ms"), 0);
  Driver driver(emulator);
  for (int i = 0; i < 100'000; ++i)
    ASSERT_EQ(driver.offer(i, 100, i * 10 * kUs), common::Status::kOk);
  driver.drain();
  ASSERT_EQ(driver.released().size(), 100'000u);
  int64_t previous = INT64_MIN;
  int64_t sojourn_sum = 0;
  for (size_t i = 0; i < driver.released().size(); ++i) {
    const auto& r = driver.released()[i];
    ASSERT_EQ(r.handle, i);
    ASSERT_GE(r.at_ns, previous);
    ASSERT_GE(r.at_ns - static_cast<int64_t>(i) * 10 * kUs, 8 * kMs);  // never below delay - J
    sojourn_sum += r.at_ns - static_cast<int64_t>(i) * 10 * kUs;
    previous = r.at_ns;
  }
  // The clamped release times are the ones reported: next_event_ns() woke the driver exactly
  // then, and the sojourn histogram holds exactly the observed sojourns.
  EXPECT_EQ(driver.empty_wakeups(), 0u);
  const auto& h = emulator.counters().sojourn_ns[static_cast<int>(TrafficClass::kBestEffort)];
  EXPECT_NEAR(h.mean(), static_cast<double>(sojourn_sum) / 100'000, 1e-3);
}

TEST(Jitter, NormalSigma) {
  constexpr int kFrames = 100'000;
  const auto s = sojourns(spec_of("delay=20ms,jitter=1ms,jitter-dist=normal"), kFrames, 10 * kMs);
  const Moments m = moments(s);
  EXPECT_NEAR(m.mean, 20e6, 5 * 1e6 / std::sqrt(kFrames));
  EXPECT_NEAR(m.stddev, 1e6, 0.015e6);
  EXPECT_GE(m.min, 16 * kMs);  // clamped at 4 sigma
  EXPECT_LE(m.max, 24 * kMs);
  // Share within 1 sigma: 68.27 % (binomial sd 0.15 %).
  const auto within =
      std::count_if(s.begin(), s.end(), [](int64_t v) { return std::abs(v - 20 * kMs) <= kMs; });
  EXPECT_NEAR(static_cast<double>(within) / kFrames, 0.6827, 0.0075);
}

TEST(Jitter, ParetoNormalIsNetemShapeWithSigmaJ) {
  constexpr int kFrames = 100'000;
  const auto s =
      sojourns(spec_of("delay=20ms,jitter=1ms,jitter-dist=pareto-normal"), kFrames, 10 * kMs);
  const Moments m = moments(s);
  const double mean_offset = kParetoNormalTableMean / kParetoNormalTableStddev * 1e6;  // -29.6 us
  EXPECT_NEAR(m.mean, 20e6 + mean_offset, 5 * 1e6 / std::sqrt(kFrames));
  EXPECT_NEAR(m.stddev, 1e6, 0.03e6);
  const JitterSampler sampler(kMs, JitterDistribution::kParetoNormal);
  EXPECT_GE(m.min, 20 * kMs + sampler.min_offset_ns());
  EXPECT_LE(m.max, 20 * kMs + static_cast<int64_t>(4.8e6));
  // Right-skewed: the upper tail is longer than the lower one.
  std::vector<int64_t> sorted = s;
  std::sort(sorted.begin(), sorted.end());
  const int64_t p1 = sorted[kFrames / 100];
  const int64_t p50 = sorted[kFrames / 2];
  const int64_t p99 = sorted[kFrames - kFrames / 100];
  EXPECT_GT(p99 - p50, 2 * (p50 - p1));
}

TEST(Jitter, TableFunctionMatchesNetemConstants) {
  // Integrate the table over u: mean and sigma are the constants the sampler rescales by.
  constexpr int kSteps = 400'000;
  double sum = 0;
  double sq = 0;
  for (int i = 0; i < kSteps; ++i) {
    const double v = pareto_normal_table((i + 0.5) / kSteps);
    sum += v;
    sq += v * v;
  }
  const double mean = sum / kSteps;
  EXPECT_NEAR(mean, kParetoNormalTableMean, 1e-4);
  EXPECT_NEAR(std::sqrt(sq / kSteps - mean * mean), kParetoNormalTableStddev, 1e-4);
  EXPECT_NEAR(inverse_normal_cdf(0.975), 1.959963984540054, 1e-12);
  EXPECT_NEAR(inverse_normal_cdf(1e-6), -4.753424308822899, 1e-9);
}

TEST(Loss, BernoulliRateWithinBinomialBound) {
  constexpr int kFrames = 200'000;
  constexpr double kP = 0.01;
  Emulator emulator(spec_of("loss=1%"), 0);
  Driver driver(emulator);
  for (int i = 0; i < kFrames; ++i) (void)driver.offer(i, 100, i * kUs);
  driver.drain();
  const uint64_t lost = testing::dropped(emulator, TrafficClass::kBestEffort, DropReason::kLoss);
  EXPECT_NEAR(static_cast<double>(lost), kFrames * kP, 5 * std::sqrt(kFrames * kP * (1 - kP)));
  EXPECT_EQ(driver.released().size() + lost, static_cast<size_t>(kFrames));
  EXPECT_EQ(testing::total_dropped(testing::class_counters(emulator, TrafficClass::kBestEffort)),
            lost);
}

TEST(Loss, GilbertElliottMeanLossAndBurstLength) {
  // 1-h = 1, 1-k = 0: every frame in the bad state is lost; bursts are geometric, mean 1/r.
  constexpr int kFrames = 1'000'000;
  const double p = 0.01;
  const double r = 0.10;
  Emulator emulator(spec_of("ge=1%/10%"), 0);
  Driver driver(emulator);
  std::vector<bool> delivered(kFrames, false);
  for (int i = 0; i < kFrames; ++i) (void)driver.offer(i, 100, i * kUs);
  driver.drain();
  for (const auto& rel : driver.released()) delivered[rel.handle] = true;
  uint64_t lost = 0;
  uint64_t bursts = 0;
  for (int i = 0; i < kFrames; ++i) {
    if (delivered[i]) continue;
    ++lost;
    if (i == 0 || delivered[i - 1]) ++bursts;
  }
  EXPECT_EQ(lost, testing::dropped(emulator, TrafficClass::kBestEffort, DropReason::kBurstLoss));
  // Long-run share of the bad state, with the Markov chain's asymptotic variance.
  const double pi_bad = p / (p + r);
  const double variance = pi_bad * (1 - pi_bad) * (2 - p - r) / (p + r);
  EXPECT_NEAR(static_cast<double>(lost) / kFrames, pi_bad, 5 * std::sqrt(variance / kFrames));
  const double burst_sd = std::sqrt(1 - r) / r;
  EXPECT_NEAR(static_cast<double>(lost) / static_cast<double>(bursts), 1 / r,
              5 * burst_sd / std::sqrt(static_cast<double>(bursts)));
}

TEST(Loss, GilbertElliottFourParameters) {
  constexpr int kFrames = 1'000'000;
  const ImpairmentSpec spec = spec_of("ge=5%/20%/50%/1%");
  Emulator emulator(spec, 0);
  Driver driver(emulator);
  for (int i = 0; i < kFrames; ++i) (void)driver.offer(i, 100, i * kUs);
  driver.drain();
  const double expected = GilbertElliottLoss::mean_loss(spec.ge);
  EXPECT_NEAR(expected, (0.2 * 0.01 + 0.05 * 0.5) / 0.25, 1e-12);
  const double lost = static_cast<double>(
      testing::dropped(emulator, TrafficClass::kBestEffort, DropReason::kBurstLoss));
  EXPECT_NEAR(lost / kFrames, expected, 0.004);  // > 5 sd of the correlated estimate
}

TEST(Loss, BernoulliAndGilbertElliottKeepTheirOwnStatistics) {
  constexpr int kFrames = 200'000;
  Emulator alone(spec_of("loss=2%"), 0);
  Emulator both(spec_of("loss=2%,ge=1%/50%"), 0);
  for (int i = 0; i < kFrames; ++i) {
    (void)alone.offer({static_cast<uint64_t>(i), 100}, i * kUs);
    (void)both.offer({static_cast<uint64_t>(i), 100}, i * kUs);
    alone.release(i * kUs, [](uint64_t, uint32_t, bool) {});
    both.release(i * kUs, [](uint64_t, uint32_t, bool) {});
  }
  // Random loss draws from its own stream: the same frames are lost with or without GE.
  EXPECT_EQ(testing::dropped(alone, TrafficClass::kBestEffort, DropReason::kLoss),
            testing::dropped(both, TrafficClass::kBestEffort, DropReason::kLoss));
  EXPECT_GT(testing::dropped(both, TrafficClass::kBestEffort, DropReason::kBurstLoss), 0u);
}

TEST(Duplication, RateWithinBinomialBoundAndCopiesDelivered) {
  constexpr int kFrames = 100'000;
  constexpr double kP = 0.05;
  Emulator emulator(spec_of("dup=5%,delay=1ms"), 0);
  Driver driver(emulator);
  for (int i = 0; i < kFrames; ++i)
    ASSERT_EQ(driver.offer(i, 100, i * 10 * kUs), common::Status::kOk);
  driver.drain();
  const auto& c = testing::class_counters(emulator, TrafficClass::kBestEffort);
  EXPECT_EQ(c.duplicated_packets, driver.duplicates_requested());
  EXPECT_NEAR(static_cast<double>(c.duplicated_packets), kFrames * kP,
              5 * std::sqrt(kFrames * kP * (1 - kP)));
  EXPECT_EQ(c.forwarded_packets, kFrames + c.duplicated_packets);
  std::set<uint64_t> copies;
  for (const auto& r : driver.released()) {
    if (r.handle & testing::kDuplicateBit) copies.insert(r.handle & ~testing::kDuplicateBit);
  }
  EXPECT_EQ(copies.size(), c.duplicated_packets);
}

TEST(Reorder, ShareAndExactlyThoseFramesAreOutOfOrder) {
  constexpr int kFrames = 50'000;
  constexpr double kP = 0.10;
  constexpr int64_t kSpacing = 100 * kUs;  // reorder-ahead (1 ms) overtakes up to 9 frames
  Emulator emulator(spec_of("delay=10ms,reorder=10%,reorder-ahead=1ms"), 0);
  Driver driver(emulator);
  for (int i = 0; i < kFrames; ++i)
    ASSERT_EQ(driver.offer(i, 100, i * kSpacing), common::Status::kOk);
  driver.drain();
  ASSERT_EQ(driver.released().size(), static_cast<size_t>(kFrames));

  std::set<uint64_t> early;  // frames that took the reorder path: released 1 ms early
  for (const auto& r : driver.released()) {
    const int64_t sojourn = r.at_ns - static_cast<int64_t>(r.handle) * kSpacing;
    ASSERT_TRUE(sojourn == 10 * kMs || sojourn == 9 * kMs) << sojourn;
    if (sojourn == 9 * kMs) early.insert(r.handle);
  }
  const auto& c = testing::class_counters(emulator, TrafficClass::kBestEffort);
  EXPECT_EQ(c.reordered_packets, early.size());
  EXPECT_NEAR(static_cast<double>(early.size()), kFrames * kP,
              5 * std::sqrt(kFrames * kP * (1 - kP)));

  // A frame is out of order if some earlier-offered frame is released after it.
  std::set<uint64_t> out_of_order;
  std::vector<bool> done(kFrames, false);
  uint64_t lowest_pending = 0;
  for (const auto& r : driver.released()) {
    if (r.handle > lowest_pending) out_of_order.insert(r.handle);
    done[r.handle] = true;
    while (lowest_pending < kFrames && done[lowest_pending]) ++lowest_pending;
  }
  // The first early frame of the run could only be "in order" if the 9 frames before it were
  // all early too (p = 1e-9): with this seed, the two sets are identical.
  EXPECT_EQ(out_of_order, early);
}

TEST(Reorder, NotBeforeTransmissionEnd) {
  // reorder-ahead larger than the delay: released at tx end (offer time without rate).
  Emulator emulator(spec_of("delay=1ms,reorder=100%,reorder-ahead=5ms"), 0);
  Driver driver(emulator);
  ASSERT_EQ(driver.offer(1, 100, 7 * kMs), common::Status::kOk);
  driver.drain();
  ASSERT_EQ(driver.released().size(), 1u);
  EXPECT_EQ(driver.released()[0].at_ns, 7 * kMs);
}

}  // namespace
}  // namespace detwan::wanem

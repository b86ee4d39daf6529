#include <cmath>

#include <gtest/gtest.h>

#include "transport/fec/codec.h"

namespace detwan::transport::fec {
namespace {

// Reference P(Binomial(n, p) > m), independent of the implementation: 1 - CDF with an
// iterative pmf (fine for the moderate n and p used here).
double block_loss(int n, int m, double p) {
  double pmf = std::pow(1.0 - p, n);
  double cdf = 0.0;
  for (int i = 0; i <= m; ++i) {
    cdf += pmf;
    pmf *= static_cast<double>(n - i) / (i + 1) * p / (1.0 - p);
  }
  return 1.0 - cdf;
}

TEST(AdaptivePolicy, KnownValueK32OnePercent) {
  AdaptivePolicy policy;  // target 1e-3
  const int m = policy.parity_for(32, 0.01, 32);
  EXPECT_EQ(m, 3);
  EXPECT_LT(block_loss(32 + m, m, 0.01), 1e-3);
  EXPECT_GE(block_loss(32 + m - 1, m - 1, 0.01), 1e-3);
}

TEST(AdaptivePolicy, ChosenMIsTheSmallestMeetingTarget) {
  // Values chosen away from exact ties (p^2 == target) where rounding decides either way.
  for (double target : {2e-2, 1e-3, 3e-7}) {
    AdaptivePolicy policy{target};
    for (int k : {1, 4, 16, 32, 64, 128}) {
      for (double p : {2e-4, 3e-3, 0.012, 0.05, 0.13}) {
        const int m = policy.parity_for(k, p, 32);
        if (m < 32) {
          EXPECT_LT(block_loss(k + m, m, p), target) << k << " " << p;
        }
        if (m > 0) {
          EXPECT_GE(block_loss(k + m - 1, m - 1, p), target) << k << " " << p;
        }
      }
    }
  }
}

TEST(AdaptivePolicy, ZeroWhenNoLoss) {
  AdaptivePolicy policy;
  EXPECT_EQ(policy.parity_for(32, 0.0, 8), 0);
  EXPECT_EQ(policy.parity_for(32, 5e-7, 8), 0);
  EXPECT_EQ(policy.parity_for(32, std::nan(""), 8), 0);
  EXPECT_EQ(policy.parity_for(32, -0.5, 8), 0);
}

TEST(AdaptivePolicy, MonotoneInLossRate) {
  AdaptivePolicy policy;
  for (int k : {4, 32, 128}) {
    int previous = 0;
    for (double p = 1e-6; p < 0.5; p *= 1.3) {
      const int m = policy.parity_for(k, p, 32);
      EXPECT_GE(m, previous) << "k=" << k << " p=" << p;
      previous = m;
    }
    EXPECT_GT(previous, 0);
  }
}

TEST(AdaptivePolicy, RespectsMaxM) {
  AdaptivePolicy policy;
  EXPECT_EQ(policy.parity_for(32, 0.3, 4), 4);
  EXPECT_EQ(policy.parity_for(32, 1.0, 6), 6);
  EXPECT_EQ(policy.parity_for(32, 0.01, 2), 2);
  EXPECT_EQ(policy.parity_for(32, 0.01, 0), 0);
  EXPECT_EQ(policy.parity_for(32, 0.01, -3), 0);
  EXPECT_LE(policy.parity_for(128, 0.5, 1000), kMaxParitySymbols);
}

TEST(LossEstimator, FirstWindowPrimes) {
  LossEstimator estimator(0.125);
  EXPECT_EQ(estimator.loss_rate(), 0.0);
  estimator.on_window(100, 10);
  EXPECT_DOUBLE_EQ(estimator.loss_rate(), 0.1);
}

TEST(LossEstimator, EwmaAfterPriming) {
  LossEstimator estimator(0.25);
  estimator.on_window(100, 0);
  EXPECT_DOUBLE_EQ(estimator.loss_rate(), 0.0);
  estimator.on_window(100, 40);
  EXPECT_DOUBLE_EQ(estimator.loss_rate(), 0.1);
  estimator.on_window(0, 0);  // idle window: no information
  EXPECT_DOUBLE_EQ(estimator.loss_rate(), 0.1);
  estimator.on_window(50, 500);  // more lost than sent is clamped to 1
  EXPECT_DOUBLE_EQ(estimator.loss_rate(), 0.1 + 0.25 * 0.9);
}

TEST(LossEstimator, ConvergesToSteadyRate) {
  LossEstimator estimator;
  estimator.on_window(1000, 500);
  for (int i = 0; i < 200; ++i) estimator.on_window(1000, 20);
  EXPECT_NEAR(estimator.loss_rate(), 0.02, 1e-6);
}

}  // namespace
}  // namespace detwan::transport::fec

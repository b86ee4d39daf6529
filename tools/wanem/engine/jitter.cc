#include "tools/wanem/engine/jitter.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace detwan::wanem {
namespace {

constexpr double kNormalClampSigmas = 4.0;
// netem's tables hold int16 values scaled by NETEM_DIST_SCALE = 8192.
constexpr double kTableMax = 32767.0 / 8192.0;
constexpr double kTableMin = -32768.0 / 8192.0;
// Lowest paretonormal table value: 0.25 * (-4) + 0.75 * pareto(0) = -1 - 0.5.
constexpr double kParetoNormalTableLowest = -1.5;

int64_t scaled(double units, int64_t jitter_ns) noexcept {
  return std::llround(units * static_cast<double>(jitter_ns));
}

}  // namespace

double inverse_normal_cdf(double p) noexcept {
  // Peter Acklam's algorithm; coefficients for the central and tail regions.
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                                 -2.759285104469687e+02, 1.383577518672690e+02,
                                 -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                                 -1.556989798598866e+02, 6.680131188771972e+01,
                                 -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                                 -2.400758277161838e+00, -2.549732539343734e+00,
                                 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                                 2.445134137142996e+00, 3.754408661907416e+00};
  constexpr double kLow = 0.02425;
  double x = 0.0;
  if (p < kLow) {
    const double q = std::sqrt(-2.0 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  } else if (p <= 1.0 - kLow) {
    const double q = p - 0.5;
    const double r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0);
  } else {
    const double q = std::sqrt(-2.0 * std::log(1.0 - p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  }
  // One Halley step against the exact CDF brings the error to double precision.
  const double e = 0.5 * std::erfc(-x / std::sqrt(2.0)) - p;
  const double u = e * std::sqrt(2.0 * std::numbers::pi) * std::exp(x * x / 2.0);
  return x - u / (1.0 + x * u / 2.0);
}

double pareto_normal_table(double u) noexcept {
  const double normal = std::clamp(inverse_normal_cdf(u), -kNormalClampSigmas, kNormalClampSigmas);
  const double pareto = std::min(4.0 / 3.0 * (1.0 / std::cbrt(1.0 - u) - 1.5), kTableMax);
  return std::clamp(0.25 * normal + 0.75 * pareto, kTableMin, kTableMax);
}

int64_t JitterSampler::sample(Rng& rng) const noexcept {
  if (jitter_ns_ <= 0) return 0;
  switch (distribution_) {
    case JitterDistribution::kUniform: {
      const auto span = static_cast<uint64_t>(jitter_ns_) * 2 + 1;
      return static_cast<int64_t>(rng.below(span)) - jitter_ns_;
    }
    case JitterDistribution::kNormal: {
      const double z = std::clamp(inverse_normal_cdf(rng.uniform_open01()), -kNormalClampSigmas,
                                  kNormalClampSigmas);
      return scaled(z, jitter_ns_);
    }
    case JitterDistribution::kParetoNormal:
      return scaled(pareto_normal_table(rng.uniform_open01()) / kParetoNormalTableStddev,
                    jitter_ns_);
  }
  return 0;
}

int64_t JitterSampler::min_offset_ns() const noexcept {
  if (jitter_ns_ <= 0) return 0;
  switch (distribution_) {
    case JitterDistribution::kUniform:
      return -jitter_ns_;
    case JitterDistribution::kNormal:
      return scaled(-kNormalClampSigmas, jitter_ns_);
    case JitterDistribution::kParetoNormal:
      // One ns of slack for the rounding in scaled().
      return scaled(kParetoNormalTableLowest / kParetoNormalTableStddev, jitter_ns_) - 1;
  }
  return 0;
}

}  // namespace detwan::wanem

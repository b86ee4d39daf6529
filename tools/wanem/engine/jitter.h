#pragma once
// Delay-variation distributions. A sample is a signed offset added to the constant delay.
//   uniform        integer uniform on [-J, +J] (netem: delay ± jitter)
//   normal         sigma = J, clamped to ±4 sigma (netem's table spans about ±4 sigma too)
//   pareto-normal  netem's paretonormal table: at quantile u the value is
//                  0.25 * normal(u) + 0.75 * pareto(u), where pareto(u) = 4/3 * ((1-u)^(-1/3)
//                  - 1.5) (Pareto a = 3, centred, capped at +4) and the result capped at ±4 table
//                  units. netem scales that table by J, which gives a standard deviation of only
//                  0.835 J; here it is rescaled so that the standard deviation is exactly J
//                  (mean -0.0296 J, long right tail up to +4.79 J, lowest value -1.797 J).
// Samples are drawn by inversion from one uniform each, so a seed gives the same sequence on
// every platform.
#include <cstdint>

#include "tools/wanem/engine/random.h"
#include "tools/wanem/engine/spec.h"

namespace detwan::wanem {

// Standard deviation of netem's paretonormal table in units of its sigma parameter (computed by
// integrating pareto_normal_table() over u; see jitter.cc).
inline constexpr double kParetoNormalTableStddev = 0.834936;
// Mean of the same table (it is not centred).
inline constexpr double kParetoNormalTableMean = -0.0246924;

// Quantile function of the standard normal distribution, p in (0, 1). Acklam's rational
// approximation plus one Halley step: relative error < 1e-15 in double precision.
double inverse_normal_cdf(double p) noexcept;

// netem's paretonormal table value at quantile u in (0, 1), in table (sigma) units.
double pareto_normal_table(double u) noexcept;

class JitterSampler {
 public:
  JitterSampler() = default;
  JitterSampler(int64_t jitter_ns, JitterDistribution distribution) noexcept
      : jitter_ns_(jitter_ns), distribution_(distribution) {}

  // Offset in ns to add to the delay; always 0 when jitter is 0 (and then draws nothing).
  [[nodiscard]] int64_t sample(Rng& rng) const noexcept;
  // Lowest value sample() can return (<= 0).
  [[nodiscard]] int64_t min_offset_ns() const noexcept;

  [[nodiscard]] int64_t jitter_ns() const noexcept { return jitter_ns_; }

 private:
  int64_t jitter_ns_ = 0;
  JitterDistribution distribution_ = JitterDistribution::kUniform;
};

}  // namespace detwan::wanem

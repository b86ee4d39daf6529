// The planner's step model (placement.h): an allreduce from the collective library's cost
// model, and a step with or without the overlap of bucketed allreduces and the backward pass.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "collectives/topology/cost_model.h"
#include "collectives/topology/topology.h"
#include "control/compute/placement.h"

namespace detwan::control::compute {

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
  const uint64_t first = std::min(
      overlap.first_bucket_bytes != 0 ? overlap.first_bucket_bytes : bucket, gradient_bytes);
  if (bucket == 0 || first >= gradient_bytes || fraction <= 0) {
    // One allreduce when the compute has ended (also: a single bucket, ready at the end).
    const Prediction whole =
        predict_allreduce(gradient_bytes, ranks_per_site, payload_rate_bps, latency_ns);
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
  const uint64_t rest = gradient_bytes - first;        // >= 1
  const uint64_t m_full = (rest - 1) / bucket;         // full buckets after the first
  const uint64_t last_bytes = rest - m_full * bucket;  // 1..bucket
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

}  // namespace detwan::control::compute

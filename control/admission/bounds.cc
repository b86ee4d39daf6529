#include "control/admission/bounds.h"

#include <algorithm>
#include <cmath>

#include "common/link_time.h"

namespace detwan::control::admission {
namespace {

int64_t round_up_us(int64_t ns) { return (ns + 999) / 1000 * 1000; }

}  // namespace

uint64_t auto_burst_bytes(const model::Link& first_link, uint64_t rate_bps) {
  const auto cycle_bytes =
      static_cast<uint64_t>(static_cast<common::LinkUint128>(rate_bps) *
                            static_cast<uint64_t>(first_link.cycle_ns) / 8'000'000'000u);
  return std::max<uint64_t>(cycle_bytes, 8 * uint64_t{first_link.mtu_bytes + 18});
}

DirectionBound direction_bound(const model::Topology& t, const std::vector<uint32_t>& links,
                               uint32_t from_gateway, uint32_t to_gateway,
                               int64_t service_latency_ns, uint64_t guaranteed_bps,
                               uint64_t burst_bytes) {
  DirectionBound d;
  const model::Link& first = t.links[links.front()];
  const int64_t burst_ns =
      guaranteed_bps == 0 ? 0 : common::ceil_serialisation_ns(burst_bytes * 8, guaranteed_bps);
  d.egress_ns = service_latency_ns + burst_ns + max_frame_ns(first);
  for (size_t i = 0; i < links.size(); ++i) {
    const model::Link& link = t.links[links[i]];
    d.links_ns += link.max_delay_ns();
    d.min_ns += link.min_delay_ns();
    if (i > 0) d.transit_ns += max_frame_ns(link);
  }
  if (from_gateway != model::kNone) d.processing_ns += t.gateways[from_gateway].processing_delay_ns;
  if (to_gateway != model::kNone) {
    d.processing_ns += t.gateways[to_gateway].processing_delay_ns;
    d.playout_error_ns = t.gateways[to_gateway].playout_error_ns;
  }
  d.max_ns = d.egress_ns + d.links_ns + d.transit_ns + d.processing_ns;
  return d;
}

Bound combine(const model::Topology& t, const std::vector<uint32_t>& links,
              const DirectionBound& forward, const DirectionBound& reverse,
              int64_t requested_variation_ns) {
  Bound b;
  b.forward = forward;
  b.reverse = reverse;
  double keep = 1.0;
  for (const uint32_t l : links) {
    b.propagation_ns += t.links[l].delay_ns;
    keep *= 1.0 - t.links[l].loss;
  }
  b.max_loss = 1.0 - keep;
  const int64_t max_ns = std::max(forward.max_ns, reverse.max_ns);
  const int64_t min_ns = std::min(forward.min_ns, reverse.min_ns);
  const int64_t in_time_variation = max_ns - min_ns;
  b.on_time = requested_variation_ns >= 0 && requested_variation_ns < in_time_variation;
  if (b.on_time) {
    b.playout_bound_ns = round_up_us(max_ns);
    const int64_t error = std::max(forward.playout_error_ns, reverse.playout_error_ns);
    b.max_latency_ns = b.playout_bound_ns + error;
    b.max_latency_variation_ns = error;
    b.min_latency_ns = b.playout_bound_ns;
  } else {
    b.max_latency_ns = max_ns;
    b.max_latency_variation_ns = in_time_variation;
    b.min_latency_ns = min_ns;
  }
  return b;
}

int64_t max_frame_ns(const model::Link& link) {
  return common::ceil_serialisation_ns(uint64_t{link.mtu_bytes + 18} * 8, link.capacity_bps);
}

}  // namespace detwan::control::admission

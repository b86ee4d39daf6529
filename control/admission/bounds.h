#pragma once
// Worst-case latency bounds of a reserved path (RFC 9320 latency-rate servers; results in
// RFC 9016 terms). docs/control.md, "Admission and bounds", derives each term.
//
// For one direction, from the gateway that sends (egress port on the path's first link, slots
// S, cycle C, guaranteed rate R' >= the reserved rate r, policer depth b) to the far gateway:
//   egress     = T(S) + b / R' + one max frame at line rate    T(S) = cycle - shortest usable
//                                                               window (slot_calendar.h)
//   links      = sum of (delay + jitter) over the path's links
//   transit    = one max frame at each transit hop's outgoing link rate (non-preemptive
//                blocking of the reserved class by a best-effort frame)
//   processing = the two gateways' processing_delay
//   max        = egress + links + transit + processing
//   min        = sum of max(delay - jitter, 0)
// Delivery:
//   on time  (the far gateway's playout releases at tx time + B, B = max rounded up to 1 us):
//            max_latency = B + playout_error, max_latency_variation = playout_error;
//   in time  (no playout, released on arrival): max_latency = max, variation = max - min.
// The planner uses in-time delivery when it meets the requested variation, on-time otherwise.
#include <cstdint>
#include <vector>

#include "control/model/topology.h"

namespace detwan::control::admission {

struct DirectionBound {
  int64_t egress_ns = 0;
  int64_t links_ns = 0;
  int64_t transit_ns = 0;
  int64_t processing_ns = 0;
  int64_t max_ns = 0;
  int64_t min_ns = 0;
  int64_t playout_error_ns = 0;  // of the receiving gateway
};

struct Bound {
  bool on_time = false;
  int64_t playout_bound_ns = 0;          // B given to the receiving gateways (0: in time)
  int64_t max_latency_ns = 0;            // RFC 9016 MaxLatency
  int64_t max_latency_variation_ns = 0;  // RFC 9016 MaxLatencyVariation
  int64_t min_latency_ns = 0;
  int64_t propagation_ns = 0;  // sum of nominal link delays
  double max_loss = 0;         // RFC 9016 MaxLoss from the links' loss
  DirectionBound forward;      // source -> destination
  DirectionBound reverse;
};

// One direction along `links` (in travel order) from gateway `from` to gateway `to`.
DirectionBound direction_bound(const model::Topology& topology, const std::vector<uint32_t>& links,
                               uint32_t from_gateway, uint32_t to_gateway,
                               int64_t service_latency_ns, uint64_t guaranteed_bps,
                               uint64_t burst_bytes);

// Combines both directions and chooses the delivery mode for the requested variation
// (-1 = none requested: in time).
Bound combine(const model::Topology& topology, const std::vector<uint32_t>& links,
              const DirectionBound& forward, const DirectionBound& reverse,
              int64_t requested_variation_ns);

// Default policer depth of a tunnel (as detwan-gw's "auto"): one cycle at the rate, at least
// 8 max-size frames.
uint64_t auto_burst_bytes(const model::Link& first_link, uint64_t rate_bps);
// Serialisation time of one maximum frame (MTU + Ethernet header and FCS) at the link's rate.
int64_t max_frame_ns(const model::Link& link);

}  // namespace detwan::control::admission

#pragma once
// Admission: can the domain carry a reservation, on which path(s), with which slots, and what
// bounds can it promise? (docs/control.md, "Admission and bounds")
//
// A request names two sites, a rate, a time window and the flow's requirements in RFC 9016
// terms (MaxLatency, MaxLatencyVariation, MaxLoss). The planner runs a constrained shortest
// path search over links whose reservable capacity is free in both directions for the whole
// window, and whose gateway ports have enough free time slots for the rate, weighted by each
// link's share of the worst-case latency; it allocates slots, computes the bounds of the path
// (bounds.h) and compares them with the requirements. A refusal carries a machine-readable
// cause and a message naming the limiting link or figure.
//
// Pure function of (topology, ledger, request): it books nothing. Thread-compatible.
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "control/admission/bounds.h"
#include "control/calendar/ledger.h"
#include "control/model/topology.h"
#include "control/path/path.h"

namespace detwan::control::admission {

struct Request {
  uint32_t src_site = model::kNone;
  uint32_t dst_site = model::kNone;
  uint64_t rate_bps = 0;                  // RFC 9016 MinBandwidth, each direction
  uint64_t burst_bytes = 0;               // 0 = auto: one cycle at the rate, at least 8 max frames
  int64_t max_latency_ns = 0;             // 0 = no requirement
  int64_t max_latency_variation_ns = -1;  // -1 = no requirement
  double max_loss = 1.0;                  // 1 = no requirement
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint32_t paths = 1;       // k link-disjoint paths
  uint64_t ignore_key = 0;  // a modification: do not count this reservation's own booking
  // A modification keeps its path and slots when they still fit.
  const calendar::Booking* current = nullptr;
};

// One end of a path: the gateway whose WAN port on `link` sends into the path.
struct PathEnd {
  uint32_t gateway = model::kNone;
  uint32_t link = model::kNone;
  int direction = 0;
  std::string port;  // WAN port name
  std::string peer;  // peer name on that gateway for the far gateway
  std::vector<uint32_t> slots;
  uint64_t guaranteed_bps = 0;
};

struct PathPlan {
  std::vector<uint32_t> nodes;
  std::vector<uint32_t> links;
  PathEnd ends[2];  // [0] leaves the source site, [1] leaves the destination site
  Bound bound;
};

struct Plan {
  std::vector<PathPlan> paths;  // best first
  Bound bound;                  // the worst over paths (what the reservation promises)
  uint64_t burst_bytes = 0;
};

// Causes (stable strings, also in the API's error objects).
inline constexpr const char* kUnknownSite = "unknown_site";
inline constexpr const char* kSameSite = "same_site";
inline constexpr const char* kNoPath = "no_path";
inline constexpr const char* kNoCapacity = "no_capacity";
inline constexpr const char* kNoSlots = "no_slots";
inline constexpr const char* kBelowPropagation = "latency_below_propagation";
inline constexpr const char* kLatencyUnachievable = "latency_unachievable";
inline constexpr const char* kVariationUnachievable = "latency_variation_unachievable";
inline constexpr const char* kLossUnachievable = "loss_unachievable";
inline constexpr const char* kTooFewPaths = "too_few_disjoint_paths";

struct Refusal {
  std::string cause;
  std::string message;
  std::string field;  // the request field it concerns, e.g. "max_latency_ns"
};

using Decision = std::variant<Plan, Refusal>;

Decision plan(const model::Topology& topology, const calendar::Ledger& ledger,
              const Request& request);

// Candidate paths and their bounds without the capacity test (detwanctl paths --all).
std::vector<PathPlan> candidate_paths(const model::Topology& topology,
                                      const calendar::Ledger& ledger, const Request& request,
                                      bool require_capacity);

// The booking a plan makes for reservation `key`.
calendar::Booking booking_of(const Plan& plan, uint64_t key, const Request& request);

}  // namespace detwan::control::admission

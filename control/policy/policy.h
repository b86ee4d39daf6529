#pragma once
// Owner policy (issue 32 item 6, docs/trust.md "Owner policy"): what one tenant or one foreign
// domain may hold in this domain at once — rate per reservation, share of any link's reservable
// rate summed over its reservations, window length, number of reservations. A pure checker:
// the agent calls it (under its lock) from reserve and modify with the holder's current
// reservations; nothing here keeps state.
//
// The holder is the foreign domain when the request comes from a peer agent (requester_domain
// non-empty; its `domains` entry or the default), else the tenant (its `tenants` entry or the
// default). The domain's own operator (tenant "" and no requester domain: an admin token over
// every tenant, or no tokens at all) is not capped.
//
// Refusals are ApiError 403 (the request is well formed and could be met, but this holder may
// not have it) with cause policy_rate, policy_link_share, policy_window or policy_reservations
// and a message naming the cap, the holder and the figure. Threading: none (pure functions).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

#include "control/model/topology.h"
#include "control/reservation/reservation.h"

namespace detwan::control::policy {

inline constexpr std::string_view kPolicyRate = "policy_rate";
inline constexpr std::string_view kPolicyLinkShare = "policy_link_share";
inline constexpr std::string_view kPolicyWindow = "policy_window";
inline constexpr std::string_view kPolicyReservations = "policy_reservations";
inline constexpr int kPolicyStatus = 403;

struct PolicyRefusal {
  std::string cause;    // one of the k* above
  std::string message;  // names the cap, the holder and the figure
  std::string field;    // the request field concerned
};

// One reservation the holder holds now (held, committed, provisioned or released).
struct Holding {
  std::string id;
  uint64_t rate_bps = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  std::vector<std::string> links;  // every link of every path it books (at rate_bps each)
};

// The caps that apply to a holder; nullptr for the domain's operator (not capped).
const model::PolicyLimits* limits_for(const model::Policy& policy, std::string_view tenant,
                                      std::string_view requester_domain);

// Checks a request (spec, start/end resolved, booking `spec_links` at spec.min_bandwidth_bps
// each) against the holder's caps. `holdings` are the holder's other reservations (for modify:
// without the one modified). The link share sums the holdings whose window overlaps the
// request's. Links are looked up in `topology` (an unknown link counts no capacity).
std::optional<PolicyRefusal> check_policy(const model::Policy& policy,
                                          const model::Topology& topology, std::string_view tenant,
                                          std::string_view requester_domain,
                                          const reservation::Spec& spec,
                                          const std::vector<std::string>& spec_links,
                                          const std::vector<Holding>& holdings);

// GET /v1/policy: {"default": LIMITS, "tenants": {...}, "domains": {...}} with only the entries
// `all` or the given tenant / domain may see. LIMITS: {"max_rate_bps", "max_link_share",
// "max_window_ns", "max_reservations"}, each present only when capped.
struct PolicyView {
  bool all = false;    // an admin (or anonymous on a lab agent)
  std::string tenant;  // its own entry ("" = none)
  std::string domain;  // a peer: its domain's entry
};
boost::json::object policy_json(const model::Policy& policy, const PolicyView& view);

}  // namespace detwan::control::policy

// Owner policy checker (policy.h).
#include "control/policy/policy.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "common/units.h"

namespace detwan::control::policy {
namespace json = boost::json;

namespace {

std::string holder_of(std::string_view tenant, std::string_view requester_domain) {
  return requester_domain.empty() ? fmt::format("tenant '{}'", tenant)
                                  : fmt::format("domain '{}'", requester_domain);
}

std::string percent(double share) { return fmt::format("{:g}%", share * 100.0); }

json::object limits_json(const model::PolicyLimits& l) {
  json::object out;
  if (l.max_rate_bps) out["max_rate_bps"] = *l.max_rate_bps;
  if (l.max_link_share) out["max_link_share"] = *l.max_link_share;
  if (l.max_window_ns) out["max_window_ns"] = *l.max_window_ns;
  if (l.max_reservations) out["max_reservations"] = *l.max_reservations;
  return out;
}

}  // namespace

const model::PolicyLimits* limits_for(const model::Policy& policy, std::string_view tenant,
                                      std::string_view requester_domain) {
  if (!requester_domain.empty()) {
    const auto found = policy.domains.find(std::string(requester_domain));
    return found != policy.domains.end() ? &found->second : &policy.defaults;
  }
  if (tenant.empty()) return nullptr;  // the domain's operator
  const auto found = policy.tenants.find(std::string(tenant));
  return found != policy.tenants.end() ? &found->second : &policy.defaults;
}

std::optional<PolicyRefusal> check_policy(const model::Policy& policy,
                                          const model::Topology& topology, std::string_view tenant,
                                          std::string_view requester_domain,
                                          const reservation::Spec& spec,
                                          const std::vector<std::string>& spec_links,
                                          const std::vector<Holding>& holdings) {
  const model::PolicyLimits* limits = limits_for(policy, tenant, requester_domain);
  if (limits == nullptr) return std::nullopt;
  const std::string holder = holder_of(tenant, requester_domain);
  if (limits->max_rate_bps && spec.min_bandwidth_bps > *limits->max_rate_bps) {
    return PolicyRefusal{
        std::string(kPolicyRate),
        fmt::format("{} may reserve at most {} per reservation (max_rate); asked {}", holder,
                    common::format_rate_bps(*limits->max_rate_bps),
                    common::format_rate_bps(spec.min_bandwidth_bps)),
        "min_bandwidth_bps"};
  }
  const int64_t window_ns = spec.end_ns - spec.start_ns;
  if (limits->max_window_ns && window_ns > *limits->max_window_ns) {
    return PolicyRefusal{
        std::string(kPolicyWindow),
        fmt::format("{} may hold a reservation for at most {} (max_window); asked {}", holder,
                    common::format_duration_ns(*limits->max_window_ns),
                    common::format_duration_ns(window_ns)),
        "end_unix_ns"};
  }
  if (limits->max_reservations && holdings.size() + 1 > *limits->max_reservations) {
    return PolicyRefusal{
        std::string(kPolicyReservations),
        fmt::format("{} may hold at most {} reservations at once (max_reservations); it holds {}",
                    holder, *limits->max_reservations, holdings.size()),
        ""};
  }
  if (limits->max_link_share) {
    // The request's rate on each of its links, plus the overlapping holdings' on the same links.
    std::map<std::string, uint64_t> sum_bps;
    for (const std::string& link : spec_links) sum_bps[link] += spec.min_bandwidth_bps;
    for (const Holding& h : holdings) {
      if (h.end_ns <= spec.start_ns || spec.end_ns <= h.start_ns) continue;
      for (const std::string& link : h.links) {
        if (sum_bps.contains(link)) sum_bps[link] += h.rate_bps;
      }
    }
    for (const auto& [link, bps] : sum_bps) {
      const uint32_t index = topology.find_link(link);
      const uint64_t reservable =
          index == model::kNone ? 0 : topology.links[index].reservable_bps();
      const auto cap_bps = static_cast<uint64_t>(
          std::floor(*limits->max_link_share * static_cast<double>(reservable)));
      if (bps > cap_bps) {
        return PolicyRefusal{
            std::string(kPolicyLinkShare),
            fmt::format("{} may hold at most {} of link '{}' ({} of {} reservable, "
                        "max_link_share); with this request it would hold {}",
                        holder, percent(*limits->max_link_share), link,
                        common::format_rate_bps(cap_bps), common::format_rate_bps(reservable),
                        common::format_rate_bps(bps)),
            "min_bandwidth_bps"};
      }
    }
  }
  return std::nullopt;
}

json::object policy_json(const model::Policy& policy, const PolicyView& view) {
  json::object tenants;
  json::object domains;
  for (const auto& [name, limits] : policy.tenants) {
    if (view.all || name == view.tenant) tenants[name] = limits_json(limits);
  }
  for (const auto& [name, limits] : policy.domains) {
    if (view.all || name == view.domain) domains[name] = limits_json(limits);
  }
  return json::object{{"default", limits_json(policy.defaults)},
                      {"tenants", std::move(tenants)},
                      {"domains", std::move(domains)}};
}

}  // namespace detwan::control::policy

#include "control/admission/planner.h"

#include <algorithm>
#include <ctime>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "common/link_time.h"
#include "common/units.h"

namespace detwan::control::admission {
namespace {

using model::kNone;
using model::Topology;

std::string rate(uint64_t bps) { return common::format_rate_bps(bps); }
std::string duration(int64_t ns) { return common::format_duration_ns(ns); }

// "2026-12-01T14:00:00Z" (UTC, whole seconds) for messages.
std::string when(int64_t unix_ns) {
  const time_t seconds = static_cast<time_t>(unix_ns / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

struct Context {
  const Topology& t;
  const calendar::Ledger& ledger;
  const Request& r;
  uint32_t src_node = kNone;
  uint32_t dst_node = kNone;
};

// The direction in which `link` leaves `node`, or -1 if it does not end there.
int leaving(const model::Link& link, uint32_t node) {
  if (link.ends[0] == node) return 0;
  if (link.ends[1] == node) return 1;
  return -1;
}

const std::vector<uint32_t>* preferred_slots(const Request& r, uint32_t link, int direction) {
  if (r.current == nullptr) return nullptr;
  for (const calendar::SlotUse& use : r.current->slots) {
    if (use.link == link && use.direction == direction) return &use.slots;
  }
  return nullptr;
}

std::optional<std::vector<uint32_t>> slots_for(const Context& c, uint32_t link, int direction) {
  const calendar::SlotCalendar* calendar = c.ledger.slots(link, direction);
  if (calendar == nullptr) return std::vector<uint32_t>{};  // no gateway: nothing to allocate
  return calendar->plan(c.r.rate_bps, c.r.start_ns, c.r.end_ns, c.r.ignore_key,
                        preferred_slots(c.r, link, direction));
}

bool capacity_free(const Context& c, uint32_t link) {
  for (int d = 0; d < 2; ++d) {
    if (!c.ledger.fits(link, d, c.r.start_ns, c.r.end_ns, c.r.rate_bps, c.r.ignore_key)) {
      return false;
    }
  }
  return true;
}

bool slots_free(const Context& c, uint32_t link) {
  const model::Link& l = c.t.links[link];
  for (const uint32_t site_node : {c.src_node, c.dst_node}) {
    const int d = leaving(l, site_node);
    if (d >= 0 && !slots_for(c, link, d)) return false;
  }
  return true;
}

int64_t link_weight(const Context& c, uint32_t link) {
  const model::Link& l = c.t.links[link];
  return l.max_delay_ns() + max_frame_ns(l);
}

PathEnd end_of(const Context& c, const std::vector<uint32_t>& links, bool at_source) {
  PathEnd end;
  const uint32_t node = at_source ? c.src_node : c.dst_node;
  const uint32_t far_node = at_source ? c.dst_node : c.src_node;
  end.link = at_source ? links.front() : links.back();
  end.direction = leaving(c.t.links[end.link], node);
  end.gateway = c.t.gateway_at_node(node);
  const uint32_t far = c.t.gateway_at_node(far_node);
  if (end.gateway != kNone) {
    const model::Gateway& g = c.t.gateways[end.gateway];
    if (const model::GatewayPort* port = g.port_on_link(end.link)) end.port = port->name;
    if (const model::GatewayPeer* peer = g.peer_via(end.port, far)) end.peer = peer->name;
  }
  end.slots = slots_for(c, end.link, end.direction).value_or(std::vector<uint32_t>{});
  const calendar::SlotCalendar* calendar = c.ledger.slots(end.link, end.direction);
  end.guaranteed_bps = calendar == nullptr
                           ? c.r.rate_bps
                           : calendar::guaranteed_rate_bps(calendar->geometry(), end.slots);
  return end;
}

PathPlan evaluate(const Context& c, const path::Path& p, uint64_t burst_bytes) {
  PathPlan plan;
  plan.nodes = p.nodes;
  plan.links = p.links;
  plan.ends[0] = end_of(c, p.links, true);
  plan.ends[1] = end_of(c, p.links, false);
  auto latency = [&](const PathEnd& end) {
    const calendar::SlotCalendar* calendar = c.ledger.slots(end.link, end.direction);
    return calendar == nullptr ? 0 : calendar::service_latency_ns(calendar->geometry(), end.slots);
  };
  std::vector<uint32_t> backward(p.links.rbegin(), p.links.rend());
  const DirectionBound forward =
      direction_bound(c.t, p.links, plan.ends[0].gateway, plan.ends[1].gateway,
                      latency(plan.ends[0]), plan.ends[0].guaranteed_bps, burst_bytes);
  const DirectionBound reverse =
      direction_bound(c.t, backward, plan.ends[1].gateway, plan.ends[0].gateway,
                      latency(plan.ends[1]), plan.ends[1].guaranteed_bps, burst_bytes);
  plan.bound = combine(c.t, p.links, forward, reverse, c.r.max_latency_variation_ns);
  return plan;
}

std::string path_text(const Topology& t, const std::vector<uint32_t>& nodes) {
  std::string out;
  for (const uint32_t n : nodes) out += (out.empty() ? "" : "-") + t.nodes[n].name;
  return out;
}

// Why the topologically best path cannot carry the request: the first full link direction.
std::string bottleneck(const Context& c, const path::Path& p) {
  for (size_t i = 0; i < p.links.size(); ++i) {
    const model::Link& l = c.t.links[p.links[i]];
    for (int d = 0; d < 2; ++d) {
      const uint64_t free =
          c.ledger.free_bps(p.links[i], d, c.r.start_ns, c.r.end_ns, c.r.ignore_key);
      if (free < c.r.rate_bps) {
        return fmt::format("link '{}' {}->{} has {} free of {} reservable in the window", l.name,
                           c.t.nodes[l.ends[d]].name, c.t.nodes[l.ends[1 - d]].name, rate(free),
                           rate(l.reservable_bps()));
      }
    }
    for (const uint32_t site_node : {c.src_node, c.dst_node}) {
      const int d = leaving(l, site_node);
      if (d >= 0 && !slots_for(c, p.links[i], d)) {
        const calendar::SlotCalendar* calendar = c.ledger.slots(p.links[i], d);
        const auto free = calendar->free_slots(c.r.start_ns, c.r.end_ns, c.r.ignore_key);
        return fmt::format(
            "the gateway port on link '{}' leaving '{}' has {} of {} slots free in "
            "the window (reservable {}), too few for {}",
            l.name, c.t.nodes[site_node].name, std::count(free.begin(), free.end(), true),
            l.slot_count, l.reservable_slots(), rate(c.r.rate_bps));
      }
    }
  }
  return "every path lacks capacity";
}

}  // namespace

std::vector<PathPlan> candidate_paths(const Topology& t, const calendar::Ledger& ledger,
                                      const Request& r, bool require_capacity) {
  std::vector<PathPlan> out;
  if (r.src_site >= t.sites.size() || r.dst_site >= t.sites.size() || r.src_site == r.dst_site) {
    return out;
  }
  Context c{t, ledger, r, t.sites[r.src_site].node, t.sites[r.dst_site].node};
  auto admit = [&](uint32_t l, uint32_t) {
    return !require_capacity || (capacity_free(c, l) && slots_free(c, l));
  };
  auto weight = [&](uint32_t l, uint32_t) { return link_weight(c, l); };
  // One path: Dijkstra tests only the links it reaches before the destination; k paths need
  // every arc's admission up front (the residual graph).
  std::vector<path::Path> found;
  if (std::max(1u, r.paths) == 1) {
    if (auto p = path::shortest_path(t, c.src_node, c.dst_node, admit, weight)) {
      found.push_back(std::move(*p));
    }
  } else {
    found = path::disjoint_paths(t, c.src_node, c.dst_node, r.paths, admit, weight);
  }
  for (const path::Path& p : found) {
    const uint64_t burst =
        r.burst_bytes != 0 ? r.burst_bytes : auto_burst_bytes(t.links[p.links.front()], r.rate_bps);
    out.push_back(evaluate(c, p, burst));
  }
  return out;
}

Decision plan(const Topology& t, const calendar::Ledger& ledger, const Request& r) {
  if (r.src_site >= t.sites.size() || r.dst_site >= t.sites.size()) {
    return Refusal{kUnknownSite, "unknown site", r.src_site >= t.sites.size() ? "src" : "dst"};
  }
  if (r.src_site == r.dst_site) {
    return Refusal{kSameSite,
                   fmt::format("src and dst are both site '{}'", t.sites[r.src_site].name), "dst"};
  }
  Context c{t, ledger, r, t.sites[r.src_site].node, t.sites[r.dst_site].node};
  const std::string pair = fmt::format("{}-{}", t.sites[r.src_site].name, t.sites[r.dst_site].name);
  auto any = [](uint32_t, uint32_t) { return true; };
  auto by_min_delay = [&](uint32_t l, uint32_t) { return t.links[l].min_delay_ns(); };
  const auto fastest = path::shortest_path(t, c.src_node, c.dst_node, any, by_min_delay);
  if (!fastest) {
    return Refusal{kNoPath,
                   fmt::format("no path joins sites {} (through transit nodes only)", pair), "dst"};
  }
  int64_t propagation = 0;
  for (const uint32_t l : fastest->links) propagation += t.links[l].min_delay_ns();
  if (r.max_latency_ns > 0 && r.max_latency_ns < propagation) {
    return Refusal{kBelowPropagation,
                   fmt::format("max_latency {} is below the propagation delay {} of the fastest "
                               "path {}",
                               duration(r.max_latency_ns), duration(propagation),
                               path_text(t, fastest->nodes)),
                   "max_latency_ns"};
  }
  auto weight = [&](uint32_t l, uint32_t) { return link_weight(c, l); };
  const auto best_topology = path::shortest_path(t, c.src_node, c.dst_node, any, weight);
  const std::vector<PathPlan> paths = candidate_paths(t, ledger, r, true);
  const uint32_t wanted = std::max(1u, r.paths);
  if (paths.empty()) {
    auto with_capacity = [&](uint32_t l, uint32_t) { return capacity_free(c, l); };
    const bool capacity_only =
        path::shortest_path(t, c.src_node, c.dst_node, with_capacity, weight).has_value();
    return Refusal{capacity_only ? kNoSlots : kNoCapacity,
                   fmt::format("no path {} can carry {} in each direction from {} to {}: {}", pair,
                               rate(r.rate_bps), when(r.start_ns), when(r.end_ns),
                               bottleneck(c, *best_topology)),
                   "min_bandwidth_bps"};
  }
  if (paths.size() < wanted) {
    return Refusal{kTooFewPaths,
                   fmt::format("{} link-disjoint paths {} with {} free were requested, {} exist",
                               wanted, pair, rate(r.rate_bps), paths.size()),
                   "paths"};
  }
  Plan out;
  out.paths = paths;
  out.burst_bytes = r.burst_bytes != 0
                        ? r.burst_bytes
                        : auto_burst_bytes(t.links[paths.front().links.front()], r.rate_bps);
  out.bound = paths.front().bound;
  for (const PathPlan& p : paths) {
    if (p.bound.max_latency_ns > out.bound.max_latency_ns) out.bound = p.bound;
  }
  const Bound& b = out.bound;
  if (r.max_latency_ns > 0 && b.max_latency_ns > r.max_latency_ns) {
    // Would a faster path meet it if it had capacity? Then capacity is what is missing (it may
    // come back), not the latency (which never will).
    const calendar::Ledger empty(t);
    Request unbooked = r;
    unbooked.ignore_key = 0;
    const auto idle = candidate_paths(t, empty, unbooked, true);
    if (!idle.empty() && idle.front().bound.max_latency_ns <= r.max_latency_ns) {
      return Refusal{
          kNoCapacity,
          fmt::format("the paths {} that meet max_latency {} cannot carry {} in each "
                      "direction from {} to {}: {} (the best path with capacity, {}, "
                      "has a bound of {})",
                      path_text(t, idle.front().nodes), duration(r.max_latency_ns),
                      rate(r.rate_bps), when(r.start_ns), when(r.end_ns),
                      bottleneck(c, path::Path{idle.front().nodes, idle.front().links, 0}),
                      path_text(t, paths.front().nodes), duration(b.max_latency_ns)),
          "min_bandwidth_bps"};
    }
    return Refusal{kLatencyUnachievable,
                   fmt::format("max_latency {} is below the bound {} of the best path {} with "
                               "capacity ({} delivery; propagation {})",
                               duration(r.max_latency_ns), duration(b.max_latency_ns),
                               path_text(t, paths.front().nodes), b.on_time ? "on-time" : "in-time",
                               duration(b.propagation_ns)),
                   "max_latency_ns"};
  }
  if (r.max_latency_variation_ns >= 0 && b.max_latency_variation_ns > r.max_latency_variation_ns) {
    return Refusal{
        kVariationUnachievable,
        fmt::format("max_latency_variation {} is below what path {} can promise: {} "
                    "(the receiving gateway's playout error)",
                    duration(r.max_latency_variation_ns), path_text(t, paths.front().nodes),
                    duration(b.max_latency_variation_ns)),
        "max_latency_variation_ns"};
  }
  // 1 - (1 - 0.01) is 0.010000000000000009 in binary floating point: a requirement equal to
  // the path's loss must be met, so compare with a margin far below any meaningful ratio.
  constexpr double kLossEpsilon = 1e-12;
  if (b.max_loss > r.max_loss + kLossEpsilon) {
    return Refusal{kLossUnachievable,
                   fmt::format("max_loss {:g} is below the loss {:g} of path {}", r.max_loss,
                               b.max_loss, path_text(t, paths.front().nodes)),
                   "max_loss"};
  }
  return out;
}

calendar::Booking booking_of(const Plan& plan, uint64_t key, const Request& r) {
  calendar::Booking booking;
  booking.key = key;
  booking.start_ns = r.start_ns;
  booking.end_ns = r.end_ns;
  booking.rate_bps = r.rate_bps;
  for (const PathPlan& p : plan.paths) {
    booking.links.insert(booking.links.end(), p.links.begin(), p.links.end());
    for (const PathEnd& end : p.ends) {
      if (end.gateway != kNone) booking.slots.push_back({end.link, end.direction, end.slots});
    }
  }
  return booking;
}

}  // namespace detwan::control::admission

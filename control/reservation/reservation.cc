#include "control/reservation/reservation.h"

#include <fmt/format.h>

namespace detwan::control::reservation {

std::string_view to_string(State state) noexcept {
  switch (state) {
    case State::kHeld:
      return "held";
    case State::kCommitted:
      return "committed";
    case State::kProvisioned:
      return "provisioned";
    case State::kReleased:
      return "released";
    case State::kTerminated:
      return "terminated";
    case State::kFailed:
      return "failed";
  }
  return "unknown";
}

std::optional<State> state_from_string(std::string_view text) noexcept {
  for (const State s : {State::kHeld, State::kCommitted, State::kProvisioned, State::kReleased,
                        State::kTerminated, State::kFailed}) {
    if (to_string(s) == text) return s;
  }
  return std::nullopt;
}

bool holds_resources(State state) noexcept {
  return state == State::kHeld || state == State::kCommitted || state == State::kProvisioned ||
         state == State::kReleased;
}

bool is_final(State state) noexcept {
  return state == State::kTerminated || state == State::kFailed;
}

std::string_view nsi_reservation_state(State state) noexcept {
  return state == State::kHeld ? "ReserveHeld" : "ReserveStart";
}

std::string_view nsi_provision_state(State state) noexcept {
  return state == State::kProvisioned ? "Provisioned" : "Released";
}

std::string_view nsi_lifecycle_state(State state, std::string_view reason) noexcept {
  if (state == State::kFailed) return "Failed";
  if (state == State::kTerminated) return reason == "end_time" ? "PassedEndTime" : "Terminated";
  return "Created";
}

std::vector<PathPlacement> placement_of(const model::Topology& t, const admission::Plan& plan) {
  std::vector<PathPlacement> out;
  for (const admission::PathPlan& p : plan.paths) {
    PathPlacement placement;
    for (const uint32_t n : p.nodes) placement.nodes.push_back(t.nodes[n].name);
    for (const uint32_t l : p.links) placement.links.push_back(t.links[l].name);
    for (int e = 0; e < 2; ++e) {
      const admission::PathEnd& end = p.ends[e];
      EndPlacement& to = placement.ends[e];
      to.gateway = end.gateway == model::kNone ? "" : t.gateways[end.gateway].name;
      to.link = t.links[end.link].name;
      to.from = t.nodes[t.links[end.link].ends[end.direction]].name;
      to.port = end.port;
      to.peer = end.peer;
      to.slots = end.slots;
      to.guaranteed_bps = end.guaranteed_bps;
    }
    placement.bound = p.bound;
    out.push_back(std::move(placement));
  }
  return out;
}

common::Result<calendar::Booking> booking_of(const model::Topology& t, const Reservation& r) {
  calendar::Booking booking;
  booking.key = r.key;
  booking.start_ns = r.spec.start_ns;
  booking.end_ns = r.spec.end_ns;
  booking.rate_bps = r.spec.min_bandwidth_bps;
  for (const PathPlacement& p : r.paths) {
    for (const std::string& name : p.links) {
      const uint32_t l = t.find_link(name);
      if (l == model::kNone) {
        return common::make_error(
            common::ErrorCode::kNotFound,
            fmt::format("{}: link '{}' of its path is not in the topology", r.id, name));
      }
      booking.links.push_back(l);
    }
    for (const EndPlacement& end : p.ends) {
      if (end.gateway.empty()) continue;
      const uint32_t l = t.find_link(end.link);
      const uint32_t from = t.find_node(end.from);
      if (l == model::kNone || from == model::kNone || t.links[l].other_end(from) == model::kNone) {
        return common::make_error(common::ErrorCode::kNotFound,
                                  fmt::format("{}: port '{}' on link '{}' from '{}' is not in the "
                                              "topology",
                                              r.id, end.port, end.link, end.from));
      }
      for (const uint32_t s : end.slots) {
        if (s >= t.links[l].slot_count) {
          return common::make_error(common::ErrorCode::kNotFound,
                                    fmt::format("{}: slot {} is beyond link '{}''s {} slots", r.id,
                                                s, end.link, t.links[l].slot_count));
        }
      }
      booking.slots.push_back({l, t.links[l].direction_from(from), end.slots});
    }
  }
  return booking;
}

}  // namespace detwan::control::reservation

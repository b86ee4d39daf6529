// control/reservation/reservation: state names, NSI sub-states, and placement/booking by name.
#include "control/reservation/reservation.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "control/admission/planner.h"
#include "tests/control/topology_builder.h"

namespace detwan::control::reservation {
namespace {

using testing::link_with;
using testing::TopologyBuilder;

constexpr State kAll[] = {State::kHeld,     State::kCommitted,  State::kProvisioned,
                          State::kReleased, State::kTerminated, State::kFailed};

TEST(ReservationState, NamesRoundTrip) {
  const std::vector<std::string> names = {"held",     "committed",  "provisioned",
                                          "released", "terminated", "failed"};
  for (size_t i = 0; i < std::size(kAll); ++i) {
    EXPECT_EQ(to_string(kAll[i]), names[i]);
    const auto back = state_from_string(names[i]);
    ASSERT_TRUE(back.has_value()) << names[i];
    EXPECT_EQ(*back, kAll[i]);
  }
  EXPECT_FALSE(state_from_string("Held").has_value());
  EXPECT_FALSE(state_from_string("").has_value());
  EXPECT_FALSE(state_from_string("unknown").has_value());
}

TEST(ReservationState, ResourcesAndFinality) {
  EXPECT_TRUE(holds_resources(State::kHeld));
  EXPECT_TRUE(holds_resources(State::kCommitted));
  EXPECT_TRUE(holds_resources(State::kProvisioned));
  EXPECT_TRUE(holds_resources(State::kReleased));
  EXPECT_FALSE(holds_resources(State::kTerminated));
  EXPECT_FALSE(holds_resources(State::kFailed));
  for (const State s : kAll) {
    EXPECT_EQ(is_final(s), !holds_resources(s)) << to_string(s);
  }
}

TEST(ReservationState, NsiSubStates) {
  EXPECT_EQ(nsi_reservation_state(State::kHeld), "ReserveHeld");
  for (const State s : {State::kCommitted, State::kProvisioned, State::kReleased,
                        State::kTerminated, State::kFailed}) {
    EXPECT_EQ(nsi_reservation_state(s), "ReserveStart") << to_string(s);
  }
  EXPECT_EQ(nsi_provision_state(State::kProvisioned), "Provisioned");
  for (const State s :
       {State::kHeld, State::kCommitted, State::kReleased, State::kTerminated, State::kFailed}) {
    EXPECT_EQ(nsi_provision_state(s), "Released") << to_string(s);
  }
  EXPECT_EQ(nsi_lifecycle_state(State::kTerminated, "end_time"), "PassedEndTime");
  EXPECT_EQ(nsi_lifecycle_state(State::kTerminated, "aborted"), "Terminated");
  EXPECT_EQ(nsi_lifecycle_state(State::kTerminated, "terminated_by_client"), "Terminated");
  EXPECT_EQ(nsi_lifecycle_state(State::kFailed, "gateway said no"), "Failed");
  for (const State s : {State::kHeld, State::kCommitted, State::kProvisioned, State::kReleased}) {
    EXPECT_EQ(nsi_lifecycle_state(s, "end_time"), "Created") << to_string(s);
  }
}

model::Topology lab() {
  return TopologyBuilder()
      .site("a")
      .site("b")
      .transit("r")
      .link("a-r", "a", "r", link_with(1'000'000'000, 1'000'000))
      .link("r-b", "r", "b", link_with(1'000'000'000, 2'000'000))
      .build();
}

TEST(ReservationPlacement, ByNameAndBackToTheSameBooking) {
  const model::Topology t = lab();
  const calendar::Ledger ledger(t);
  admission::Request request;
  request.src_site = 0;
  request.dst_site = 1;
  request.rate_bps = 100'000'000;
  request.start_ns = 1'000;
  request.end_ns = 2'000;
  const auto decision = admission::plan(t, ledger, request);
  ASSERT_TRUE(std::holds_alternative<admission::Plan>(decision));
  const admission::Plan& plan = std::get<admission::Plan>(decision);
  const std::vector<PathPlacement> placement = placement_of(t, plan);
  ASSERT_EQ(placement.size(), 1u);
  EXPECT_EQ(placement[0].nodes, (std::vector<std::string>{"a", "r", "b"}));
  EXPECT_EQ(placement[0].links, (std::vector<std::string>{"a-r", "r-b"}));
  EXPECT_EQ(placement[0].ends[0].gateway, "gw-a");
  EXPECT_EQ(placement[0].ends[0].link, "a-r");
  EXPECT_EQ(placement[0].ends[0].from, "a");
  EXPECT_EQ(placement[0].ends[0].port, "p-a-r");
  EXPECT_EQ(placement[0].ends[1].gateway, "gw-b");
  EXPECT_EQ(placement[0].ends[1].link, "r-b");
  EXPECT_EQ(placement[0].ends[1].from, "b");
  EXPECT_EQ(placement[0].ends[1].slots, plan.paths[0].ends[1].slots);
  EXPECT_EQ(placement[0].bound.max_latency_ns, plan.paths[0].bound.max_latency_ns);

  Reservation r;
  r.id = "r-5";
  r.key = 5;
  r.spec.min_bandwidth_bps = request.rate_bps;
  r.spec.start_ns = request.start_ns;
  r.spec.end_ns = request.end_ns;
  r.paths = placement;
  const auto booking = booking_of(t, r);
  ASSERT_TRUE(booking.has_value()) << booking.error().message;
  const calendar::Booking expected = admission::booking_of(plan, 5, request);
  EXPECT_EQ(booking->key, expected.key);
  EXPECT_EQ(booking->start_ns, expected.start_ns);
  EXPECT_EQ(booking->end_ns, expected.end_ns);
  EXPECT_EQ(booking->rate_bps, expected.rate_bps);
  EXPECT_EQ(booking->links, expected.links);
  ASSERT_EQ(booking->slots.size(), expected.slots.size());
  for (size_t i = 0; i < expected.slots.size(); ++i) {
    EXPECT_EQ(booking->slots[i].link, expected.slots[i].link);
    EXPECT_EQ(booking->slots[i].direction, expected.slots[i].direction);
    EXPECT_EQ(booking->slots[i].slots, expected.slots[i].slots);
  }

  // A topology that lost a link, or a slot beyond the link's slots: refused naming it.
  Reservation gone = r;
  gone.paths[0].links[1] = "r-x";
  auto refused = booking_of(t, gone);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("r-5: link 'r-x'"), std::string::npos)
      << refused.error().message;
  Reservation beyond = r;
  beyond.paths[0].ends[0].slots.push_back(100);
  refused = booking_of(t, beyond);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("slot 100 is beyond link 'a-r'"), std::string::npos)
      << refused.error().message;
  Reservation moved = r;
  moved.paths[0].ends[0].from = "b";  // b is not an end of a-r
  refused = booking_of(t, moved);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("from 'b'"), std::string::npos) << refused.error().message;
}

}  // namespace
}  // namespace detwan::control::reservation

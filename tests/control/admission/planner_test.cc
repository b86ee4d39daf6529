// control/admission/planner: a plan on the lab link by hand (bounds_test.cc derives the
// figures), and every refusal cause with the link or figure its message names.
#include "control/admission/planner.h"

#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "tests/control/topology_builder.h"

namespace detwan::control::admission {
namespace {

using testing::link_with;
using testing::TopologyBuilder;

constexpr uint64_t kRate = 50'000'000;
constexpr int64_t kStart = 1'800'000'000'000'000'000;  // 2027-01-15T08:00:00Z
constexpr int64_t kEnd = kStart + 3'600'000'000'000;

model::Link lab_link(double loss = 0, double reservable = 0.9) {
  model::Link link = link_with(200'000'000, 5'000'000, 0, loss, reservable);
  link.guard_ns = 2'000;
  return link;
}

model::Topology lab(double loss = 0, double reservable = 0.9) {
  return TopologyBuilder()
      .site("a")
      .site("b")
      .link("a-b", "a", "b", lab_link(loss, reservable))
      .build();
}

Request request(uint64_t rate = kRate) {
  Request r;
  r.src_site = 0;
  r.dst_site = 1;
  r.rate_bps = rate;
  r.start_ns = kStart;
  r.end_ns = kEnd;
  return r;
}

std::vector<uint32_t> range(uint32_t first, uint32_t count) {
  std::vector<uint32_t> out;
  for (uint32_t k = 0; k < count; ++k) out.push_back(first + k);
  return out;
}

// The plan of an admitted decision (a copy: decisions are temporaries); empty if refused.
Plan expect_plan(const Decision& d) {
  if (const auto* refusal = std::get_if<Refusal>(&d)) {
    ADD_FAILURE() << "refused: " << refusal->cause << ": " << refusal->message;
    return Plan{};
  }
  return std::get<Plan>(d);
}

// Expects a refusal with `cause` about `field` whose message contains every one of `words`.
void expect_refusal(const Decision& d, const std::string& cause, const std::string& field,
                    const std::vector<std::string>& words) {
  const auto* refusal = std::get_if<Refusal>(&d);
  ASSERT_NE(refusal, nullptr) << "admitted, expected " << cause;
  EXPECT_EQ(refusal->cause, cause) << refusal->message;
  EXPECT_EQ(refusal->field, field) << refusal->message;
  for (const std::string& w : words) {
    EXPECT_NE(refusal->message.find(w), std::string::npos)
        << "'" << w << "' not in: " << refusal->message;
  }
}

TEST(Planner, OneLinkLabPlanByHand) {
  const model::Topology t = lab();
  const calendar::Ledger ledger(t);
  const Decision d = plan(t, ledger, request());
  const Plan p = expect_plan(d);
  ASSERT_EQ(p.paths.size(), 1u);
  const PathPlan& path = p.paths[0];
  EXPECT_EQ(path.nodes, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(path.links, (std::vector<uint32_t>{0}));
  EXPECT_EQ(p.burst_bytes, 12'144u);
  for (int e = 0; e < 2; ++e) {
    const PathEnd& end = path.ends[e];
    EXPECT_EQ(end.gateway, static_cast<uint32_t>(e));
    EXPECT_EQ(end.link, 0u);
    EXPECT_EQ(end.direction, e);  // a sends on direction 0, b on direction 1
    EXPECT_EQ(end.port, "p-a-b");
    EXPECT_EQ(end.peer, e == 0 ? "gw-b@p-a-b" : "gw-a@p-a-b");
    EXPECT_EQ(end.slots, range(0, 32));
    EXPECT_EQ(end.guaranteed_bps, 51'456'000u);
  }
  const Bound& b = p.bound;
  EXPECT_FALSE(b.on_time);
  EXPECT_EQ(b.forward.egress_ns, 2'691'500);
  EXPECT_EQ(b.reverse.egress_ns, 2'691'500);
  EXPECT_EQ(b.max_latency_ns, 7'791'500);
  EXPECT_EQ(b.max_latency_variation_ns, 2'791'500);
  EXPECT_EQ(b.min_latency_ns, 5'000'000);
  EXPECT_EQ(b.propagation_ns, 5'000'000);

  // The booking it makes.
  const calendar::Booking booking = booking_of(p, 9, request());
  EXPECT_EQ(booking.key, 9u);
  EXPECT_EQ(booking.start_ns, kStart);
  EXPECT_EQ(booking.end_ns, kEnd);
  EXPECT_EQ(booking.rate_bps, kRate);
  EXPECT_EQ(booking.links, (std::vector<uint32_t>{0}));
  ASSERT_EQ(booking.slots.size(), 2u);
  EXPECT_EQ(booking.slots[0].direction, 0);
  EXPECT_EQ(booking.slots[1].direction, 1);
  EXPECT_EQ(booking.slots[1].slots, range(0, 32));

  // Booked, the next reservation gets the next slots.
  calendar::Ledger booked(t);
  booked.book(booking);
  const Plan second = expect_plan(plan(t, booked, request()));
  ASSERT_EQ(second.paths.size(), 1u);
  EXPECT_EQ(second.paths[0].ends[0].slots, range(32, 32));
}

TEST(Planner, VariationChoosesInTimeOrOnTime) {
  const model::Topology t = lab();
  const calendar::Ledger ledger(t);
  Request r = request();
  r.max_latency_variation_ns = 3'000'000;  // in time meets it (2.7915 ms)
  EXPECT_FALSE(expect_plan(plan(t, ledger, r)).bound.on_time);
  r.max_latency_variation_ns = 2'000'000;  // needs the playout: variation 100 us
  const Plan p = expect_plan(plan(t, ledger, r));
  EXPECT_TRUE(p.bound.on_time);
  EXPECT_EQ(p.bound.playout_bound_ns, 7'792'000);
  EXPECT_EQ(p.bound.max_latency_ns, 7'892'000);
  EXPECT_EQ(p.bound.max_latency_variation_ns, 100'000);
}

TEST(Planner, UnknownAndSameSite) {
  const model::Topology t = lab();
  const calendar::Ledger ledger(t);
  Request r = request();
  r.dst_site = 7;
  expect_refusal(plan(t, ledger, r), kUnknownSite, "dst", {});
  r = request();
  r.src_site = model::kNone;
  expect_refusal(plan(t, ledger, r), kUnknownSite, "src", {});
  r = request();
  r.dst_site = 0;
  expect_refusal(plan(t, ledger, r), kSameSite, "dst", {"'a'"});
}

TEST(Planner, NoPathThroughTransitNodesOnly) {
  // a and b are joined only through site c.
  const model::Topology t = TopologyBuilder()
                                .site("a")
                                .site("b")
                                .site("c", false)
                                .link("a-c", "a", "c", lab_link())
                                .link("c-b", "c", "b", lab_link())
                                .build();
  const calendar::Ledger ledger(t);
  expect_refusal(plan(t, ledger, request()), kNoPath, "dst", {"a-b"});
}

TEST(Planner, NoCapacityNamesTheFullLink) {
  const model::Topology t = lab();
  calendar::Ledger ledger(t);
  calendar::Booking full;
  full.key = 1;
  full.start_ns = kStart - 1;
  full.end_ns = kStart + 1;     // overlaps the window by 1 ns
  full.rate_bps = 160'000'000;  // 180 reservable: 20 Mbit/s left
  full.links = {0};
  ledger.book(full);
  expect_refusal(plan(t, ledger, request()), kNoCapacity, "min_bandwidth_bps",
                 {"link 'a-b'", "20mbit free of 180mbit"});
  // 20 Mbit/s still fit.
  expect_plan(plan(t, ledger, request(20'000'000)));
  // After that booking the full rate fits again.
  Request later = request();
  later.start_ns = kStart + 1;
  expect_plan(plan(t, ledger, later));
}

TEST(Planner, NoSlotsWhileCapacityIsFree) {
  // The whole link may be reserved, but 80 of its 100 slots at a are taken (a booking with
  // slots and no rate: made by hand, bypassing admission): 50 Mbit/s needs 32.
  const model::Topology t = lab(0, 1.0);
  calendar::Ledger ledger(t);
  calendar::Booking slots_only;
  slots_only.key = 1;
  slots_only.start_ns = kStart;
  slots_only.end_ns = kEnd;
  slots_only.slots = {{0, 0, range(0, 80)}};
  ledger.book(slots_only);
  ASSERT_EQ(ledger.free_bps(0, 0, kStart, kEnd), 200'000'000u);
  expect_refusal(plan(t, ledger, request()), kNoSlots, "min_bandwidth_bps",
                 {"link 'a-b' leaving 'a'", "20 of 100 slots free"});
}

TEST(Planner, LatencyBelowPropagation) {
  const model::Topology t = lab();
  const calendar::Ledger ledger(t);
  Request r = request();
  r.max_latency_ns = 4'999'999;
  expect_refusal(plan(t, ledger, r), kBelowPropagation, "max_latency_ns", {"5ms", "a-b"});
}

TEST(Planner, LatencyUnachievable) {
  const model::Topology t = lab();
  const calendar::Ledger ledger(t);
  Request r = request();
  r.max_latency_ns = 7'791'499;  // one ns below the bound
  expect_refusal(plan(t, ledger, r), kLatencyUnachievable, "max_latency_ns",
                 {"7791.5us", "a-b", "in-time"});
  r.max_latency_ns = 7'791'500;
  EXPECT_EQ(expect_plan(plan(t, ledger, r)).bound.max_latency_ns, 7'791'500);
}

TEST(Planner, VariationBelowThePlayoutError) {
  const model::Topology t = lab();
  const calendar::Ledger ledger(t);
  Request r = request();
  r.max_latency_variation_ns = 99'999;
  expect_refusal(plan(t, ledger, r), kVariationUnachievable, "max_latency_variation_ns",
                 {"100us", "playout error"});
  r.max_latency_variation_ns = 100'000;
  EXPECT_TRUE(expect_plan(plan(t, ledger, r)).bound.on_time);
}

TEST(Planner, LossUnachievable) {
  const model::Topology t = lab(0.01);
  const calendar::Ledger ledger(t);
  Request r = request();
  r.max_loss = 0.005;
  expect_refusal(plan(t, ledger, r), kLossUnachievable, "max_loss", {"0.005", "0.01", "a-b"});
  r.max_loss = 0.02;
  EXPECT_NEAR(expect_plan(plan(t, ledger, r)).bound.max_loss, 0.01, 1e-12);
}

TEST(Planner, LossRequirementEqualToTheLinkLossIsMet) {
  // The link loses 1 %; a client asking for at most 1 % must be admitted.
  const model::Topology t = lab(0.01);
  const calendar::Ledger ledger(t);
  Request r = request();
  r.max_loss = 0.01;
  expect_plan(plan(t, ledger, r));
}

TEST(Planner, TooFewDisjointPaths) {
  const model::Topology t = lab();
  const calendar::Ledger ledger(t);
  Request r = request();
  r.paths = 2;
  expect_refusal(plan(t, ledger, r), kTooFewPaths, "paths", {"2 link-disjoint paths", "1 exist"});
}

TEST(Planner, TwoDisjointPathsBookSlotsOnFourPorts) {
  // The trap: the fastest path s-u-v-t (16 ms) leaves no second path; the planner must find
  // s-u-t (20 ms) and s-v-t (25 ms), and promise the slower one's bound.
  const model::Topology t = TopologyBuilder()
                                .site("s")
                                .site("t")
                                .transit("u")
                                .transit("v")
                                .link("s-u", "s", "u", link_with(200'000'000, 5'000'000))
                                .link("u-v", "u", "v", link_with(200'000'000, 1'000'000))
                                .link("v-t", "v", "t", link_with(200'000'000, 10'000'000))
                                .link("s-v", "s", "v", link_with(200'000'000, 15'000'000))
                                .link("u-t", "u", "t", link_with(200'000'000, 15'000'000))
                                .build();
  const calendar::Ledger ledger(t);
  Request r = request();
  const Plan one = expect_plan(plan(t, ledger, r));
  ASSERT_EQ(one.paths.size(), 1u);
  EXPECT_EQ(one.paths[0].nodes, (std::vector<uint32_t>{0, 2, 3, 1}));
  r.paths = 2;
  const Plan p = expect_plan(plan(t, ledger, r));
  ASSERT_EQ(p.paths.size(), 2u);
  EXPECT_EQ(p.paths[0].nodes, (std::vector<uint32_t>{0, 2, 1}));  // s-u-t, best first
  EXPECT_EQ(p.paths[1].nodes, (std::vector<uint32_t>{0, 3, 1}));  // s-v-t
  EXPECT_EQ(p.paths[0].bound.propagation_ns, 20'000'000);
  EXPECT_EQ(p.paths[1].bound.propagation_ns, 25'000'000);
  // The promised bound is the worse path's.
  ASSERT_GT(p.paths[1].bound.max_latency_ns, p.paths[0].bound.max_latency_ns);
  EXPECT_EQ(p.bound.max_latency_ns, p.paths[1].bound.max_latency_ns);
  EXPECT_EQ(p.bound.propagation_ns, 25'000'000);
  const calendar::Booking booking = booking_of(p, 3, r);
  EXPECT_EQ(booking.links.size(), 4u);
  EXPECT_EQ(booking.slots.size(), 4u);  // s's two ports and t's two ports
  calendar::Ledger booked(t);
  booked.book(booking);
  EXPECT_EQ(booked.check(), "");
}

TEST(Planner, TransitHopAddsItsTerms) {
  // a -(200 Mbit/s, 5 ms)- r -(1 Gbit/s, 3 ms)- b, guard 2 us on both.
  model::Link fast = link_with(1'000'000'000, 3'000'000);
  fast.guard_ns = 2'000;
  const model::Topology t = TopologyBuilder()
                                .site("a")
                                .site("b")
                                .transit("r")
                                .link("a-r", "a", "r", lab_link())
                                .link("r-b", "r", "b", fast)
                                .build();
  const calendar::Ledger ledger(t);
  const Plan p = expect_plan(plan(t, ledger, request()));
  ASSERT_EQ(p.paths.size(), 1u);
  EXPECT_EQ(p.paths[0].nodes, (std::vector<uint32_t>{0, 2, 1}));
  EXPECT_EQ(p.burst_bytes, 12'144u);  // auto, from the first link
  const Bound& b = p.bound;
  // Forward: egress at a as on the one-link lab; transit = one frame at 1 Gbit/s.
  EXPECT_EQ(b.forward.egress_ns, 2'691'500);
  EXPECT_EQ(b.forward.links_ns, 8'000'000);
  EXPECT_EQ(b.forward.transit_ns, 12'144);
  EXPECT_EQ(b.forward.max_ns, 10'803'644);
  // Reverse: b sends on the 1 Gbit/s link: 7 slots (usable 70 us - 2 us - 12.144 us = 55856 ns,
  // guaranteed 55.856 Mbit/s), T = 944144 ns, burst 12144 B / 55.856 Mbit/s = 1739330 ns,
  // frame 12144 ns; transit = one frame at 200 Mbit/s.
  EXPECT_EQ(p.paths[0].ends[1].slots, range(0, 7));
  EXPECT_EQ(p.paths[0].ends[1].guaranteed_bps, 55'856'000u);
  EXPECT_EQ(b.reverse.egress_ns, 944'144 + 1'739'330 + 12'144);
  EXPECT_EQ(b.reverse.transit_ns, 60'720);
  EXPECT_EQ(b.reverse.max_ns, 10'856'338);
  EXPECT_EQ(b.max_latency_ns, 10'856'338);
  EXPECT_EQ(b.min_latency_ns, 8'000'000);
  EXPECT_EQ(b.propagation_ns, 8'000'000);
}

TEST(Planner, ModificationKeepsItsSlotsAndDoesNotCountItself) {
  const model::Topology t = lab();
  calendar::Ledger ledger(t);
  // Reservation 7 holds slots 50..81 on both ports and 50 Mbit/s; 8 takes the rest of the
  // reservable rate (180 Mbit/s).
  calendar::Booking current;
  current.key = 7;
  current.start_ns = kStart;
  current.end_ns = kEnd;
  current.rate_bps = kRate;
  current.links = {0};
  current.slots = {{0, 0, range(50, 32)}, {0, 1, range(50, 32)}};
  ledger.book(current);
  calendar::Booking rest;
  rest.key = 8;
  rest.start_ns = kStart;
  rest.end_ns = kEnd;
  rest.rate_bps = 130'000'000;
  rest.links = {0};
  ledger.book(rest);
  ASSERT_EQ(ledger.check(), "");

  // A new request does not fit...
  expect_refusal(plan(t, ledger, request()), kNoCapacity, "min_bandwidth_bps", {"link 'a-b'"});
  // ...but 7's modification (a lower rate) does, and keeps slots 50..81.
  Request modify = request(40'000'000);
  modify.ignore_key = 7;
  modify.current = ledger.find(7);
  const Plan kept = expect_plan(plan(t, ledger, modify));
  EXPECT_EQ(kept.paths[0].ends[0].slots, range(50, 32));
  EXPECT_EQ(kept.paths[0].ends[1].slots, range(50, 32));
  // Without `current` it is planned afresh (first fit from slot 0, fewer slots).
  modify.current = nullptr;
  const Plan fresh = expect_plan(plan(t, ledger, modify));
  ASSERT_FALSE(fresh.paths[0].ends[0].slots.empty());
  EXPECT_EQ(fresh.paths[0].ends[0].slots.front(), 0u);
  EXPECT_LT(fresh.paths[0].ends[0].slots.size(), 32u);
  // Growing beyond what is free even without itself: refused.
  Request grow = request(60'000'000);
  grow.ignore_key = 7;
  grow.current = ledger.find(7);
  expect_refusal(plan(t, ledger, grow), kNoCapacity, "min_bandwidth_bps", {"link 'a-b'"});
}

TEST(Planner, CandidatePathsWithoutTheCapacityTest) {
  const model::Topology t = lab();
  calendar::Ledger ledger(t);
  calendar::Booking full;
  full.key = 1;
  full.start_ns = kStart;
  full.end_ns = kEnd;
  full.rate_bps = 180'000'000;
  full.links = {0};
  ledger.book(full);
  EXPECT_TRUE(candidate_paths(t, ledger, request(), true).empty());
  const auto all = candidate_paths(t, ledger, request(), false);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].links, (std::vector<uint32_t>{0}));
}

}  // namespace
}  // namespace detwan::control::admission

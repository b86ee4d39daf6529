// control/admission/bounds: the latency terms of one direction, computed by hand.
//
// Lab link: 200 Mbit/s, 5 ms, cycle 1 ms of 100 slots (10 us), guard 2 us, MTU 1500 (a 1518-byte
// frame takes 60720 ns at 200 Mbit/s). 50 Mbit/s takes 32 slots (usable 32 * 10 us - 2 us -
// 60.72 us = 257280 ns per ms: guaranteed 51.456 Mbit/s), so
//   service latency T = 1 ms - 257280 ns = 742720 ns
//   burst (auto)      = max(one cycle at 50 Mbit/s = 6250 B, 8 frames = 12144 B) = 12144 B
//   burst / R'        = ceil(12144 * 8 / 51.456e6 s) = 1888060 ns
//   egress            = 742720 + 1888060 + 60720 = 2691500 ns
//   max               = egress + 5 ms + 2 * 50 us processing = 7791500 ns; min = 5 ms
#include "control/admission/bounds.h"

#include <gtest/gtest.h>

#include "tests/control/topology_builder.h"

namespace detwan::control::admission {
namespace {

using testing::link_with;
using testing::TopologyBuilder;

model::Link lab_link(int64_t jitter_ns = 0, double loss = 0) {
  model::Link link = link_with(200'000'000, 5'000'000, jitter_ns, loss);
  link.guard_ns = 2'000;
  return link;
}

model::Topology lab(int64_t jitter_ns = 0) {
  return TopologyBuilder().site("a").site("b").link("a-b", "a", "b", lab_link(jitter_ns)).build();
}

TEST(Bounds, AutoBurstIsOneCycleAtTheRateOrEightFrames) {
  const model::Link link = lab_link();
  EXPECT_EQ(auto_burst_bytes(link, 50'000'000), 12'144u);      // 6250 B per cycle < 8 frames
  EXPECT_EQ(auto_burst_bytes(link, 1'000'000'000), 125'000u);  // one 1 ms cycle at 1 Gbit/s
  model::Link jumbo = link;
  jumbo.mtu_bytes = 9000;
  EXPECT_EQ(auto_burst_bytes(jumbo, 50'000'000), 8u * 9018u);
}

TEST(Bounds, OneLinkDirectionByHand) {
  const model::Topology t = lab();
  const DirectionBound d = direction_bound(t, {0}, 0, 1, 742'720, 51'456'000, 12'144);
  EXPECT_EQ(d.egress_ns, 2'691'500);
  EXPECT_EQ(d.links_ns, 5'000'000);
  EXPECT_EQ(d.transit_ns, 0);
  EXPECT_EQ(d.processing_ns, 100'000);
  EXPECT_EQ(d.max_ns, 7'791'500);
  EXPECT_EQ(d.min_ns, 5'000'000);
  EXPECT_EQ(d.playout_error_ns, 100'000);
  // A site without a gateway adds no processing and no playout error.
  const DirectionBound none = direction_bound(t, {0}, 0, model::kNone, 742'720, 51'456'000, 12'144);
  EXPECT_EQ(none.processing_ns, 50'000);
  EXPECT_EQ(none.playout_error_ns, 0);
}

TEST(Bounds, JitterWidensBothEnds) {
  const model::Topology t = lab(100'000);
  const DirectionBound d = direction_bound(t, {0}, 0, 1, 742'720, 51'456'000, 12'144);
  EXPECT_EQ(d.links_ns, 5'100'000);
  EXPECT_EQ(d.min_ns, 4'900'000);
  EXPECT_EQ(d.max_ns, 7'891'500);
}

TEST(Bounds, TransitHopsAddOneFrameAtTheirOutgoingRate) {
  // a -(200 Mbit/s)- r -(1 Gbit/s)- b: from a the transit hop sends on the 1 Gbit/s link
  // (12144 ns), from b on the 200 Mbit/s link (60720 ns).
  model::Link fast = link_with(1'000'000'000, 3'000'000);
  const model::Topology t = TopologyBuilder()
                                .site("a")
                                .site("b")
                                .transit("r")
                                .link("a-r", "a", "r", lab_link())
                                .link("r-b", "r", "b", fast)
                                .build();
  const DirectionBound forward = direction_bound(t, {0, 1}, 0, 1, 0, 0, 0);
  EXPECT_EQ(forward.transit_ns, 12'144);
  EXPECT_EQ(forward.links_ns, 8'000'000);
  EXPECT_EQ(forward.egress_ns, 60'720);  // no slot wait, no burst: one frame on a-r
  const DirectionBound reverse = direction_bound(t, {1, 0}, 1, 0, 0, 0, 0);
  EXPECT_EQ(reverse.transit_ns, 60'720);
  EXPECT_EQ(reverse.egress_ns, 12'144);
}

TEST(Bounds, CombineChoosesInTimeUnlessTheVariationNeedsPlayout) {
  const model::Topology t = lab();
  const DirectionBound d = direction_bound(t, {0}, 0, 1, 742'720, 51'456'000, 12'144);
  // No requirement: in time.
  Bound b = combine(t, {0}, d, d, -1);
  EXPECT_FALSE(b.on_time);
  EXPECT_EQ(b.playout_bound_ns, 0);
  EXPECT_EQ(b.max_latency_ns, 7'791'500);
  EXPECT_EQ(b.max_latency_variation_ns, 2'791'500);
  EXPECT_EQ(b.min_latency_ns, 5'000'000);
  EXPECT_EQ(b.propagation_ns, 5'000'000);
  EXPECT_DOUBLE_EQ(b.max_loss, 0.0);
  // Exactly the in-time variation: still in time.
  EXPECT_FALSE(combine(t, {0}, d, d, 2'791'500).on_time);
  // One ns less: on time, released at B = max rounded up to 1 us, plus the playout error.
  b = combine(t, {0}, d, d, 2'791'499);
  EXPECT_TRUE(b.on_time);
  EXPECT_EQ(b.playout_bound_ns, 7'792'000);
  EXPECT_EQ(b.max_latency_ns, 7'892'000);
  EXPECT_EQ(b.max_latency_variation_ns, 100'000);
  EXPECT_EQ(b.min_latency_ns, 7'792'000);
}

TEST(Bounds, CombineTakesTheWorseDirectionAndMultipliesLoss) {
  const model::Topology t = TopologyBuilder()
                                .site("a")
                                .site("b", true, 300'000)
                                .transit("r")
                                .link("a-r", "a", "r", link_with(1'000'000'000, 1'000'000, 0, 0.01))
                                .link("r-b", "r", "b", link_with(1'000'000'000, 2'000'000, 0, 0.02))
                                .build();
  DirectionBound forward;
  forward.max_ns = 9'000'000;
  forward.min_ns = 3'000'000;
  forward.playout_error_ns = 300'000;  // b's
  DirectionBound reverse;
  reverse.max_ns = 8'000'000;
  reverse.min_ns = 2'500'000;
  reverse.playout_error_ns = 100'000;
  Bound b = combine(t, {0, 1}, forward, reverse, -1);
  EXPECT_EQ(b.max_latency_ns, 9'000'000);
  EXPECT_EQ(b.min_latency_ns, 2'500'000);
  EXPECT_EQ(b.max_latency_variation_ns, 6'500'000);
  EXPECT_EQ(b.propagation_ns, 3'000'000);
  EXPECT_NEAR(b.max_loss, 1 - 0.99 * 0.98, 1e-12);
  b = combine(t, {0, 1}, forward, reverse, 1'000'000);
  EXPECT_TRUE(b.on_time);
  EXPECT_EQ(b.max_latency_variation_ns, 300'000);  // the larger playout error
  EXPECT_EQ(b.max_latency_ns, 9'300'000);
}

}  // namespace
}  // namespace detwan::control::admission

// Pacing groups (transport/pacing_group.h): channels that pace through one group share its rate.
// Two connections on two virtual networks stepped in turns (each at most 5 us ahead of the
// other), so the group sees one clock to within a datagram's wire time.
#include <gtest/gtest.h>

#include "tests/transport/proto/test_util.h"
#include "transport/pacing_group.h"

namespace detwan::transport::proto::testing {
namespace {

constexpr int64_t kRate = 100'000'000;
constexpr int64_t kStepNs = 5'000;

double wire_ns(const VirtualNet& net, int64_t rate_bps) {
  const double bits = 8.0 * static_cast<double>(net.wire_bytes(0, 0) + 42 * net.datagrams(0, 0));
  return bits * 1e9 / static_cast<double>(rate_bps);
}

bool received(VirtualNet& net, size_t n) {
  return count_events(net.events(1), Event::Kind::kMessage) >= n;
}

// Runs both networks in turns until each server has one message; returns when each finished.
std::pair<int64_t, int64_t> run_both(VirtualNet& a, VirtualNet& b, int64_t limit_ns) {
  int64_t done_a = -1;
  int64_t done_b = -1;
  const int64_t start = a.now_ns();
  auto step = [&](VirtualNet& net, int64_t& done) {
    if (done >= 0) {
      net.run_until([] { return false; }, kStepNs);  // keeps acknowledging, keeps the clock
    } else if (net.run_until([&] { return received(net, 1); }, kStepNs)) {
      done = net.now_ns();
    }
  };
  // Whichever steps first takes a token the group releases within the step: alternate, as two
  // progress threads would race for it.
  for (bool a_first = true; (done_a < 0 || done_b < 0) && a.now_ns() - start < limit_ns;
       a_first = !a_first) {
    if (a_first) {
      step(a, done_a);
      step(b, done_b);
    } else {
      step(b, done_b);
      step(a, done_a);
    }
  }
  return {done_a, done_b};
}

TEST(PacingGroup, TwoChannelsOfOneGroupTogetherKeepItsRate) {
  // Each channel is reserved the whole rate; the group bounds what both send together: 2 x 2 MB
  // take the wire time of 4 MB at the group's rate (plus an RTT for the last ACK), not of 2 MB.
  VirtualNet a(reserved_options(kRate), reserved_options(kRate), 1, 0x1111);
  VirtualNet b(reserved_options(kRate), reserved_options(kRate), 2, 0x2222);
  ASSERT_TRUE(a.run_until([&] { return a.client().established(); }, 1'000'000'000));
  ASSERT_TRUE(b.run_until([&] { return b.client().established(); }, 1'000'000'000));
  b.run_until([] { return false; }, a.now_ns() - b.now_ns());  // one clock from here on
  auto group = PacingGroup::reserved(kRate, 1500, 42, 0);
  ASSERT_EQ(a.client().set_pacing_group(0, group), Status::kOk);
  ASSERT_EQ(b.client().set_pacing_group(0, group), Status::kOk);
  EXPECT_EQ(a.client().set_pacing_group(1, group), Status::kInvalidArgument);

  const int64_t start = a.now_ns();
  const auto msgs = random_messages({2'000'000, 2'000'000}, 7);
  ASSERT_EQ(a.client().queue_message(msgs[0], 1), Status::kOk);
  ASSERT_EQ(b.client().queue_message(msgs[1], 2), Status::kOk);
  const auto [end_a, end_b] = run_both(a, b, 10'000'000'000);
  ASSERT_GE(end_a, 0);
  ASSERT_GE(end_b, 0);
  const double last = static_cast<double>(std::max(end_a, end_b) - start);
  const double together = wire_ns(a, kRate) + wire_ns(b, kRate);
  EXPECT_GT(last, 0.97 * together);          // never above the group's rate
  EXPECT_LT(last, 1.03 * together + 4e6);    // and all of it used (RTT 2 ms + a step)
  // Interleaved, not one after the other (that would finish the first at half the time).
  EXPECT_GT(static_cast<double>(std::min(end_a, end_b) - start), 0.6 * together);
  for (VirtualNet* net : {&a, &b}) {
    for (const Event& e : net->events(1)) {
      if (e.kind == Event::Kind::kMessage) {
        EXPECT_TRUE(e.message == (net == &a ? msgs[0] : msgs[1]));
      }
    }
  }
}

TEST(PacingGroup, OneChannelAloneUsesTheGroupsWholeRateAndNoMore) {
  // Own pacer at the full rate, group at a quarter: the group decides.
  VirtualNet net(reserved_options(kRate), reserved_options(kRate));
  ASSERT_TRUE(net.run_until([&] { return net.client().established(); }, 1'000'000'000));
  ASSERT_EQ(net.client().set_pacing_group(0, PacingGroup::reserved(kRate / 4, 1500, 42, 0)),
            Status::kOk);
  const int64_t start = net.now_ns();
  ASSERT_TRUE(transfer(net, random_messages({1'000'000}, 3)));
  const double elapsed = static_cast<double>(net.now_ns() - start);
  EXPECT_NEAR(elapsed, wire_ns(net, kRate / 4) + 2e6, 0.03 * wire_ns(net, kRate / 4));
  // Leaving the group: the channel's own rate again.
  ASSERT_EQ(net.client().set_pacing_group(0, nullptr), Status::kOk);
  const uint64_t bytes_before = net.wire_bytes(0, 0);
  const uint64_t datagrams_before = net.datagrams(0, 0);
  const int64_t again = net.now_ns();
  ASSERT_TRUE(transfer(net, random_messages({1'000'000}, 4)));
  const double bits = 8.0 * static_cast<double>(net.wire_bytes(0, 0) - bytes_before +
                                                 42 * (net.datagrams(0, 0) - datagrams_before));
  // At most the catch-up burst (5 ms) early: its own pacer ran behind while the group paced.
  const double alone = bits * 1e9 / kRate;
  EXPECT_GT(static_cast<double>(net.now_ns() - again), alone - 5.5e6);
  EXPECT_LT(static_cast<double>(net.now_ns() - again), 1.03 * alone + 2e6);
}

}  // namespace
}  // namespace detwan::transport::proto::testing

// A clock step on one site (an operator or a time daemon sets it +200 ms) while a tunnel carries
// traffic: nothing is lost or delivered twice, the packets sent across the step are released
// off time (late or held, all counted), and the tunnel is back on time once the peer's clock
// estimate has followed (within the clock filter's window of exchanges).
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "tests/dataplane/gw/engine_sim_util.h"

namespace detwan::dataplane::gw {
namespace {

using loopback::Delivery;
using namespace testing;  // NOLINT(google-build-using-namespace): test helpers

TEST(EngineClockStep, ASenderClockStepIsFollowedAndNothingIsLost) {
  SiteOptions o;  // offsets estimated by the time exchange (every 10 ms), not configured
  o.bound7_ns = 5 * kMs;
  auto g = two_sites(o, o);
  ASSERT_NE(g, nullptr);
  g->set_faults(0, 1, {.delay_ns = 1 * kMs});
  g->set_faults(1, 0, {.delay_ns = 1 * kMs});
  DeliveryLog log;
  int64_t last_off_time_true_ns = 0;
  uint64_t off_time = 0;
  g->set_delivery_observer([&](const Delivery& d) {
    if (d.engine != 1) return;
    log.add(d);
    // On time: released at the true instant the packet entered the tunnel + the bound. The
    // sender's timestamps are on its own (stepped) clock: compare in true time.
    const int64_t sent_true_ns = d.tx_timestamp_ns - g->clock_offset_ns(0);
    if (d.late || std::llabs(d.true_release_ns - (sent_true_ns + 5 * kMs)) > 50 * kUs) {
      ++off_time;
      last_off_time_true_ns = d.true_release_ns;
    }
  });
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 50e6));
  drive(*g, flows, kStartNs + 100 * kMs);
  ASSERT_EQ(off_time, 0u);  // on time before the step
  const int64_t step_at = g->now_ns();
  g->step_clock(0, 200 * kMs);
  drive(*g, flows, kStartNs + 600 * kMs);
  g->run_until(kStartNs + 620 * kMs);
  // The frames queued at the sender when its clock jumped found their departure times 200 ms in
  // the past: moved to later windows, or dropped and counted (beyond_horizon) when that is
  // beyond the timing wheel. Everything else arrives, once; the receiver loses nothing.
  const auto sender = boost::json::parse(g->engine(0).stats_json(g->engine_now_ns(0)));
  const auto& tx = sender.at("tunnels").at(0).at("tx");
  const uint64_t sent = tx.at("sent_on_time_packets").to_number<uint64_t>() +
                        tx.at("sent_best_effort_packets").to_number<uint64_t>();
  uint64_t counted_by_sender = 0;  // its scheduler's drops (control packets included)
  for (const auto& [reason, count] : tx.at("scheduler").at("dropped").as_object()) {
    counted_by_sender += count.to_number<uint64_t>();
  }
  EXPECT_EQ(log.count(1), sent);  // every packet that left arrived
  EXPECT_LE(flows[0].accepted - sent, 10u);  // only what was queued at the step
  EXPECT_GE(counted_by_sender, flows[0].accepted - sent);  // and counted
  EXPECT_EQ(log.repeated(), 0u);
  const auto receiver = boost::json::parse(g->engine(1).stats_json(g->engine_now_ns(1)));
  const auto& playout_drops =
      receiver.at("tunnels").at(0).at("rx").at("on_time").at("dropped").as_object();
  for (const auto& [reason, count] : playout_drops) {
    EXPECT_EQ(count.to_number<uint64_t>(), 0u) << reason;
  }
  // Some packets were released off time around the step (the receiver briefly had the wrong
  // offset), none after the estimate followed: the filter's window is 8 exchanges (80 ms) +
  // the bound, plus the 200 ms the stepped timestamps ask a packet to be held at most.
  EXPECT_GT(off_time, 0u);
  EXPECT_LT(last_off_time_true_ns - step_at, 8 * 10 * kMs + 200 * kMs + 10 * kMs);
  // The receiver's estimate of the sender's clock moved by the step.
  const PeerStatus peer = g->engine(1).peer_status(0);
  EXPECT_NEAR(static_cast<double>(-peer.playout_offset_ns), 200.0 * kMs, 1.0 * kMs);
  EXPECT_EQ(g->bad_frees(), 0u);
}

}  // namespace
}  // namespace detwan::dataplane::gw

// What survives a crash of the agent (its journal) and what it does about gateways that
// restarted, vanished, refused a tunnel, or carry tunnels that are not its own.
#include "control/journal/journal.h"
#include "control/reservation/reservation_json.h"
#include "tests/control/agent/agent_test_util.h"

namespace detwan::control::testing {
namespace {

using json = boost::json::object;

TEST_F(AgentFixture, ARestartedAgentLosesNothingCommittedAndExpiresHoldsThatRanOut) {
  auto p = request("a", "b", 60'000'000);
  p.provision = true;
  const std::string provisioned = id_of(reserve_ok(p));
  auto c = request("a", "c", 30'000'000, 600 * kSecond, 8);
  c.commit = true;
  const std::string committed = id_of(reserve_ok(c));
  auto h = request("b", "a", 10'000'000);
  h.start_now = false;
  h.spec.start_ns = kStartNs + 3600 * kSecond;  // later: no prefix conflict with the first
  h.spec.duration_ns = 60 * kSecond;
  const std::string held = id_of(reserve_ok(h));
  agent->reconcile_now();
  const json before = *agent->get(provisioned);

  agent.reset();                      // the process is gone (nothing is flushed on the way out)
  realtime.advance_ns(45 * kSecond);  // the hold (30 s) runs out while it is down
  open();
  EXPECT_EQ(state(provisioned), "provisioned");
  EXPECT_EQ(state(committed), "committed");
  EXPECT_EQ(state(held), "terminated");
  EXPECT_EQ(agent->get(held)->at("reason").as_string(), "hold_timeout");
  const json after = *agent->get(provisioned);
  EXPECT_EQ(boost::json::serialize(before.at("paths")), boost::json::serialize(after.at("paths")));
  EXPECT_EQ(before.at("tunnel_id"), after.at("tunnel_id"));
  // The bookings came back: the rest of ab1 (120 Mbit/s) cannot take 130.
  auto big = agent->reserve(request("a", "b", 130'000'000));
  ASSERT_FALSE(big.has_value());
  EXPECT_NE(big.error().code, "");
  // New ids do not reuse old ones.
  const std::string next = id_of(reserve_ok(request("a", "c", 1'000'000, 60 * kSecond, 9)));
  EXPECT_FALSE(next == provisioned || next == committed || next == held);
  // The gateways still have the tunnel; the restarted agent leaves it alone and sees it active.
  agent->reconcile_now();
  EXPECT_TRUE(active(provisioned));
  EXPECT_EQ(tunnels_on("/fake/gw-a"), 1u);
  EXPECT_EQ(agent->check_ledger(), "");
}

TEST_F(AgentFixture, AGatewayThatRestartedIsReprogrammed) {
  auto r = request("a", "b", 40'000'000);
  r.provision = true;
  const std::string id = id_of(reserve_ok(r));
  agent->reconcile_now();
  ASSERT_TRUE(active(id));
  gateways.restart("/fake/gw-b");
  EXPECT_EQ(tunnels_on("/fake/gw-b"), 0u);
  agent->reconcile_now();
  EXPECT_EQ(tunnels_on("/fake/gw-b"), 1u);
  EXPECT_TRUE(active(id));
  EXPECT_NE(
      agent->metrics_text().find("detwan_agent_gateway_restarts_seen_total{gateway=\"gw-b\"} 1"),
      std::string::npos);
}

TEST_F(AgentFixture, AnUnreachableGatewayIsRetriedAndReportedWithoutFailingTheReservation) {
  gateways.with("/fake/gw-b", [](FakeGateways::Gateway& g) { return g.reachable = false; });
  auto r = request("a", "b", 40'000'000);
  r.provision = true;
  const std::string id = id_of(reserve_ok(r));
  agent->reconcile_now();
  EXPECT_FALSE(active(id));
  EXPECT_EQ(state(id), "provisioned");
  const json view = *agent->get(id);
  const auto& gws = view.at("dataplane").as_object().at("gateways").as_array();
  bool named = false;
  for (const auto& g : gws) {
    if (g.as_object().at("gateway").as_string() == "gw-b") {
      named = g.as_object().at("error").as_string().find("/fake/gw-b") != boost::json::string::npos;
    }
  }
  EXPECT_TRUE(named);
  gateways.with("/fake/gw-b", [](FakeGateways::Gateway& g) { return g.reachable = true; });
  agent->reconcile_now();
  EXPECT_TRUE(active(id));
}

TEST_F(AgentFixture, AGatewayThatRefusesTheTunnelFailsTheReservationWithItsWords) {
  auto r = request("a", "b", 40'000'000);
  r.provision = true;
  const json reserved = reserve_ok(r);
  const auto tunnel = static_cast<uint32_t>(reserved.at("tunnel_id").to_number<uint64_t>());
  gateways.with("/fake/gw-a",
                [&](FakeGateways::Gateway& g) { return g.refuse.insert(tunnel).second; });
  agent->reconcile_now();
  const std::string id = id_of(reserved);
  EXPECT_EQ(state(id), "failed");
  EXPECT_NE(agent->get(id)->at("reason").as_string().find("refused by the fake"),
            boost::json::string::npos);
  agent->reconcile_now();
  EXPECT_EQ(tunnels_on("/fake/gw-b"), 0u);  // the half that was installed is taken away
  EXPECT_EQ(agent->check_ledger(), "");
}

// A batch refused because of one tunnel falls back to one request per tunnel; if the gateway
// stops answering during that fallback, the tunnels not yet applied are retried, not failed.
TEST_F(AgentFixture, AGatewayThatStopsAnsweringDuringTheOneByOneRetryFailsOnlyTheRefusedTunnel) {
  auto first = request("a", "b", 40'000'000, 600 * kSecond, 1);
  first.provision = true;
  auto second = request("a", "b", 40'000'000, 600 * kSecond, 2);
  second.provision = true;
  const json refused = reserve_ok(first);
  const json timed_out = reserve_ok(second);
  const auto refused_tunnel = static_cast<uint32_t>(refused.at("tunnel_id").to_number<uint64_t>());
  const auto late_tunnel = static_cast<uint32_t>(timed_out.at("tunnel_id").to_number<uint64_t>());
  gateways.with("/fake/gw-b", [&](FakeGateways::Gateway& g) {
    g.refuse.insert(refused_tunnel);
    return g.time_out.insert(late_tunnel).second;
  });
  agent->reconcile_now();
  EXPECT_EQ(state(id_of(refused)), "failed");
  EXPECT_EQ(state(id_of(timed_out)), "provisioned");  // not failed: gw-b did not answer
  EXPECT_FALSE(active(id_of(timed_out)));
  gateways.with("/fake/gw-b", [](FakeGateways::Gateway& g) {
    g.time_out.clear();
    return 0;
  });
  agent->reconcile_now();
  agent->reconcile_now();
  EXPECT_TRUE(active(id_of(timed_out)));
  EXPECT_EQ(tunnels_on("/fake/gw-b"), 1u);
  EXPECT_EQ(tunnels_on("/fake/gw-a"), 1u);
  EXPECT_EQ(agent->check_ledger(), "");
}

TEST_F(AgentFixture, TunnelsThatAreNotTheAgentsAreLeftAlone) {
  gateways.with("/fake/gw-a", [](FakeGateways::Gateway& g) {
    g.tunnels[12] = json{{"id", 12}, {"peer", "b"}, {"owner", ""}, {"rate_bps", 1'000'000}};
    g.tunnels[77] =
        json{{"id", 77}, {"peer", "b"}, {"owner", "agent:lab"}, {"rate_bps", 1'000'000}};
    return 0;
  });
  agent->reconcile_now();
  EXPECT_EQ(tunnels_on("/fake/gw-a"), 1u);  // its own stale 77 removed, the file's 12 kept
  EXPECT_FALSE(tunnel_on("/fake/gw-a", 12).empty());
}

TEST_F(AgentFixture, TheJournalReplaysWithoutOverbookingAndATamperedOneIsCaught) {
  for (int i = 0; i < 20; ++i) {
    auto r =
        request(i % 2 ? "a" : "b", i % 2 ? "c" : "a", 10'000'000 + i * 1'000'000, 30 * kSecond);
    r.start_now = false;
    r.spec.start_ns = kStartNs + i * 20 * kSecond;
    r.commit = i % 3 != 0;
    auto out = agent->reserve(r);
    if (out && i % 4 == 0) (void)agent->terminate(id_of(*out));
  }
  auto topology = model::load_topology_string(lab_topology(journal));
  ASSERT_TRUE(topology.has_value());
  const auto summary = agent::check_journal(*topology, journal);
  ASSERT_TRUE(summary.has_value()) << summary.error().message;
  EXPECT_NE(summary->find("nothing over-booked"), std::string::npos);
  agent.reset();
  // Forge an event: a second reservation on the same slots, at the same time, at full rate.
  {
    auto j = journal::Journal::open(journal, false, "test");
    ASSERT_TRUE(j.has_value());
    std::string body;
    (void)(*j)->for_each_event([&](const journal::Event& e) {
      if (e.to == "committed" && body.empty()) body = e.body;
    });
    ASSERT_FALSE(body.empty());
    auto r = reservation::from_json(boost::json::parse(body).as_object());
    ASSERT_TRUE(r.has_value());
    r->key = 999;
    r->id = "r-999";
    r->spec.min_bandwidth_bps = 180'000'000;
    ASSERT_TRUE((*j)->record({0, kStartNs, r->id, "", "committed", "forged",
                              boost::json::serialize(reservation::to_json(*r))},
                             1000, nullptr)
                    .has_value());
  }
  const auto caught = agent::check_journal(*topology, journal);
  ASSERT_FALSE(caught.has_value());
  EXPECT_NE(caught.error().message.find("r-999"), std::string::npos) << caught.error().message;
}

}  // namespace
}  // namespace detwan::control::testing

// The agent's reservation lifecycle over fake gateways in virtual time: reserve -> held ->
// committed -> provisioned (tunnels on both gateways) -> released -> terminated, holds that
// time out, advance and asap reservations, modify, and the refusals.
#include <thread>

#include "control/gateway/tunnel_spec.h"
#include "dataplane/wire/header.h"
#include "tests/control/agent/agent_test_util.h"

namespace detwan::control::testing {
namespace {

using json = boost::json::object;

TEST_F(AgentFixture, ProtectedReservationProgramsTheSecondDisjointPathOnBothGateways) {
  auto r = request("a", "b", 20'000'000);
  r.spec.protect = true;
  r.spec.paths = 2;
  r.provision = true;
  const json reserved = reserve_ok(r);
  agent->reconcile_now();
  ASSERT_TRUE(active(id_of(reserved)));
  const auto& paths = reserved.at("paths").as_array();
  ASSERT_EQ(paths.size(), 2u);
  const auto tunnel_id = static_cast<uint32_t>(reserved.at("tunnel_id").to_number<uint64_t>());
  for (int e = 0; e < 2; ++e) {
    const json& end = paths[1].as_object().at("ends").as_array()[e].as_object();
    if (end.at("gateway").as_string().empty()) continue;
    const json on = tunnel_on(e == 0 ? "/fake/gw-a" : "/fake/gw-b", tunnel_id);
    ASSERT_TRUE(on.contains("protection")) << boost::json::serialize(on);
    const json& protection = on.at("protection").as_object();
    EXPECT_EQ(protection.at("peer"), end.at("peer"));
    EXPECT_EQ(boost::json::serialize(protection.at("slots")),
              boost::json::serialize(end.at("slots")));
    // The playout bound covers the slower path.
    EXPECT_GE(on.at("bound_ns").to_number<int64_t>(),
              paths[1].as_object().at("bound").at("playout_bound_ns").to_number<int64_t>());
  }
  EXPECT_EQ(reserved.at("spec").at("protect").as_string(), "1+1");
}

TEST_F(AgentFixture, ProvisionedReservationProgramsBothGatewaysAndReleaseRemovesIt) {
  auto r = request("a", "b", 50'000'000);
  r.provision = true;
  const json reserved = reserve_ok(r);
  const std::string id = id_of(reserved);
  EXPECT_EQ(state_of(reserved), "provisioned");
  EXPECT_FALSE(active(id));  // nothing reconciled yet
  agent->reconcile_now();
  EXPECT_TRUE(active(id));
  const auto tunnel_id = static_cast<uint32_t>(reserved.at("tunnel_id").to_number<uint64_t>());
  const json on_a = tunnel_on("/fake/gw-a", tunnel_id);
  const json on_b = tunnel_on("/fake/gw-b", tunnel_id);
  ASSERT_FALSE(on_a.empty());
  ASSERT_FALSE(on_b.empty());
  EXPECT_EQ(on_a.at("peer").as_string(), "b");
  EXPECT_EQ(on_b.at("peer").as_string(), "a");
  EXPECT_EQ(on_a.at("owner").as_string(), "agent:lab");
  EXPECT_EQ(on_a.at("rate_bps").to_number<uint64_t>(), 50'000'000u);
  // Each end sends to the far site's prefixes, from its own (the reservation's tenant).
  EXPECT_EQ(boost::json::serialize(on_a.at("match")),
            R"({"dst":["10.20.2.0/24"],"src":["10.20.1.0/24"]})");
  EXPECT_EQ(boost::json::serialize(on_b.at("match")),
            R"({"dst":["10.20.1.0/24"],"src":["10.20.2.0/24"]})");
  // The slots the reservation reports are the ones each gateway got.
  const auto& ends = reserved.at("paths").as_array()[0].as_object().at("ends").as_array();
  EXPECT_EQ(boost::json::serialize(on_a.at("slots")),
            boost::json::serialize(ends[0].as_object().at("slots")));
  EXPECT_EQ(boost::json::serialize(on_b.at("slots")),
            boost::json::serialize(ends[1].as_object().at("slots")));
  // The path is the direct link (5 ms), not the 40 ms detour through r.
  EXPECT_EQ(boost::json::serialize(reserved.at("path")), R"(["a","b"])");
  // What a sender into the tunnel must fit and pace with: the link MTU less the gateway's
  // encapsulation (the dataplane's own figure) and the AEAD tag (encrypted by default), and
  // that + Ethernet per frame.
  const json& tunnel = reserved.at("tunnel").as_object();
  EXPECT_EQ(reserved.at("encrypt").as_string(), "aes-256-gcm");
  EXPECT_EQ(tunnel.at("mtu_bytes").to_number<uint64_t>(),
            1500 - dataplane::wire::encap_overhead_bytes(dataplane::wire::IpVersion::kV4) -
                control::gateway::kAeadTagBytes);
  EXPECT_EQ(tunnel.at("frame_overhead_bytes").to_number<uint64_t>(),
            dataplane::wire::encap_overhead_bytes(dataplane::wire::IpVersion::kV4) +
                control::gateway::kAeadTagBytes + 18);

  const auto released = agent->release(id);
  ASSERT_TRUE(released.has_value());
  EXPECT_EQ(state_of(*released), "released");
  agent->reconcile_now();
  EXPECT_EQ(tunnels_on("/fake/gw-a"), 0u);
  EXPECT_EQ(tunnels_on("/fake/gw-b"), 0u);
  // Released keeps the resources: a second reservation of the rest fails, provisioning again works.
  auto rest = request("a", "b", 130'000'000, 600 * kSecond, 7);
  rest.spec.max_latency_ns = 30'000'000;
  EXPECT_EQ(agent->reserve(rest).error().code, "no_capacity");
  ASSERT_TRUE(agent->provision(id).has_value());
  agent->reconcile_now();
  EXPECT_TRUE(active(id));
  ASSERT_TRUE(agent->terminate(id).has_value());
  agent->reconcile_now();
  EXPECT_EQ(tunnels_on("/fake/gw-a"), 0u);
  EXPECT_EQ(state(id), "terminated");
  EXPECT_EQ(agent->check_ledger(), "");
}

TEST_F(AgentFixture, HeldReservationTimesOutAndFreesItsCapacity) {
  auto first = request("a", "b", 150'000'000);
  first.spec.max_latency_ns = 30'000'000;
  const json held = reserve_ok(first);
  const std::string id = id_of(held);
  EXPECT_EQ(state_of(held), "held");
  auto second_request = request("a", "b", 100'000'000, 600 * kSecond, 5);
  second_request.spec.max_latency_ns = 30'000'000;  // not via the 40 ms detour
  auto second = agent->reserve(second_request);
  ASSERT_FALSE(second.has_value());
  EXPECT_EQ(second.error().code, "no_capacity");
  EXPECT_EQ(second.error().status, 409);
  realtime.advance_ns(29 * kSecond);
  agent->tick();
  EXPECT_EQ(state(id), "held");
  realtime.advance_ns(2 * kSecond);
  agent->tick();
  EXPECT_EQ(state(id), "terminated");
  EXPECT_EQ(agent->get(id)->at("reason").as_string(), "hold_timeout");
  auto late = agent->commit(id);
  ASSERT_FALSE(late.has_value());
  EXPECT_EQ(late.error().code, "hold_expired");
  EXPECT_TRUE(agent->reserve(second_request).has_value());
}

TEST_F(AgentFixture, TransitionsOutOfOrderAreRefusedAndRepeatsAreHarmless) {
  const std::string id = id_of(reserve_ok(request("a", "b", 10'000'000)));
  auto early = agent->provision(id);
  ASSERT_FALSE(early.has_value());
  EXPECT_EQ(early.error().code, "wrong_state");
  EXPECT_NE(early.error().message.find("held"), std::string::npos);
  ASSERT_TRUE(agent->commit(id).has_value());
  ASSERT_TRUE(agent->commit(id).has_value());  // repeated: answered with the reservation
  EXPECT_EQ(state(id), "committed");
  auto abort = agent->abort(id);
  ASSERT_FALSE(abort.has_value());
  EXPECT_EQ(abort.error().status, 409);
  EXPECT_FALSE(agent->get("r-999").has_value());
  EXPECT_EQ(agent->get("r-999").error().status, 404);
  EXPECT_FALSE(agent->get("nonsense").has_value());
  // History: reserved, committed.
  const json view = *agent->get(id);
  const auto& history = view.at("history").as_array();
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[1].as_object().at("to").as_string(), "committed");
}

TEST_F(AgentFixture, AdvanceReservationGoesOnTheGatewaysAtItsStartAndOffAtItsEnd) {
  auto r = request("a", "b", 20'000'000);
  r.start_now = false;
  r.spec.start_ns = kStartNs + 100 * kSecond;
  r.spec.duration_ns = 0;
  r.spec.end_ns = kStartNs + 200 * kSecond;
  r.provision = true;
  const std::string id = id_of(reserve_ok(r));
  agent->reconcile_now();
  EXPECT_EQ(tunnels_on("/fake/gw-a"), 0u);
  EXPECT_FALSE(active(id));
  realtime.set_ns(kStartNs + 100 * kSecond);
  agent->tick();
  agent->reconcile_now();
  EXPECT_EQ(tunnels_on("/fake/gw-a"), 1u);
  EXPECT_TRUE(active(id));
  realtime.set_ns(kStartNs + 200 * kSecond);
  agent->tick();
  agent->reconcile_now();
  EXPECT_EQ(tunnels_on("/fake/gw-a"), 0u);
  EXPECT_EQ(state(id), "terminated");
  EXPECT_EQ(agent->get(id)->at("reason").as_string(), "end_time");
  EXPECT_EQ(agent->get(id)->at("nsi").as_object().at("lifecycle_state").as_string(),
            "PassedEndTime");
}

TEST_F(AgentFixture, DisjointTimeWindowsShareCapacityAndSlots) {
  auto first = request("a", "b", 150'000'000);
  first.start_now = false;
  first.spec.start_ns = kStartNs;
  first.spec.end_ns = kStartNs + 100 * kSecond;
  first.spec.duration_ns = 0;
  first.commit = true;
  auto second = first;
  second.spec.start_ns = kStartNs + 100 * kSecond;  // half-open windows: no overlap
  second.spec.end_ns = kStartNs + 200 * kSecond;
  const json a = reserve_ok(first);
  const json b = reserve_ok(second);
  EXPECT_EQ(boost::json::serialize(a.at("paths").as_array()[0].as_object().at("ends")),
            boost::json::serialize(b.at("paths").as_array()[0].as_object().at("ends")));
  auto third = first;
  third.spec.start_ns = kStartNs + 50 * kSecond;
  third.spec.end_ns = kStartNs + 150 * kSecond;
  third.spec.src = "a";
  const auto refused = agent->reserve(third);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(agent->check_ledger(), "");
}

TEST_F(AgentFixture, AsapStartsWhenTheBlockingReservationEnds) {
  // 150 Mbit/s takes 82 of ab1's 90 reservable slots (each window loses a guard band and a
  // 1518-byte frame time): what is left carries no 100 Mbit/s.
  auto blocker = request("a", "b", 150'000'000, 300 * kSecond, 2);
  blocker.spec.max_latency_ns = 30'000'000;
  blocker.commit = true;
  reserve_ok(blocker);
  // Nor can it take the 40 ms detour: 1 Gbit/s links, but a 30 ms latency limit.
  auto r = request("a", "b", 100'000'000, 60 * kSecond, 3);
  r.spec.asap = true;
  r.spec.max_latency_ns = 30'000'000;
  const json placed = reserve_ok(r);
  EXPECT_EQ(placed.at("spec").as_object().at("start_unix_ns").to_number<int64_t>(),
            kStartNs + 300 * kSecond);
  EXPECT_EQ(placed.at("spec").as_object().at("end_unix_ns").to_number<int64_t>(),
            kStartNs + 360 * kSecond);
}

TEST_F(AgentFixture, ALatencyLimitBelowTheDirectPathIsRefusedAndALooseOneTakesTheDetour) {
  auto full = request("a", "b", 150'000'000, 600 * kSecond, 8);
  full.spec.max_latency_ns = 30'000'000;
  full.commit = true;
  reserve_ok(full);  // the direct link is full
  // The direct path would meet 30 ms but is full; the detour has room but takes 40 ms: what is
  // missing is capacity (409, may come back), named with the link.
  auto tight = request("a", "b", 50'000'000, 600 * kSecond, 9);
  tight.spec.max_latency_ns = 30'000'000;
  auto refused = agent->reserve(tight);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, "no_capacity");
  EXPECT_EQ(refused.error().status, 409);
  EXPECT_NE(refused.error().message.find("ab1"), std::string::npos) << refused.error().message;
  // 1 ms is above the 5 ms propagation of no path, and no path meets it: latency (422).
  auto never = request("a", "c", 50'000'000, 600 * kSecond, 9);
  never.spec.max_latency_ns = 1'200'000;
  auto unachievable = agent->reserve(never);
  ASSERT_FALSE(unachievable.has_value());
  EXPECT_EQ(unachievable.error().code, "latency_unachievable");
  EXPECT_EQ(unachievable.error().status, 422);
  EXPECT_EQ(unachievable.error().field, "max_latency_ns");
  auto loose = request("a", "b", 50'000'000, 600 * kSecond, 9);
  loose.spec.max_latency_ns = 60'000'000;
  const json detour = reserve_ok(loose);
  EXPECT_EQ(boost::json::serialize(detour.at("path")), R"(["a","r","b"])");
  EXPECT_GT(detour.at("bound").as_object().at("max_latency_ns").to_number<int64_t>(), 40'000'000);
  EXPECT_LE(detour.at("bound").as_object().at("max_latency_ns").to_number<int64_t>(), 60'000'000);
  auto impossible = request("a", "c", 1'000'000);
  impossible.spec.max_latency_ns = 400'000;
  auto below = agent->reserve(impossible);
  ASSERT_FALSE(below.has_value());
  EXPECT_EQ(below.error().code, "latency_below_propagation");
  EXPECT_NE(below.error().message.find("500us"), std::string::npos) << below.error().message;
}

TEST_F(AgentFixture, OnTimeDeliveryIsChosenWhenTheVariationAskedIsBelowThePaths) {
  auto r = request("a", "c", 10'000'000);  // link ac: 1 ms +/- 500 us
  r.spec.max_latency_variation_ns = 200'000;
  const json on_time = reserve_ok(r);
  const auto& bound = on_time.at("bound").as_object();
  EXPECT_EQ(bound.at("delivery").as_string(), "on_time");
  EXPECT_EQ(bound.at("max_latency_variation_ns").to_number<int64_t>(), 100'000);  // playout error
  EXPECT_GE(bound.at("playout_bound_ns").to_number<int64_t>(), 1'500'000);
  auto tighter = request("b", "a", 10'000'000);
  tighter.spec.max_latency_variation_ns = 50'000;  // below the gateways' playout error
  auto refused = agent->reserve(tighter);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, "latency_variation_unachievable");
}

TEST_F(AgentFixture, SecondReservationBetweenTheSameSitesAtTheSameTimeIsAPrefixConflict) {
  const std::string first = id_of(reserve_ok(request("a", "b", 10'000'000)));
  auto again = agent->reserve(request("b", "a", 10'000'000));
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code, "prefix_conflict");
  EXPECT_NE(again.error().message.find(first), std::string::npos);
  EXPECT_EQ(again.error().field, "dst_prefixes");
  EXPECT_TRUE(agent->reserve(request("a", "c", 10'000'000)).has_value());
  // Narrowed to hosts: two jobs between the same sites at once.
  auto twin = request("a", "b", 10'000'000, 600 * kSecond, 21);
  EXPECT_EQ(agent->reserve(twin).error().code, "prefix_conflict");  // the first covers the /24s
  ASSERT_TRUE(agent->terminate(first).has_value());
  reserve_ok(request("a", "b", 10'000'000, 600 * kSecond, 20));
  EXPECT_TRUE(agent->reserve(twin).has_value());
  EXPECT_EQ(agent->reserve(request("b", "a", 1'000'000, 600 * kSecond, 20)).error().code,
            "prefix_conflict");
  auto outside = request("a", "b", 1'000'000, 600 * kSecond, 30);
  outside.spec.dst_prefixes = {"10.9.9.9/32"};
  const auto refused = agent->reserve(outside);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().field, "dst_prefixes");
  EXPECT_NE(refused.error().message.find("10.20.2.0/24"), std::string::npos);
}

// Two jobs between the same sites on different hosts, to the same far host: both admitted,
// each gateway tunnel bound to its own job's host, so neither can use the other's rate.
TEST_F(AgentFixture, TwoJobsOnDifferentHostsToOneDestinationGetATunnelEach) {
  auto job1 = request("a", "b", 10'000'000, 600 * kSecond, 5);
  auto job2 = request("a", "b", 10'000'000, 600 * kSecond, 6);
  job2.spec.dst_prefixes = job1.spec.dst_prefixes;  // the same far host 10.20.2.5
  job1.provision = job2.provision = true;
  const json r1 = reserve_ok(job1);
  const json r2 = reserve_ok(job2);
  agent->reconcile_now();
  ASSERT_TRUE(active(id_of(r1)) && active(id_of(r2)));
  for (const auto& [r, host] : {std::pair{&r1, 5}, std::pair{&r2, 6}}) {
    const auto tunnel = static_cast<uint32_t>(r->at("tunnel_id").to_number<uint64_t>());
    const json on_a = tunnel_on("/fake/gw-a", tunnel);
    const json on_b = tunnel_on("/fake/gw-b", tunnel);
    EXPECT_EQ(boost::json::serialize(on_a.at("match")),
              fmt::format(R"({{"dst":["10.20.2.5/32"],"src":["10.20.1.{}/32"]}})", host));
    EXPECT_EQ(boost::json::serialize(on_b.at("match")),
              fmt::format(R"({{"dst":["10.20.1.{}/32"],"src":["10.20.2.5/32"]}})", host));
  }
  // The same hosts again would be the same traffic: refused.
  auto twice = request("a", "b", 1'000'000, 600 * kSecond, 6);
  twice.spec.dst_prefixes = job1.spec.dst_prefixes;
  const auto refused = agent->reserve(twice);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, "prefix_conflict");
  EXPECT_NE(refused.error().message.find(id_of(r2)), std::string::npos);
}

// The reconciler's comparison of a gateway's tunnel with the wanted one covers the tenant: a
// tunnel whose match.src differs (or is missing) is re-programmed.
TEST(TunnelSpec, MatchesComparesTheSources) {
  gateway::TunnelSpec spec;
  spec.id = 7;
  spec.peer = "b";
  spec.owner = "agent:lab";
  spec.rate_bps = 1'000'000;
  spec.slots = {0, 1};
  spec.burst_bytes = 3000;
  spec.match_dst = {"10.20.2.5/32"};
  spec.match_src = {"10.20.1.5/32"};
  const json request = spec.to_request();
  EXPECT_EQ(boost::json::serialize(request.at("match")),
            R"({"dst":["10.20.2.5/32"],"src":["10.20.1.5/32"]})");
  // As detwan-gw shows it (tunnels JSON: every match key, numbers in base units).
  json shown{{"id", 7},
             {"peer", "b"},
             {"owner", "agent:lab"},
             {"rate_bps", 1'000'000},
             {"burst_bytes", 3000},
             {"bound_ns", 0},
             {"max_hold_ns", 1'000'000'000},
             {"dscp", 46},
             {"slots", boost::json::array{1, 0}},
             {"match", boost::json::parse(
                           R"({"dst":["10.20.2.5/32"],"src":["10.20.1.5/32"],"udp_ports":[]})")}};
  std::string difference;
  EXPECT_TRUE(spec.matches(shown, &difference)) << difference;
  shown["match"] = boost::json::parse(R"({"dst":["10.20.2.5/32"],"src":[],"udp_ports":[]})");
  EXPECT_FALSE(spec.matches(shown, &difference));
  EXPECT_EQ(difference, "match.src");
  spec.match_src.clear();  // a spec without a tenant matches a tunnel without one
  EXPECT_TRUE(spec.matches(shown, &difference)) << difference;
  EXPECT_FALSE(spec.to_request().at("match").as_object().contains("src"));
}

TEST_F(AgentFixture, ModifyChangesRateAndEndInServiceOrChangesNothing) {
  auto r = request("a", "b", 50'000'000);
  r.spec.max_latency_ns = 30'000'000;  // stays on the direct link
  r.provision = true;
  const std::string id = id_of(reserve_ok(r));
  agent->reconcile_now();
  const auto tunnel = static_cast<uint32_t>(agent->get(id)->at("tunnel_id").to_number<uint64_t>());
  agent::ModifyRequest more;
  more.min_bandwidth_bps = 100'000'000;
  more.end_ns = kStartNs + 900 * kSecond;
  const auto modified = agent->modify(id, more);
  ASSERT_TRUE(modified.has_value()) << modified.error().message;
  EXPECT_EQ(modified->at("version").to_number<uint64_t>(), 2u);
  EXPECT_EQ(modified->at("state").as_string(), "provisioned");
  agent->reconcile_now();
  EXPECT_EQ(tunnel_on("/fake/gw-a", tunnel).at("rate_bps").to_number<uint64_t>(), 100'000'000u);
  EXPECT_TRUE(active(id));
  agent::ModifyRequest too_much;
  too_much.min_bandwidth_bps = 190'000'000;  // above ab1's 180 Mbit/s; the detour is too slow
  const auto refused = agent->modify(id, too_much);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, "latency_unachievable");
  EXPECT_EQ(agent->get(id)->at("version").to_number<uint64_t>(), 2u);
  EXPECT_EQ(agent->get(id)->at("min_bandwidth_bps").to_number<uint64_t>(), 100'000'000u);
  // The old booking is intact: 100 Mbit/s reserved on ab1 in each direction.
  const json topology = agent->topology_json();
  for (const auto& link : topology.at("links").as_array()) {
    if (link.as_object().at("name").as_string() != "ab1") continue;
    for (const auto& d : link.as_object().at("directions").as_array()) {
      EXPECT_EQ(d.as_object().at("reserved_bps_now").to_number<uint64_t>(), 100'000'000u);
    }
  }
  EXPECT_EQ(agent->check_ledger(), "");
}

TEST_F(AgentFixture, RepeatedRequestIdReturnsTheSameReservationAndADifferentBodyIsRefused) {
  auto r = request("a", "b", 10'000'000);
  r.client_request_id = "job-42";
  const std::string first = id_of(reserve_ok(r));
  const std::string again = id_of(reserve_ok(r));
  EXPECT_EQ(first, again);
  auto other = request("a", "b", 20'000'000);
  other.client_request_id = "job-42";
  const auto refused = agent->reserve(other);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, "idempotency_conflict");
  EXPECT_EQ(agent->list(std::nullopt).size(), 1u);
}

TEST_F(AgentFixture, OfRacingRequestsForTheLastCapacityExactlyOneIsAdmitted) {
  constexpr int kThreads = 8;
  std::atomic<int> admitted{0};
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      auto r = request(i % 2 == 0 ? "a" : "b", i % 2 == 0 ? "b" : "a", 100'000'000, 600 * kSecond,
                       10 + i);
      r.spec.max_latency_ns = 30'000'000;  // the detour is too slow: one link for all
      r.fingerprint = std::to_string(i);
      if (agent->reserve(r).has_value()) {
        ++admitted;
      } else {
        ++refused;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(admitted.load(), 1);
  EXPECT_EQ(refused.load(), kThreads - 1);
  EXPECT_EQ(agent->check_ledger(), "");
}

TEST_F(AgentFixture, UnknownSitesAndBadWindowsAreRefusedNamingTheField) {
  auto r = request("a", "z", 10'000'000);
  auto unknown = agent->reserve(r);
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.error().field, "dst");
  EXPECT_NE(unknown.error().message.find("sites: a, b, c"), std::string::npos);
  auto past = request("a", "b", 10'000'000);
  past.start_now = false;
  past.spec.start_ns = kStartNs - 100 * kSecond;
  past.spec.end_ns = kStartNs - 10 * kSecond;
  past.spec.duration_ns = 0;
  auto refused = agent->reserve(past);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().field, "end_unix_ns");
  auto same = request("b", "b", 10'000'000);
  EXPECT_EQ(agent->reserve(same).error().code, "same_site");
}

}  // namespace
}  // namespace detwan::control::testing

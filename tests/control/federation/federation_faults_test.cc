// Failures leave nothing behind (docs/federation.md, "Failures"): for every domain x phase x
// fault, the requester's error names the domain and, once the holds passed, no domain holds or
// books anything; a participant's hold expires by its own timer; the aggregator recovers a
// reservation a restart interrupted (reserving: aborted; committing: commits re-sent).
#include <boost/json.hpp>

#include "tests/control/federation/federation_harness.h"

namespace detwan::control::testing {
namespace {

namespace json = boost::json;
using federation::FaultKind;

struct Case {
  const char* domain;
  const char* phase;
  FaultKind kind;
};

std::string kind_name(FaultKind k) {
  return k == FaultKind::kRefuse ? "refuse" : k == FaultKind::kTimeout ? "timeout" : "drop";
}

TEST_F(FederationFixture, EveryFaultLeavesNoHoldOrBookingAndNamesTheDomain) {
  int n = 0;
  for (const char* domain : kDomains) {
    for (const char* phase : {"reserve", "commit"}) {
      for (const FaultKind kind : {FaultKind::kRefuse, FaultKind::kTimeout, FaultKind::kDrop}) {
        SCOPED_TRACE(fmt::format("domain {} phase {} fault {}", domain, phase, kind_name(kind)));
        coordinator().faults().clear();
        coordinator().faults().add(federation::Fault{domain, phase, kind, -1});
        auto out = coordinator().reserve(request(fmt::format("fault-{}", ++n), true));
        ASSERT_FALSE(out.has_value()) << json::serialize(*out);
        EXPECT_NE(out.error().message.find(fmt::format("domain {}", domain)), std::string::npos)
            << out.error().message;
        const int expected_status = kind == FaultKind::kRefuse    ? 409
                                    : kind == FaultKind::kTimeout ? 504
                                                                  : 502;
        EXPECT_EQ(out.error().status, expected_status) << out.error().message;
        coordinator().faults().clear();
        // The domains that answered were released before the answer; the faulted one's abort
        // or terminate is owed (its domain did not answer: the requester is not kept waiting
        // for a second call to it) and done by the next tick, before any hold passes (a
        // timed-out call's segment is found by its client_request_id).
        for (const char* d : kDomains) {
          if (kind == FaultKind::kRefuse || std::string(d) != domain) {
            EXPECT_EQ(holding(d), 0u) << "at once, domain " << d;
          }
        }
        coordinator().tick();
        for (const char* d : kDomains) EXPECT_EQ(holding(d), 0u) << "after a tick, domain " << d;
        // Nothing is left once the holds (10 s, plus the call timeout for a call without an
        // answer) passed and the retry loop ran.
        realtime.advance_ns(13 * kSecond);
        monotonic.advance_ns(13 * kSecond);
        tick_all();
        for (const char* d : kDomains) {
          EXPECT_EQ(holding(d), 0u) << "domain " << d;
          EXPECT_EQ(agent_of(d).check_ledger(), "") << "domain " << d;
        }
      }
    }
  }
  // The federated reservations say why.
  for (const json::value& a : coordinator().list()) {
    const std::string state(a.at("state").as_string());
    EXPECT_TRUE(state == "terminated" || state == "failed") << state;
    for (const json::value& s : a.at("segments").as_array()) {
      EXPECT_FALSE(s.at("cleanup").as_bool()) << json::serialize(a);
    }
  }
}

TEST_F(FederationFixture, ASlowPeerTimesOutAndItsLateSegmentIsAbortedWhenItAppears) {
  // x waits 300 ms for a peer; w takes 800 ms to answer a segment request (real HTTP).
  call_timeout = "300ms";
  open("x");
  {
    std::lock_guard lock(domains["w"].slot->mutex);
    domains["w"].slot->delay_request = "POST /v1/federation/segments";
    domains["w"].slot->delay_ms = 800;
  }
  auto out = coordinator().reserve(request("slow"));
  ASSERT_FALSE(out.has_value());
  EXPECT_EQ(out.error().status, 504) << out.error().message;
  EXPECT_EQ(out.error().code, "peer_timeout");
  EXPECT_NE(out.error().message.find("domain w"), std::string::npos) << out.error().message;
  EXPECT_EQ(holding("x"), 0u);  // x's own segment aborted at once
  // w holds the segment once the late request is handled; the retry loop finds it by its
  // client_request_id and aborts it, before its hold would have expired (no virtual time
  // passes).
  bool seen = false;
  for (int i = 0; i < 200 && !(seen && holding("w") == 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    seen = seen || !agent_of("w").list(std::nullopt).empty();
    coordinator().tick();
  }
  EXPECT_TRUE(seen);
  EXPECT_EQ(holding("w"), 0u);
  EXPECT_EQ(agent_of("w").check_ledger(), "");
  const auto list = agent_of("w").list(std::nullopt);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(std::string(list[0].at("reason").as_string()), "aborted");
  EXPECT_FALSE(coordinator().list()[0].at("segments").as_array()[1].at("cleanup").as_bool());
}

TEST_F(FederationFixture, ACommitWithoutAnAnswerIsTerminatedEvenAfterTheHoldsPassed) {
  // w commits, its answer is lost: the others are compensated at once; w's segment is
  // committed there (no hold timer frees it) and is terminated by the retry loop even once
  // the holds have passed.
  coordinator().faults().add(federation::Fault{"w", "commit", FaultKind::kTimeout, 1});
  auto out = coordinator().reserve(request("commit-lost", true));
  ASSERT_FALSE(out.has_value());
  EXPECT_EQ(out.error().status, 504) << out.error().message;
  EXPECT_NE(out.error().message.find("domain w"), std::string::npos) << out.error().message;
  EXPECT_EQ(holding("x"), 0u);
  EXPECT_EQ(holding("z"), 0u);
  EXPECT_EQ(holding("w"), 1u);  // committed there; its terminate is owed
  const json::object a = coordinator().list()[0].as_object();
  EXPECT_EQ(std::string(a.at("state").as_string()), "failed");
  const json::object& w = a.at("segments").as_array()[1].as_object();
  EXPECT_TRUE(w.at("cleanup").as_bool()) << json::serialize(a);
  EXPECT_EQ(std::string(w.at("state").as_string()), "unknown");
  realtime.advance_ns(13 * kSecond);  // past every hold
  monotonic.advance_ns(13 * kSecond);
  for (const char* d : kDomains) agent_of(d).tick();
  EXPECT_EQ(holding("w"), 1u);  // a committed segment does not expire
  coordinator().tick();
  EXPECT_EQ(holding("w"), 0u);
  EXPECT_EQ(agent_of("w").check_ledger(), "");
  EXPECT_FALSE(
      coordinator().list()[0].at("segments").as_array()[1].at("cleanup").as_bool());
}

TEST_F(FederationFixture, AProvisionFailedAtOneDomainIsFinishedByARetryAndTheStateFollows) {
  auto committed = coordinator().reserve(request("prov-retry", true));
  ASSERT_TRUE(committed.has_value()) << committed.error().message;
  const std::string id(committed->at("id").as_string());
  coordinator().faults().add(federation::Fault{"z", "provision", FaultKind::kDrop, 1});
  auto failed = coordinator().provision(id);
  ASSERT_FALSE(failed.has_value());
  EXPECT_EQ(failed.error().status, 502);
  EXPECT_NE(failed.error().message.find("domain z"), std::string::npos);
  // Not rolled back: x and w provisioned, z committed, the aggregate committed.
  auto got = coordinator().get(id);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(std::string(got->at("state").as_string()), "committed");
  EXPECT_EQ(std::string(got->at("segments").as_array()[0].at("state").as_string()),
            "provisioned");
  EXPECT_EQ(std::string(got->at("segments").as_array()[2].at("state").as_string()), "committed");
  // z carries it out by another route (here: its own API, as a late request would): the
  // aggregate follows its segments once they agree.
  const std::string z_id(got->at("segments").as_array()[2].at("id").as_string());
  ASSERT_TRUE(agent_of("z").provision(z_id).has_value());
  got = coordinator().get(id);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(std::string(got->at("state").as_string()), "provisioned") << json::serialize(*got);
  // A retried provision (the client's answer to the 502) is answered as done.
  auto again = coordinator().provision(id);
  ASSERT_TRUE(again.has_value()) << again.error().message;
  EXPECT_EQ(std::string(again->at("state").as_string()), "provisioned");
}

TEST_F(FederationFixture, TunnelIdTakenAtAnEndIsRetriedWithAnotherId) {
  // The first reservation takes 40001; the second draws 40001 again (taken at every end:
  // 409 tunnel_id_taken, its held segments aborted), then 40002.
  std::vector<uint32_t> draws{40001, 40001, 40002};
  size_t next = 0;
  draw_tunnel_id = [&] { return draws[std::min(next++, draws.size() - 1)]; };
  open("x");
  auto first = coordinator().reserve(request("t-1"));
  ASSERT_TRUE(first.has_value()) << first.error().message;
  EXPECT_EQ(first->at("tunnel_id").to_number<uint32_t>(), 40001u);
  agent::ReserveRequest other = request("t-2");
  other.spec.src_prefixes = {"10.20.1.2/32"};  // other hosts: no prefix conflict
  other.spec.dst_prefixes = {"10.20.3.2/32"};
  other.fingerprint = "t-2";
  auto second = coordinator().reserve(other);
  ASSERT_TRUE(second.has_value()) << second.error().message;
  EXPECT_EQ(second->at("tunnel_id").to_number<uint32_t>(), 40002u);
  EXPECT_EQ(next, 3u);
  for (const char* d : kDomains) EXPECT_EQ(holding(d), 2u) << d;
  // Every id was drawn from the range: no tunnel_id_taken is left behind.
  auto exhausted_draws = [&] { return uint32_t{40001}; };
  draw_tunnel_id = exhausted_draws;
  open("x");
  agent::ReserveRequest third = request("t-3");
  third.spec.src_prefixes = {"10.20.1.3/32"};
  third.spec.dst_prefixes = {"10.20.3.3/32"};
  third.fingerprint = "t-3";
  auto refused = coordinator().reserve(third);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, "tunnel_id_taken");
  EXPECT_NE(refused.error().message.find("domain x"), std::string::npos);
  for (const char* d : kDomains) EXPECT_EQ(holding(d), 2u) << d;
}

TEST_F(FederationFixture, ParticipantRestartKeepsItsSegmentsAndTheirHoldsExpire) {
  auto held = coordinator().reserve(request("p-restart"));
  ASSERT_TRUE(held.has_value()) << held.error().message;
  open("w");  // w restarts on its journal
  const std::string id = agent_of("w").reservation_of_request("r-1@x/w");
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(agent_of("w").segment_requester(id), "x");
  EXPECT_EQ(holding("w"), 1u);
  realtime.advance_ns(11 * kSecond);
  agent_of("w").tick();
  EXPECT_EQ(holding("w"), 0u);
}

TEST_F(FederationFixture, SegmentCreationIsIdempotentByClientRequestId) {
  const std::string body =
      R"({"client_request_id":"agg-1@x/w","aggregate":{"id":"r-9","domain":"x"},
      "from":"a.ac1","to":"c.ac1","rate_bps":10000000,"start_unix_ns":)" +
      std::to_string(kStartNs) + R"(,"end_unix_ns":)" + std::to_string(kStartNs + 600 * kSecond) +
      R"(,"tunnel_id":40100,"encrypt":"none"})";
  auto [s1, b1] = http("w", "POST", "/v1/federation/segments", body, token("x", "w"));
  ASSERT_EQ(s1, 201) << json::serialize(b1);
  auto [s2, b2] = http("w", "POST", "/v1/federation/segments", body, token("x", "w"));
  ASSERT_EQ(s2, 201) << json::serialize(b2);
  EXPECT_EQ(b1.at("id"), b2.at("id"));
  EXPECT_EQ(holding("w"), 1u);
  // The same request id for another segment: refused.
  std::string other = body;
  other.replace(other.find("10000000"), 8, "20000000");
  auto [s3, b3] = http("w", "POST", "/v1/federation/segments", other, token("x", "w"));
  EXPECT_EQ(s3, 409) << json::serialize(b3);
  // Looked up by request id (how an aggregator finds a segment whose answer it lost).
  auto [s4, b4] = http("w", "GET", "/v1/federation/segments?client_request_id=agg-1%40x%2Fw", "",
                       token("x", "w"));
  ASSERT_EQ(s4, 200) << json::serialize(b4);
  EXPECT_EQ(b4.at("id"), b1.at("id"));
  // A repeated abort answers 200 with the segment (nothing held).
  std::string second_body = body;
  second_body.replace(second_body.find("agg-1@x/w"), 9, "agg-2@x/w");
  second_body.replace(second_body.find("40100"), 5, "40101");
  auto [s6, b6] = http("w", "POST", "/v1/federation/segments", second_body, token("x", "w"));
  ASSERT_EQ(s6, 201) << json::serialize(b6);
  for (int i = 0; i < 2; ++i) {
    auto [s7, b7] = http(
        "w", "POST", "/v1/federation/segments/" + std::string(b6.at("id").as_string()) + "/abort",
        "", token("x", "w"));
    EXPECT_EQ(s7, 200) << json::serialize(b7);
    EXPECT_EQ(std::string(b7.at("state").as_string()), "terminated");
  }
  // A repeated commit answers 200 with the segment.
  const std::string id(b1.at("id").as_string());
  for (int i = 0; i < 2; ++i) {
    auto [s5, b5] =
        http("w", "POST", "/v1/federation/segments/" + id + "/commit", "{}", token("x", "w"));
    EXPECT_EQ(s5, 200) << json::serialize(b5);
    EXPECT_EQ(std::string(b5.at("state").as_string()), "committed");
  }
}

TEST_F(FederationFixture, ModifyPropagatesToEverySegment) {
  auto committed = coordinator().reserve(request("modify", true));
  ASSERT_TRUE(committed.has_value()) << committed.error().message;
  const std::string id(committed->at("id").as_string());
  agent::ModifyRequest m;
  m.min_bandwidth_bps = 80'000'000;
  auto modified = coordinator().modify(id, m);
  ASSERT_TRUE(modified.has_value()) << modified.error().message;
  EXPECT_EQ(modified->at("min_bandwidth_bps").to_number<uint64_t>(), 80'000'000u);
  for (const char* d : kDomains) {
    const auto list = agent_of(d).list(std::nullopt);
    ASSERT_EQ(list.size(), 1u);
    EXPECT_EQ(list[0].at("spec").at("min_bandwidth_bps").to_number<uint64_t>(), 80'000'000u)
        << d << json::serialize(list[0]);
  }
  // More than w can carry: refused by w, and every segment keeps the old rate.
  m.min_bandwidth_bps = 390'000'000;
  auto refused = coordinator().modify(id, m);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("domain w"), std::string::npos) << refused.error().message;
  for (const char* d : kDomains) {
    EXPECT_EQ(
        agent_of(d).list(std::nullopt)[0].at("spec").at("min_bandwidth_bps").to_number<uint64_t>(),
        80'000'000u)
        << d;
    EXPECT_EQ(agent_of(d).check_ledger(), "") << d;
  }
}

TEST_F(FederationFixture, ParticipantHoldExpiresByItsOwnTimerAndTheCommitThenFails) {
  auto held = coordinator().reserve(request("late"));
  ASSERT_TRUE(held.has_value()) << held.error().message;
  const std::string id(held->at("id").as_string());
  EXPECT_EQ(holding("w"), 1u);
  realtime.advance_ns(11 * kSecond);  // past federation.hold_timeout (10 s)
  agent_of("w").tick();               // w's own timer only
  EXPECT_EQ(holding("w"), 0u);
  auto committed = coordinator().commit(id);
  ASSERT_FALSE(committed.has_value());
  EXPECT_EQ(committed.error().code, "hold_expired");
  EXPECT_NE(committed.error().message.find("domain w"), std::string::npos);
  EXPECT_EQ(std::string(coordinator().get(id)->at("state").as_string()), "failed");
  for (const char* d : kDomains) EXPECT_EQ(holding(d), 0u) << d;
}

TEST_F(FederationFixture, AggregatorHeldReservationExpires) {
  auto held = coordinator().reserve(request("expire"));
  ASSERT_TRUE(held.has_value()) << held.error().message;
  realtime.advance_ns(11 * kSecond);
  tick_all();
  EXPECT_EQ(std::string(coordinator().list()[0].at("reason").as_string()), "hold_timeout");
  for (const char* d : kDomains) EXPECT_EQ(holding(d), 0u) << d;
}

// A crash right after a journal write: the row says what the aggregator had decided.
json::object journaled(agent::Agent& x, const std::string& id) {
  for (const auto& [row_id, body] : x.federation_rows("aggregate")) {
    if (row_id == id) return json::parse(body).as_object();
  }
  ADD_FAILURE() << "no journal row for " << id;
  return {};
}

void rewrite_state(agent::Agent& x, const json::object& aggregate, const std::string& state,
                   const std::string& decision) {
  json::object row = journaled(x, std::string(aggregate.at("id").as_string()));
  for (const auto& item : aggregate) {
    if (item.key() != "fingerprint") row[item.key()] = item.value();
  }
  row["state"] = state;
  row["decision"] = decision;
  ASSERT_TRUE(
      x.journal_federation("aggregate", std::string(row.at("id").as_string()), json::serialize(row))
          .has_value());
}

TEST_F(FederationFixture, RestartMidCommitResendsTheCommits) {
  auto held = coordinator().reserve(request("restart-commit"));
  ASSERT_TRUE(held.has_value()) << held.error().message;
  const std::string id(held->at("id").as_string());
  rewrite_state(agent_of("x"), *held, "committing", "commit");
  open("x");  // destroy x's Agent and coordinator, reopen on the same journal
  auto got = coordinator().get(id);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(std::string(got->at("state").as_string()), "committed") << json::serialize(*got);
  for (const json::value& s : got->at("segments").as_array()) {
    EXPECT_EQ(std::string(s.at("state").as_string()), "committed");
  }
  for (const char* d : kDomains) EXPECT_EQ(holding(d), 1u) << d;
  // The same request id after the restart: the same reservation.
  auto again = coordinator().reserve(request("restart-commit"));
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->at("id"), held->at("id"));
}

TEST_F(FederationFixture, RestartMidCommitThatCannotCommitTerminatesEverySegment) {
  auto held = coordinator().reserve(request("restart-late"));
  ASSERT_TRUE(held.has_value()) << held.error().message;
  const std::string id(held->at("id").as_string());
  rewrite_state(agent_of("x"), *held, "committing", "commit");
  realtime.advance_ns(11 * kSecond);  // the holds pass while x is down
  agent_of("z").tick();
  open("x");
  auto got = coordinator().get(id);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(std::string(got->at("state").as_string()), "failed");
  EXPECT_NE(std::string(got->at("reason").as_string()).find("hold expired"), std::string::npos)
      << got->at("reason");
  tick_all();
  for (const char* d : kDomains) EXPECT_EQ(holding(d), 0u) << d;
}

TEST_F(FederationFixture, RestartWhileReservingAbortsEverySegment) {
  auto held = coordinator().reserve(request("restart-reserving"));
  ASSERT_TRUE(held.has_value()) << held.error().message;
  const std::string id(held->at("id").as_string());
  // As if x stopped after w held its segment but before it heard z's answer.
  json::object row = *held;
  row["segments"].as_array()[2].as_object()["id"] = "";
  row["segments"].as_array()[2].as_object()["state"] = "planned";
  row["segments"].as_array()[2].as_object()["state"] = "unknown";
  rewrite_state(agent_of("x"), row, "reserving", "");
  open("x");
  auto got = coordinator().get(id);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(std::string(got->at("state").as_string()), "terminated");
  EXPECT_EQ(std::string(got->at("reason").as_string()), "aggregator_restart");
  for (const char* d : kDomains) EXPECT_EQ(holding(d), 0u) << d;  // z's found by request id
}

TEST_F(FederationFixture, UnansweredTerminateIsRetriedUntilThePeerAnswers) {
  auto committed = coordinator().reserve(request("retry", true));
  ASSERT_TRUE(committed.has_value()) << committed.error().message;
  const std::string id(committed->at("id").as_string());
  coordinator().faults().add(federation::Fault{"w", "terminate", FaultKind::kDrop, 2});
  auto terminated = coordinator().terminate(id);
  ASSERT_TRUE(terminated.has_value()) << terminated.error().message;
  EXPECT_EQ(std::string(terminated->at("state").as_string()), "terminated");
  // w did not answer: its segment says so, and the retry loop keeps at it.
  const json::object& w = terminated->at("segments").as_array()[1].as_object();
  EXPECT_TRUE(w.at("cleanup").as_bool());
  EXPECT_NE(std::string(w.at("error").as_string()).find("domain w"), std::string::npos);
  EXPECT_EQ(holding("w"), 1u);
  EXPECT_EQ(holding("z"), 0u);
  coordinator().tick();  // the second drop
  EXPECT_EQ(holding("w"), 1u);
  coordinator().tick();  // answered
  EXPECT_EQ(holding("w"), 0u);
  EXPECT_EQ(agent_of("w").check_ledger(), "");
}

}  // namespace
}  // namespace detwan::control::testing

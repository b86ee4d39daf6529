// Other owners' agents are not trusted to send well-formed JSON (beside
// federation_hostile_peer_test.cc, over the harness's HTTP): a peer whose requests have fields of
// the wrong type, numbers that are not integers or escapes that are not escapes gets a 400 naming
// the field; one that answers nonsense, or shows a view of the wrong shape, is named; never an
// exception through the agent, and nothing is left held anywhere.
#include <string>

#include "tests/control/federation/federation_harness.h"

namespace detwan::control::testing {
namespace {

namespace json = boost::json;

std::string segment_body(const std::string& crid, int tunnel) {
  return R"({"client_request_id":")" + crid +
         R"(","aggregate":{"id":"r-9","domain":"x"},"from":"a.ac1","to":"c.ac1",)"
         R"("rate_bps":10000000,"start_unix_ns":)" +
         std::to_string(kStartNs) + R"(,"end_unix_ns":)" +
         std::to_string(kStartNs + 600 * kSecond) + R"(,"tunnel_id":)" + std::to_string(tunnel) +
         R"(,"encrypt":"none"})";
}

TEST_F(FederationFixture, MalformedSegmentRequestsAre400sAndHoldNothing) {
  const std::string peer = token("x", "w");
  // Wrong types, non-integers, a missing field, a body that is no object.
  for (const std::string& bad :
       {std::string(R"({"client_request_id":7})"), std::string(R"([1,2,3])"),
        std::string(R"({"client_request_id":"c","from":"a.ac1","to":"c.ac1","rate_bps":"fast",)"
                    R"("start_unix_ns":1,"end_unix_ns":2,"tunnel_id":40100})"),
        std::string(R"({"client_request_id":"c","from":"a.ac1","to":"c.ac1","rate_bps":1.5,)"
                    R"("start_unix_ns":1,"end_unix_ns":2,"tunnel_id":40100})"),
        std::string(R"({"client_request_id":"c","from":"a.ac1","to":"c.ac1","rate_bps":1e30,)"
                    R"("start_unix_ns":1,"end_unix_ns":2,"tunnel_id":40100})"),
        std::string(R"({"client_request_id":"c","from":"a.ac1","to":"c.ac1","rate_bps":10,)"
                    R"("start_unix_ns":1,"end_unix_ns":2,"tunnel_id":40100,"src_prefixes":[1]})")}) {
    SCOPED_TRACE(bad);
    auto [status, body] = http("w", "POST", "/v1/federation/segments", bad, peer);
    EXPECT_EQ(status, 400) << json::serialize(body);
  }
  EXPECT_EQ(holding("w"), 0u);
  // A lookup whose escape is not one, an id that is no id.
  auto [s1, b1] = http("w", "GET", "/v1/federation/segments?client_request_id=%zz%4", "", peer);
  EXPECT_EQ(s1, 400) << json::serialize(b1);  // refused, not guessed at
  auto [s2, b2] = http("w", "GET", "/v1/federation/segments/123456789012345678901234567890", "",
                       peer);
  EXPECT_EQ(s2, 400) << json::serialize(b2);  // no segment id (r-<64-bit number>)
  // A held segment; then a PATCH of wrong types: 400 naming the field, the segment unchanged.
  auto [s3, held] = http("w", "POST", "/v1/federation/segments", segment_body("h-1@x/w", 40100),
                         peer);
  ASSERT_EQ(s3, 201) << json::serialize(held);
  const std::string id(held.at("id").as_string());
  for (const char* bad : {R"({"min_bandwidth_bps":"lots"})", R"({"min_bandwidth_bps":-5})",
                          R"({"end_unix_ns":1.5})", R"({"end_unix_ns":{}})"}) {
    SCOPED_TRACE(bad);
    auto [s, b] = http("w", "PATCH", "/v1/federation/segments/" + id, bad, peer);
    EXPECT_EQ(s, 400) << json::serialize(b);
  }
  auto [s4, still] = http("w", "GET", "/v1/federation/segments/" + id, "", peer);
  ASSERT_EQ(s4, 200);
  EXPECT_EQ(still.at("state").as_string(), "held");
  // A commit whose fields are of the wrong types is refused, naming the field.
  auto [s5, committed] = http("w", "POST", "/v1/federation/segments/" + id + "/commit",
                              R"({"far_gateway":7,"far_prefixes":"10.0.0.0/8",)"
                              R"("bound":{"delivery":"on_time","playout_bound_ns":1.5},)"
                              R"("aggregate":[],"far_public_key":{}})",
                              peer);
  EXPECT_EQ(s5, 400) << json::serialize(committed);  // the segment stays held
  auto [s7, held_still] = http("w", "GET", "/v1/federation/segments/" + id, "", peer);
  EXPECT_EQ(held_still.at("state").as_string(), "held") << s7;
  auto [s6, aborted] = http("w", "POST", "/v1/federation/segments/" + id + "/terminate", "", peer);
  EXPECT_EQ(s6, 200) << json::serialize(aborted);
  EXPECT_EQ(holding("w"), 0u);
}

TEST_F(FederationFixture, APeerAnsweringNonsenseIsNamedAndNothingStaysHeld) {
  // w answers every segment call with fields of the wrong types.
  const std::string garbage =
      R"({"id":["r-1"],"state":5,"gateways":[1,{},"gw-w"],"public_keys":[],)"
      R"("prefixes":"10/8","bound":{"max_latency_ns":"soon","max_loss":"none",)"
      R"("playout_bound_ns":1.5},"hold_expires_unix_ns":1e300,"dataplane_active":"yes"})";
  {
    std::lock_guard lock(domains["w"].slot->mutex);
    api::Handler sane = domains["w"].slot->handler;  // its view stays sane: the path is found
    domains["w"].slot->handler = [garbage, sane](api::HttpRequest r, api::Respond send) {
      if (r.method == "GET" && r.path == "/v1/federation/view") return sane(std::move(r), send);
      api::HttpResponse answer;
      answer.status = r.method == "POST" && r.path == "/v1/federation/segments" ? 201 : 200;
      answer.body = garbage;
      send(answer);
    };
  }
  auto out = coordinator().reserve(request("garbage", true));
  if (out.has_value()) {
    // Whatever it made of the answer, it must not claim a commit it could not verify.
    EXPECT_NE(std::string(out->at("state").as_string()), "committed") << json::serialize(*out);
  } else {
    EXPECT_NE(out.error().message.find("domain w"), std::string::npos) << out.error().message;
  }
  // A GET of it while w talks nonsense: answered, not thrown.
  for (const json::value& a : coordinator().list()) {
    auto got = coordinator().get(std::string(a.at("id").as_string()));
    EXPECT_TRUE(got.has_value() || !got.error().message.empty());
  }
  tick_all();
  open("w");  // w's agent comes back sane
  realtime.advance_ns(13 * kSecond);
  monotonic.advance_ns(13 * kSecond);
  tick_all();
  for (const char* d : kDomains) {
    EXPECT_EQ(holding(d), 0u) << "domain " << d;
    EXPECT_EQ(agent_of(d).check_ledger(), "") << "domain " << d;
  }
}

TEST_F(FederationFixture, AViewOfTheWrongShapeIsNoPath) {
  {
    std::lock_guard lock(domains["w"].slot->mutex);
    domains["w"].slot->handler = [](api::HttpRequest, api::Respond send) {
      api::HttpResponse r;
      r.status = 200;
      r.body = R"({"domain":"w","generated_unix_ns":"now","borders":[{"name":1}],"transits":7})";
      send(r);
    };
  }
  auto out = coordinator().reserve(request("bad-view", true));
  ASSERT_FALSE(out.has_value());
  EXPECT_NE(out.error().message.find("w"), std::string::npos) << out.error().message;
  for (const char* d : kDomains) EXPECT_EQ(holding(d), 0u) << d;
}

}  // namespace
}  // namespace detwan::control::testing

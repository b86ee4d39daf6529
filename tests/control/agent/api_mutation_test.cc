// Hostile input to the agent's API, seeded: valid request bodies mutated byte by byte (flips,
// insertions, deletions, truncations, swapped JSON types) and random methods and paths, through
// the request parsers and the whole route table over a live agent (fake gateways). Every
// request must get a JSON answer with a status the API documents, nothing may crash or leak
// (this runs under ASan+UBSan in CI), and the agent's ledger must stay consistent.
#include <random>
#include <set>

#include "control/api/requests.h"
#include "control/api/routes.h"
#include "tests/control/agent/agent_test_util.h"

namespace detwan::control::testing {
namespace {

const char* const kBodies[] = {
    R"({"src":"a","dst":"b","min_bandwidth_bps":50000000,"max_latency_ns":40000000,"max_latency_variation_ns":5000000,"duration_ns":600000000000,"provision":true})",
    R"({"src":"a","dst":"c","min_bandwidth_bps":1000000,"start_unix_ns":1800000100000000000,"end_unix_ns":1800000200000000000,"commit":true,"client_request_id":"x"})",
    R"({"src":"b","dst":"a","min_bandwidth_bps":2000000,"asap":true,"duration_ns":60000000000,"paths":2,"dst_prefixes":["10.20.1.7/32"],"src_prefixes":["10.20.2.7/32"]})",
    R"({"min_bandwidth_bps":60000000,"end_unix_ns":1800000900000000000})",
    R"({"src":"a","dst":"b","min_bandwidth_bps":10000000,"k":2,"require_capacity":false})",
};

std::string mutate(std::string s, std::mt19937_64& rng) {
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits && !s.empty(); ++e) {
    const size_t at = rng() % s.size();
    switch (rng() % 6) {
      case 0:
        s[at] = static_cast<char>(rng() % 256);
        break;
      case 1:
        s.insert(at, 1, "{}[]\":,0-9e.\\ntf"[rng() % 16]);
        break;
      case 2:
        s.erase(at, 1 + rng() % 8);
        break;
      case 3:
        s.resize(at);
        break;
      case 4: {  // a number becomes huge, negative or fractional
        const size_t digit = s.find_first_of("0123456789", at);
        if (digit != std::string::npos) s.insert(digit, rng() % 2 ? "-" : "99999999999999999999");
        break;
      }
      default: {  // a value becomes another JSON type
        const size_t colon = s.find(':', at);
        if (colon != std::string::npos) s.insert(colon + 1, rng() % 2 ? "null," : "[1,{\"a\":2}],");
        break;
      }
    }
  }
  return s;
}

TEST(ApiMutation, ParsersRefuseEveryMalformedBodyNamingWhy) {
  std::mt19937_64 rng(12);
  int refused = 0;
  for (int i = 0; i < 20'000; ++i) {
    const std::string body = mutate(kBodies[rng() % std::size(kBodies)], rng);
    for (int which = 0; which < 3; ++which) {
      std::string message;
      int status = 0;
      bool ok = false;
      if (which == 0) {
        auto r = api::parse_reserve(body);
        ok = r.has_value();
        if (!ok) std::tie(status, message) = std::pair{r.error().status, r.error().message};
      } else if (which == 1) {
        auto r = api::parse_modify(body);
        ok = r.has_value();
        if (!ok) std::tie(status, message) = std::pair{r.error().status, r.error().message};
      } else {
        auto r = api::parse_paths(body);
        ok = r.has_value();
        if (!ok) std::tie(status, message) = std::pair{r.error().status, r.error().message};
      }
      if (!ok) {
        ++refused;
        EXPECT_EQ(status, 400) << body;
        EXPECT_FALSE(message.empty()) << body;
      }
    }
  }
  EXPECT_GT(refused, 30'000);  // most mutations break the body
}

TEST_F(AgentFixture, EveryRequestThroughTheRoutesGetsADocumentedJsonAnswer) {
  const api::Handler handler = api::make_handler(*agent, "openapi: 3.0.3\n");
  std::mt19937_64 rng(34);
  const char* methods[] = {"GET", "POST", "PATCH", "DELETE", "PUT"};
  const char* paths[] = {"/v1/reservations",
                         "/v1/reservations/r-1",
                         "/v1/reservations/r-1/commit",
                         "/v1/reservations/r-2/provision",
                         "/v1/reservations/r-1/release",
                         "/v1/reservations/r-3/terminate",
                         "/v1/reservations/r-x/abort",
                         "/v1/reservations?state=held",
                         "/v1/reservations?state=bogus",
                         "/v1/paths",
                         "/v1/topology",
                         "/healthz",
                         "/metrics",
                         "/v1/stats",
                         "/nope",
                         "/v1/reservations/r-1/reboot",
                         "/v1/reservations/"
                         "r-99999999999999999999999"};
  const std::set<int> documented = {200, 201, 400, 404, 405, 409, 422};
  std::map<int, int> seen;
  for (int i = 0; i < 3'000; ++i) {
    api::HttpRequest request;
    request.method = methods[rng() % std::size(methods)];
    request.target = paths[rng() % std::size(paths)];
    const size_t q = request.target.find('?');
    request.path = request.target.substr(0, q);
    request.query =
        q == std::string::npos ? "wait=false" : request.target.substr(q + 1) + "&wait=false";
    request.body = rng() % 4 == 0 ? std::string(kBodies[rng() % std::size(kBodies)])
                                  : mutate(kBodies[rng() % std::size(kBodies)], rng);
    api::HttpResponse answer;
    bool answered = false;
    handler(request, [&](api::HttpResponse r) {
      answer = std::move(r);
      answered = true;
    });
    ASSERT_TRUE(answered) << request.method << " " << request.target;
    ++seen[answer.status];
    EXPECT_EQ(documented.count(answer.status), 1u)
        << answer.status << " " << request.method << " " << request.target << " " << answer.body;
    if (answer.content_type == "application/json") {
      boost::system::error_code ec;
      (void)boost::json::parse(answer.body, ec);
      EXPECT_FALSE(ec) << answer.body;
    }
    if (i % 100 == 0) {
      realtime.advance_ns(7 * kSecond);
      agent->tick();
      agent->reconcile_now();
    }
  }
  EXPECT_GT(seen[201], 0);
  EXPECT_GT(seen[400], 0);
  EXPECT_GT(seen[404], 0);
  EXPECT_EQ(agent->check_ledger(), "");
}

}  // namespace
}  // namespace detwan::control::testing

// Compute pools and the placement planner through the agent's HTTP routes (virtual time, fake
// gateways): pools registered, listed, journaled across a restart and removed; a plan that
// needs the WAN names the reservation the admission planner can give; plan + reserve holds it
// in the ledger; refusals carry their cause.
#include "control/api/routes.h"
#include "tests/control/agent/agent_test_util.h"

namespace detwan::control::testing {
namespace {

using json = boost::json::value;

struct ComputeFixture : AgentFixture {
  std::pair<int, json> call(const std::string& method, const std::string& path,
                            const std::string& body = "") {
    const api::Handler handler = api::make_handler(*agent, "openapi: 3.0.3\n");
    api::HttpRequest request;
    request.method = method;
    request.target = path;
    request.path = path;
    request.body = body;
    request.content_type = "application/json";
    int status = 0;
    json answer;
    handler(request, [&](api::HttpResponse r) {
      status = r.status;
      answer = boost::json::parse(r.body);
    });
    return {status, answer};
  }
  void register_pool(const std::string& name, const std::string& site, int ranks,
                     const std::string& extra = "", const std::string& kind = "cpu") {
    const auto [status, answer] = call(
        "POST", "/v1/pools",
        fmt::format(R"({{"name":"{}","site":"{}","kind":"{}","ranks":{}{}}})", name, site, kind,
                    ranks, extra));
    ASSERT_EQ(status, 201) << boost::json::serialize(answer);
  }
};

TEST_F(ComputeFixture, PoolsAreRegisteredListedKeptAcrossARestartAndRemoved) {
  register_pool("a-cpu", "a", 4,
                R"(,"reference":{"step_ns":2000000000,"steps":5,"gradient_bytes":4000000,"model":"mlp"})");
  register_pool("b-cpu", "b", 2);
  EXPECT_EQ(call("GET", "/v1/pools").second.at("pools").as_array().size(), 2u);
  open();  // the agent restarts on the same journal
  const auto [status, pool] = call("GET", "/v1/pools/a-cpu");
  ASSERT_EQ(status, 200);
  EXPECT_EQ(pool.at("ranks").as_int64(), 4);
  EXPECT_EQ(pool.at("reference").at("step_ns").as_int64(), 2'000'000'000);
  EXPECT_EQ(call("DELETE", "/v1/pools/b-cpu").first, 200);
  EXPECT_EQ(call("GET", "/v1/pools/b-cpu").first, 404);
  open();
  EXPECT_EQ(call("GET", "/v1/pools").second.at("pools").as_array().size(), 1u);
}

TEST_F(ComputeFixture, BadPoolsAreRefusedNamingTheField) {
  auto [status, answer] =
      call("POST", "/v1/pools", R"({"name":"x","site":"nowhere","kind":"cpu","ranks":1})");
  EXPECT_EQ(status, 400);
  EXPECT_EQ(answer.at("error").at("code").as_string(), "unknown_site");
  std::tie(status, answer) =
      call("POST", "/v1/pools", R"({"name":"x","site":"a","kind":"cpu","ranks":-1})");
  EXPECT_EQ(status, 400);
  EXPECT_EQ(answer.at("error").at("field").as_string(), "ranks");
}

TEST_F(ComputeFixture, APlanOverTwoSitesNamesItsReservationAndPlanReserveHoldsIt) {
  register_pool("a-cpu", "a", 2);
  register_pool("b-cpu", "b", 2);
  const std::string job =
      R"({"gradient_bytes":4000000,"ranks":4,"step_compute_ns":2000000000,"target_step_ns":2500000000)";
  auto [status, plan] = call("POST", "/v1/plan", job + "}");
  ASSERT_EQ(status, 200) << boost::json::serialize(plan);
  ASSERT_EQ(plan.at("placement").as_array().size(), 2u);
  const auto& need = plan.at("reservations").as_array().at(0);
  const int64_t rate = need.at("rate_bps").to_number<int64_t>();
  EXPECT_GT(rate, 0);
  EXPECT_LE(rate, 180'000'000);  // ab1: 200 Mbit/s, 90 % reservable
  // The path and bound the admission planner gives at that rate.
  EXPECT_EQ(boost::json::serialize(need.at("path")), R"(["a","b"])");
  EXPECT_EQ(boost::json::serialize(need.at("links")), R"(["ab1"])");
  EXPECT_GT(need.at("max_latency_ns").to_number<int64_t>(), 0);
  EXPECT_LE(plan.at("predicted_step_s").as_double(), 2.5);
  EXPECT_GT(plan.at("predicted_efficiency").as_double(), 0.8);
  EXPECT_EQ(agent->list(std::nullopt).size(), 0u);  // a plan books nothing

  std::tie(status, plan) = call("POST", "/v1/plan", job + R"(,"reserve":true})");
  ASSERT_EQ(status, 201) << boost::json::serialize(plan);
  const auto& held = plan.at("reserved").as_array();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].at("state").as_string(), "held");
  EXPECT_EQ(held[0].at("spec").at("min_bandwidth_bps").to_number<int64_t>(), rate);
  EXPECT_EQ(agent->check_ledger(), "");
}

TEST_F(ComputeFixture, RefusalsCarryTheirCause) {
  register_pool("a-cpu", "a", 2);
  auto [status, answer] = call(
      "POST", "/v1/plan", R"({"gradient_bytes":1000,"ranks":4,"step_compute_ns":1000000000})");
  EXPECT_EQ(status, 422);
  EXPECT_EQ(answer.at("error").at("code").as_string(), "not_enough_compute");
  register_pool("b-cpu", "b", 2);
  std::tie(status, answer) =
      call("POST", "/v1/plan",
           R"({"gradient_bytes":400000000,"ranks":4,"step_compute_ns":1000000000,"target_step_ns":1100000000})");
  EXPECT_EQ(status, 422);
  EXPECT_EQ(answer.at("error").at("code").as_string(), "bound_too_tight");
  // No compute time and no measured reference: the pools are left out, and the answer says so.
  std::tie(status, answer) = call("POST", "/v1/plan", R"({"gradient_bytes":1000,"ranks":2})");
  EXPECT_EQ(status, 422);
  EXPECT_NE(answer.at("error").at("message").as_string().find("no compute time"),
            boost::json::string::npos);
  std::tie(status, answer) = call("POST", "/v1/plan", R"({"ranks":2})");
  EXPECT_EQ(status, 400);
  EXPECT_EQ(answer.at("error").at("field").as_string(), "gradient_bytes");
}

TEST_F(ComputeFixture, TheMeasuredReferenceStepStandsInForAMissingComputeTime) {
  register_pool("a-cpu", "a", 2,
                R"(,"reference":{"step_ns":1000000000,"steps":5,"gradient_bytes":1000000})");
  // Twice the reference model's gradient: twice its step.
  auto [status, plan] = call("POST", "/v1/plan", R"({"gradient_bytes":2000000,"ranks":2})");
  ASSERT_EQ(status, 200) << boost::json::serialize(plan);
  EXPECT_EQ(plan.at("predicted").at("compute_ns").to_number<int64_t>(), 2'000'000'000);
}

TEST_F(ComputeFixture, SpeedSharesGiveEachPoolItsFractionOfTheBatch) {
  register_pool("a-gpu", "a", 2, "", "a100");
  register_pool("a-cpu", "a", 2);
  const std::string job =
      R"({"gradient_bytes":1000,"ranks":4,"step_compute_ns_by_kind":{"a100":1000000000,)"
      R"("cpu":4000000000})";
  auto [status, plan] = call("POST", "/v1/plan", job + "}");
  ASSERT_EQ(status, 200) << boost::json::serialize(plan);
  EXPECT_EQ(plan.at("predicted").at("compute_ns").to_number<int64_t>(), 4'000'000'000);
  EXPECT_EQ(plan.at("job").at("shares").as_string(), "equal");
  std::tie(status, plan) = call("POST", "/v1/plan", job + R"(,"shares":"speed"})");
  ASSERT_EQ(status, 200) << boost::json::serialize(plan);
  EXPECT_EQ(plan.at("predicted").at("compute_ns").to_number<int64_t>(), 1'600'000'000);
  EXPECT_EQ(plan.at("job").at("shares").as_string(), "speed");
  const auto& pools = plan.at("placement").at(0).at("pools").as_array();
  ASSERT_EQ(pools.size(), 2u);
  EXPECT_EQ(pools[0].at("kind").as_string(), "a100");
  EXPECT_DOUBLE_EQ(pools[0].at("batch_fraction").to_number<double>(), 0.4);
  EXPECT_DOUBLE_EQ(pools[1].at("batch_fraction").to_number<double>(), 0.1);
  std::tie(status, plan) = call("POST", "/v1/plan", job + R"(,"shares":"fast"})");
  EXPECT_EQ(status, 400);
  EXPECT_EQ(plan.at("error").at("field").as_string(), "shares");
}

}  // namespace
}  // namespace detwan::control::testing

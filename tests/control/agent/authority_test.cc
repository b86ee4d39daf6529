// Per-tenant authority and owner policy through the agent's routes (control/api/authority.h,
// control/policy/policy.h): requests with the Identity the HTTP server would give them, over
// a live agent (fake gateways, virtual time). A tenant sees and changes only its own
// reservations, admins all; verbs and sites scope tokens; peers reach only the federation,
// /healthz and /v1/policy; policy caps refuse with their cause; every 403 is counted.
#include "control/api/routes.h"
#include "tests/control/agent/agent_test_util.h"

namespace detwan::control::testing {
namespace {

using api::Identity;

constexpr const char* kPolicy = R"(policy:
  default: {max_rate: 100mbit, max_reservations: 3}
  tenants:
    small: {max_rate: 20mbit}
    share: {max_link_share: 10%}
  domains:
    w: {max_rate: 50mbit}
    v: {max_window: 1h}
)";

Identity token(const std::string& tenant, bool reserve = true, bool admin = false,
               std::vector<std::string> sites = {}) {
  Identity who;
  who.kind = Identity::Kind::kToken;
  who.name = "tok-" + (tenant.empty() ? std::string("ops") : tenant);
  who.tenant = tenant;
  who.may_read = true;
  who.may_reserve = reserve || admin;
  who.may_admin = admin;
  who.sites = std::move(sites);
  return who;
}

Identity peer(const std::string& domain) {
  Identity who;
  who.kind = Identity::Kind::kPeer;
  who.name = "CN=agent-" + domain;
  who.domain = domain;
  who.may_admin = false;
  return who;
}

struct AuthorityTest : AgentFixture {
  std::unique_ptr<api::Handler> handler;

  void SetUp() override { reopen(); }

  // Opens (again) the agent on the same journal, with the policy.
  void reopen() {
    handler.reset();
    agent.reset();
    auto topology = model::load_topology_string(lab_topology(journal, kPolicy));
    ASSERT_TRUE(topology.has_value()) << topology.error().message;
    agent::AgentOptions options;
    options.realtime = &realtime;
    options.monotonic = &monotonic;
    options.gateway_client = &gateways;
    options.start_threads = false;
    auto opened = agent::Agent::open(std::move(*topology), options);
    ASSERT_TRUE(opened.has_value()) << opened.error().message;
    agent = std::move(*opened);
    handler = std::make_unique<api::Handler>(api::make_handler(*agent, "openapi: 3.0.3\n"));
  }

  api::HttpResponse call(const Identity& who, const std::string& method, const std::string& target,
                         const std::string& body = "") {
    api::HttpRequest request;
    request.method = method;
    request.target = target;
    const size_t q = target.find('?');
    request.path = target.substr(0, q);
    request.query = q == std::string::npos ? "" : target.substr(q + 1);
    request.body = body;
    request.client = "127.0.0.1:5555";
    request.identity = who;
    api::HttpResponse answer;
    bool answered = false;
    (*handler)(request, [&](api::HttpResponse r) {
      answer = std::move(r);
      answered = true;
    });
    EXPECT_TRUE(answered) << method << " " << target;
    return answer;
  }

  static std::string body(const std::string& src, const std::string& dst, uint64_t rate_bps,
                          int host, const std::string& extra = "") {
    auto site = [](const std::string& s) { return s == "a" ? 1 : s == "b" ? 2 : 3; };
    return fmt::format(
        R"({{"src":"{}","dst":"{}","min_bandwidth_bps":{},"duration_ns":600000000000,)"
        R"("src_prefixes":["10.20.{}.{}/32"],"dst_prefixes":["10.20.{}.{}/32"]{}}})",
        src, dst, rate_bps, site(src), host, site(dst), host, extra);
  }

  // POST /v1/reservations as `who`; the new id ("" and a failed expectation if refused).
  std::string reserve_as(const Identity& who, const std::string& src, const std::string& dst,
                         uint64_t rate_bps, int host) {
    const auto r = call(who, "POST", "/v1/reservations", body(src, dst, rate_bps, host));
    EXPECT_EQ(r.status, 201) << r.body;
    if (r.status != 201) return "";
    return std::string(boost::json::parse(r.body).at("id").as_string());
  }

  static std::string code_of(const api::HttpResponse& r) {
    return std::string(boost::json::parse(r.body).at("error").at("code").as_string());
  }
  static std::string message_of(const api::HttpResponse& r) {
    return std::string(boost::json::parse(r.body).at("error").at("message").as_string());
  }
  std::vector<std::string> listed(const Identity& who) {
    const auto r = call(who, "GET", "/v1/reservations");
    EXPECT_EQ(r.status, 200) << r.body;
    std::vector<std::string> ids;
    const boost::json::value parsed = boost::json::parse(r.body);
    for (const auto& item : parsed.at("reservations").as_array()) {
      ids.emplace_back(item.at("id").as_string());
    }
    return ids;
  }
  uint64_t refused_metric(const std::string& cause) {
    const std::string text = agent->metrics_text();
    const std::string key = fmt::format(
        "detwan_agent_admission_decisions_total{{decision=\"refused\",cause=\"{}\"}} ", cause);
    const size_t at = text.find(key);
    return at == std::string::npos ? 0 : std::stoull(text.substr(at + key.size()));
  }
};

TEST_F(AuthorityTest, ATenantSeesAndChangesOnlyItsOwnReservations) {
  const Identity alpha = token("alpha");
  const Identity beta = token("beta");
  const std::string mine = reserve_as(alpha, "a", "b", 10'000'000, 1);
  const std::string theirs = reserve_as(beta, "a", "b", 10'000'000, 2);
  ASSERT_FALSE(mine.empty());
  ASSERT_FALSE(theirs.empty());
  // The reservation records and shows who holds it.
  EXPECT_EQ(agent->get(mine)->at("tenant").as_string(), "alpha");
  EXPECT_EQ(agent->get(theirs)->at("tenant").as_string(), "beta");

  EXPECT_EQ(listed(alpha), std::vector<std::string>{mine});
  EXPECT_EQ(listed(beta), std::vector<std::string>{theirs});
  EXPECT_EQ(listed(token("", true, true)).size(), 2u);  // the operator's admin token
  EXPECT_EQ(listed(Identity{}).size(), 2u);             // anonymous (lab): as before

  const uint64_t before = refused_metric("forbidden");
  struct Attempt {
    const char* method;
    std::string target;
    std::string body;
  };
  const std::vector<Attempt> attempts = {
      {"GET", "/v1/reservations/" + theirs, ""},
      {"PATCH", "/v1/reservations/" + theirs, R"({"min_bandwidth_bps":20000000})"},
      {"DELETE", "/v1/reservations/" + theirs, ""},
      {"POST", "/v1/reservations/" + theirs + "/commit", ""},
      {"POST", "/v1/reservations/" + theirs + "/release", ""},
      {"POST", "/v1/reservations/" + theirs + "/terminate", ""},
      {"POST", "/v1/reservations/" + theirs + "/rotate-key", ""},
  };
  for (const Attempt& a : attempts) {
    const auto r = call(alpha, a.method, a.target, a.body);
    EXPECT_EQ(r.status, 403) << a.method << " " << a.target << ": " << r.body;
    EXPECT_EQ(code_of(r), "forbidden");
    EXPECT_NE(message_of(r).find(theirs), std::string::npos) << r.body;
    EXPECT_NE(message_of(r).find("'beta'"), std::string::npos) << r.body;
    EXPECT_NE(message_of(r).find("alpha"), std::string::npos) << r.body;
  }
  EXPECT_EQ(refused_metric("forbidden"), before + attempts.size());
  EXPECT_EQ(state(theirs), "held");  // nothing happened to it
  // Its own: fine. An admin acts on anyone's.
  EXPECT_EQ(call(alpha, "POST", "/v1/reservations/" + mine + "/commit").status, 200);
  EXPECT_EQ(call(token("ops", true, true), "DELETE", "/v1/reservations/" + theirs).status, 200);
  EXPECT_EQ(state(theirs), "terminated");
  // An unknown id is still the agent's own 404.
  EXPECT_EQ(call(alpha, "GET", "/v1/reservations/r-999").status, 404);
}

TEST_F(AuthorityTest, TheTenantIsJournaledWithTheReservation) {
  const std::string mine = reserve_as(token("alpha"), "a", "b", 10'000'000, 1);
  const std::string ops = reserve_as(token("", true, true), "a", "b", 10'000'000, 2);
  ASSERT_FALSE(mine.empty());
  reopen();  // a restart replays the journal
  EXPECT_EQ(agent->get(mine)->at("tenant").as_string(), "alpha");
  EXPECT_EQ(agent->get(ops)->at("tenant").as_string(), "");
  EXPECT_EQ(listed(token("alpha")), std::vector<std::string>{mine});
  EXPECT_EQ(call(token("beta"), "POST", "/v1/reservations/" + mine + "/abort").status, 403);
  EXPECT_EQ(call(token("alpha"), "POST", "/v1/reservations/" + mine + "/abort").status, 200);
}

TEST_F(AuthorityTest, AnotherTenantsClientRequestIdIsNotAWayIn) {
  const auto first = call(token("alpha"), "POST", "/v1/reservations",
                          body("a", "b", 10'000'000, 1, R"(,"client_request_id":"job-7")"));
  ASSERT_EQ(first.status, 201) << first.body;
  const auto replay = call(token("beta"), "POST", "/v1/reservations",
                           body("a", "b", 10'000'000, 1, R"(,"client_request_id":"job-7")"));
  EXPECT_EQ(replay.status, 403) << replay.body;
  EXPECT_NE(message_of(replay).find("job-7"), std::string::npos);
  EXPECT_EQ(replay.body.find("tunnel"), std::string::npos);  // none of alpha's reservation
}

TEST_F(AuthorityTest, VerbsScopeWhatATokenMayDo) {
  const Identity reader = token("alpha", false);
  const auto refused = call(reader, "POST", "/v1/reservations", body("a", "b", 1'000'000, 1));
  EXPECT_EQ(refused.status, 403);
  EXPECT_NE(message_of(refused).find("may not reserve"), std::string::npos);
  EXPECT_EQ(call(reader, "GET", "/v1/topology").status, 200);
  const std::string pool =
      R"({"name":"p1","site":"a","kind":"gpu","ranks":4,"reference_step_ns":1000000,"reference_gradient_bytes":1000000})";
  const auto pools = call(token("alpha"), "POST", "/v1/pools", pool);
  EXPECT_EQ(pools.status, 403) << pools.body;
  EXPECT_NE(message_of(pools).find("admin"), std::string::npos);
  EXPECT_EQ(call(token("alpha"), "DELETE", "/v1/pools/p1").status, 403);
  const auto admin = call(token("ops", true, true), "POST", "/v1/pools", pool);
  EXPECT_NE(admin.status, 403) << admin.body;
  const auto plan =
      call(reader, "POST", "/v1/plan", R"({"ranks":4,"gradient_bytes":1000000,"reserve":true})");
  EXPECT_EQ(plan.status, 403) << plan.body;
}

TEST_F(AuthorityTest, ATokenWithSitesReservesOnlyBetweenThem) {
  const Identity ab = token("alpha", true, false, {"a", "b"});
  EXPECT_FALSE(reserve_as(ab, "a", "b", 1'000'000, 1).empty());
  const auto refused = call(ab, "POST", "/v1/reservations", body("a", "c", 1'000'000, 1));
  EXPECT_EQ(refused.status, 403) << refused.body;
  EXPECT_NE(message_of(refused).find("site 'c'"), std::string::npos) << refused.body;
  const auto plan = call(ab, "POST", "/v1/plan",
                         R"({"ranks":4,"gradient_bytes":1000000,"sites":["a","c"],)"
                         R"("reserve":true})");
  EXPECT_EQ(plan.status, 403) << plan.body;
}

TEST_F(AuthorityTest, APeerReachesOnlyTheFederationHealthAndPolicy) {
  const Identity w = peer("w");
  EXPECT_EQ(call(w, "GET", "/healthz").status, 200);
  for (const auto& [method, target] :
       std::vector<std::pair<std::string, std::string>>{{"GET", "/v1/reservations"},
                                                        {"POST", "/v1/reservations"},
                                                        {"GET", "/v1/topology"},
                                                        {"GET", "/metrics"},
                                                        {"GET", "/v1/stats"},
                                                        {"POST", "/v1/paths"}}) {
    const auto r = call(w, method, target, "{}");
    EXPECT_EQ(r.status, 403) << method << " " << target;
    EXPECT_NE(message_of(r).find("peer domain 'w'"), std::string::npos) << r.body;
  }
  // Federation routes are not refused by authority (another part routes them: 404 here).
  EXPECT_NE(call(w, "POST", "/v1/federation/reserve", "{}").status, 403);
  const auto policy = call(w, "GET", "/v1/policy");
  ASSERT_EQ(policy.status, 200);
  const auto json = boost::json::parse(policy.body);
  EXPECT_EQ(json.at("default").at("max_rate_bps").to_number<uint64_t>(), 100'000'000u);
  EXPECT_EQ(json.at("domains").as_object().size(), 1u);
  EXPECT_EQ(json.at("domains").at("w").at("max_rate_bps").to_number<uint64_t>(), 50'000'000u);
  // An entry inherits the default's keys it omits.
  EXPECT_EQ(json.at("domains").at("w").at("max_reservations").to_number<uint64_t>(), 3u);
  EXPECT_TRUE(json.at("tenants").as_object().empty());
}

TEST_F(AuthorityTest, PolicyIsShownToThoseAllowed) {
  auto view = [&](const Identity& who) {
    const auto r = call(who, "GET", "/v1/policy");
    EXPECT_EQ(r.status, 200) << r.body;
    return boost::json::parse(r.body);
  };
  const auto admin = view(token("", true, true));
  EXPECT_EQ(admin.at("tenants").as_object().size(), 2u);
  EXPECT_EQ(admin.at("domains").as_object().size(), 2u);
  const auto small = view(token("small"));
  EXPECT_EQ(small.at("tenants").at("small").at("max_rate_bps").to_number<uint64_t>(), 20'000'000u);
  EXPECT_TRUE(small.at("domains").as_object().empty());
  const auto other = view(token("other"));
  EXPECT_TRUE(other.at("tenants").as_object().empty());
  EXPECT_EQ(other.at("default").at("max_reservations").to_number<uint64_t>(), 3u);
  EXPECT_EQ(call(token("small"), "POST", "/v1/policy", "{}").status, 405);
}

TEST_F(AuthorityTest, OwnerPolicyRefusesBeyondTheCapsWithTheirCause) {
  const Identity small = token("small");
  const auto rate = call(small, "POST", "/v1/reservations", body("a", "b", 30'000'000, 1));
  EXPECT_EQ(rate.status, 403) << rate.body;
  EXPECT_EQ(code_of(rate), "policy_rate");
  EXPECT_NE(message_of(rate).find("tenant 'small'"), std::string::npos) << rate.body;
  EXPECT_EQ(refused_metric("policy_rate"), 1u);
  // At the cap: admitted. Then a modify above it is refused and changes nothing.
  const std::string id = reserve_as(small, "a", "b", 20'000'000, 1);
  ASSERT_FALSE(id.empty());
  const auto modify =
      call(small, "PATCH", "/v1/reservations/" + id, R"({"min_bandwidth_bps":20000001})");
  EXPECT_EQ(modify.status, 403) << modify.body;
  EXPECT_EQ(code_of(modify), "policy_rate");
  EXPECT_EQ(agent->get(id)->at("min_bandwidth_bps").to_number<uint64_t>(), 20'000'000u);
  EXPECT_EQ(agent->check_ledger(), "");
  // max_reservations 3 (inherited): a fourth is refused.
  EXPECT_FALSE(reserve_as(small, "a", "b", 1'000'000, 2).empty());
  EXPECT_FALSE(reserve_as(small, "a", "b", 1'000'000, 3).empty());
  const auto fourth = call(small, "POST", "/v1/reservations", body("a", "b", 1'000'000, 4));
  EXPECT_EQ(fourth.status, 403) << fourth.body;
  EXPECT_EQ(code_of(fourth), "policy_reservations");
  // Releasing one makes room (terminated holds nothing).
  EXPECT_EQ(call(small, "DELETE", "/v1/reservations/" + id).status, 200);
  EXPECT_FALSE(reserve_as(small, "a", "b", 1'000'000, 4).empty());
  // A cap is checked before the request is planned: policy_rate, not a prefix conflict.
  const auto over = call(small, "POST", "/v1/reservations", body("a", "b", 30'000'000, 2));
  EXPECT_EQ(code_of(over), "policy_rate") << over.body;
  // The operator (admin over every tenant) is not capped.
  EXPECT_FALSE(reserve_as(token("", true, true), "a", "b", 150'000'000, 9).empty());
}

TEST_F(AuthorityTest, LinkShareAndForeignDomainsAreCappedByTheAgent) {
  // Link ac: 100 Mbit/s, 90 % reservable: tenant "share" may hold 10 % of 90 Mbit/s on it.
  const Identity share = token("share");
  EXPECT_FALSE(reserve_as(share, "a", "c", 5'000'000, 1).empty());
  const auto refused = call(share, "POST", "/v1/reservations", body("a", "c", 5'000'000, 2));
  EXPECT_EQ(refused.status, 403) << refused.body;
  EXPECT_EQ(code_of(refused), "policy_link_share");
  EXPECT_NE(message_of(refused).find("link 'ac'"), std::string::npos) << refused.body;
  EXPECT_EQ(refused_metric("policy_link_share"), 1u);
  EXPECT_FALSE(reserve_as(share, "a", "c", 4'000'000, 2).empty());  // 9 Mbit/s: at the cap
  // A foreign domain's segment (federation sets requester_domain) gets its domain's caps.
  auto w = request("a", "b", 60'000'000, 600 * kSecond, 5);
  w.requester_domain = "w";
  const auto capped = agent->reserve(w);
  ASSERT_FALSE(capped.has_value());
  EXPECT_EQ(capped.error().code, "policy_rate");
  EXPECT_EQ(capped.error().status, 403);
  EXPECT_NE(capped.error().message.find("domain 'w'"), std::string::npos);
  w.spec.min_bandwidth_bps = 50'000'000;
  const auto ok = agent->reserve(w);
  ASSERT_TRUE(ok.has_value()) << ok.error().message;
  EXPECT_EQ(ok->at("requester_domain").as_string(), "w");
  EXPECT_EQ(agent->check_ledger(), "");
}

}  // namespace
}  // namespace detwan::control::testing

namespace detwan::control::testing {
namespace {

// GET /v1/reservations?after=&limit=&site=: pages in id order, each tenant's pages hold only its
// own reservations (the filter is applied before the page is cut), `next` only when more follow.
TEST_F(AuthorityTest, ReservationsArePagedAndFilteredPerTenant) {
  const Identity alpha = token("alpha");
  const Identity beta = token("beta");
  const Identity ops = token("", true, true);
  std::vector<std::string> alphas, all;
  for (int host = 1; host <= 3; ++host) {
    alphas.push_back(reserve_as(alpha, "a", host == 3 ? "c" : "b", 1'000'000, host));
    all.push_back(alphas.back());
    all.push_back(reserve_as(beta, "a", "b", 1'000'000, 10 + host));
  }
  auto page = [&](const Identity& who, const std::string& query) {
    const auto r = call(who, "GET", "/v1/reservations" + query);
    EXPECT_EQ(r.status, 200) << r.body;
    std::pair<std::vector<std::string>, std::string> out;
    const boost::json::value v = boost::json::parse(r.body);
    for (const auto& item : v.at("reservations").as_array()) {
      out.first.emplace_back(item.at("id").as_string());
    }
    if (const auto* next = v.as_object().if_contains("next")) out.second = next->as_string();
    return out;
  };
  // The operator walks all six, two at a time.
  std::vector<std::string> walked;
  std::string after;
  for (int pages = 0; pages < 10; ++pages) {
    auto [ids, next] = page(ops, "?limit=2" + (after.empty() ? "" : "&after=" + after));
    walked.insert(walked.end(), ids.begin(), ids.end());
    if (next.empty()) break;
    EXPECT_EQ(next, ids.back());
    after = next;
  }
  EXPECT_EQ(walked, all);
  // A tenant's pages: its own only, full pages first.
  auto [first, next] = page(alpha, "?limit=2");
  EXPECT_EQ(first, (std::vector<std::string>{alphas[0], alphas[1]}));
  ASSERT_EQ(next, alphas[1]);
  auto [second, end] = page(alpha, "?limit=2&after=" + next);
  EXPECT_EQ(second, std::vector<std::string>{alphas[2]});
  EXPECT_TRUE(end.empty());
  // A page that ends exactly at the last one says nothing follows.
  EXPECT_TRUE(page(alpha, "?limit=3").second.empty());
  // By site (either end), and with the state filter.
  EXPECT_EQ(page(ops, "?site=c").first, std::vector<std::string>{alphas[2]});
  EXPECT_EQ(page(ops, "?site=a&state=held&limit=10000").first.size(), 6u);
  EXPECT_TRUE(page(ops, "?state=committed").first.empty());
  // Bad paging is refused, naming the field.
  for (const char* bad : {"?limit=0", "?limit=10001", "?limit=x", "?after=3", "?after=r-", "?after=r-1x"}) {
    const auto r = call(ops, "GET", std::string("/v1/reservations") + bad);
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_EQ(code_of(r), "invalid_field") << bad;
  }
}

// The archive through the API: after agent.archive_after (7 days by default) a terminated
// reservation is listed with ?archived=true (each tenant its own), read by id with its tenant's
// rights, answered again on DELETE and refused any change.
TEST_F(AuthorityTest, ArchivedReservationsAreReadThroughTheApiWithTheirTenantsRights) {
  const Identity alpha = token("alpha");
  const Identity beta = token("beta");
  const Identity ops = token("", true, true);
  const std::string mine = reserve_as(alpha, "a", "b", 1'000'000, 1);
  const std::string theirs = reserve_as(beta, "a", "c", 1'000'000, 2);
  const std::string live = reserve_as(beta, "a", "b", 1'000'000, 3);
  ASSERT_EQ(call(alpha, "DELETE", "/v1/reservations/" + mine).status, 200);
  ASSERT_EQ(call(beta, "DELETE", "/v1/reservations/" + theirs).status, 200);
  const auto commit = call(beta, "POST", "/v1/reservations/" + live + "/commit");
  ASSERT_EQ(commit.status, 200) << commit.body;
  realtime.advance_ns(8 * 86'400 * kSecond);
  monotonic.advance_ns(8 * 86'400 * kSecond);
  agent->tick();  // the live one ended too (its window passed); archived at the next pass
  EXPECT_EQ(listed(ops), std::vector<std::string>{live});
  auto archived = [&](const Identity& who) {
    const auto r = call(who, "GET", "/v1/reservations?archived=true");
    EXPECT_EQ(r.status, 200) << r.body;
    std::vector<std::string> ids;
    const boost::json::value parsed = boost::json::parse(r.body);
    for (const auto& item : parsed.at("reservations").as_array()) {
      EXPECT_TRUE(item.at("archived").as_bool());
      ids.emplace_back(item.at("id").as_string());
    }
    return ids;
  };
  EXPECT_EQ(archived(ops), (std::vector<std::string>{mine, theirs}));
  EXPECT_EQ(archived(alpha), std::vector<std::string>{mine});
  const auto read = call(alpha, "GET", "/v1/reservations/" + mine);
  ASSERT_EQ(read.status, 200) << read.body;
  EXPECT_EQ(boost::json::parse(read.body).at("state").as_string(), "terminated");
  EXPECT_EQ(call(beta, "GET", "/v1/reservations/" + mine).status, 403);  // alpha's, archived
  EXPECT_EQ(call(alpha, "DELETE", "/v1/reservations/" + mine).status, 200);
  const auto changed =
      call(alpha, "PATCH", "/v1/reservations/" + mine, R"({"min_bandwidth_bps":2000000})");
  EXPECT_EQ(changed.status, 409) << changed.body;
  EXPECT_NE(message_of(changed).find("archived"), std::string::npos) << changed.body;
  EXPECT_EQ(call(ops, "GET", "/v1/reservations/r-4242").status, 404);
}

}  // namespace
}  // namespace detwan::control::testing

// Federation across three owners' agents (docs/federation.md): the topology's borders, the
// abstract view (no internal name), the two-phase reservation a -> c across x, w, z, its
// propagation, idempotency, faults per domain and phase, hold expiry and the aggregator's
// recovery after a restart.
#include <boost/json.hpp>

#include "common/link_time.h"
#include "common/units.h"
#include "control/federation/domain_path.h"
#include "tests/control/federation/federation_harness.h"

namespace detwan::control::testing {
namespace {

namespace json = boost::json;

std::string str(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : "";
}

TEST(FederationTopology, BordersArePlanningSitesAndRemotePeersNameForeignGateways) {
  TempDir dir;
  auto t = model::load_topology_string(
      topology_of("x", dir.path() + "/x.db", "    - {domain: w, url: 'http://127.0.0.1:1'}\n"),
      "x.yaml");
  ASSERT_TRUE(t.has_value()) << t.error().message;
  ASSERT_EQ(t->borders.size(), 1u);
  EXPECT_EQ(t->borders[0].domain, "w");
  const uint32_t site = t->find_site("a.ac1");
  ASSERT_NE(site, model::kNone);
  EXPECT_EQ(t->sites[site].gateway, model::kNone);
  EXPECT_EQ(t->border_at_site(site), &t->borders[0]);
  EXPECT_EQ(t->gateways[0].peers[0].remote, "gw-c");
  EXPECT_EQ(t->gateways[0].peers[0].gateway, model::kNone);
  // The local tunnel id range was cut below the federation's.
  EXPECT_LT(t->agent.last_tunnel_id, t->federation.first_tunnel_id);
  // A peer with both gateway: and remote: is refused; so is an agent.tunnel_ids range given
  // inside the federation's.
  auto both = model::load_topology_string(
      "domain: q\nsites: [{name: s, gateway: g, tunnel_prefixes: [10.1.0.0/24]}]\n"
      "gateways: [{name: g, site: s, admin_socket: /x, ports: [{name: p, link: l}],\n"
      "  peers: [{name: f, port: p, gateway: g, remote: h}]}]\n"
      "borders: [{name: s.b, domain: r}]\n"
      "links: [{name: l, ends: [s, s.b], capacity: 1gbit, delay: 1ms}]\n",
      "q.yaml");
  ASSERT_FALSE(both.has_value());
  EXPECT_NE(both.error().message.find("not both"), std::string::npos) << both.error().message;
  auto overlap = model::load_topology_string(
      "domain: q\nagent: {tunnel_ids: 1000-50000}\nborders: [{name: s.b, domain: r}]\n"
      "federation: {tunnel_ids: 40000-65535}\nlinks: []\n",
      "q.yaml");
  ASSERT_FALSE(overlap.has_value());
  EXPECT_NE(overlap.error().message.find("overlaps agent.tunnel_ids"), std::string::npos)
      << overlap.error().message;
  // A border that is also a site is refused, naming it.
  auto twice = model::load_topology_string(
      "domain: q\nborders: [{name: s, domain: r}]\nsites: [{name: s}]\nlinks: []\n", "q.yaml");
  ASSERT_FALSE(twice.has_value());
  EXPECT_NE(twice.error().message.find("'s' names a site and a border"), std::string::npos)
      << twice.error().message;
}

federation::Transit transit(const std::string& domain, const std::string& from,
                            const std::string& to, int64_t latency_ns, uint64_t free_bps = 1000) {
  return federation::Transit{domain, from, to, latency_ns, latency_ns / 2, {{0, 100, free_bps}}};
}

federation::ParsedView view_of(const std::string& domain, std::vector<std::string> sites,
                               std::vector<federation::Transit> transits) {
  federation::ParsedView v;
  v.domain = domain;
  v.sites = std::move(sites);
  v.transits = std::move(transits);
  return v;
}

std::string route(const federation::DomainPath& p) {
  std::string out;
  for (const auto& s : p.segments) out += fmt::format("{}:{}>{} ", s.domain, s.from, s.to);
  return out;
}

TEST(FederationDomainPath, LeastLatencyWithCapacityFewerDomainsOnTiesAndSitesNeverHops) {
  // p: s -> b1 (10) or s -> b2 (5); q: b1 -> t (5), b2 -> t (20); q's site t.
  std::vector<federation::ParsedView> views{
      view_of("p", {"s"}, {transit("p", "s", "b1", 10), transit("p", "s", "b2", 5)}),
      view_of("q", {"t"}, {transit("q", "b1", "t", 5), transit("q", "b2", "t", 20)})};
  auto path = federation::find_domain_path(views, "s", "t", 100, 10, 20);
  EXPECT_EQ(route(path), "p:s>b1 q:b1>t ");
  EXPECT_EQ(path.max_latency_ns, 15);
  EXPECT_EQ(path.segments[0].min_latency_ns, 5);
  // b1 -> t has too little free in the window: the other way.
  views[1].transits[0].capacity = {{0, 15, 1000}, {15, 100, 50}};
  path = federation::find_domain_path(views, "s", "t", 100, 10, 20);
  EXPECT_EQ(route(path), "p:s>b2 q:b2>t ");
  // Before the shortage it fits again.
  EXPECT_EQ(route(federation::find_domain_path(views, "s", "t", 100, 0, 14)), "p:s>b1 q:b1>t ");
  // Equal latency through a third domain: fewer domains win.
  views[1].transits[0].capacity = {{0, 100, 1000}};
  views[1].transits[1] = transit("q", "b2", "t", 10);  // s-b2-t: 15, two domains
  views.push_back(view_of("r", {}, {transit("r", "b1", "b3", 1)}));
  views[1].transits.push_back(transit("q", "b3", "t", 4));  // s-b1-b3-t: 15, three domains
  path = federation::find_domain_path(views, "s", "t", 100, 10, 20);
  EXPECT_EQ(path.segments.size(), 2u) << route(path);
  // A site is an end, never a hop: s -> m -> t through site m is not a path.
  views.push_back(view_of("v", {"m"}, {transit("v", "s", "m", 1), transit("v", "m", "t", 1)}));
  path = federation::find_domain_path(views, "s", "t", 100, 10, 20);
  EXPECT_EQ(path.max_latency_ns, 15) << route(path);
  // A run of transits of one domain is one segment.
  views.push_back(view_of(
      "u", {},
      {transit("u", "s", "x1", 1), transit("u", "x1", "x2", 1), transit("u", "x2", "t", 1)}));
  path = federation::find_domain_path(views, "s", "t", 100, 10, 20);
  EXPECT_EQ(route(path), "u:s>t ");
  EXPECT_EQ(path.max_latency_ns, 3);
  // Nothing reaches an unknown site.
  EXPECT_TRUE(federation::find_domain_path(views, "s", "nowhere", 100, 10, 20).segments.empty());
}

TEST_F(FederationFixture, ViewNamesNoInternalNodeLinkGatewayPortOrAddress) {
  auto [status, view] = http("x", "GET", "/v1/federation/view", "", token("w", "x"));
  ASSERT_EQ(status, 200) << json::serialize(view);
  const std::string text = json::serialize(view);
  for (const char* secret : {"router-internal-x", "link-hidden-a", "link-hidden-b", "gw-secret-a",
                             "port-hidden-1", "10.20.1", "/fake/"}) {
    EXPECT_EQ(text.find(secret), std::string::npos) << secret << " leaks in " << text;
  }
  EXPECT_EQ(str(view, "domain"), "x");
  EXPECT_EQ(view.at("sites").as_array().size(), 1u);
  // a -> a.ac1 and back, with the internal path's latency and the reservable capacity.
  ASSERT_EQ(view.at("transits").as_array().size(), 2u);
  for (const json::value& t : view.at("transits").as_array()) {
    EXPECT_GE(t.at("max_latency_ns").to_number<int64_t>(), 5'000'000);
    EXPECT_EQ(t.at("min_latency_ns").to_number<int64_t>(), 5'000'000);
    EXPECT_EQ(t.at("capacity").as_array()[0].at("available_bps").to_number<uint64_t>(),
              900'000'000u);
  }
  // A reservation's booking shows in the capacity steps.
  ASSERT_TRUE(coordinator().reserve(request("view-1")).has_value());
  auto [s2, after] = http("x", "GET", "/v1/federation/view", "", token("z", "x"));
  ASSERT_EQ(s2, 200);
  const auto& steps = after.at("transits").as_array()[0].at("capacity").as_array();
  ASSERT_GE(steps.size(), 2u);
  EXPECT_EQ(steps[0].at("available_bps").to_number<uint64_t>(), 850'000'000u);
  EXPECT_EQ(steps[1].at("available_bps").to_number<uint64_t>(), 900'000'000u);
}

TEST_F(FederationFixture, ViewShowsComputePoolsWithoutAddresses) {
  auto [status, pool] =
      http("z", "POST", "/v1/pools", R"({"name":"c-gpu","site":"c","kind":"a100","ranks":8})");
  ASSERT_EQ(status, 201) << json::serialize(pool);
  auto [s2, view] = http("z", "GET", "/v1/federation/view", "", token("x", "z"));
  ASSERT_EQ(s2, 200);
  ASSERT_EQ(view.at("pools").as_array().size(), 1u);
  const json::object& p = view.at("pools").as_array()[0].as_object();
  EXPECT_EQ(str(p, "name"), "c-gpu");
  EXPECT_EQ(str(p, "site"), "c");
  EXPECT_EQ(str(p, "kind"), "a100");
  EXPECT_EQ(p.at("ranks").to_number<int>(), 8);
  EXPECT_EQ(json::serialize(view).find("gw-c"), std::string::npos);
}

TEST_F(FederationFixture, PlanPlacesAJobOnPoolsOfTwoDomainsAndReservesAcrossThem) {
  // Two ranks at x's site a, two at z's site c: a four-rank job needs both, and the WAN
  // between them across x, w, z.
  ASSERT_EQ(
      http("x", "POST", "/v1/pools", R"({"name":"a-cpu","site":"a","kind":"cpu","ranks":2})").first,
      201);
  ASSERT_EQ(
      http("z", "POST", "/v1/pools", R"({"name":"c-cpu","site":"c","kind":"cpu","ranks":2})").first,
      201);
  const std::string job =
      R"({"gradient_bytes":4000000,"ranks":4,"step_compute_ns":2000000000,"target_step_ns":2500000000)";
  // Without federation the agent only sees its own pool.
  auto [local_status, local] = http("x", "POST", "/v1/plan", job + "}");
  EXPECT_EQ(local_status, 422) << json::serialize(local);
  auto [status, plan] = http("x", "POST", "/v1/plan?federated=true", job + "}");
  ASSERT_EQ(status, 200) << json::serialize(plan);
  ASSERT_EQ(plan.at("placement").as_array().size(), 2u);
  ASSERT_EQ(plan.at("reservations").as_array().size(), 1u);
  const int64_t rate = plan.at("reservations").as_array()[0].at("rate_bps").to_number<int64_t>();
  EXPECT_GT(rate, 0);
  EXPECT_LE(rate, 360'000'000);  // w's link: 400 Mbit/s, 90 % reservable
  for (const char* d : kDomains) EXPECT_EQ(holding(d), 0u) << d;  // a plan books nothing
  auto [rs, reserved] = http("x", "POST", "/v1/plan?federated=true", job + R"(,"reserve":true})");
  ASSERT_EQ(rs, 201) << json::serialize(reserved);
  const auto& held = reserved.at("reserved").as_array();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_TRUE(held[0].at("federated").as_bool());
  EXPECT_EQ(held[0].at("state").as_string(), "held");
  for (const char* d : kDomains) EXPECT_EQ(holding(d), 1u) << d;
}

TEST_F(FederationFixture, FederationRoutesRefuseCallersThatAreNotPeers) {
  auto [status, body] = http("w", "GET", "/v1/federation/view");
  EXPECT_EQ(status, 403);
  const json::object& error = body.at("error").as_object();
  EXPECT_NE(str(error, "message").find("anonymous client 127.0.0.1"), std::string::npos)
      << str(error, "message");
  auto [s2, b2] = http("w", "POST", "/v1/federation/segments", "{}", "not-a-peer-token-123456");
  EXPECT_EQ(s2, 403);
  // A peer only sees its own segments.
  ASSERT_TRUE(coordinator().reserve(request("own-1")).has_value());
  const std::string id = agent_of("w").reservation_of_request("r-1@x/w");
  ASSERT_FALSE(id.empty());
  auto [s3, b3] = http("w", "GET", "/v1/federation/segments/" + id, "", token("z", "w"));
  EXPECT_EQ(s3, 403) << json::serialize(b3);
  auto [s4, b4] = http("w", "GET", "/v1/federation/segments/" + id, "", token("x", "w"));
  EXPECT_EQ(s4, 200) << json::serialize(b4);
}

TEST_F(FederationFixture, ReservesAcrossThreeDomainsAndComposesTheBound) {
  const std::string body = R"({"src":"a","dst":"c","min_bandwidth_bps":50000000,
      "duration_ns":600000000000,"encrypt":"none","client_request_id":"job-1"})";
  auto [status, r] = http("x", "POST", "/v1/reservations", body);
  ASSERT_EQ(status, 201) << json::serialize(r);
  EXPECT_TRUE(r.at("federated").as_bool());
  EXPECT_EQ(str(r, "state"), "held");
  const auto& segments = r.at("segments").as_array();
  ASSERT_EQ(segments.size(), 3u);
  const char* expected[][3] = {{"x", "a", "a.ac1"}, {"w", "a.ac1", "c.ac1"}, {"z", "c.ac1", "c"}};
  int64_t forward_max = 0, forward_min = 0;
  for (size_t i = 0; i < 3; ++i) {
    const json::object& s = segments[i].as_object();
    EXPECT_EQ(str(s, "domain"), expected[i][0]);
    EXPECT_EQ(str(s, "from"), expected[i][1]);
    EXPECT_EQ(str(s, "to"), expected[i][2]);
    EXPECT_EQ(str(s, "state"), "held");
    forward_max += s.at("bound").at("forward").at("max_ns").to_number<int64_t>();
    forward_min += s.at("bound").at("forward").at("min_ns").to_number<int64_t>();
    EXPECT_EQ(holding(expected[i][0]), 1u) << expected[i][0];
  }
  // RFC 9320: the delay terms add, the burst term b/r is paid once (not at the two borders).
  const int64_t burst_ns =
      common::ceil_serialisation_ns(r.at("burst_bytes").to_number<uint64_t>() * 8, 50'000'000);
  EXPECT_GT(burst_ns, 0);
  EXPECT_EQ(r.at("bound").at("forward").at("max_ns").to_number<int64_t>(),
            forward_max - 2 * burst_ns);
  EXPECT_EQ(r.at("bound").at("forward").at("min_ns").to_number<int64_t>(), forward_min);
  EXPECT_GE(r.at("bound").at("max_latency_ns").to_number<int64_t>(), forward_max - 2 * burst_ns);
  // Each domain holds its segment, under the tunnel id the aggregator chose.
  const uint64_t tunnel = r.at("tunnel_id").to_number<uint64_t>();
  EXPECT_GE(tunnel, 40000u);
  const std::string w_id = agent_of("w").reservation_of_request("r-1@x/w");
  EXPECT_EQ(agent_of("w").segment(w_id)->at("tunnel_id").to_number<uint64_t>(), tunnel);
  EXPECT_EQ(agent_of("z")
                .segment(agent_of("z").reservation_of_request("r-1@x/z"))
                ->at("prefixes")
                .as_array()[0]
                .as_string(),
            "10.20.3.0/24");
  // The same request again: the same reservation.
  auto [again_status, again] = http("x", "POST", "/v1/reservations", body);
  EXPECT_EQ(again_status, 201);
  EXPECT_EQ(str(again, "id"), str(r, "id"));
  EXPECT_EQ(holding("w"), 1u);
  const std::string id = str(r, "id");
  auto [cs, committed] = http("x", "POST", "/v1/reservations/" + id + "/commit");
  ASSERT_EQ(cs, 200) << json::serialize(committed);
  EXPECT_EQ(str(committed, "state"), "committed");
  for (const json::value& s : committed.at("segments").as_array()) {
    EXPECT_EQ(str(s.as_object(), "state"), "committed");
  }
  // The commit told z the far gateway and prefixes.
  EXPECT_EQ(agent_of("w").segment(w_id)->at("state").as_string(), "committed");
  auto [ps, provisioned] = http("x", "POST", "/v1/reservations/" + id + "/provision");
  ASSERT_EQ(ps, 200) << json::serialize(provisioned);
  EXPECT_EQ(str(provisioned, "state"), "provisioned");
  // Each end programs its own gateway toward the other domain's: the peer whose `remote:` is
  // the far gateway, the far site's prefixes, the tunnel id the aggregator chose.
  agent_of("x").reconcile_now();
  agent_of("z").reconcile_now();
  auto tunnel_on = [&](const std::string& socket) {
    return gateways.with(socket, [&](FakeGateways::Gateway& g) {
      return g.tunnels.count(static_cast<uint32_t>(tunnel)) != 0
                 ? g.tunnels.at(static_cast<uint32_t>(tunnel))
                 : json::object{};
    });
  };
  const json::object at_a = tunnel_on("/fake/x/gw-secret-a");
  const json::object at_c = tunnel_on("/fake/z/gw-c");
  ASSERT_FALSE(at_a.empty());
  ASSERT_FALSE(at_c.empty());
  EXPECT_EQ(str(at_a, "peer"), "c");
  EXPECT_EQ(str(at_c, "peer"), "a");
  EXPECT_EQ(json::serialize(at_a.at("match").at("dst")), R"(["10.20.3.0/24"])");
  EXPECT_EQ(json::serialize(at_c.at("match").at("dst")), R"(["10.20.1.0/24"])");
  auto [as, active] = http("x", "GET", "/v1/reservations/" + id);
  ASSERT_EQ(as, 200);
  for (const json::value& s : active.at("segments").as_array()) {
    EXPECT_TRUE(s.at("dataplane_active").as_bool()) << json::serialize(s);
  }
  auto [rs, released] = http("x", "POST", "/v1/reservations/" + id + "/release");
  ASSERT_EQ(rs, 200) << json::serialize(released);
  EXPECT_EQ(agent_of("z")
                .segment(agent_of("z").reservation_of_request("r-1@x/z"))
                ->at("state")
                .as_string(),
            "released");
  auto [gs, got] = http("x", "GET", "/v1/reservations/" + id);
  ASSERT_EQ(gs, 200);
  EXPECT_EQ(str(got, "state"), "released");
  auto [ts, terminated] = http("x", "DELETE", "/v1/reservations/" + id);
  ASSERT_EQ(ts, 200) << json::serialize(terminated);
  EXPECT_EQ(str(terminated, "state"), "terminated");
  for (const char* d : kDomains) {
    EXPECT_EQ(holding(d), 0u) << d;
    EXPECT_EQ(agent_of(d).check_ledger(), "") << d;
  }
}

TEST_F(FederationFixture, NoPathNamesTheDomainsLookedAt) {
  agent::ReserveRequest r = request("nowhere");
  r.spec.dst = "q";
  auto out = coordinator().reserve(r);
  ASSERT_FALSE(out.has_value());
  EXPECT_EQ(out.error().code, "no_path");
  EXPECT_NE(out.error().message.find("x, w, z"), std::string::npos) << out.error().message;
  // More than any domain can carry.
  agent::ReserveRequest big = request("big");
  big.spec.min_bandwidth_bps = 500'000'000;  // w's link reserves 360 Mbit/s
  auto refused = coordinator().reserve(big);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, "no_path");
}

TEST_F(FederationFixture, AViewThatTimedOutIsNotWaitedForTwiceInOneRequest) {
  // Cold views (older than view_max_age): the request fetches every peer's view, and fetches
  // them again when no path is found. w's first fetch times out: the second look does not ask
  // w again (one call timeout, not two) and the refusal names w's view.
  realtime.advance_ns(60 * kSecond);
  coordinator().faults().add(federation::Fault{"w", "view", federation::FaultKind::kTimeout, 2});
  auto out = coordinator().reserve(request("view-hung"));
  ASSERT_FALSE(out.has_value());
  EXPECT_EQ(out.error().code, "no_path");
  EXPECT_NE(out.error().message.find("w (view unavailable: domain w: no answer"),
            std::string::npos)
      << out.error().message;
  // The second fault is still there: w's view was asked once.
  auto again = coordinator().reserve(request("view-hung-2"));
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code, "no_path");
  // A refused fetch (answered at once) is asked again by the second look: the request goes on.
  coordinator().faults().clear();
  realtime.advance_ns(60 * kSecond);
  coordinator().faults().add(federation::Fault{"w", "view", federation::FaultKind::kDrop, 1});
  auto held = coordinator().reserve(request("view-dropped"));
  ASSERT_TRUE(held.has_value()) << held.error().message;
}

TEST_F(FederationFixture, AnEncryptedCrossDomainTunnelNeedsBothGatewaysIdentityKeys) {
  agent::ReserveRequest r = request("enc");
  r.spec.encrypt = "aes-256-gcm";
  auto out = coordinator().reserve(r);
  ASSERT_FALSE(out.has_value());
  EXPECT_EQ(out.error().status, 422);
  EXPECT_EQ(out.error().code, "cross_domain_keys_unavailable");
  EXPECT_NE(out.error().message.find("public_key"), std::string::npos) << out.error().message;
  // Nothing is held anywhere after the refusal.
  for (const char* d : kDomains) EXPECT_EQ(holding(d), 0u) << d;
}

}  // namespace
}  // namespace detwan::control::testing

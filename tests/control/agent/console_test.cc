// The operator console's routes (control/api/console_routes.h, docs/console.md) over a live
// agent (fake gateways, virtual time): the page and its security headers, who may read what
// (through the real HTTP server with a tokens file), /v1/whoami, /v1/gateways, a gateway's live
// tunnels from its stats (cached, one fetch per second however many ask; an unreachable gateway
// said so), and the links' calendars.
#include <filesystem>
#include <fstream>

#include "control/api/console_routes.h"
#include "control/api/routes.h"
#include "control/client/http_client.h"
#include "tests/control/agent/agent_test_util.h"

namespace detwan::control::testing {
namespace {

using api::Identity;

constexpr const char* kReadToken = "console-read-token-0123";
constexpr const char* kWriteToken = "console-write-token-0123";

Identity token(bool reserve) {
  Identity who;
  who.kind = Identity::Kind::kToken;
  who.name = reserve ? "ops" : "viewer";
  who.may_read = true;
  who.may_reserve = reserve;
  who.may_admin = reserve;
  return who;
}

struct ConsoleTest : AgentFixture {
  api::Handler handler;

  void SetUp() override {
    AgentFixture::SetUp();
    handler = api::make_handler(*agent, "openapi: 3.0.3\n");
  }

  api::HttpResponse call(const Identity& who, const std::string& method,
                         const std::string& target) {
    api::HttpRequest request;
    request.method = method;
    request.target = target;
    const size_t q = target.find('?');
    request.path = target.substr(0, q);
    request.query = q == std::string::npos ? "" : target.substr(q + 1);
    request.client = "127.0.0.1:5555";
    request.identity = who;
    api::HttpResponse answer;
    bool answered = false;
    handler(request, [&](api::HttpResponse r) {
      answer = std::move(r);
      answered = true;
    });
    EXPECT_TRUE(answered) << method << " " << target;
    return answer;
  }
  boost::json::object get_json(const std::string& target, const Identity& who = token(false)) {
    const auto r = call(who, "GET", target);
    EXPECT_EQ(r.status, 200) << target << ": " << r.body;
    return r.status == 200 ? boost::json::parse(r.body).as_object() : boost::json::object{};
  }
  static std::string header(const api::HttpResponse& r, const std::string& name) {
    for (const auto& [key, value] : r.headers) {
      if (key == name) return value;
    }
    return "";
  }
  // A provisioned reservation a -> b whose tunnel is on both fake gateways.
  std::string provisioned() {
    agent::ReserveRequest r = request("a", "b", 50'000'000);
    r.provision = true;
    const std::string id = id_of(reserve_ok(r));
    agent->reconcile_now();
    EXPECT_TRUE(active(id));
    return id;
  }
};

TEST_F(ConsoleTest, ThePageIsServedWithItsSecurityHeadersAndNoInlineScript) {
  const auto page = call(Identity{}, "GET", "/");
  ASSERT_EQ(page.status, 200);
  EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
  const std::string csp = header(page, "Content-Security-Policy");
  EXPECT_NE(csp.find("default-src 'self'"), std::string::npos) << csp;
  EXPECT_NE(csp.find("script-src 'self'"), std::string::npos) << csp;
  EXPECT_EQ(csp.find("unsafe-inline"), std::string::npos) << csp;
  EXPECT_EQ(header(page, "X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(header(page, "X-Frame-Options"), "DENY");
  // Every script is a file of ours: no inline script or handler, no inline style, nothing
  // fetched from elsewhere.
  EXPECT_NE(page.body.find(R"(<script src="/console.js" defer></script>)"), std::string::npos);
  EXPECT_EQ(page.body.find("<script>"), std::string::npos);
  EXPECT_EQ(page.body.find(" onclick="), std::string::npos);
  EXPECT_EQ(page.body.find(" style="), std::string::npos);
  EXPECT_EQ(page.body.find("http://"), std::string::npos);
  EXPECT_EQ(page.body.find("https://"), std::string::npos);

  const auto js = call(Identity{}, "GET", "/console.js");
  ASSERT_EQ(js.status, 200);
  EXPECT_EQ(js.content_type, "text/javascript; charset=utf-8");
  EXPECT_NE(js.body.find("/v1/whoami"), std::string::npos);
  EXPECT_EQ(header(js, "X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(call(Identity{}, "GET", "/console.css").content_type, "text/css; charset=utf-8");
  EXPECT_EQ(call(Identity{}, "GET", "/favicon.ico").status, 204);
  EXPECT_EQ(call(Identity{}, "POST", "/").status, 405);
  // Only the page's own files are open paths; the data behind it is not.
  for (const std::string& path : api::console_page_paths()) {
    EXPECT_EQ(path.rfind("/v1/", 0), std::string::npos) << path;
  }
}

TEST_F(ConsoleTest, WhoamiTellsWhetherTheCallerMayReserve) {
  auto who = get_json("/v1/whoami", token(false));
  EXPECT_EQ(who.at("kind").as_string(), "token");
  EXPECT_EQ(who.at("name").as_string(), "viewer");
  EXPECT_FALSE(who.at("may_reserve").as_bool());
  who = get_json("/v1/whoami", token(true));
  EXPECT_TRUE(who.at("may_reserve").as_bool());
  EXPECT_TRUE(who.at("may_admin").as_bool());
  EXPECT_EQ(get_json("/v1/whoami", Identity{}).at("kind").as_string(), "anonymous");
  EXPECT_EQ(call(token(true), "POST", "/v1/whoami").status, 405);
  // A peer agent (mutual TLS) reaches the federation only.
  Identity peer;
  peer.kind = Identity::Kind::kPeer;
  peer.domain = "w";
  peer.may_admin = false;
  EXPECT_EQ(call(peer, "GET", "/v1/gateways").status, 403);
  EXPECT_EQ(call(peer, "GET", "/v1/whoami").status, 403);
}

TEST_F(ConsoleTest, GatewaysShowWhatTheReconcilerLastSaw) {
  auto all = get_json("/v1/gateways").at("gateways").as_array();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].at("name").as_string(), "gw-a");
  EXPECT_TRUE(all[0].at("report_age_ns").is_null());  // no pass yet
  gateways.with("/fake/gw-c", [](FakeGateways::Gateway& g) { return g.reachable = false; });
  const std::string id = provisioned();
  monotonic.advance_ns(kSecond);
  all = get_json("/v1/gateways").at("gateways").as_array();
  const auto& a = all[0].as_object();
  EXPECT_TRUE(a.at("reachable").as_bool());
  EXPECT_TRUE(a.at("in_sync").as_bool());
  EXPECT_EQ(a.at("generation").as_int64(), 1);
  EXPECT_EQ(a.at("error").as_string(), "");
  EXPECT_EQ(a.at("report_age_ns").as_int64(), kSecond);
  EXPECT_EQ(a.at("tunnels_in_place").as_array().size(), 1u);
  EXPECT_GE(a.at("reconciler").at("passes").as_int64(), 1);
  const auto& c = all[2].as_object();
  EXPECT_FALSE(c.at("reachable").as_bool());
  EXPECT_NE(std::string(c.at("error").as_string()).find("Connection refused"), std::string::npos);
  (void)id;
}

TEST_F(ConsoleTest, GatewayTunnelsCarryLiveDelaysCachedForASecond) {
  const std::string id = provisioned();
  gateways.with("/fake/gw-b", [](FakeGateways::Gateway& g) { return g.rx_packets = 100; });
  auto live = get_json("/v1/gateways/gw-b/tunnels");
  EXPECT_TRUE(live.at("reachable").as_bool());
  EXPECT_EQ(live.at("gateway").as_string(), "gw-b");
  auto tunnels = live.at("tunnels").as_array();
  ASSERT_EQ(tunnels.size(), 1u);
  const auto& t = tunnels[0].as_object();
  EXPECT_EQ(t.at("reservation").as_string(), id);
  EXPECT_EQ(t.at("owner").as_string(), "agent:lab");
  EXPECT_EQ(t.at("rate_bps").as_int64(), 50'000'000);
  const auto& rx = t.at("rx").as_object();
  EXPECT_EQ(rx.at("class").as_string(), "on_time");
  EXPECT_EQ(rx.at("received_packets").as_int64(), 100);
  EXPECT_EQ(rx.at("wan_delay_ns").at("p50").as_int64(), 5'000'000);
  EXPECT_EQ(rx.at("wan_delay_ns").at("p99").as_int64(), 5'001'000);
  EXPECT_EQ(rx.at("one_way_delay_ns").at("p50").as_int64(), 6'000'000);
  EXPECT_TRUE(rx.at("lateness_ns").is_null());  // no late packet

  // Within a second every caller gets the cached answer: the gateway is asked once.
  gateways.with("/fake/gw-b", [](FakeGateways::Gateway& g) {
    g.rx_packets = 250;
    g.wan_delay_ns = 7'000'000;
    return 0;
  });
  for (int i = 0; i < 5; ++i) {
    live = get_json("/v1/gateways/gw-b/tunnels");
    EXPECT_EQ(live.at("tunnels").at(0).at("rx").at("received_packets").as_int64(), 100);
  }
  EXPECT_EQ(gateways.with("/fake/gw-b", [](FakeGateways::Gateway& g) { return g.stats_requests; }),
            1u);
  monotonic.advance_ns(kSecond);
  live = get_json("/v1/gateways/gw-b/tunnels");
  EXPECT_EQ(live.at("tunnels").at(0).at("rx").at("received_packets").as_int64(), 250);
  EXPECT_EQ(live.at("tunnels").at(0).at("rx").at("wan_delay_ns").at("p50").as_int64(), 7'000'000);
  EXPECT_EQ(gateways.with("/fake/gw-b", [](FakeGateways::Gateway& g) { return g.stats_requests; }),
            2u);

  // A gateway that does not answer is said so (200: the console shows it), an unknown one 404.
  gateways.with("/fake/gw-a", [](FakeGateways::Gateway& g) { return g.reachable = false; });
  live = get_json("/v1/gateways/gw-a/tunnels");
  EXPECT_FALSE(live.at("reachable").as_bool());
  EXPECT_NE(std::string(live.at("error").as_string()).find("/fake/gw-a"), std::string::npos);
  EXPECT_TRUE(live.at("tunnels").as_array().empty());
  EXPECT_EQ(call(token(false), "GET", "/v1/gateways/nope/tunnels").status, 404);
  EXPECT_EQ(call(token(true), "DELETE", "/v1/gateways/gw-a/tunnels").status, 405);
}

TEST_F(ConsoleTest, TheCalendarShowsEachDirectionsReservedRateOverTime) {
  // 50 Mbit/s a -> b for 600 s from now, on link ab1.
  provisioned();
  const auto calendar = get_json("/v1/calendar?horizon_s=3600&step_s=300");
  EXPECT_EQ(calendar.at("steps").as_int64(), 12);
  EXPECT_EQ(calendar.at("step_ns").as_int64(), 300 * kSecond);
  EXPECT_EQ(calendar.at("from_unix_ns").as_int64(), kStartNs);
  const boost::json::object* ab1 = nullptr;
  for (const auto& l : calendar.at("links").as_array()) {
    if (l.at("name").as_string() == "ab1") ab1 = &l.as_object();
  }
  ASSERT_NE(ab1, nullptr);
  EXPECT_EQ(ab1->at("reservable_bps").as_int64(), 180'000'000);
  const auto& ab = ab1->at("directions").at(0).as_object();
  EXPECT_EQ(ab.at("from").as_string(), "a");
  const auto& reserved = ab.at("reserved_bps").as_array();
  ASSERT_EQ(reserved.size(), 12u);
  EXPECT_EQ(reserved[0].as_int64(), 50'000'000);
  EXPECT_EQ(reserved[1].as_int64(), 50'000'000);
  EXPECT_EQ(reserved[2].as_int64(), 0);  // the reservation ended at 600 s
  // Defaults: 6 h in 10 min steps. Out of range: 400 naming why.
  EXPECT_EQ(get_json("/v1/calendar").at("steps").as_int64(), 36);
  for (const char* bad :
       {"/v1/calendar?step_s=0", "/v1/calendar?horizon_s=x", "/v1/calendar?horizon_s=864000",
        "/v1/calendar?horizon_s=3600&step_s=1", "/v1/calendar?horizon_s=-5"}) {
    const auto r = call(token(false), "GET", bad);
    EXPECT_EQ(r.status, 400) << bad << ": " << r.body;
  }
}

TEST_F(ConsoleTest, ThroughTheServerThePageIsOpenAndTheDataNeedsAToken) {
  const std::string tokens = dir.path() + "/tokens";
  std::ofstream(tokens) << "read " << kReadToken << "\nwrite " << kWriteToken << "\n";
  std::filesystem::permissions(
      tokens, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  api::HttpServerOptions options;
  options.listen = *common::parse_host_port("127.0.0.1:0", true);
  options.allow = {*common::parse_ip_prefix("127.0.0.0/8")};
  options.tokens_file = tokens;
  for (const std::string& p : api::console_page_paths()) options.open_paths.push_back(p);
  auto server = api::HttpServer::start(options, handler);
  ASSERT_TRUE(server.has_value()) << server.error().message;
  const auto url =
      client::parse_url(fmt::format("http://127.0.0.1:{}", (*server)->local_endpoint().port));
  ASSERT_TRUE(url.has_value());
  auto get = [&](const std::string& path, const std::string& bearer) {
    auto answer = client::http_call(*url, "GET", path, "", bearer, 5000);
    EXPECT_TRUE(answer.has_value()) << path;
    return answer ? answer->status : 0;
  };
  EXPECT_EQ(get("/", ""), 200);
  EXPECT_EQ(get("/console.js", ""), 200);
  EXPECT_EQ(get("/console.css?v=1", ""), 200);
  for (const char* data : {"/v1/whoami", "/v1/gateways", "/v1/gateways/gw-a/tunnels",
                           "/v1/calendar", "/v1/reservations", "/v1/topology"}) {
    EXPECT_EQ(get(data, ""), 401) << data;
    EXPECT_EQ(get(data, "not-a-token-of-ours-000"), 401) << data;
    EXPECT_EQ(get(data, kReadToken), 200) << data;
  }
  auto who = client::http_call(*url, "GET", "/v1/whoami", "", kReadToken, 5000);
  ASSERT_TRUE(who.has_value());
  EXPECT_FALSE(boost::json::parse(who->body).at("may_reserve").as_bool());
  who = client::http_call(*url, "GET", "/v1/whoami", "", kWriteToken, 5000);
  ASSERT_TRUE(who.has_value());
  EXPECT_TRUE(boost::json::parse(who->body).at("may_reserve").as_bool());
  // A read token may not use the page's forms.
  auto post = client::http_call(*url, "POST", "/v1/reservations/r-1/release", "", kReadToken, 5000);
  ASSERT_TRUE(post.has_value());
  EXPECT_EQ(post->status, 403);
  (*server)->stop();
}

}  // namespace
}  // namespace detwan::control::testing

// A communicator's view of detwan-agent reservations (collectives/comm/reservation.h) against a
// live agent: the agent of tests/control/agent (fake gateways, virtual time) behind its real
// HTTP server on 127.0.0.1, asked by the real client (control/client). What init checks
// (provisioned, active, the site covered, every site pair joined, the tunnel address), the
// pacing a reservation implies, and the watcher that fails a job whose reservation goes away.
#include "collectives/comm/reservation.h"

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "control/api/http_server.h"
#include "control/api/routes.h"
#include "control/client/http_client.h"
#include "tests/control/agent/agent_test_util.h"

namespace detwan::control::testing {
namespace {

using collectives::check_site_pairs;
using collectives::pacing_for;
using collectives::parse_reservation_ids;
using collectives::ReservationWatch;
using collectives::resolve_reservations;
using collectives::WanReservations;
using common::ErrorCode;

// The host's tunnel address as a lab host would have it: 10.20.<site>.2.
common::Result<std::string> lab_host_address(const std::vector<std::string>& prefixes) {
  for (const auto& p : prefixes) {
    if (p.ends_with("/32")) return p.substr(0, p.size() - 3);  // a host's own prefix
    if (p == "10.20.1.0/24") return std::string("10.20.1.2");
    if (p == "10.20.2.0/24") return std::string("10.20.2.2");
  }
  return common::make_error(ErrorCode::kNotFound, "this host has no address in the prefixes");
}

struct AgentClientFixture : AgentFixture {
  std::unique_ptr<api::HttpServer> server;
  client::AgentAddress address;

  void SetUp() override {
    AgentFixture::SetUp();
    api::HttpServerOptions options;
    options.listen = *common::parse_host_port("127.0.0.1:0", true);
    options.allow = {*common::parse_ip_prefix("127.0.0.0/8")};
    auto started = api::HttpServer::start(options, api::make_handler(*agent, ""));
    ASSERT_TRUE(started.has_value()) << started.error().message;
    server = std::move(*started);
    address.url = "http://" + common::format_host_port(server->local_endpoint());
  }
  void TearDown() override {
    if (server) server->stop();
  }

  std::string provisioned(const std::string& src, const std::string& dst, uint64_t rate_bps) {
    auto r = request(src, dst, rate_bps);
    r.provision = true;
    const std::string id = id_of(reserve_ok(r));
    agent->reconcile_now();
    return id;
  }
};

TEST_F(AgentClientFixture, FetchReturnsWhatASenderIntoTheTunnelNeeds) {
  const std::string id = provisioned("a", "b", 100'000'000);
  auto g = client::fetch_grant(address, id);
  ASSERT_TRUE(g.has_value()) << g.error().message;
  EXPECT_EQ(g->id, id);
  EXPECT_EQ(g->state, "provisioned");
  EXPECT_TRUE(g->dataplane_active);
  EXPECT_EQ(g->src, "a");
  EXPECT_EQ(g->dst, "b");
  EXPECT_EQ(g->rate_bps, 100'000'000);
  EXPECT_GT(g->burst_bytes, 0);
  EXPECT_GT(g->max_latency_ns, g->min_latency_ns);
  EXPECT_GE(g->min_latency_ns, 5'000'000);  // the a-b link's 5 ms
  EXPECT_EQ(g->src_prefixes, std::vector<std::string>{"10.20.1.0/24"});
  EXPECT_EQ(g->dst_prefixes, std::vector<std::string>{"10.20.2.0/24"});
  // Encrypted by default: the tunnel's AEAD tag (16 bytes) comes off the inner MTU and is part
  // of each frame's overhead.
  EXPECT_EQ(g->mtu_bytes, 1500 - 68 - 16);
  EXPECT_EQ(g->frame_overhead_bytes, 68 + 18 + 16);
}

TEST_F(AgentClientFixture, FetchNamesAMissingReservationAndAMissingAgent) {
  auto missing = client::fetch_grant(address, "r-404");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find("r-404"), std::string::npos);
  const std::string url = address.url;
  server->stop();
  server.reset();
  client::AgentAddress gone{url, "", 2000};
  auto unreachable = client::fetch_grant(gone, "r-1");
  ASSERT_FALSE(unreachable.has_value());
  EXPECT_EQ(unreachable.error().code, ErrorCode::kUnavailable) << unreachable.error().message;
  EXPECT_NE(unreachable.error().message.find("r-1"), std::string::npos);
  auto bad_id = client::fetch_grant(address, "r-1/../x");
  ASSERT_FALSE(bad_id.has_value());
  EXPECT_EQ(bad_id.error().code, ErrorCode::kInvalidArgument);
}

TEST_F(AgentClientFixture, ResolveFindsTheSitesTunnelAddressAndChecksEveryPair) {
  const std::string id = provisioned("a", "b", 100'000'000);
  auto at_b = resolve_reservations(address, {id}, "b", lab_host_address);
  ASSERT_TRUE(at_b.has_value()) << at_b.error().message;
  EXPECT_EQ(at_b->tunnel_host, "10.20.2.2");
  ASSERT_EQ(at_b->grants.size(), 1u);
  EXPECT_NE(at_b->between("b", "a"), nullptr);
  EXPECT_TRUE(check_site_pairs(*at_b, {"a", "b"}).has_value());
  // A job with ranks at c too: the pair a-c is not joined.
  auto uncovered = check_site_pairs(*at_b, {"a", "b", "c"});
  ASSERT_FALSE(uncovered.has_value());
  EXPECT_NE(uncovered.error().message.find("sites a and c"), std::string::npos)
      << uncovered.error().message;
  // A rank at site c is in none of them.
  auto at_c = resolve_reservations(address, {id}, "c", lab_host_address);
  ASSERT_FALSE(at_c.has_value());
  EXPECT_EQ(at_c.error().code, ErrorCode::kConfig);
  EXPECT_NE(at_c.error().message.find("site 'c'"), std::string::npos) << at_c.error().message;
  // A host without an address in the site's prefixes.
  auto no_address = resolve_reservations(address, {id}, "a", [](const auto&) {
    return common::Result<std::string>(
        common::make_error(ErrorCode::kNotFound, "this host has no address in 10.20.1.0/24"));
  });
  ASSERT_FALSE(no_address.has_value());
  EXPECT_NE(no_address.error().message.find(id), std::string::npos);
  EXPECT_NE(no_address.error().message.find("10.20.1.0/24"), std::string::npos);
  // Without an agent URL.
  auto no_agent = resolve_reservations(client::AgentAddress{}, {id}, "a", lab_host_address);
  ASSERT_FALSE(no_agent.has_value());
  EXPECT_NE(no_agent.error().message.find("DETWAN_AGENT"), std::string::npos);
}

TEST_F(AgentClientFixture, ResolveRefusesAReservationThatIsNotProvisioned) {
  auto r = request("a", "b", 50'000'000, 600 * kSecond, 5);
  const std::string held = id_of(reserve_ok(r));
  auto refused = resolve_reservations(address, {held}, "a", lab_host_address);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kConfig);
  EXPECT_NE(refused.error().message.find(held), std::string::npos);
  EXPECT_NE(refused.error().message.find("not provisioned: state held"), std::string::npos)
      << refused.error().message;
  // Provisioned but not yet on the gateways (no reconcile ran).
  ASSERT_TRUE(agent->commit(held).has_value());
  ASSERT_TRUE(agent->provision(held).has_value());
  auto inactive = resolve_reservations(address, {held}, "a", lab_host_address);
  ASSERT_FALSE(inactive.has_value());
  EXPECT_NE(inactive.error().message.find("not active"), std::string::npos)
      << inactive.error().message;
  agent->reconcile_now();
  EXPECT_TRUE(resolve_reservations(address, {held}, "a", lab_host_address).has_value());
  // The same pair twice (the second for other hosts of the sites, so the agent admits it).
  auto other = request("a", "b", 1'000'000, 600 * kSecond, 7);
  other.provision = true;
  const std::string second = id_of(reserve_ok(other));
  agent->reconcile_now();
  auto twice = resolve_reservations(address, {held, second}, "a", lab_host_address);
  ASSERT_FALSE(twice.has_value()) << "two reservations of a-b accepted";
  EXPECT_NE(twice.error().message.find("one per site pair"), std::string::npos);
}

TEST_F(AgentClientFixture, TheWatchNamesAReleasedReservation) {
  const std::string id = provisioned("a", "b", 100'000'000);
  auto wan = resolve_reservations(address, {id}, "a", lab_host_address);
  ASSERT_TRUE(wan.has_value()) << wan.error().message;
  std::mutex mutex;
  std::condition_variable cv;
  std::string lost;
  ReservationWatch watch(*wan, 20'000'000, [&](const std::string& why) {
    std::lock_guard lock(mutex);
    lost = why;
    cv.notify_all();
  });
  EXPECT_FALSE(watch.check_now().has_value());
  // Released through the API: the agent is single-threaded (its server's thread calls it), and
  // the watch's thread is asking that server meanwhile — calling agent->release from here
  // would race with it (ThreadSanitizer saw it).
  const auto url = client::parse_url(address.url);
  ASSERT_TRUE(url.has_value());
  const auto released =
      client::http_call(*url, "POST", "/v1/reservations/" + id + "/release", "", "", 10'000);
  ASSERT_TRUE(released.has_value()) << released.error().message;
  ASSERT_EQ(released->status, 200) << released->body;
  const auto message = watch.check_now();
  ASSERT_TRUE(message.has_value());
  EXPECT_NE(message->find(id), std::string::npos);
  EXPECT_NE(message->find("no longer provisioned (state released"), std::string::npos) << *message;
  std::unique_lock lock(mutex);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return !lost.empty(); }))
      << "the watch never reported the released reservation";
  EXPECT_EQ(lost, *message);
}

TEST_F(AgentClientFixture, AnUnreachableAgentIsNotALostReservation) {
  const std::string id = provisioned("a", "b", 100'000'000);
  auto wan = resolve_reservations(address, {id}, "a", lab_host_address);
  ASSERT_TRUE(wan.has_value());
  server->stop();
  server.reset();
  ReservationWatch watch(*wan, 1'000'000'000, [](const std::string&) {});
  EXPECT_FALSE(watch.check_now().has_value());
}

TEST(Reservations, IdsPacingAndGrantParsing) {
  EXPECT_EQ(*parse_reservation_ids(" r-3, r-4,,r-3 "), (std::vector<std::string>{"r-3", "r-4"}));
  EXPECT_FALSE(parse_reservation_ids("r-3;drop").has_value());
  EXPECT_FALSE(parse_reservation_ids(" , ").has_value());

  client::TunnelGrant g;
  g.rate_bps = 100'000'000;
  g.burst_bytes = 24'000;
  g.mtu_bytes = 1432;
  g.frame_overhead_bytes = 86;
  const auto p = pacing_for(g, 2, 1500);
  EXPECT_EQ(p.rate_bps, 49'000'000);           // two local ranks share 98 % of it
  EXPECT_EQ(p.frame_overhead_bytes, 28 + 86);  // inner IPv4 + UDP, then the tunnel's
  EXPECT_EQ(p.mtu_bytes, 1432);                // the tunnel's, below the configured 1500
  EXPECT_EQ(p.max_burst_bytes, 6'000);         // half the burst, shared
  EXPECT_EQ(pacing_for(g, 1, 1000).mtu_bytes, 1000);

  auto bad = client::parse_grant(R"({"id":"r-1","version":1,"state":"provisioned"})");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("'reason'"), std::string::npos) << bad.error().message;
  EXPECT_FALSE(client::parse_grant("not json").has_value());
}

}  // namespace
}  // namespace detwan::control::testing

// control/client http_call_replicas against real HTTP servers on loopback: a client given the
// replica set passes a follower (503 not_leader) and a replica that does not answer, finds the
// leader, starts from it next time, gives up after its retry window with the last answer, and
// with one URL makes exactly one attempt.
#include <atomic>
#include <chrono>
#include <thread>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "control/api/http_server.h"
#include "control/client/http_client.h"

namespace detwan::control {
namespace {

struct Replica {
  std::unique_ptr<api::HttpServer> server;
  std::atomic<int> calls{0};
  std::atomic<bool> leader{false};
  std::string url;
};

std::unique_ptr<Replica> start_replica(bool leader) {
  auto r = std::make_unique<Replica>();
  r->leader = leader;
  api::HttpServerOptions options;
  options.listen = *common::parse_host_port("127.0.0.1:0", true);
  options.allow = {*common::parse_ip_prefix("127.0.0.0/8")};
  Replica* raw = r.get();
  auto server = api::HttpServer::start(options, [raw](api::HttpRequest, api::Respond respond) {
    ++raw->calls;
    if (raw->leader) {
      respond(api::HttpResponse{200, R"({"id":"r-1"})", "application/json", {}});
    } else {
      respond(api::HttpResponse{503, R"({"error":{"code":"not_leader","message":"follower"}})",
                                "application/json", {{"Retry-After", "1"}}});
    }
  });
  EXPECT_TRUE(server) << server.error().message;
  r->url = "http://" + common::format_host_port((*server)->local_endpoint());
  r->server = std::move(*server);
  return r;
}

std::vector<client::Url> urls_of(const std::vector<std::string>& texts) {
  std::string joined;
  for (const std::string& t : texts) joined += (joined.empty() ? "" : ",") + t;
  auto urls = client::parse_urls(joined);
  EXPECT_TRUE(urls) << urls.error().message;
  return *urls;
}

TEST(ReplicasClient, ParsesAReplicaSetAndNamesTheBadURL) {
  auto two = client::parse_urls("http://127.0.0.1:1,https://[::1]:2");
  ASSERT_TRUE(two);
  ASSERT_EQ(two->size(), 2u);
  EXPECT_TRUE((*two)[1].https);
  auto bad = client::parse_urls("http://127.0.0.1:1,,http://127.0.0.1:2");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("''"), std::string::npos) << bad.error().message;
}

TEST(ReplicasClient, PassesFollowersAndDeadReplicasToTheLeader) {
  auto follower = start_replica(false);
  auto leader = start_replica(true);
  // A port nobody listens on: a replica that is down.
  const std::string dead = "http://127.0.0.1:1";
  const auto urls = urls_of({dead, follower->url, leader->url});
  auto answer = client::http_call_replicas(urls, "GET", "/v1/reservations/r-1", "", "", 2000,
                                           5000, "test");
  ASSERT_TRUE(answer) << answer.error().message;
  EXPECT_EQ(answer->status, 200);
  EXPECT_EQ(leader->calls.load(), 1);
  // The next call starts at the replica that answered last: the follower is not asked again.
  const int follower_calls = follower->calls.load();
  ASSERT_TRUE(client::http_call_replicas(urls, "GET", "/", "", "", 2000, 5000, "test"));
  EXPECT_EQ(follower->calls.load(), follower_calls);
  EXPECT_EQ(leader->calls.load(), 2);
}

TEST(ReplicasClient, RetriesUntilALeaderIsElectedThenGivesUpWithTheLastAnswer) {
  auto a = start_replica(false);
  auto b = start_replica(false);
  const auto urls = urls_of({a->url, b->url});
  // No leader during the whole window: the last 503 comes back, after several rounds.
  auto none = client::http_call_replicas(urls, "GET", "/", "", "", 2000, 700, "test");
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_EQ(none->status, 503);
  EXPECT_GE(a->calls.load() + b->calls.load(), 4);  // at least two rounds of two
  // b is elected while a client waits: it gets b's answer.
  std::thread elect([&] {
    while (a->calls.load() < 4) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    b->leader = true;
  });
  auto later = client::http_call_replicas(urls, "GET", "/", "", "", 2000, 30000, "test");
  elect.join();
  ASSERT_TRUE(later) << later.error().message;
  EXPECT_EQ(later->status, 200);
}

TEST(ReplicasClient, OneURLIsOneAttempt) {
  auto follower = start_replica(false);
  auto answer = client::http_call_replicas(urls_of({follower->url}), "GET", "/", "", "", 2000,
                                           5000, "test");
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 503);
  EXPECT_EQ(follower->calls.load(), 1);
}

}  // namespace
}  // namespace detwan::control

// detwan-gw's HTTP exporter (dataplane/daemon/metrics_server.h) and the control server's local
// requests it rides on: scrapes answered by the loop's responder, shared within min_interval,
// bounded, refused outside the allow-list, answered 503 when the gateway stops; wrong paths and
// methods named. The control server is polled by a thread of the test, as the datapath polls it.
#include "dataplane/daemon/metrics_server.h"

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "common/net_address.h"
#include "dataplane/gw/control_server.h"
#include "tests/dataplane/uring/uring_test_util.h"

namespace detwan::dataplane::daemon {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;

struct Answer {
  int status = 0;  // 0: the connection closed without an answer
  std::string body;
};

Answer http_request(const common::HostPort& at, http::verb verb, const std::string& target) {
  asio::io_context io;
  tcp::socket socket(io);
  beast::error_code ec;
  socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), at.port), ec);
  if (ec) return {};
  http::request<http::string_body> request{verb, target, 11};
  request.set(http::field::host, "127.0.0.1");
  request.keep_alive(false);
  http::write(socket, request, ec);
  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  http::read(socket, buffer, response, ec);
  if (ec) return {};
  return {static_cast<int>(response.result_int()), response.body()};
}

// A control server polled every millisecond by a thread, answering with `respond`.
class PolledControl {
 public:
  explicit PolledControl(gw::ControlServer::Responder respond) : respond_(std::move(respond)) {
    auto server = gw::ControlServer::start(uring::testing::unique_socket_name("metrics"));
    EXPECT_TRUE(server.has_value());
    server_ = std::move(*server);
  }
  void start_polling() {
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        server_->poll_st(0, respond_);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  ~PolledControl() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  gw::ControlServer& server() { return *server_; }

 private:
  gw::ControlServer::Responder respond_;
  std::unique_ptr<gw::ControlServer> server_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

gw::MetricsConfig loopback_config(int64_t min_interval_ns = 1'000'000'000) {
  gw::MetricsConfig config;
  config.listen = "127.0.0.1:0";
  config.min_interval_ns = min_interval_ns;
  return config;
}

TEST(MetricsServer, ScrapeIsBuiltByTheLoopAndSharedWithinTheInterval) {
  std::atomic<int> builds{0};
  PolledControl control([&](std::string_view request) {
    EXPECT_EQ(request, fmt::format(R"({{"cmd":"prometheus","part":{{"head":true,)"
                                   R"("after_tunnel":-1,"max_tunnels":{}}}}})",
                                   MetricsServer::kTunnelsPerPart));
    ++builds;
    return "# HELP x_total X\n# TYPE x_total counter\nx_total " + std::to_string(builds.load()) +
           "\n";
  });
  control.start_polling();
  std::atomic<int64_t> now_ns{0};
  auto server = MetricsServer::start(loopback_config(), control.server(), [&] { return now_ns.load(); });
  ASSERT_TRUE(server.has_value()) << server.error().message;
  const common::HostPort at = (*server)->local_endpoint();
  ASSERT_NE(at.port, 0);

  const Answer first = http_request(at, http::verb::get, "/metrics");
  EXPECT_EQ(first.status, 200);
  EXPECT_NE(first.body.find("x_total 1\n"), std::string::npos) << first.body;
  EXPECT_NE(first.body.find("detwan_gw_http_connections_total{outcome=\"accepted\"}"),
            std::string::npos);
  // Within min_interval: the same build, the datapath not asked again.
  const Answer second = http_request(at, http::verb::get, "/metrics");
  EXPECT_EQ(second.status, 200);
  EXPECT_NE(second.body.find("x_total 1\n"), std::string::npos);
  EXPECT_EQ(builds.load(), 1);
  EXPECT_EQ((*server)->cached_answers(), 1u);
  now_ns.store(1'000'000'001);
  const Answer third = http_request(at, http::verb::get, "/metrics");
  EXPECT_NE(third.body.find("x_total 2\n"), std::string::npos);
  EXPECT_EQ((*server)->builds(), 2u);
}

TEST(MetricsServer, ALargeExpositionIsBuiltInPartsOnePerPollAndJoinedByFamily) {
  // The loop's answers: the first part says more tunnels follow after 1049, the second after
  // 1099, the third is the last. Each part repeats the families it writes.
  std::mutex mutex;  // the poll thread writes, the test thread reads
  std::vector<std::string> asked;
  PolledControl control([&](std::string_view request) -> std::string {
    std::lock_guard lock(mutex);
    asked.emplace_back(request);
    const std::string family = "# HELP t_total T\n# TYPE t_total counter\n";
    if (asked.size() == 1) {
      return "# HELP up Up\n# TYPE up gauge\nup 1\n" + family + "t_total{tunnel=\"1000\"} 1\n" +
             std::string(gw::kPrometheusMore) + "1049\n";
    }
    if (asked.size() == 2) {
      return family + "t_total{tunnel=\"1050\"} 2\n" + std::string(gw::kPrometheusMore) + "1099\n";
    }
    return family + "t_total{tunnel=\"1100\"} 3\n";
  });
  control.start_polling();
  auto server = MetricsServer::start(loopback_config(), control.server(), [] { return int64_t{0}; });
  ASSERT_TRUE(server.has_value()) << server.error().message;
  const Answer answer = http_request((*server)->local_endpoint(), http::verb::get, "/metrics");
  EXPECT_EQ(answer.status, 200);
  EXPECT_EQ(answer.body.substr(0, answer.body.find("# HELP detwan_gw_http")),
            "# HELP up Up\n# TYPE up gauge\nup 1\n# HELP t_total T\n# TYPE t_total counter\n"
            "t_total{tunnel=\"1000\"} 1\nt_total{tunnel=\"1050\"} 2\nt_total{tunnel=\"1100\"} 3\n");
  std::lock_guard lock(mutex);
  ASSERT_EQ(asked.size(), 3u);
  EXPECT_NE(asked[1].find(R"("head":false,"after_tunnel":1049)"), std::string::npos) << asked[1];
  EXPECT_NE(asked[2].find(R"("after_tunnel":1099)"), std::string::npos) << asked[2];
  EXPECT_EQ((*server)->builds(), 1u);
}

TEST(MetricsServer, WrongPathAndMethodAreNamed) {
  PolledControl control([](std::string_view) { return std::string("x 1\n"); });
  control.start_polling();
  auto server = MetricsServer::start(loopback_config(), control.server(), [] { return int64_t{0}; });
  ASSERT_TRUE(server.has_value()) << server.error().message;
  const Answer missing = http_request((*server)->local_endpoint(), http::verb::get, "/stats");
  EXPECT_EQ(missing.status, 404);
  EXPECT_NE(missing.body.find("/stats"), std::string::npos);
  const Answer post = http_request((*server)->local_endpoint(), http::verb::post, "/metrics");
  EXPECT_EQ(post.status, 405);
}

TEST(MetricsServer, ClientOutsideTheAllowListGetsNothing) {
  PolledControl control([](std::string_view) { return std::string("x 1\n"); });
  control.start_polling();
  gw::MetricsConfig config = loopback_config();
  config.allow = {"10.0.0.0/8"};
  auto server = MetricsServer::start(config, control.server(), [] { return int64_t{0}; });
  ASSERT_TRUE(server.has_value()) << server.error().message;
  EXPECT_EQ(http_request((*server)->local_endpoint(), http::verb::get, "/metrics").status, 0);
}

TEST(MetricsServer, AnErrorFromTheGatewayIs503AndNotCached) {
  std::atomic<int> calls{0};
  PolledControl control([&](std::string_view) {
    return ++calls == 1 ? std::string(R"({"error":"internal error: boom"})") : std::string("x 1\n");
  });
  control.start_polling();
  auto server = MetricsServer::start(loopback_config(), control.server(), [] { return int64_t{0}; });
  ASSERT_TRUE(server.has_value()) << server.error().message;
  const Answer failed = http_request((*server)->local_endpoint(), http::verb::get, "/metrics");
  EXPECT_EQ(failed.status, 503);
  EXPECT_NE(failed.body.find("boom"), std::string::npos);
  EXPECT_EQ(http_request((*server)->local_endpoint(), http::verb::get, "/metrics").status, 200);
}

TEST(MetricsServer, AScrapeWaitingWhenTheGatewayStopsIsAnswered503) {
  PolledControl control([](std::string_view) { return std::string("x 1\n"); });  // never polled
  auto server = MetricsServer::start(loopback_config(), control.server(), [] { return int64_t{0}; });
  ASSERT_TRUE(server.has_value()) << server.error().message;
  const common::HostPort at = (*server)->local_endpoint();
  auto pending = std::async(std::launch::async, [&] { return http_request(at, http::verb::get, "/metrics"); });
  // The scrape reaches the control server's local queue; nobody polls it.
  for (int i = 0; i < 2000 && (*server)->builds() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ((*server)->builds(), 1u);
  server->reset();
  const Answer answer = pending.get();
  EXPECT_EQ(answer.status, 503);
  EXPECT_NE(answer.body.find("stopping"), std::string::npos);
}

TEST(ControlServerLocal, AnsweredWithinThePollBudgetAndBounded) {
  auto server = gw::ControlServer::start(uring::testing::unique_socket_name("local"));
  ASSERT_TRUE(server.has_value()) << server.error().message;
  std::vector<std::string> answers;
  for (size_t i = 0; i < gw::ControlServer::kMaxLocalRequests; ++i) {
    EXPECT_TRUE((*server)->submit("q" + std::to_string(i),
                                  [&answers](std::string a) { answers.push_back(std::move(a)); }));
  }
  EXPECT_FALSE((*server)->submit("over", [](std::string) { FAIL() << "refused: never called"; }));
  EXPECT_TRUE((*server)->has_connections());  // the loop is told to poll soon
  const auto echo = [](std::string_view r) { return "a:" + std::string(r); };
  (*server)->poll_st(0, echo);  // one answer per poll (the default budget)
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0], "a:q0");
  for (int i = 0; i < 20; ++i) (*server)->poll_st(0, echo);
  EXPECT_EQ(answers.size(), gw::ControlServer::kMaxLocalRequests);
  EXPECT_EQ(answers.back(), "a:q15");
  EXPECT_FALSE((*server)->has_connections());
  // Still waiting at destruction: answered with an error, not dropped.
  std::string last;
  EXPECT_TRUE((*server)->submit("late", [&last](std::string a) { last = std::move(a); }));
  server->reset();
  EXPECT_NE(last.find("stopping"), std::string::npos);
}

}  // namespace
}  // namespace detwan::dataplane::daemon

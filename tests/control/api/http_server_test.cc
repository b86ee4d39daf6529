// control/api/http_server: the agent's HTTP server on 127.0.0.1, port 0, driven by Boost.Beast
// synchronous clients. Who may connect, how many, how large a body, which token may do what.
#include "control/api/http_server.h"

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <stdlib.h>

// GCC 12 with -fsanitize=address,undefined reports a false -Wmaybe-uninitialized inside
// Beast's parser (boost::optional in basic_parser::content_length), fatal under -Werror.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#pragma GCC diagnostic pop

namespace detwan::control::api {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr const char* kReadToken = "read-token-0123456789";
constexpr const char* kWriteToken = "write-token-0123456789";

// Records the requests it sees and answers each with 200 and a JSON echo of it.
struct EchoHandler {
  std::mutex mutex;
  std::vector<HttpRequest> seen;

  Handler handler() {
    return [this](HttpRequest request, Respond respond) {
      boost::json::object echo{{"method", request.method},
                               {"path", request.path},
                               {"query", request.query},
                               {"body", request.body},
                               {"content_type", request.content_type}};
      {
        std::lock_guard lock(mutex);
        seen.push_back(std::move(request));
      }
      HttpResponse response;
      response.body = boost::json::serialize(echo);
      response.headers.emplace_back("X-Echo", "1");
      respond(std::move(response));
    };
  }
  size_t count() {
    std::lock_guard lock(mutex);
    return seen.size();
  }
};

HttpServerOptions loopback_options() {
  HttpServerOptions options;
  options.listen = *common::parse_host_port("127.0.0.1:0", true);
  options.allow = {*common::parse_ip_prefix("127.0.0.0/8")};
  return options;
}

// One synchronous client connection.
class Client {
 public:
  explicit Client(uint16_t port) : socket_(io_) {
    socket_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  }

  void send(http::verb method, const std::string& target, const std::string& body = "",
            const std::string& token = "", bool keep_alive = true) {
    http::request<http::string_body> request{method, target, 11};
    request.set(http::field::host, "127.0.0.1");
    request.set(http::field::content_type, "application/json");
    if (!token.empty()) request.set(http::field::authorization, "Bearer " + token);
    request.body() = body;
    request.keep_alive(keep_alive);
    request.prepare_payload();
    beast::error_code ec;
    http::write(socket_, request, ec);  // may fail when the server closed at once
  }

  // The next response; fails the test if the connection closed instead.
  http::response<http::string_body> receive() {
    http::response<http::string_body> response;
    beast::error_code ec;
    http::read(socket_, buffer_, response, ec);
    EXPECT_FALSE(ec) << "no answer: " << ec.message();
    return response;
  }

  http::response<http::string_body> request(http::verb method, const std::string& target,
                                            const std::string& body = "",
                                            const std::string& token = "") {
    send(method, target, body, token);
    return receive();
  }

  // True if the server closes the connection without sending a byte.
  bool closed_without_answer() {
    char byte = 0;
    beast::error_code ec;
    const size_t got = socket_.read_some(asio::buffer(&byte, 1), ec);
    return got == 0 && buffer_.size() == 0 &&
           (ec == asio::error::eof || ec == asio::error::connection_reset);
  }

  void close() {
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

 private:
  asio::io_context io_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
};

std::string error_code_of(const http::response<http::string_body>& response) {
  const auto body = boost::json::parse(response.body());
  return std::string(body.at("error").at("code").as_string());
}

TEST(HttpServer, AnswersRequestsOnAKeptAliveConnection) {
  EchoHandler echo;
  auto server = HttpServer::start(loopback_options(), echo.handler());
  ASSERT_TRUE(server.has_value()) << server.error().message;
  const uint16_t port = (*server)->local_endpoint().port;
  ASSERT_NE(port, 0);

  Client client(port);
  auto response = client.request(http::verb::post, "/v1/reservations?wait=false", R"({"x":1})");
  EXPECT_EQ(response.result_int(), 200u);
  EXPECT_EQ(response[http::field::content_type], "application/json");
  EXPECT_EQ(response["X-Echo"], "1");
  EXPECT_EQ(response[http::field::server], "detwan-agent");
  const auto body = boost::json::parse(response.body());
  EXPECT_EQ(body.at("method").as_string(), "POST");
  EXPECT_EQ(body.at("path").as_string(), "/v1/reservations");
  EXPECT_EQ(body.at("query").as_string(), "wait=false");
  EXPECT_EQ(body.at("body").as_string(), R"({"x":1})");
  EXPECT_EQ(body.at("content_type").as_string(), "application/json");
  // The same connection serves the next request.
  response = client.request(http::verb::get, "/healthz");
  EXPECT_EQ(response.result_int(), 200u);
  EXPECT_EQ(boost::json::parse(response.body()).at("path").as_string(), "/healthz");
  ASSERT_EQ(echo.count(), 2u);
  {
    std::lock_guard lock(echo.mutex);
    EXPECT_EQ(echo.seen[0].client.rfind("127.0.0.1:", 0), 0u) << echo.seen[0].client;
    EXPECT_EQ(echo.seen[0].target, "/v1/reservations?wait=false");
  }
  const HttpCounters counters = (*server)->counters();
  EXPECT_EQ(counters.accepted, 1u);
  EXPECT_EQ(counters.refused_address, 0u);
}

TEST(HttpServer, AnswerFromAnotherThreadExactlyOnce) {
  std::vector<std::thread> threads;
  std::mutex mutex;
  int calls = 0;
  Handler later = [&](HttpRequest request, Respond respond) {
    std::lock_guard lock(mutex);
    const int n = ++calls;
    threads.emplace_back([respond, n, path = request.path] {
      HttpResponse first;
      first.status = 201;
      first.body = "{\"n\":" + std::to_string(n) + ",\"path\":\"" + path + "\"}";
      respond(first);
      HttpResponse second;  // ignored: a request is answered once
      second.status = 500;
      second.body = "{\"late\":true}";
      respond(second);
    });
  };
  {
    auto server = HttpServer::start(loopback_options(), later);
    ASSERT_TRUE(server.has_value()) << server.error().message;
    Client client((*server)->local_endpoint().port);
    auto first = client.request(http::verb::get, "/one");
    EXPECT_EQ(first.result_int(), 201u);
    EXPECT_EQ(first.body(), R"({"n":1,"path":"/one"})");
    // Had the second answer been sent, it would be read here instead of /two's.
    auto second = client.request(http::verb::get, "/two");
    EXPECT_EQ(second.result_int(), 201u);
    EXPECT_EQ(second.body(), R"({"n":2,"path":"/two"})");
  }
  for (std::thread& t : threads) t.join();
}

// A handler may answer at any time from any thread, even after the server stopped (the agent
// answers a provisioning call when the gateways are done): the late answer is dropped, and
// nothing of the server is touched after it is gone (ASan in CI).
TEST(HttpServer, AnAnswerAfterTheServerStoppedIsDropped) {
  std::mutex mutex;
  std::condition_variable arrived;
  Respond kept;
  Handler keep = [&](HttpRequest, Respond respond) {
    std::lock_guard lock(mutex);
    kept = std::move(respond);
    arrived.notify_all();
  };
  {
    auto server = HttpServer::start(loopback_options(), keep);
    ASSERT_TRUE(server.has_value()) << server.error().message;
    Client client((*server)->local_endpoint().port);
    client.send(http::verb::get, "/slow");
    std::unique_lock lock(mutex);
    ASSERT_TRUE(arrived.wait_for(lock, std::chrono::seconds(10), [&] { return kept != nullptr; }));
  }
  HttpResponse late;
  late.body = "{}";
  kept(late);  // the server is gone: dropped
  kept(late);
  kept = nullptr;
}

// The server stops right after answering, while its accept handler may still be re-arming the
// accept on another I/O thread (it starts the session first, and the session may answer before
// the handler returns). Stopping must not touch the acceptor beside that handler: under
// ThreadSanitizer (CI's tsan suite) a race fails this test.
TEST(HttpServer, StopsRightAfterAnAnswerWithoutRacingTheAcceptor) {
  for (int round = 0; round < 200; ++round) {
    EchoHandler echo;
    auto server = HttpServer::start(loopback_options(), echo.handler());
    ASSERT_TRUE(server.has_value()) << server.error().message;
    Client client((*server)->local_endpoint().port);
    ASSERT_EQ(client.request(http::verb::get, "/healthz").result_int(), 200u) << round;
    (*server)->stop();
    EXPECT_EQ(echo.count(), 1u);
  }
  // The same when the accept handler refuses the client: it closes the socket, then re-arms.
  HttpServerOptions options = loopback_options();
  options.allow = {*common::parse_ip_prefix("10.0.0.0/8")};
  for (int round = 0; round < 200; ++round) {
    EchoHandler echo;
    auto server = HttpServer::start(options, echo.handler());
    ASSERT_TRUE(server.has_value()) << server.error().message;
    Client client((*server)->local_endpoint().port);
    ASSERT_TRUE(client.closed_without_answer()) << round;
    (*server)->stop();
    EXPECT_EQ((*server)->counters().refused_address, 1u);
  }
}

TEST(HttpServer, ClientOutsideAllowIsClosedWithoutAnAnswer) {
  EchoHandler echo;
  HttpServerOptions options = loopback_options();
  options.allow = {*common::parse_ip_prefix("10.0.0.0/8")};
  auto server = HttpServer::start(options, echo.handler());
  ASSERT_TRUE(server.has_value()) << server.error().message;
  Client client((*server)->local_endpoint().port);
  client.send(http::verb::get, "/healthz");
  EXPECT_TRUE(client.closed_without_answer());
  EXPECT_EQ(echo.count(), 0u);
  const HttpCounters counters = (*server)->counters();
  EXPECT_EQ(counters.refused_address, 1u);
  EXPECT_EQ(counters.accepted, 0u);
}

TEST(HttpServer, MaxConnectionsIsEnforced) {
  EchoHandler echo;
  HttpServerOptions options = loopback_options();
  options.max_connections = 1;
  auto server = HttpServer::start(options, echo.handler());
  ASSERT_TRUE(server.has_value()) << server.error().message;
  const uint16_t port = (*server)->local_endpoint().port;

  Client first(port);
  EXPECT_EQ(first.request(http::verb::get, "/a").result_int(), 200u);  // accepted and alive
  Client second(port);
  second.send(http::verb::get, "/b");
  EXPECT_TRUE(second.closed_without_answer());
  EXPECT_EQ((*server)->counters().refused_connections, 1u);
  EXPECT_EQ(echo.count(), 1u);
  // The first connection is still served.
  EXPECT_EQ(first.request(http::verb::get, "/c").result_int(), 200u);

  // Once the first closes, a new connection is served. The server learns of the close
  // asynchronously: retry (bounded) until it has.
  first.close();
  bool served = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!served && std::chrono::steady_clock::now() < deadline) {
    Client next(port);
    next.send(http::verb::get, "/d");
    // A refused connection is closed without a byte; an accepted one is answered.
    served = !next.closed_without_answer();
  }
  EXPECT_TRUE(served);
}

TEST(HttpServer, BodyAboveTheLimitIs413AndClosesTheConnection) {
  EchoHandler echo;
  HttpServerOptions options = loopback_options();
  options.max_body_bytes = 1024;
  auto server = HttpServer::start(options, echo.handler());
  ASSERT_TRUE(server.has_value()) << server.error().message;
  const uint16_t port = (*server)->local_endpoint().port;
  {
    Client client(port);
    const auto response = client.request(http::verb::post, "/v1/paths", std::string(1024, ' '));
    EXPECT_EQ(response.result_int(), 200u);  // exactly the limit
  }
  Client client(port);
  const auto response = client.request(http::verb::post, "/v1/paths", std::string(1025, ' '));
  EXPECT_EQ(response.result_int(), 413u);
  EXPECT_EQ(error_code_of(response), "body_too_large");
  EXPECT_FALSE(response.keep_alive());
  EXPECT_TRUE(client.closed_without_answer());
  EXPECT_EQ(echo.count(), 1u);
  EXPECT_EQ((*server)->counters().bad_requests, 1u);
}

TEST(HttpServer, HeadersAboveTheLimitAre431) {
  EchoHandler echo;
  auto server = HttpServer::start(loopback_options(), echo.handler());
  ASSERT_TRUE(server.has_value()) << server.error().message;
  Client client((*server)->local_endpoint().port);
  const std::string target = "/" + std::string(17 * 1024, 'x');
  const auto response = client.request(http::verb::get, target);
  EXPECT_EQ(response.result_int(), 431u);
  EXPECT_EQ(echo.count(), 0u);
}

TEST(HttpServer, ASilentClientIsClosedAfterTheRequestTimeout) {
  EchoHandler echo;
  HttpServerOptions options = loopback_options();
  options.request_timeout_ns = 100'000'000;  // the test waits this long for the close
  auto server = HttpServer::start(options, echo.handler());
  ASSERT_TRUE(server.has_value()) << server.error().message;
  Client client((*server)->local_endpoint().port);
  EXPECT_TRUE(client.closed_without_answer());
  EXPECT_EQ(echo.count(), 0u);
}

class TokensTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/detwan-http-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  // A tokens file as an operator keeps it: the owner's only (0600).
  std::string write_file(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    std::filesystem::permissions(path, std::filesystem::perms::owner_read |
                                           std::filesystem::perms::owner_write);
    return path;
  }
  std::string dir_;
};

TEST_F(TokensTest, ReadTokensMayGetWriteTokensMayChangeHealthzNeedsNone) {
  EchoHandler echo;
  HttpServerOptions options = loopback_options();
  options.tokens_file = write_file("tokens", std::string("# agent tokens\n\nread ") + kReadToken +
                                                 "\n  write   " + kWriteToken + "  # ops\n");
  auto server = HttpServer::start(options, echo.handler());
  ASSERT_TRUE(server.has_value()) << server.error().message;
  Client client((*server)->local_endpoint().port);

  auto response = client.request(http::verb::get, "/v1/reservations");
  EXPECT_EQ(response.result_int(), 401u);
  EXPECT_EQ(error_code_of(response), "unauthorized");
  response = client.request(http::verb::get, "/v1/reservations", "", "not-a-token-at-all-0000");
  EXPECT_EQ(response.result_int(), 401u);
  // A prefix of a valid token is not a valid token.
  response = client.request(http::verb::get, "/v1/reservations", "",
                            std::string(kReadToken).substr(0, 16));
  EXPECT_EQ(response.result_int(), 401u);
  response = client.request(http::verb::get, "/v1/reservations", "", kReadToken);
  EXPECT_EQ(response.result_int(), 200u);
  response = client.request(http::verb::post, "/v1/reservations", "{}", kReadToken);
  EXPECT_EQ(response.result_int(), 403u);
  EXPECT_EQ(error_code_of(response), "forbidden");
  response = client.request(http::verb::delete_, "/v1/reservations/r-1", "", kReadToken);
  EXPECT_EQ(response.result_int(), 403u);
  response = client.request(http::verb::post, "/v1/reservations", "{}", kWriteToken);
  EXPECT_EQ(response.result_int(), 200u);
  response = client.request(http::verb::get, "/v1/topology", "", kWriteToken);
  EXPECT_EQ(response.result_int(), 200u);
  response = client.request(http::verb::get, "/healthz");
  EXPECT_EQ(response.result_int(), 200u);
  // Only GET /healthz is open.
  response = client.request(http::verb::post, "/healthz");
  EXPECT_EQ(response.result_int(), 401u);

  EXPECT_EQ(echo.count(), 4u);  // refused requests never reach the handler
  EXPECT_EQ((*server)->counters().refused_token, 6u);
}

TEST_F(TokensTest, OpenPathsNeedNoTokenForAGetOnly) {
  EchoHandler echo;
  HttpServerOptions options = loopback_options();
  options.tokens_file = write_file("tokens", std::string("read ") + kReadToken + "\n");
  options.open_paths = {"/healthz", "/", "/console.js"};
  auto server = HttpServer::start(options, echo.handler());
  ASSERT_TRUE(server.has_value()) << server.error().message;
  Client client((*server)->local_endpoint().port);
  auto response = client.request(http::verb::get, "/");
  EXPECT_EQ(response.result_int(), 200u);
  EXPECT_EQ(response["X-Content-Type-Options"], "nosniff");  // on every answer
  EXPECT_EQ(client.request(http::verb::get, "/console.js?v=2").result_int(), 200u);
  // A wrong token on an open path is no worse than none; anything else still needs one.
  EXPECT_EQ(client.request(http::verb::get, "/", "", "not-a-token-at-all-0000").result_int(), 200u);
  EXPECT_EQ(client.request(http::verb::post, "/").result_int(), 401u);
  EXPECT_EQ(client.request(http::verb::get, "/console.css").result_int(), 401u);
  EXPECT_EQ(client.request(http::verb::get, "/v1/whoami").result_int(), 401u);
  EXPECT_EQ(client.request(http::verb::get, "/v1/whoami", "", kReadToken).result_int(), 200u);
  EXPECT_EQ(echo.count(), 4u);
}

TEST_F(TokensTest, LoadTokensErrorsNameTheLine) {
  const std::string good = std::string("read ") + kReadToken + "\n";
  auto loaded = load_tokens(write_file("good", "# c\n" + good + "write " + kWriteToken + "\n"));
  ASSERT_TRUE(loaded.has_value()) << loaded.error().message;
  ASSERT_EQ(loaded->size(), 2u);
  EXPECT_EQ((*loaded)[0].token, kReadToken);
  EXPECT_FALSE((*loaded)[0].write);
  EXPECT_TRUE((*loaded)[1].write);

  auto expect_line = [&](const std::string& name, const std::string& text, int line) {
    const std::string path = write_file(name, text);
    const auto refused = load_tokens(path);
    ASSERT_FALSE(refused.has_value()) << name;
    EXPECT_NE(refused.error().message.find(path + ":" + std::to_string(line) + ":"),
              std::string::npos)
        << refused.error().message;
  };
  expect_line("role", good + "\nadmin " + kWriteToken + "\n", 3);
  expect_line("short", "read short\n", 1);
  expect_line("extra", good + "read other-token-0123456789\n" + "write " + kWriteToken + " extra\n",
              3);
  expect_line("missing", "# tokens\nwrite\n", 2);

  const std::string empty = write_file("empty", "# nothing here\n\n");
  auto none = load_tokens(empty);
  ASSERT_FALSE(none.has_value());
  EXPECT_NE(none.error().message.find("has no token"), std::string::npos) << none.error().message;
  auto absent = load_tokens(dir_ + "/absent");
  ASSERT_FALSE(absent.has_value());
  EXPECT_NE(absent.error().message.find(dir_ + "/absent"), std::string::npos);
  // A server with a broken tokens file does not start.
  HttpServerOptions options = loopback_options();
  options.tokens_file = dir_ + "/short";
  EchoHandler echo;
  EXPECT_FALSE(HttpServer::start(options, echo.handler()).has_value());
}

// A tokens file others may read (or write) is refused, naming its owner and mode; the server
// does not start with it.
TEST_F(TokensTest, ATokensFileOthersMayReadIsRefused) {
  const std::string path = write_file("open", std::string("read ") + kReadToken + "\n");
  std::filesystem::permissions(path, std::filesystem::perms(0644));
  const auto refused = load_tokens(path);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("tokens file '" + path + "'"), std::string::npos)
      << refused.error().message;
  EXPECT_NE(refused.error().message.find("mode 0644"), std::string::npos)
      << refused.error().message;
  HttpServerOptions options = loopback_options();
  options.tokens_file = path;
  EchoHandler echo;
  EXPECT_FALSE(HttpServer::start(options, echo.handler()).has_value());
}

TEST(HttpServer, ListenErrorsNameTheAddress) {
  EchoHandler echo;
  auto first = HttpServer::start(loopback_options(), echo.handler());
  ASSERT_TRUE(first.has_value()) << first.error().message;
  HttpServerOptions taken = loopback_options();
  taken.listen.port = (*first)->local_endpoint().port;
  const auto second = HttpServer::start(taken, echo.handler());
  ASSERT_FALSE(second.has_value());
  EXPECT_NE(second.error().message.find("127.0.0.1:" + std::to_string(taken.listen.port)),
            std::string::npos)
      << second.error().message;
}

}  // namespace
}  // namespace detwan::control::api

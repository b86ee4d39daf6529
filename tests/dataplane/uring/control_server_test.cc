// The control socket: protocol, error answers, names (abstract and filesystem), refusal of a
// second server, client errors. The server is polled by the test thread exactly as the datapath
// polls it (never blocking), with virtual time for its deadlines; clients run on another thread.
#include "dataplane/gw/control_server.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <string>

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/json.hpp>

#include "dataplane/gw/engine.h"
#include "tests/dataplane/uring/uring_test_util.h"

namespace detwan::dataplane::gw {
namespace {

using uring::testing::unique_socket_name;

std::string echo(std::string_view request) { return "got:" + std::string(request); }

// Polls `server` until `answer` is ready: on the listening socket's readiness, or every
// millisecond while a connection is open (the datapath's own cadence).
template <typename T>
T serve_until(ControlServer& server, std::future<T>& answer,
              const ControlServer::Responder& respond, int64_t now_ns = 0) {
  while (answer.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    pollfd descriptor{server.fd(), POLLIN, 0};
    (void)::poll(&descriptor, 1, 1);
    server.poll_st(now_ns, respond);
  }
  return answer.get();
}

common::UniqueFd connect_raw(const std::string& abstract_name) {
  common::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string name = abstract_name.substr(1);
  std::memcpy(address.sun_path + 1, name.data(), name.size());
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), length), 0);
  return fd;
}

std::string read_all(int fd) {
  std::string out;
  char buffer[4096];
  for (;;) {
    pollfd descriptor{fd, POLLIN, 0};
    if (::poll(&descriptor, 1, 10'000) <= 0) return out + "<timeout>";
    const ssize_t got = ::recv(fd, buffer, sizeof buffer, 0);
    if (got <= 0) return out;
    out.append(buffer, static_cast<size_t>(got));
  }
}

TEST(ControlServer, AnswersOneRequestLine) {
  const std::string name = unique_socket_name("echo");
  auto server = ControlServer::start(name);
  ASSERT_TRUE(server) << server.error().message;
  EXPECT_EQ((*server)->name(), name);
  auto answer = std::async(std::launch::async, [&] { return control_request(name, "hello"); });
  auto result = serve_until(**server, answer, echo);
  ASSERT_TRUE(result) << result.error().message;
  EXPECT_EQ(*result, "got:hello");  // the line arrives without its '\n', the answer too
  EXPECT_FALSE((*server)->has_connections());
}

TEST(ControlServer, ServesSeveralClientsOneAfterAnother) {
  const std::string name = unique_socket_name("many");
  auto server = ControlServer::start(name);
  ASSERT_TRUE(server) << server.error().message;
  for (int i = 0; i < 20; ++i) {
    const std::string request = "request " + std::to_string(i);
    auto answer = std::async(std::launch::async, [&] { return control_request(name, request); });
    auto result = serve_until(**server, answer, echo);
    ASSERT_TRUE(result) << result.error().message;
    EXPECT_EQ(*result, "got:" + request);
  }
}

TEST(ControlServer, LargeAnswerIsWrittenAcrossPolls) {
  const std::string name = unique_socket_name("large");
  auto server = ControlServer::start(name);
  ASSERT_TRUE(server) << server.error().message;
  std::string big(3 << 20, 'x');  // far above a Unix socket's buffer
  for (size_t i = 0; i < big.size(); i += 4096) big[i] = static_cast<char>('a' + (i / 4096) % 26);
  auto answer = std::async(std::launch::async, [&] { return control_request(name, "big"); });
  auto result = serve_until(**server, answer, [&](std::string_view) { return big; });
  ASSERT_TRUE(result) << result.error().message;
  EXPECT_EQ(*result, big);
}

TEST(ControlServer, DefaultNameIsTheAbstractDetwanGw) {
  EXPECT_EQ(control_socket_name(""), "@detwan-gw");
  EXPECT_EQ(control_socket_name("/run/x.sock"), "/run/x.sock");
  EXPECT_EQ(control_socket_name("@other"), "@other");
}

TEST(ControlServer, AbstractNameLeavesNoFile) {
  const std::string name = unique_socket_name("abstract");
  auto server = ControlServer::start(name);
  ASSERT_TRUE(server) << server.error().message;
  EXPECT_FALSE(std::filesystem::exists(name));
  EXPECT_FALSE(std::filesystem::exists(name.substr(1)));
  auto answer = std::async(std::launch::async, [&] { return control_request(name, "x"); });
  EXPECT_TRUE(serve_until(**server, answer, echo).has_value());
}

TEST(ControlServer, FilesystemPathIsCreatedReplacedWhenStaleAndRemoved) {
  const auto directory = std::filesystem::temp_directory_path() /
                         ("detwan-control-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(directory);
  const std::string path = (directory / "gw.sock").string();
  {
    auto server = ControlServer::start(path);
    ASSERT_TRUE(server) << server.error().message;
    struct stat info {};
    ASSERT_EQ(::lstat(path.c_str(), &info), 0);
    EXPECT_TRUE(S_ISSOCK(info.st_mode));
    auto answer = std::async(std::launch::async, [&] { return control_request(path, "p"); });
    auto result = serve_until(**server, answer, echo);
    ASSERT_TRUE(result) << result.error().message;
    EXPECT_EQ(*result, "got:p");
  }
  EXPECT_FALSE(std::filesystem::exists(path));  // removed with the server

  // A socket file whose gateway died (bound, never listening, closed) is replaced.
  {
    common::UniqueFd stale(::socket(AF_UNIX, SOCK_STREAM, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, path.data(), path.size());
    ASSERT_EQ(::bind(stale.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  }
  ASSERT_TRUE(std::filesystem::exists(path));
  auto server = ControlServer::start(path);
  EXPECT_TRUE(server) << server.error().message;
  server->reset();  // closes it and removes the file

  // Something that is not a socket is never deleted.
  {
    std::FILE* file = std::fopen(path.c_str(), "w");
    std::fclose(file);
  }
  auto refused = ControlServer::start(path);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("exists and is not a socket"), std::string::npos);
  std::filesystem::remove_all(directory);
}

TEST(ControlServer, SecondServerOnTheSameNameIsRefused) {
  const std::string name = unique_socket_name("twice");
  auto first = ControlServer::start(name);
  ASSERT_TRUE(first) << first.error().message;
  auto second = ControlServer::start(name);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, common::ErrorCode::kAlreadyExists);
  EXPECT_EQ(second.error().message,
            "control socket '" + name + "' is in use: another detwan-gw listens on it");

  const std::string path = (std::filesystem::temp_directory_path() /
                            ("detwan-twice-" + std::to_string(::getpid()) + ".sock"))
                               .string();
  auto first_path = ControlServer::start(path);
  ASSERT_TRUE(first_path) << first_path.error().message;
  auto second_path = ControlServer::start(path);
  ASSERT_FALSE(second_path);
  EXPECT_NE(second_path.error().message.find("is in use"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(path));  // the live gateway keeps its socket
}

TEST(ControlServer, BadNamesAreRefused) {
  auto empty_abstract = ControlServer::start("@");
  ASSERT_FALSE(empty_abstract);
  EXPECT_EQ(empty_abstract.error().code, common::ErrorCode::kInvalidArgument);
  auto too_long = ControlServer::start("/tmp/" + std::string(200, 'x'));
  ASSERT_FALSE(too_long);
  EXPECT_NE(too_long.error().message.find("must be 1..107 characters"), std::string::npos);
}

TEST(ControlClient, NobodyListeningIsAClearError) {
  const std::string name = unique_socket_name("nobody");
  auto result = control_request(name, R"({"cmd":"stats"})", 1000);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, common::ErrorCode::kUnavailable);
  EXPECT_EQ(result.error().message, "no detwan-gw listening on " + name + ": Connection refused");

  auto missing = control_request("/nonexistent-dir/gw.sock", "x", 1000);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message,
            "no detwan-gw listening on /nonexistent-dir/gw.sock: No such file or directory");
}

TEST(ControlClient, TimesOutWhenTheGatewayNeverAnswers) {
  const std::string name = unique_socket_name("silent");
  auto server = ControlServer::start(name);  // listening, but nobody polls it
  ASSERT_TRUE(server) << server.error().message;
  auto result = control_request(name, R"({"cmd":"stats"})", 200);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, common::ErrorCode::kTimeout);
  EXPECT_EQ(result.error().message, "no answer from detwan-gw on " + name + " within 200 ms");
}

TEST(ControlServer, IncompleteRequestIsAnsweredAtItsDeadline) {
  const std::string name = unique_socket_name("deadline");
  auto server = ControlServer::start(name);
  ASSERT_TRUE(server) << server.error().message;
  common::UniqueFd client = connect_raw(name);
  ASSERT_EQ(::send(client.get(), "{\"cmd\":", 7, 0), 7);  // no newline, connection kept open
  int64_t now_ns = 1'000;
  int responder_calls = 0;
  auto respond = [&](std::string_view) {
    ++responder_calls;
    return std::string("never");
  };
  // Until the deadline the server waits (and never blocks doing so).
  for (int i = 0; i < 10 && !(*server)->has_connections(); ++i) {
    pollfd descriptor{(*server)->fd(), POLLIN, 0};
    (void)::poll(&descriptor, 1, 1000);
    (*server)->poll_st(now_ns, respond);
  }
  ASSERT_TRUE((*server)->has_connections());
  now_ns += ControlServer::kRequestTimeoutNs - 1;
  (*server)->poll_st(now_ns, respond);
  EXPECT_TRUE((*server)->has_connections());
  now_ns += 1;  // the deadline
  (*server)->poll_st(now_ns, respond);
  EXPECT_FALSE((*server)->has_connections());
  EXPECT_EQ(responder_calls, 0);
  EXPECT_EQ(read_all(client.get()), "{\"error\":\"no complete request line within 2000 ms\"}\n");
}

TEST(ControlServer, OversizedRequestIsRefused) {
  const std::string name = unique_socket_name("oversize");
  auto server = ControlServer::start(name);
  ASSERT_TRUE(server) << server.error().message;
  const std::string request(ControlServer::kMaxRequestBytes + 100, 'a');
  auto answer = std::async(std::launch::async, [&] { return control_request(name, request); });
  auto result = serve_until(**server, answer, echo);
  ASSERT_TRUE(result) << result.error().message;
  EXPECT_EQ(*result, "{\"error\":\"request longer than 4096 bytes\"}");
}

TEST(ControlServer, RequestEndedByShutdownWithoutNewline) {
  const std::string name = unique_socket_name("shutdown");
  auto server = ControlServer::start(name);
  ASSERT_TRUE(server) << server.error().message;
  common::UniqueFd client = connect_raw(name);
  ASSERT_EQ(::send(client.get(), "last", 4, 0), 4);
  ASSERT_EQ(::shutdown(client.get(), SHUT_WR), 0);
  auto answer = std::async(std::launch::async, [&] { return read_all(client.get()); });
  EXPECT_EQ(serve_until(**server, answer, echo), "got:last\n");
}

// ---- the gateway's requests, answered from a real engine ----

class ControlRequests : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = uring::testing::site_config("site-a", "site-b", uring::testing::loopback(4789),
                                          uring::testing::loopback(4790));
    auto engine = Engine::create(config_, kStartNs);
    ASSERT_TRUE(engine) << engine.error().message;
    engine_ = std::move(*engine);
  }
  std::string ask(std::string_view request) {
    return answer_control_request(*engine_, request, kStartNs + 5'000'000'000);
  }
  static constexpr int64_t kStartNs = 1'700'000'000'000'000'000;
  GatewayConfig config_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(ControlRequests, StatsIsTheEngineJson) {
  const std::string answer = ask(R"({"cmd":"stats"})");
  EXPECT_EQ(answer, engine_->stats_json(kStartNs + 5'000'000'000));
  const boost::json::value parsed = boost::json::parse(answer);
  EXPECT_EQ(parsed.at("gateway").as_string(), "site-a");
  EXPECT_EQ(parsed.at("uptime_ns").to_number<int64_t>(), 5'000'000'000);
}

TEST_F(ControlRequests, PrometheusAndConfig) {
  // The same exposition, but for the request counter (the answer is built while the request
  // is being answered; the engine counts it after).
  const auto without_requests = [](std::string text) {
    const std::string line = "\ndetwan_gw_control_requests_total ";
    const size_t at = text.find(line);
    if (at != std::string::npos) text.erase(at + 1, text.find('\n', at + 1) - at);
    return text;
  };
  EXPECT_EQ(without_requests(ask(R"({"cmd":"prometheus"})")),
            without_requests(engine_->prometheus_text(kStartNs + 5'000'000'000)));
  EXPECT_NE(ask(R"({"cmd":"prometheus"})").find("# TYPE"), std::string::npos);
  const std::string config = ask(R"( {"cmd" : "config"} )");
  EXPECT_EQ(config, describe(config_));
  EXPECT_NE(config.find("site-a"), std::string::npos);
}

TEST_F(ControlRequests, BadRequestsNameWhatWasWrong) {
  auto error_of = [&](std::string_view request) {
    const boost::json::value parsed = boost::json::parse(ask(request));
    return std::string(parsed.at("error").as_string());
  };
  const std::string commands =
      "stats, prometheus, config, tunnels, apply, add_tunnel, modify_tunnel, remove_tunnel or "
      "reload";
  EXPECT_EQ(error_of(R"({"cmd":"reboot"})"), "unknown cmd \"reboot\" (use " + commands + ")");
  EXPECT_EQ(error_of(R"({"command":"stats"})"), "request has no \"cmd\" (use " + commands + ")");
  EXPECT_EQ(error_of(R"({"cmd":1})"), "\"cmd\" must be a string (" + commands + ")");
  EXPECT_EQ(error_of(R"({"cmd":"stats","verbose":true})"),
            "unknown field \"verbose\" (only \"cmd\" for stats, prometheus, config, tunnels)");
  EXPECT_EQ(error_of(R"(["stats"])"), "request must be a JSON object like {\"cmd\":\"stats\"}");
  EXPECT_NE(error_of("stats please").find("request is not JSON"), std::string::npos);
  EXPECT_NE(error_of("").find("request is not JSON"), std::string::npos);
}

TEST_F(ControlRequests, OverTheSocketFromTheEngine) {
  const std::string name = unique_socket_name("engine");
  auto server = ControlServer::start(name);
  ASSERT_TRUE(server) << server.error().message;
  auto answer =
      std::async(std::launch::async, [&] { return control_request(name, R"({"cmd":"nope"})"); });
  while (answer.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    pollfd descriptor{(*server)->fd(), POLLIN, 0};
    (void)::poll(&descriptor, 1, 1);
    (*server)->poll_st(*engine_, kStartNs);
  }
  auto result = answer.get();
  ASSERT_TRUE(result) << result.error().message;
  EXPECT_EQ(
      *result,
      R"json({"error":"unknown cmd \"nope\" (use stats, prometheus, config, tunnels, apply, add_tunnel, modify_tunnel, remove_tunnel or reload)"})json");
}

}  // namespace
}  // namespace detwan::dataplane::gw

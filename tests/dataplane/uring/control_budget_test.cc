// The control channel's budget (issue 31, item 8): one poll answers at most
// max_answers_per_poll requests and writes at most max_write_bytes_per_poll bytes; a client uid
// gets at most client_requests_per_s answers per second after a burst on the read-only socket;
// what waits is counted, answered later (or "busy" at its deadline), never lost. Polled by the
// test thread in virtual time, clients are raw sockets whose requests are all sent before the
// poll: every count is exact.
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "dataplane/gw/control_server.h"
#include "tests/dataplane/uring/uring_test_util.h"

namespace detwan::dataplane::gw {
namespace {

using uring::testing::unique_socket_name;

constexpr int64_t kMs = 1'000'000;

common::UniqueFd connect_and_ask(const std::string& abstract_name, const std::string& request) {
  common::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string name = abstract_name.substr(1);
  std::memcpy(address.sun_path + 1, name.data(), name.size());
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), length), 0);
  const std::string line = request + "\n";
  EXPECT_EQ(::send(fd.get(), line.data(), line.size(), 0), static_cast<ssize_t>(line.size()));
  return fd;
}

// What has arrived on `fd` so far, without waiting.
std::string available(int fd) {
  std::string out;
  char buffer[65536];
  for (;;) {
    const ssize_t got = ::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
    if (got <= 0) return out;
    out.append(buffer, static_cast<size_t>(got));
  }
}

struct Budgeted {
  explicit Budgeted(const std::string& tag, ControlServerOptions options = {}) {
    name = unique_socket_name(tag);
    auto started = ControlServer::start(name, options);
    EXPECT_TRUE(started) << started.error().message;
    if (started) server = std::move(*started);
  }
  // Serves one poll at now_ns; the responder counts its calls.
  void poll(int64_t now_ns) {
    server->poll_st(now_ns, [this](std::string_view request) {
      ++answered;
      return "answer to " + std::string(request);
    });
  }
  std::string name;
  std::unique_ptr<ControlServer> server;
  int answered = 0;
};

TEST(ControlBudget, OnePollAnswersOneRequestTheOthersWait) {
  Budgeted b("budget-poll");
  std::vector<common::UniqueFd> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(connect_and_ask(b.name, "q" + std::to_string(i)));
  b.poll(0);
  EXPECT_EQ(b.answered, 1);
  EXPECT_EQ(b.server->deferred(), 3u);  // counted once per request, however long it waits
  b.poll(0);
  b.poll(0);
  EXPECT_EQ(b.answered, 3);
  EXPECT_EQ(b.server->deferred(), 3u);
  b.poll(0);
  EXPECT_EQ(b.answered, 4);
  EXPECT_FALSE(b.server->has_connections());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(available(clients[i].get()), "answer to q" + std::to_string(i) + "\n");  // in order
  }
  EXPECT_EQ(b.server->rate_limited(), 0u);
}

TEST(ControlBudget, AClientUidGetsItsRateThenWaitsItsTurn) {
  ControlServerOptions options;
  options.max_answers_per_poll = 8;  // only the rate limits here
  options.client_requests_per_s = 10;
  options.client_burst = 2;
  Budgeted b("budget-rate", options);
  std::vector<common::UniqueFd> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(connect_and_ask(b.name, "q"));
  b.poll(0);
  EXPECT_EQ(b.answered, 2);  // the burst
  EXPECT_EQ(b.server->rate_limited(), 2u);
  b.poll(99 * kMs);
  EXPECT_EQ(b.answered, 2);  // one answer per 100 ms after the burst
  b.poll(100 * kMs);
  EXPECT_EQ(b.answered, 3);
  b.poll(200 * kMs);
  EXPECT_EQ(b.answered, 4);
  EXPECT_EQ(b.server->rate_limited(), 2u);
  EXPECT_EQ(b.server->deferred(), 0u);
  for (auto& client : clients) EXPECT_EQ(available(client.get()), "answer to q\n");
}

TEST(ControlBudget, AHeldRequestIsToldBusyAtItsDeadline) {
  ControlServerOptions options;
  options.max_answers_per_poll = 8;
  options.client_requests_per_s = 1;
  options.client_burst = 1;
  Budgeted b("budget-busy", options);
  std::vector<common::UniqueFd> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(connect_and_ask(b.name, "q"));
  b.poll(0);
  EXPECT_EQ(b.answered, 1);
  // At the deadline (2 s after accept) the second has its turn (1/s), the third does not.
  b.poll(ControlServer::kRequestTimeoutNs + kMs);
  EXPECT_EQ(b.answered, 2);
  EXPECT_EQ(available(clients[1].get()), "answer to q\n");
  EXPECT_EQ(available(clients[2].get()),
            "{\"error\":\"busy: the control socket's budget is spent (1 requests/s per uid, one "
            "answer per poll); try again\"}\n");
  EXPECT_FALSE(b.server->has_connections());
}

TEST(ControlBudget, TheAdminSocketHasNoRateButTheSameBudget) {
  char pattern[] = "/tmp/detwan-budget-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const std::string path = std::string(pattern) + "/admin.sock";
  ControlServerOptions options;
  options.admin = true;
  options.max_answers_per_poll = 64;
  options.client_requests_per_s = 1;  // ignored on the admin socket
  options.client_burst = 1;
  auto server = ControlServer::start(path, options);
  ASSERT_TRUE(server) << server.error().message;
  std::vector<common::UniqueFd> clients;
  for (int i = 0; i < 5; ++i) {
    common::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    ASSERT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    ASSERT_EQ(::send(fd.get(), "q\n", 2, 0), 2);
    clients.push_back(std::move(fd));
  }
  int answered = 0;
  (*server)->poll_st(0, [&](std::string_view) {
    ++answered;
    return std::string("ok");
  });
  EXPECT_EQ(answered, 5);
  EXPECT_EQ((*server)->rate_limited(), 0u);
  server->reset();
  ::rmdir(pattern);
}

TEST(ControlBudget, ALargeAnswerIsWrittenAtMostTheByteBudgetPerPoll) {
  ControlServerOptions options;
  options.max_write_bytes_per_poll = 64 * 1024;
  const std::string name = unique_socket_name("budget-bytes");
  auto server = ControlServer::start(name, options);
  ASSERT_TRUE(server) << server.error().message;
  common::UniqueFd client = connect_and_ask(name, "big");
  const std::string big(1 << 20, 'x');
  const auto respond = [&](std::string_view) { return big; };
  std::string received;
  int polls = 0;
  while ((*server)->has_connections() || polls == 0) {
    (*server)->poll_st(0, respond);
    ++polls;
    const std::string got = available(client.get());
    EXPECT_LE(got.size(), options.max_write_bytes_per_poll) << "poll " << polls;
    received += got;
    ASSERT_LT(polls, 1000);
  }
  received += available(client.get());
  EXPECT_EQ(received, big + "\n");
  EXPECT_GE(polls, 17);  // 1 MiB + 1 in 64 KiB steps
}

}  // namespace
}  // namespace detwan::dataplane::gw

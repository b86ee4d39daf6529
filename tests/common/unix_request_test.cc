// common/unix_request: one request line over a Unix stream socket, answered by a tiny server
// thread in the test (filesystem paths in a temporary directory, and abstract names).
#include "common/unix_request.h"

#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/unique_fd.h"

namespace detwan::common {
namespace {

// A listening Unix socket; serve() handles one connection on a thread with `behaviour`,
// which gets the connected fd and the request line it read.
class Server {
 public:
  explicit Server(const std::string& name) {
    fd_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    EXPECT_TRUE(fd_.valid());
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    const bool abstract = name.front() == '@';
    const std::string bytes = abstract ? name.substr(1) : name;
    std::memcpy(address.sun_path + (abstract ? 1 : 0), bytes.data(), bytes.size());
    const auto length = static_cast<socklen_t>(
        offsetof(sockaddr_un, sun_path) + (abstract ? 1 : 0) + bytes.size() + (abstract ? 0 : 1));
    EXPECT_EQ(::bind(fd_.get(), reinterpret_cast<const sockaddr*>(&address), length), 0)
        << std::strerror(errno);
    EXPECT_EQ(::listen(fd_.get(), 4), 0);
  }
  ~Server() {
    if (thread_.joinable()) thread_.join();
  }

  void serve(std::function<void(int fd, const std::string& request)> behaviour) {
    thread_ = std::thread([this, behaviour = std::move(behaviour)] {
      UniqueFd client(::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      ASSERT_TRUE(client.valid());
      std::string line;
      char c = 0;
      while (::recv(client.get(), &c, 1, 0) == 1) {
        line += c;
        if (c == '\n') break;
      }
      request_ = line;
      behaviour(client.get(), line);
    });
  }
  void join() { thread_.join(); }
  const std::string& request() const { return request_; }  // after join()

 private:
  UniqueFd fd_;
  std::thread thread_;
  std::string request_;
};

void send_all(int fd, const std::string& text) {
  size_t sent = 0;
  while (sent < text.size()) {
    const ssize_t n = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // the client gave up
    sent += static_cast<size_t>(n);
  }
}

// Waits until the client closes its end.
void wait_for_close(int fd) {
  char buffer[256];
  while (::recv(fd, buffer, sizeof buffer, 0) > 0) {
  }
}

class UnixRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/detwan-unix-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  std::string dir_;
};

TEST_F(UnixRequestTest, SendsALineAndReturnsTheAnswerWithoutItsLastNewline) {
  const std::string path = dir_ + "/gw.sock";
  Server server(path);
  server.serve([](int fd, const std::string&) { send_all(fd, "ok generation 7\nsecond line\n"); });
  const auto answer = unix_request(path, "status", 5000);
  server.join();
  ASSERT_TRUE(answer.has_value()) << answer.error().message;
  EXPECT_EQ(*answer, "ok generation 7\nsecond line");
  EXPECT_EQ(server.request(), "status\n");
}

TEST_F(UnixRequestTest, AbstractSocketsAndLargeAnswers) {
  const std::string name = "@detwan-unix-request-test-" + std::to_string(::getpid());
  Server server(name);
  const std::string big(1 << 20, 'x');
  server.serve([&](int fd, const std::string&) { send_all(fd, big); });
  const auto answer = unix_request(name, "dump", 5000);
  server.join();
  ASSERT_TRUE(answer.has_value()) << answer.error().message;
  EXPECT_EQ(answer->size(), big.size());
  EXPECT_EQ(*answer, big);
}

TEST_F(UnixRequestTest, NothingListening) {
  const std::string path = dir_ + "/absent.sock";
  const auto answer = unix_request(path, "status", 1000);
  ASSERT_FALSE(answer.has_value());
  EXPECT_EQ(answer.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(answer.error().message.find("nothing listens on " + path), std::string::npos)
      << answer.error().message;
}

TEST_F(UnixRequestTest, NoAnswerWithinTheTimeout) {
  const std::string path = dir_ + "/slow.sock";
  Server server(path);
  server.serve([](int fd, const std::string&) { wait_for_close(fd); });  // never answers
  const auto answer = unix_request(path, "status", 50);
  server.join();
  ASSERT_FALSE(answer.has_value());
  EXPECT_EQ(answer.error().code, ErrorCode::kTimeout);
  EXPECT_NE(answer.error().message.find("no answer from " + path + " within 50 ms"),
            std::string::npos)
      << answer.error().message;
}

TEST_F(UnixRequestTest, ClosedWithoutAnswering) {
  const std::string path = dir_ + "/mute.sock";
  Server server(path);
  server.serve([](int, const std::string&) {});  // closes at once
  const auto answer = unix_request(path, "status", 5000);
  server.join();
  ASSERT_FALSE(answer.has_value());
  EXPECT_EQ(answer.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(answer.error().message.find("closed the connection without answering"),
            std::string::npos)
      << answer.error().message;
}

TEST_F(UnixRequestTest, AnswerAboveTheLimit) {
  const std::string path = dir_ + "/chatty.sock";
  Server server(path);
  server.serve([](int fd, const std::string&) { send_all(fd, std::string(100, 'y')); });
  const auto answer = unix_request(path, "status", 5000, 10);
  server.join();
  ASSERT_FALSE(answer.has_value());
  EXPECT_EQ(answer.error().code, ErrorCode::kIo);
  EXPECT_NE(answer.error().message.find("exceeds 10 bytes"), std::string::npos)
      << answer.error().message;
}

TEST_F(UnixRequestTest, BadSocketNames) {
  for (const std::string& name : {std::string(), std::string("@"), std::string(200, 'x')}) {
    const auto answer = unix_request(name, "status", 100);
    ASSERT_FALSE(answer.has_value()) << "'" << name << "'";
    EXPECT_EQ(answer.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(answer.error().message.find("must be 1..107 characters"), std::string::npos)
        << answer.error().message;
  }
}

}  // namespace
}  // namespace detwan::common

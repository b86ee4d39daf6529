#pragma once
// A real etcd member for tests (Debian's etcd-server), on loopback in a temporary directory:
// started by the constructor, killed and removed by the destructor.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "control/store/etcd_client.h"

extern char** environ;

namespace detwan::control::store {

inline constexpr const char* kEtcd = "/usr/bin/etcd";

// A port nothing listens on right now (bound then closed: another process could take it, which
// the tests would see as a failure to start, never as a wrong answer).
inline uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// One etcd member on loopback; killed and its directory removed by the destructor.
class EtcdProcess {
 public:
  EtcdProcess() {
    dir_ = std::filesystem::temp_directory_path() /
           fmt::format("detwan-etcd-test-{}-{}", ::getpid(), counter_++);
    std::filesystem::create_directories(dir_);
    client_url_ = fmt::format("http://127.0.0.1:{}", free_port());
    const std::string peer_url = fmt::format("http://127.0.0.1:{}", free_port());
    std::vector<std::string> args = {kEtcd,
                                     "--name", "test",
                                     "--data-dir", (dir_ / "data").string(),
                                     "--listen-client-urls", client_url_,
                                     "--advertise-client-urls", client_url_,
                                     "--listen-peer-urls", peer_url,
                                     "--initial-advertise-peer-urls", peer_url,
                                     "--initial-cluster", "test=" + peer_url};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    // Its log to a file of the directory (nothing can block on a pipe).
    const std::string log = (dir_ / "log").string();
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    if (posix_spawn(&pid_, kEtcd, &actions, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
  }
  ~EtcdProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  [[nodiscard]] const std::string& url() const { return client_url_; }
  // Polls (bounded) until a range answers.
  bool ready() const {
    auto c = EtcdClient::create({client_url_}, 500);
    if (!c) return false;
    for (int i = 0; i < 200; ++i) {
      if ((*c)->range("ready?")) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

 private:
  static inline int counter_ = 0;
  std::filesystem::path dir_;
  std::string client_url_;
  pid_t pid_ = -1;
};

// A test with its own etcd member and a client of it; skipped, saying why, without etcd.
class EtcdFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kEtcd)) {
      GTEST_SKIP() << kEtcd << " is not installed (Debian package etcd-server; tools/install-deps)";
    }
    etcd_ = std::make_unique<EtcdProcess>();
    ASSERT_TRUE(etcd_->ready()) << "etcd did not start on " << etcd_->url();
    auto c = EtcdClient::create({etcd_->url()});
    ASSERT_TRUE(c) << c.error().message;
    client_ = std::shared_ptr<EtcdClient>(std::move(*c));
  }
  std::unique_ptr<EtcdProcess> etcd_;
  std::shared_ptr<EtcdClient> client_;
};

}  // namespace detwan::control::store

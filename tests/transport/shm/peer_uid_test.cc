// The shm backend admits only processes of this job's uid (SO_PEERCRED), whatever the
// endpoint's Security mode: a forked child that drops to the user "nobody" can neither connect
// to this process's listener nor serve a name this process connects to. Needs root (to change
// uid); skipped otherwise.
#include <cstddef>
#include <cstring>
#include <string>

#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "transport/shm/endpoint.h"

namespace detwan::transport::shm {
namespace {

constexpr int64_t kTimeoutNs = 5'000'000'000;

// The abstract address of a listener name (transport/shm/session.cc: "\0detwan-shm-<name>").
socklen_t address_of(const std::string& name, sockaddr_un& address) {
  std::memset(&address, 0, sizeof(address));
  address.sun_family = AF_UNIX;
  const std::string path = "detwan-shm-" + name;
  std::memcpy(address.sun_path + 1, path.data(), path.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + path.size());
}

uid_t nobody_uid() {
  const passwd* nobody = ::getpwnam("nobody");
  return nobody != nullptr ? nobody->pw_uid : 65534;
}

class ShmPeerUid : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a peer under another uid";
  }
};

TEST_F(ShmPeerUid, PeerOfAnotherUidIsRefusedAndCounted) {
  auto endpoint = make_endpoint(EndpointOptions{});
  ASSERT_TRUE(endpoint) << endpoint.error().message;
  auto name = (*endpoint)->listen("");
  ASSERT_TRUE(name) << name.error().message;
  sockaddr_un address{};
  const socklen_t length = address_of(*name, address);
  const uid_t nobody = nobody_uid();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Only async-signal-safe calls after fork in a threaded process.
    if (::setgid(nobody) != 0 || ::setuid(nobody) != 0) ::_exit(2);
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0 || ::connect(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0) {
      ::_exit(3);
    }
    char byte = 0;
    ::_exit(::read(fd, &byte, 1) == 0 ? 0 : 4);  // 0: the listener hung up without a word
  }
  auto accepted = (*endpoint)->accept(kTimeoutNs);
  ASSERT_FALSE(accepted) << "a peer of uid " << nobody << " was accepted";
  EXPECT_NE(accepted.error().message.find("uid " + std::to_string(nobody)), std::string::npos)
      << accepted.error().message;
  auto* counted = dynamic_cast<ShmEndpointBase*>(endpoint->get());
  ASSERT_NE(counted, nullptr);
  EXPECT_EQ(counted->refused_peers(), 1u);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
}

TEST_F(ShmPeerUid, ListenerOfAnotherUidIsRefused) {
  const std::string name = "uid-squatter-" + std::to_string(::getpid());
  sockaddr_un address{};
  const socklen_t length = address_of(name, address);
  const uid_t nobody = nobody_uid();
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::setgid(nobody) != 0 || ::setuid(nobody) != 0) ::_exit(2);
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0 || ::bind(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0 ||
        ::listen(fd, 4) != 0) {
      ::_exit(3);
    }
    (void)::write(ready[1], "r", 1);
    const int peer = ::accept(fd, nullptr, nullptr);
    char byte = 0;
    if (peer >= 0) (void)::read(peer, &byte, 1);  // until the client hangs up
    ::_exit(0);
  }
  ::close(ready[1]);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ::close(ready[0]);
  auto endpoint = make_endpoint(EndpointOptions{});
  ASSERT_TRUE(endpoint);
  auto connected = (*endpoint)->connect(name, ChannelOptions{}, kTimeoutNs);
  ASSERT_FALSE(connected) << "connected to a listener of uid " << nobody;
  EXPECT_NE(connected.error().message.find("uid " + std::to_string(nobody)), std::string::npos)
      << connected.error().message;
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
}

}  // namespace
}  // namespace detwan::transport::shm

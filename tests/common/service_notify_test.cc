// ServiceNotifier against a datagram socket standing in for systemd's NOTIFY_SOCKET: what it
// sends for ready/reloading/stopping, the watchdog's pings every half interval on the injected
// clock, and nothing at all without NOTIFY_SOCKET.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "common/service_notify.h"

namespace detwan::common {
namespace {

class FakeSystemd {
 public:
  FakeSystemd() {
    path_ = (std::filesystem::temp_directory_path() /
             ("detwan-notify-" + std::to_string(::getpid()))).string();
    ::unlink(path_.c_str());
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    path_.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ::setenv("NOTIFY_SOCKET", path_.c_str(), 1);
  }
  ~FakeSystemd() {
    ::unsetenv("NOTIFY_SOCKET");
    ::unsetenv("WATCHDOG_USEC");
    ::unsetenv("WATCHDOG_PID");
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  // The next notification, or "" when none is waiting.
  std::string next() {
    char buf[512];
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  }

 private:
  std::string path_;
  int fd_ = -1;
};

TEST(ServiceNotifier, TellsTheServiceManagerItsStates) {
  FakeSystemd systemd;
  ServiceNotifier notifier;
  ASSERT_TRUE(notifier.active());
  EXPECT_EQ(notifier.watchdog_interval_ns(), 0);
  notifier.ready("serving on 127.0.0.1:7800");
  EXPECT_EQ(systemd.next(), "READY=1\nSTATUS=serving on 127.0.0.1:7800");
  notifier.reloading("");
  EXPECT_EQ(systemd.next(), "RELOADING=1");
  notifier.status("3 tunnels");
  EXPECT_EQ(systemd.next(), "STATUS=3 tunnels");
  notifier.stopping("SIGTERM");
  EXPECT_EQ(systemd.next(), "STOPPING=1\nSTATUS=SIGTERM");
  notifier.heartbeat(0);  // no watchdog asked for: nothing
  EXPECT_EQ(systemd.next(), "");
  EXPECT_EQ(notifier.sent(), 4u);
}

TEST(ServiceNotifier, PingsTheWatchdogEveryHalfInterval) {
  FakeSystemd systemd;
  ::setenv("WATCHDOG_USEC", "200000", 1);  // 200 ms
  ::setenv("WATCHDOG_PID", std::to_string(::getpid()).c_str(), 1);
  ServiceNotifier notifier;
  EXPECT_EQ(notifier.watchdog_interval_ns(), 200'000'000);
  const int64_t t0 = 5'000'000'000;
  notifier.heartbeat(t0);
  EXPECT_EQ(systemd.next(), "WATCHDOG=1");
  notifier.heartbeat(t0 + 99'000'000);  // not yet half the interval
  EXPECT_EQ(systemd.next(), "");
  notifier.heartbeat(t0 + 100'000'000);
  EXPECT_EQ(systemd.next(), "WATCHDOG=1");
}

TEST(ServiceNotifier, AWatchdogForAnotherProcessIsNotOurs) {
  FakeSystemd systemd;
  ::setenv("WATCHDOG_USEC", "200000", 1);
  ::setenv("WATCHDOG_PID", std::to_string(::getpid() + 1).c_str(), 1);
  ServiceNotifier notifier;
  EXPECT_EQ(notifier.watchdog_interval_ns(), 0);
}

TEST(ServiceNotifier, WithoutNotifySocketNothingIsSent) {
  ::unsetenv("NOTIFY_SOCKET");
  ServiceNotifier notifier;
  EXPECT_FALSE(notifier.active());
  notifier.ready("x");
  notifier.heartbeat(0);
  EXPECT_EQ(notifier.sent(), 0u);
}

}  // namespace
}  // namespace detwan::common

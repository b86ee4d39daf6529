#pragma once
// Tests that need a network of their own (TUN devices, changed MTUs, addresses): run the body on
// a thread in a fresh network namespace with its loopback up.
#include <cerrno>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "common/unique_fd.h"

namespace detwan::test_support {

// Runs `body` on a thread in a fresh network namespace (unshare(CLONE_NEWNET) applies to the
// calling thread only; threads it starts inherit it) with its loopback up. Returns why it could
// not, for GTEST_SKIP: creating a namespace needs CAP_NET_ADMIN (CI runs as root).
inline std::optional<std::string> in_private_netns(const std::function<void()>& body) {
  std::optional<std::string> failure;
  std::thread thread([&] {
    if (::unshare(CLONE_NEWNET) != 0) {
      failure = std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno) +
                " (this test needs CAP_NET_ADMIN; CI runs it as root)";
      return;
    }
    common::UniqueFd control(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    ifreq request{};
    std::strcpy(request.ifr_name, "lo");
    if (::ioctl(control.get(), SIOCGIFFLAGS, &request) == 0) {
      request.ifr_flags = static_cast<short>(request.ifr_flags | IFF_UP);
      ::ioctl(control.get(), SIOCSIFFLAGS, &request);
    }
    body();
  });
  thread.join();
  return failure;
}

}  // namespace detwan::test_support

// Variadic: a lambda's commas are not macro argument separators.
#define DETWAN_RUN_IN_NETNS(...)                                              \
  do {                                                                        \
    if (auto skipped = ::detwan::test_support::in_private_netns(__VA_ARGS__)) \
      GTEST_SKIP() << *skipped;                                               \
  } while (0)

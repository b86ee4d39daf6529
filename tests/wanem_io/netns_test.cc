// detwan-wanem end to end on real interfaces: three throwaway network namespaces (A, WAN, B),
// two veth pairs, the emulator in WAN between them. Needs root (skipped otherwise).
//
// Checks that hold on any machine, however loaded: frames cross in both directions, never
// earlier than the configured delay; run-time changes and link state take effect; a GSO
// super-frame (offloads left on at the sender) is dropped and counted as oversize instead of
// crashing the emulator; frames held longer than the receive ring takes to come round are
// copied out of it and still arrive intact and in order. No timing upper bound is asserted
// beyond "arrives within seconds". Each test runs with the receive rings (read in place, the
// default) and with recvmmsg (--rx-ring-frames 0).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json.hpp>

#include "common/unique_fd.h"
#include "tools/wanem/control.h"

namespace detwan::wanem {
namespace {

using common::UniqueFd;

constexpr int64_t kDelayNs = 5'000'000;
constexpr int kPort = 7311;

int64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec * 1'000'000'000LL + now.tv_nsec;
}

bool sh(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

// The parameter: --rx-ring-frames (0: recvmmsg).
class WanemNetns : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces)";
    if (!sh("command -v ip")) GTEST_SKIP() << "needs iproute2";
    const std::string tag = "wio" + std::to_string(::getpid());
    ns_a_ = tag + "a";
    ns_w_ = tag + "w";
    ns_b_ = tag + "b";
    socket_ = "/tmp/" + tag + ".sock";
    for (const std::string& ns : {ns_a_, ns_w_, ns_b_}) {
      ASSERT_TRUE(sh("ip netns add " + ns + " && ip -n " + ns + " link set dev lo up")) << ns;
    }
    ASSERT_TRUE(sh("ip link add xa netns " + ns_a_ + " type veth peer name wa netns " + ns_w_));
    ASSERT_TRUE(sh("ip link add xb netns " + ns_b_ + " type veth peer name wb netns " + ns_w_));
    ASSERT_TRUE(sh("ip -n " + ns_a_ + " addr add 10.78.0.1/24 dev xa"));
    ASSERT_TRUE(sh("ip -n " + ns_b_ + " addr add 10.78.0.2/24 dev xb"));
    for (const auto& [ns, dev] :
         {std::pair{ns_a_, "xa"}, {ns_b_, "xb"}, {ns_w_, "wa"}, {ns_w_, "wb"}}) {
      // Offloads stay on at A's end on purpose (GSO test); the checksum is completed by wanem.
      if (ns != ns_a_)
        sh("ip netns exec " + ns + " ethtool -K " + dev + " gro off gso off tso off");
      ASSERT_TRUE(sh("ip -n " + ns + " link set dev " + dev + " up"));
    }
    sh("ip netns exec " + ns_w_ + " sysctl -qw net.ipv6.conf.all.disable_ipv6=1");
    start_wanem("delay=5ms", GetParam());
  }

  void TearDown() override {
    stop_wanem();
    for (const std::string& ns : {ns_a_, ns_w_, ns_b_}) {
      if (!ns.empty()) sh("ip netns del " + ns);
    }
  }

  void stop_wanem() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < 100 && ::waitpid(pid_, &status, WNOHANG) == 0; ++i) ::usleep(50'000);
    if (::waitpid(pid_, &status, WNOHANG) == 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
    pid_ = -1;
  }

  void start_wanem(const std::string& spec, int ring_frames) {
    const std::string ring = std::to_string(ring_frames);
    pid_ = ::fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      const int null_fd = ::open("/dev/null", O_WRONLY);
      ::dup2(null_fd, STDOUT_FILENO);
      ::execlp("ip", "ip", "netns", "exec", ns_w_.c_str(), DETWAN_WANEM_BINARY, "run", "--iface-a",
               "wa", "--iface-b", "wb", "--spec", spec.c_str(), "--control", socket_.c_str(),
               "--rx-ring-frames", ring.c_str(), "--duration", "60", "--log-level", "warn",
               nullptr);
      ::_exit(127);
    }
    // Ready when the control socket answers (bounded: 10 s).
    for (int i = 0; i < 200; ++i) {
      if (control_request(socket_, R"({"cmd":"stats"})", 1000)) return;
      ::usleep(50'000);
    }
    FAIL() << "detwan-wanem did not come up";
  }

  // A socket created inside namespace `ns` (it stays there after the thread switches back).
  static UniqueFd socket_in(const std::string& ns, int type) {
    UniqueFd self(::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
    UniqueFd target(::open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC));
    if (!self.valid() || !target.valid() || ::setns(target.get(), CLONE_NEWNET) != 0) return {};
    UniqueFd fd(::socket(AF_INET, type | SOCK_CLOEXEC, 0));
    if (::setns(self.get(), CLONE_NEWNET) != 0) std::abort();  // would corrupt the test process
    return fd;
  }

  boost::json::object stats() {
    auto answer = control_request(socket_, R"({"cmd":"stats"})");
    EXPECT_TRUE(answer.has_value());
    return boost::json::parse(answer.value_or("{}")).as_object().at("stats").as_object();
  }

  // One UDP round trip A -> B -> A; returns its duration in ns, or -1 if nothing came back
  // within timeout_ms.
  int64_t round_trip(int a, int b, int timeout_ms) {
    sockaddr_in to_b{};
    to_b.sin_family = AF_INET;
    to_b.sin_port = htons(kPort);
    inet_pton(AF_INET, "10.78.0.2", &to_b.sin_addr);
    const int64_t start = monotonic_ns();
    const char ping[] = "ping";
    if (::sendto(a, ping, sizeof ping, 0, reinterpret_cast<sockaddr*>(&to_b), sizeof to_b) < 0) {
      return -1;
    }
    char buffer[64];
    sockaddr_in from{};
    socklen_t from_len = sizeof from;
    pollfd pb{b, POLLIN, 0};
    if (::poll(&pb, 1, timeout_ms) != 1) return -1;
    const ssize_t got =
        ::recvfrom(b, buffer, sizeof buffer, 0, reinterpret_cast<sockaddr*>(&from), &from_len);
    if (got <= 0 || ::sendto(b, buffer, static_cast<size_t>(got), 0,
                             reinterpret_cast<sockaddr*>(&from), from_len) < 0) {
      return -1;
    }
    pollfd pa{a, POLLIN, 0};
    if (::poll(&pa, 1, timeout_ms) != 1) return -1;
    if (::recv(a, buffer, sizeof buffer, 0) <= 0) return -1;
    return monotonic_ns() - start;
  }

  std::string ns_a_, ns_w_, ns_b_, socket_;
  pid_t pid_ = -1;
};

TEST_P(WanemNetns, FramesCrossBothWaysNeverBeforeTheDelay) {
  UniqueFd a = socket_in(ns_a_, SOCK_DGRAM);
  UniqueFd b = socket_in(ns_b_, SOCK_DGRAM);
  ASSERT_TRUE(a.valid() && b.valid());
  sockaddr_in bind_b{};
  bind_b.sin_family = AF_INET;
  bind_b.sin_port = htons(kPort);
  ASSERT_EQ(::bind(b.get(), reinterpret_cast<sockaddr*>(&bind_b), sizeof bind_b), 0);

  std::vector<int64_t> rtts;
  for (int i = 0; i < 20; ++i) {
    const int64_t rtt = round_trip(a.get(), b.get(), 3000);
    ASSERT_GT(rtt, 0) << "round trip " << i << " lost";
    rtts.push_back(rtt);
  }
  std::sort(rtts.begin(), rtts.end());
  EXPECT_GE(rtts.front(), 2 * kDelayNs);  // the emulator never releases early
  std::printf("[ info ] UDP RTT through delay=5ms each way: min %.3f ms, median %.3f ms\n",
              rtts.front() / 1e6, rtts[rtts.size() / 2] / 1e6);

  // Run-time change: more delay in one direction only.
  ASSERT_TRUE(control_request(socket_, R"({"cmd":"set","dir":"ab","tokens":"delay=15ms"})"));
  const int64_t slower = round_trip(a.get(), b.get(), 3000);
  EXPECT_GE(slower, 20'000'000);

  // Link down: nothing crosses; up again: traffic resumes.
  ASSERT_TRUE(control_request(socket_, R"({"cmd":"link","dir":"both","up":false})"));
  EXPECT_EQ(round_trip(a.get(), b.get(), 300), -1);
  char drain[64];
  while (::recv(b.get(), drain, sizeof drain, MSG_DONTWAIT) > 0) {
  }
  ASSERT_TRUE(control_request(socket_, R"({"cmd":"link","dir":"both","up":true})"));
  EXPECT_GT(round_trip(a.get(), b.get(), 3000), 0);

  const auto s = stats();
  EXPECT_GE(s.at("port").at("a").at("rx_packets").as_int64(), 22);
  EXPECT_GE(s.at("port").at("b").at("tx_packets").as_int64(), 21);
  EXPECT_GE(s.at("ab").at("best_effort").at("dropped").at("link_down").as_int64(), 1);
}

TEST_P(WanemNetns, GsoSuperFramesAreDroppedAndCountedNotFatal) {
  if (!sh("ip netns exec " + ns_a_ + " ethtool -K xa gso on tso on")) {
    GTEST_SKIP() << "cannot turn TSO on for the veth (ethtool missing?)";
  }
  UniqueFd listener = socket_in(ns_b_, SOCK_STREAM);
  UniqueFd client = socket_in(ns_a_, SOCK_STREAM);
  ASSERT_TRUE(listener.valid() && client.valid());
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(kPort);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(listener.get(), 1), 0);
  inet_pton(AF_INET, "10.78.0.2", &address.sin_addr);
  timeval timeout{5, 0};
  ::setsockopt(client.get(), SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  ASSERT_EQ(::connect(client.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  // Large writes become GSO super-frames at A's veth; the emulator cannot forward them.
  const std::vector<char> chunk(256 * 1024, 'x');
  (void)::send(client.get(), chunk.data(), chunk.size(), MSG_DONTWAIT);
  uint64_t oversize = 0;
  for (int i = 0; i < 60 && oversize == 0; ++i) {
    ::usleep(50'000);
    oversize = static_cast<uint64_t>(stats().at("port").at("drops").at("oversize").as_int64());
  }
  EXPECT_GT(oversize, 0U);
  EXPECT_EQ(::waitpid(pid_, nullptr, WNOHANG), 0) << "detwan-wanem died";
}

// 2,000 datagrams through a 50 ms delay, 10 per millisecond: up to 500 frames held at once,
// more than a 256-slot receive ring has. The frames the kernel is about to need slots for are
// copied out of the ring (rx_spilled); every datagram still arrives intact (A's veth leaves the
// UDP checksum to offload: the emulator completes it in the ring slot) and in order. With
// recvmmsg nothing is read in place.
TEST_P(WanemNetns, FramesHeldLongerThanTheRingLapArriveIntactAndInOrder) {
  stop_wanem();
  start_wanem("delay=50ms", GetParam() == 0 ? 0 : 256);
  UniqueFd a = socket_in(ns_a_, SOCK_DGRAM);
  UniqueFd b = socket_in(ns_b_, SOCK_DGRAM);
  ASSERT_TRUE(a.valid() && b.valid());
  const int buffer_bytes = 8 << 20;
  ::setsockopt(b.get(), SOL_SOCKET, SO_RCVBUFFORCE, &buffer_bytes, sizeof buffer_bytes);
  sockaddr_in to_b{};
  to_b.sin_family = AF_INET;
  to_b.sin_port = htons(kPort);
  ASSERT_EQ(::bind(b.get(), reinterpret_cast<sockaddr*>(&to_b), sizeof to_b), 0);
  inet_pton(AF_INET, "10.78.0.2", &to_b.sin_addr);
  // One round trip first: both ends resolve ARP (the kernel would drop most of a burst queued
  // behind an unresolved neighbour).
  ASSERT_GT(round_trip(a.get(), b.get(), 3000), 0);
  constexpr uint32_t kDatagrams = 2000;
  auto payload = [](uint32_t i) {
    std::vector<uint8_t> bytes(1000);
    for (size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<uint8_t>(i * 31 + k * 7);
    std::memcpy(bytes.data(), &i, sizeof i);
    return bytes;
  };
  for (uint32_t i = 0; i < kDatagrams; ++i) {
    const auto bytes = payload(i);
    ASSERT_EQ(::sendto(a.get(), bytes.data(), bytes.size(), 0, reinterpret_cast<sockaddr*>(&to_b),
                       sizeof to_b),
              static_cast<ssize_t>(bytes.size()));
    if (i % 20 == 19) ::usleep(2'000);
  }
  uint32_t next = 0;
  std::vector<uint8_t> got(2000);
  while (next < kDatagrams) {
    pollfd pb{b.get(), POLLIN, 0};
    if (::poll(&pb, 1, 5000) != 1) break;
    const ssize_t n = ::recv(b.get(), got.data(), got.size(), 0);
    ASSERT_EQ(n, 1000) << "datagram " << next;
    got.resize(1000);
    ASSERT_EQ(got, payload(next)) << "datagram " << next << " changed or out of order";
    got.resize(2000);
    ++next;
  }
  EXPECT_EQ(next, kDatagrams) << "datagrams lost";
  const auto port = stats().at("port").as_object();
  if (GetParam() == 0) {
    EXPECT_EQ(port.at("rx_in_place").as_int64(), 0);
  } else {
    EXPECT_GE(port.at("rx_in_place").as_int64(), static_cast<int64_t>(kDatagrams));
    EXPECT_GT(port.at("rx_spilled").as_int64(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(RxPaths, WanemNetns, ::testing::Values(4096, 0),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 0 ? std::string("recvmmsg")
                                                  : std::string("rx_ring");
                         });

}  // namespace
}  // namespace detwan::wanem

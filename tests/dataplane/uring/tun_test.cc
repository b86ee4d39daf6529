// The TUN device: creation, MTU, link state, routes installed and removed, packets both ways,
// and the errors. Needs CAP_NET_ADMIN: each test runs in a private network namespace of its own
// thread (testing::in_private_netns), and is skipped, saying so, where that is not allowed.
#include "dataplane/gw/tun.h"

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/unique_fd.h"
#include "tests/dataplane/uring/uring_test_util.h"

namespace detwan::dataplane::gw {
namespace {

#define RUN_IN_NETNS DETWAN_RUN_IN_NETNS

Prefix prefix(const char* text) {
  auto parsed = parse_prefix(text);
  EXPECT_TRUE(parsed) << text;
  return parsed.value_or(Prefix{});
}

TunConfig tun_config(const std::string& name, std::vector<Prefix> routes = {}) {
  TunConfig config;
  config.name = name;
  config.mtu_bytes = 1400;
  config.routes = std::move(routes);
  return config;
}

// Routes of this thread's namespace through `device`, as "address/length" strings.
std::vector<std::string> routes_via(const std::string& device) {
  std::vector<std::string> out;
  std::ifstream v4("/proc/thread-self/net/route");
  std::string line;
  std::getline(v4, line);  // header
  while (std::getline(v4, line)) {
    std::istringstream fields(line);
    std::string iface, destination, gateway, flags, refcnt, use, metric, mask;
    fields >> iface >> destination >> gateway >> flags >> refcnt >> use >> metric >> mask;
    if (iface != device) continue;
    const uint32_t address = std::stoul(destination, nullptr, 16);  // network order, as stored
    const uint32_t netmask = std::stoul(mask, nullptr, 16);
    char text[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &address, text, sizeof text);
    out.push_back(std::string(text) + "/" + std::to_string(__builtin_popcount(netmask)));
  }
  std::ifstream v6("/proc/thread-self/net/ipv6_route");
  while (std::getline(v6, line)) {
    std::istringstream fields(line);
    std::string destination, length, source, source_length, next_hop, metric, refcnt, use, flags,
        iface;
    fields >> destination >> length >> source >> source_length >> next_hop >> metric >> refcnt >>
        use >> flags >> iface;
    if (iface != device || destination.rfind("fe80", 0) == 0 || destination.rfind("ff00", 0) == 0) {
      continue;  // the kernel's own link-local and multicast routes
    }
    uint8_t bytes[16];
    for (int i = 0; i < 16; ++i)
      bytes[i] = static_cast<uint8_t>(std::stoul(destination.substr(2 * i, 2), nullptr, 16));
    char text[INET6_ADDRSTRLEN];
    ::inet_ntop(AF_INET6, bytes, text, sizeof text);
    out.push_back(std::string(text) + "/" + std::to_string(std::stoul(length, nullptr, 16)));
  }
  return out;
}

ifreq interface_request(const std::string& name) {
  ifreq request{};
  std::memcpy(request.ifr_name, name.data(), name.size());
  return request;
}

uint16_t checksum(const uint8_t* data, size_t size) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < size; i += 2) sum += static_cast<uint32_t>(data[i] << 8 | data[i + 1]);
  if (size % 2 != 0) sum += static_cast<uint32_t>(data[size - 1] << 8);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

TEST(TunDevice, NameTooLongIsRefusedBeforeTouchingTheKernel) {
  auto device = TunDevice::open(tun_config("a-name-far-too-long"));
  ASSERT_FALSE(device);
  EXPECT_EQ(device.error().code, common::ErrorCode::kInvalidArgument);
  EXPECT_EQ(device.error().message,
            "TUN device 'a-name-far-too-long': name must be 1..15 characters");
}

TEST(TunDevice, CreatesTheDeviceWithMtuLinkUpAndRoutesThenRemovesThem) {
  RUN_IN_NETNS([] {
    auto opened = TunDevice::open(tun_config(
        "dtwt0", {prefix("10.20.2.0/24"), prefix("10.30.0.0/16"), prefix("fd00:20::/64")}));
    ASSERT_TRUE(opened) << opened.error().message;
    TunDevice device = std::move(*opened);
    EXPECT_EQ(device.name(), "dtwt0");
    EXPECT_GE(device.fd(), 0);
    EXPECT_EQ(device.if_index(), static_cast<int>(::if_nametoindex("dtwt0")));
    EXPECT_EQ(device.routes().size(), 3u);

    common::UniqueFd probe(::socket(AF_INET, SOCK_DGRAM, 0));
    ifreq request = interface_request("dtwt0");
    ASSERT_EQ(::ioctl(probe.get(), SIOCGIFMTU, &request), 0);
    EXPECT_EQ(request.ifr_mtu, 1400);
    ASSERT_EQ(::ioctl(probe.get(), SIOCGIFTXQLEN, &request), 0);
    EXPECT_EQ(request.ifr_qlen, 4096);  // tun.queue's default, not the kernel's 500
    ASSERT_EQ(::ioctl(probe.get(), SIOCGIFFLAGS, &request), 0);
    EXPECT_NE(request.ifr_flags & IFF_UP, 0);

    std::vector<std::string> routes = routes_via("dtwt0");
    std::sort(routes.begin(), routes.end());
    EXPECT_EQ(routes, (std::vector<std::string>{"10.20.2.0/24", "10.30.0.0/16", "fd00:20::/64"}));

    // Non-blocking: once what the kernel sent by itself (IPv6 router solicitations, MLD) is
    // read, nothing is queued -> EAGAIN, never a hang.
    char buffer[2048];
    ssize_t got = 0;
    for (int i = 0; i < 100 && got >= 0; ++i) got = ::read(device.fd(), buffer, sizeof buffer);
    EXPECT_EQ(got, -1);
    EXPECT_EQ(errno, EAGAIN);

    device.close();
    EXPECT_FALSE(device.is_open());
    EXPECT_EQ(::if_nametoindex("dtwt0"), 0u);
    EXPECT_TRUE(routes_via("dtwt0").empty());
  });
}

TEST(TunDevice, HostBitsOfARouteAreCleared) {
  RUN_IN_NETNS([] {
    Prefix with_host_bits = prefix("10.20.2.0/24");  // parse_prefix refuses host bits
    with_host_bits.address[3] = 77;
    auto device = TunDevice::open(tun_config("dtwt1", {with_host_bits}));
    ASSERT_TRUE(device) << device.error().message;
    EXPECT_EQ(routes_via("dtwt1"), std::vector<std::string>{"10.20.2.0/24"});
  });
}

TEST(TunDevice, MovedFromDeviceDoesNotRemoveTheRoutes) {
  RUN_IN_NETNS([] {
    auto opened = TunDevice::open(tun_config("dtwt2", {prefix("10.40.0.0/16")}));
    ASSERT_TRUE(opened) << opened.error().message;
    std::optional<TunDevice> kept;
    {
      TunDevice moved = std::move(*opened);
      kept.emplace(std::move(moved));
    }  // `moved` (empty) destroyed here
    EXPECT_EQ(routes_via("dtwt2"), std::vector<std::string>{"10.40.0.0/16"});
    kept.reset();
    EXPECT_TRUE(routes_via("dtwt2").empty());
  });
}

TEST(TunDevice, RouteErrorsNameTheDeviceAndLeaveNothingBehind) {
  RUN_IN_NETNS([] {
    auto twice =
        TunDevice::open(tun_config("dtwt3", {prefix("10.50.0.0/16"), prefix("10.50.0.0/16")}));
    ASSERT_FALSE(twice);
    EXPECT_EQ(twice.error().code, common::ErrorCode::kIo);
    EXPECT_EQ(twice.error().message, "TUN device 'dtwt3': add route 10.50.0.0/16: File exists");
    EXPECT_EQ(::if_nametoindex("dtwt3"), 0u);
    EXPECT_TRUE(routes_via("dtwt3").empty());
  });
}

TEST(TunDevice, IPv6RouteOnASmallMtuSaysWhy) {
  RUN_IN_NETNS([] {
    TunConfig config = tun_config("dtwt4", {prefix("fd00:44::/64")});
    config.mtu_bytes = 1200;
    auto device = TunDevice::open(config);
    ASSERT_FALSE(device);
    EXPECT_NE(device.error().message.find(
                  "TUN device 'dtwt4': add route fd00:44::/64 (IPv6 needs an MTU of at least 1280, "
                  "the device has 1200)"),
              std::string::npos)
        << device.error().message;
  });
}

TEST(TunDevice, SameNameTwiceIsBusy) {
  RUN_IN_NETNS([] {
    auto first = TunDevice::open(tun_config("dtwt5"));
    ASSERT_TRUE(first) << first.error().message;
    auto second = TunDevice::open(tun_config("dtwt5"));
    ASSERT_FALSE(second);
    EXPECT_EQ(second.error().message, "TUN device 'dtwt5': TUNSETIFF: Device or resource busy");
  });
}

TEST(TunDevice, CarriesPacketsBothWays) {
  RUN_IN_NETNS([] {
    auto opened = TunDevice::open(tun_config("dtwt6", {prefix("10.20.2.0/24")}));
    ASSERT_TRUE(opened) << opened.error().message;
    TunDevice& device = *opened;
    // The host's own address on the device, so the stack has a source for the route.
    common::UniqueFd control(::socket(AF_INET, SOCK_DGRAM, 0));
    ifreq request = interface_request("dtwt6");
    auto* address = reinterpret_cast<sockaddr_in*>(&request.ifr_addr);
    address->sin_family = AF_INET;
    ::inet_pton(AF_INET, "10.77.0.1", &address->sin_addr);
    ASSERT_EQ(::ioctl(control.get(), SIOCSIFADDR, &request), 0) << std::strerror(errno);

    // Host -> device: a datagram to 10.20.2.5 comes out of the TUN fd as one IPv4 packet.
    common::UniqueFd sender(::socket(AF_INET, SOCK_DGRAM, 0));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(9999);
    ::inet_pton(AF_INET, "10.20.2.5", &to.sin_addr);
    ASSERT_EQ(::sendto(sender.get(), "ping", 4, 0, reinterpret_cast<sockaddr*>(&to), sizeof to), 4)
        << std::strerror(errno);
    std::array<uint8_t, 2048> packet{};
    ssize_t got = 0;
    do {  // skipping what the kernel sends on its own (IPv6 router solicitations, MLD)
      pollfd readable{device.fd(), POLLIN, 0};
      ASSERT_EQ(::poll(&readable, 1, 10'000), 1);
      got = ::read(device.fd(), packet.data(), packet.size());
      ASSERT_GT(got, 0);
    } while (packet[0] >> 4 == 6);
    ASSERT_EQ(got, 20 + 8 + 4);  // IFF_NO_PI: the IP packet alone
    EXPECT_EQ(packet[0] >> 4, 4);
    EXPECT_EQ(packet[9], IPPROTO_UDP);
    EXPECT_EQ(std::memcmp(&packet[16], &to.sin_addr, 4), 0);
    EXPECT_EQ(std::memcmp(&packet[28], "ping", 4), 0);

    // Device -> host: a UDP packet written to the fd reaches a socket on 10.77.0.1.
    common::UniqueFd receiver(::socket(AF_INET, SOCK_DGRAM, 0));
    sockaddr_in local{};
    local.sin_family = AF_INET;
    local.sin_port = htons(7777);
    ::inet_pton(AF_INET, "10.77.0.1", &local.sin_addr);
    ASSERT_EQ(::bind(receiver.get(), reinterpret_cast<sockaddr*>(&local), sizeof local), 0);
    std::array<uint8_t, 32> reply{};
    reply[0] = 0x45;
    reply[3] = 32;  // total length
    reply[8] = 64;  // TTL
    reply[9] = IPPROTO_UDP;
    ::inet_pton(AF_INET, "10.20.2.5", &reply[12]);
    std::memcpy(&reply[16], &local.sin_addr, 4);
    const uint16_t header_sum = checksum(reply.data(), 20);
    reply[10] = static_cast<uint8_t>(header_sum >> 8);
    reply[11] = static_cast<uint8_t>(header_sum);
    reply[20] = 0x27;
    reply[21] = 0x0F;  // source port 9999
    reply[22] = 0x1E;
    reply[23] = 0x61;  // destination port 7777
    reply[25] = 12;    // UDP length; checksum 0 = none (IPv4)
    std::memcpy(&reply[28], "pong", 4);
    ASSERT_EQ(::write(device.fd(), reply.data(), reply.size()), 32) << std::strerror(errno);
    char received[16] = {};
    pollfd incoming{receiver.get(), POLLIN, 0};
    ASSERT_EQ(::poll(&incoming, 1, 10'000), 1);
    ASSERT_EQ(::recv(receiver.get(), received, sizeof received, 0), 4);
    EXPECT_EQ(std::string(received, 4), "pong");
  });
}

}  // namespace
}  // namespace detwan::dataplane::gw

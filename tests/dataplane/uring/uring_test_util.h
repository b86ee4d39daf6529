#pragma once
// Helpers of the uring backend, control socket and daemon tests: gateway configurations built in
// code on 127.0.0.1, unique control socket names, UDP sockets of the test itself.
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/unique_fd.h"
#include "dataplane/gw/config.h"
#include "dataplane/wire/header.h"
#include "tests/common/private_netns.h"

namespace detwan::dataplane::uring::testing {

inline constexpr int64_t kMs = 1'000'000;

using ::detwan::test_support::in_private_netns;  // and DETWAN_RUN_IN_NETNS (private_netns.h)

// "@detwan-test-<pid>-<tag>-<n>": abstract, so nothing is left on disk, and unique per process.
inline std::string unique_socket_name(const std::string& tag) {
  static std::atomic<int> counter{0};
  return "@detwan-test-" + std::to_string(::getpid()) + "-" + tag + "-" +
         std::to_string(counter.fetch_add(1));
}

inline gw::Endpoint loopback(uint16_t port) {
  gw::Endpoint endpoint;
  endpoint.address[0] = 127;
  endpoint.address[3] = 1;
  endpoint.port = port;
  return endpoint;
}

inline gw::Endpoint loopback6(uint16_t port) {
  gw::Endpoint endpoint;
  endpoint.ipv6 = true;
  endpoint.address[15] = 1;
  endpoint.port = port;
  return endpoint;
}

// One side of a two-gateway setup: WAN port "wan1" on `local`, peer `peer_name` at
// `peer_endpoint`, tunnel 7 owning slots [0, owned_slots) of 100 in a 1 ms cycle at 1 Gbit/s
// (reserved `rate_bps`), no TUN. The service endpoints are set by the caller.
// All 100 slots (the default) make one endless window: no frame can miss its slot however late
// a loaded machine runs the loop, so every datagram must arrive. With fewer, a frame whose
// departure the loop reaches too late is dropped and counted (missed_slot), by design.
inline gw::GatewayConfig site_config(const std::string& name, const std::string& peer_name,
                                     const gw::Endpoint& local, const gw::Endpoint& peer_endpoint,
                                     uint64_t rate_bps = 100'000'000, uint32_t owned_slots = 100) {
  gw::GatewayConfig config;
  config.source = "<test>";
  config.name = name;
  config.buffer_count = 1024;
  config.batch = 16;
  config.tun.enabled = false;
  gw::WanPortConfig port;
  port.name = "wan1";
  port.local = local;
  port.line_rate_bps = 1'000'000'000;
  port.best_effort_dscp = 10;
  config.wan_ports.push_back(port);
  gw::PeerConfig peer;
  peer.name = peer_name;
  peer.wan_port = "wan1";
  peer.endpoint = peer_endpoint;
  peer.clock_offset_ns = 0;  // one machine, one clock
  peer.time_exchange_interval_ns = 100 * kMs;
  peer.keepalive_interval_ns = 20 * kMs;
  config.peers.push_back(peer);
  gw::TunnelConfig tunnel;
  tunnel.id = 7;
  tunnel.peer = peer_name;
  tunnel.rate_bps = rate_bps;
  for (uint32_t slot = 0; slot < owned_slots; ++slot) tunnel.slots.push_back(slot);
  tunnel.dscp = 46;
  config.tunnels.push_back(tunnel);
  return config;
}

// A UDP socket bound to `address`:`port` (IPv4), for a host application behind the TUN device.
// Fails the test naming the errno otherwise (call under ASSERT_NO_FATAL_FAILURE).
inline void bind_udp_v4(const char* address, uint16_t port, common::UniqueFd* socket) {
  *socket = common::UniqueFd(::socket(AF_INET, SOCK_DGRAM, 0));
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_port = htons(port);
  ASSERT_EQ(::inet_pton(AF_INET, address, &local.sin_addr), 1) << address;
  ASSERT_EQ(::bind(socket->get(), reinterpret_cast<sockaddr*>(&local), sizeof local), 0)
      << address << ":" << port << ": " << std::strerror(errno);
}

// Gives interface `device` the IPv4 address `address` (the host's own address on a TUN device:
// the source of what it routes there). Fails the test naming the errno otherwise.
inline void set_ipv4_address(const char* device, const char* address) {
  common::UniqueFd control(::socket(AF_INET, SOCK_DGRAM, 0));
  ifreq request{};
  std::strncpy(request.ifr_name, device, IFNAMSIZ - 1);
  auto* in = reinterpret_cast<sockaddr_in*>(&request.ifr_addr);
  in->sin_family = AF_INET;
  ASSERT_EQ(::inet_pton(AF_INET, address, &in->sin_addr), 1) << address;
  ASSERT_EQ(::ioctl(control.get(), SIOCSIFADDR, &request), 0)
      << device << ": " << std::strerror(errno);
}

// A UDP socket of the test bound to 127.0.0.1 (or ::1) port 0.
struct TestSocket {
  common::UniqueFd fd;
  gw::Endpoint local;

  static TestSocket open(bool ipv6 = false) {
    TestSocket socket;
    socket.fd.reset(::socket(ipv6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_storage address{};
    socklen_t length = 0;
    if (ipv6) {
      auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
      v6->sin6_family = AF_INET6;
      v6->sin6_addr = in6addr_loopback;
      length = sizeof *v6;
    } else {
      auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
      v4->sin_family = AF_INET;
      v4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      length = sizeof *v4;
    }
    if (::bind(socket.fd.get(), reinterpret_cast<sockaddr*>(&address), length) != 0) return socket;
    length = sizeof address;
    ::getsockname(socket.fd.get(), reinterpret_cast<sockaddr*>(&address), &length);
    socket.local = ipv6 ? loopback6(ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port))
                        : loopback(ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port));
    return socket;
  }

  bool send_to(const gw::Endpoint& to, const void* data, size_t size) const {
    sockaddr_storage address{};
    socklen_t length = 0;
    if (to.ipv6) {
      auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
      v6->sin6_family = AF_INET6;
      std::memcpy(&v6->sin6_addr, to.address, 16);
      v6->sin6_port = htons(to.port);
      length = sizeof *v6;
    } else {
      auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
      v4->sin_family = AF_INET;
      std::memcpy(&v4->sin_addr, to.address, 4);
      v4->sin_port = htons(to.port);
      length = sizeof *v4;
    }
    return ::sendto(fd.get(), data, size, 0, reinterpret_cast<sockaddr*>(&address), length) ==
           static_cast<ssize_t>(size);
  }

  // One datagram, waiting at most timeout_ms (a bound for a broken gateway, not a timing
  // assertion); nullopt if none came.
  std::optional<std::vector<std::byte>> receive(int timeout_ms = 10'000) const {
    pollfd descriptor{fd.get(), POLLIN, 0};
    if (::poll(&descriptor, 1, timeout_ms) <= 0) return std::nullopt;
    std::vector<std::byte> data(65536);
    const ssize_t got = ::recv(fd.get(), data.data(), data.size(), 0);
    if (got < 0) return std::nullopt;
    data.resize(static_cast<size_t>(got));
    return data;
  }
};

inline uint16_t ip_checksum(const uint8_t* data, size_t size) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < size; i += 2) sum += static_cast<uint32_t>(data[i] << 8 | data[i + 1]);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// An IPv4/UDP packet (UDP checksum 0: none) from `source` to `destination`.
inline std::vector<std::byte> ipv4_udp(const char* source, const char* destination,
                                       uint16_t source_port, uint16_t destination_port,
                                       std::string_view data) {
  std::vector<std::byte> packet(28 + data.size());
  auto* p = reinterpret_cast<uint8_t*>(packet.data());
  p[0] = 0x45;
  p[2] = static_cast<uint8_t>(packet.size() >> 8);
  p[3] = static_cast<uint8_t>(packet.size());
  p[8] = 64;
  p[9] = IPPROTO_UDP;
  ::inet_pton(AF_INET, source, p + 12);
  ::inet_pton(AF_INET, destination, p + 16);
  const uint16_t sum = ip_checksum(p, 20);
  p[10] = static_cast<uint8_t>(sum >> 8);
  p[11] = static_cast<uint8_t>(sum);
  p[20] = static_cast<uint8_t>(source_port >> 8);
  p[21] = static_cast<uint8_t>(source_port);
  p[22] = static_cast<uint8_t>(destination_port >> 8);
  p[23] = static_cast<uint8_t>(destination_port);
  p[24] = static_cast<uint8_t>((8 + data.size()) >> 8);
  p[25] = static_cast<uint8_t>(8 + data.size());
  std::memcpy(p + 28, data.data(), data.size());
  return packet;
}

// A tunnel frame as a peer sends it: the header (type, tunnel id, payload length, sent now by
// CLOCK_TAI), then `inner`.
inline std::vector<std::byte> tunnel_frame(uint32_t tunnel_id, wire::DataType type,
                                           const std::vector<std::byte>& inner) {
  timespec now{};
  clock_gettime(CLOCK_TAI, &now);
  wire::TunnelHeader header;
  header.type = static_cast<uint8_t>(type);
  header.tunnel_id = tunnel_id;
  header.payload_length = static_cast<uint16_t>(inner.size());
  header.tx_time_ns = static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
  std::vector<std::byte> outer(wire::kHeaderSize);
  EXPECT_EQ(wire::encode(header, outer).status, wire::EncodeStatus::kOk);
  outer.insert(outer.end(), inner.begin(), inner.end());
  return outer;
}

}  // namespace detwan::dataplane::uring::testing

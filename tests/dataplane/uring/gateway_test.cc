// End to end through the io_uring backend: two gateways (engines + uring::Gateway, configured in
// code) run by Gateway::run on two threads of this process, WAN and service ports on loopback,
// port 0 everywhere. Assertions are about counts and bytes, never about how fast anything was.
#include "dataplane/uring/gateway.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <time.h>

#include <boost/json.hpp>

#include "dataplane/gw/control_server.h"
#include "dataplane/gw/engine.h"
#include "dataplane/wire/header.h"
#include "tests/dataplane/uring/uring_site.h"
#include "tests/dataplane/uring/uring_test_util.h"

namespace detwan::dataplane::uring {
namespace {

using testing::counter;
using testing::ipv4_udp;
using testing::loopback;
using testing::loopback6;
using testing::Site;
using testing::tai_now_ns;
using testing::TestSocket;
using Bytes = std::vector<std::byte>;

Bytes random_payload(std::mt19937& random, size_t size, uint32_t index) {
  Bytes data(size);
  for (auto& b : data) b = static_cast<std::byte>(random());
  std::memcpy(data.data(), &index, std::min<size_t>(4, size));
  return data;
}

// A gateway pair joined by tunnel 7: datagrams sent to A's service port come out of B's
// service_deliver endpoint, which is `app`.
struct Pair {
  TestSocket app = TestSocket::open();
  std::unique_ptr<Site> a;
  std::unique_ptr<Site> b;

  explicit Pair(bool ipv6_wan = false, gw::TimingMode timing_b = gw::TimingMode::kLowCpu) {
    const gw::Endpoint any = ipv6_wan ? loopback6(0) : loopback(0);
    gw::GatewayConfig config_a = testing::site_config("site-a", "site-b", any, any, 400'000'000);
    gw::GatewayConfig config_b = testing::site_config("site-b", "site-a", any, any, 400'000'000);
    config_a.tunnels[0].service_listen = loopback(0);
    config_a.tunnels[0].burst_bytes = 4 << 20;  // the tests send in bursts
    config_b.tunnels[0].service_deliver = app.local;
    config_b.timing = timing_b;
    a = std::make_unique<Site>(config_a);
    b = std::make_unique<Site>(config_b);
    if (!a->opened() || !b->opened()) return;
    a->config().peers[0].endpoint = b->wan();
    b->config().peers[0].endpoint = a->wan();
    a->start();
    b->start();
  }
  [[nodiscard]] bool ok() const { return a->opened() && b->opened(); }

  // Sends `payloads` to A's service port in bursts of 16 and returns what the app received.
  std::vector<Bytes> carry(const std::vector<Bytes>& payloads) const {
    TestSocket sender = TestSocket::open();
    std::vector<Bytes> received;
    for (size_t i = 0; i < payloads.size(); i += 16) {
      const size_t end = std::min(payloads.size(), i + 16);
      for (size_t j = i; j < end; ++j) {
        EXPECT_TRUE(sender.send_to(*a->service(), payloads[j].data(), payloads[j].size()));
      }
      for (size_t j = i; j < end; ++j) {
        auto datagram = app.receive();
        if (!datagram) return received;  // lost: the caller's comparison says which
        received.push_back(std::move(*datagram));
      }
    }
    return received;
  }
};

TEST(UringGateway, ServiceDatagramsCrossTheTunnelWithoutTheirHeader) {
  Pair pair;
  ASSERT_TRUE(pair.ok());
  std::mt19937 random(7);
  std::vector<Bytes> payloads;
  for (uint32_t i = 0; i < 256; ++i) {
    payloads.push_back(random_payload(random, 1 + random() % 1400, i));
  }
  payloads.push_back(random_payload(random, 1432, 256));  // the WAN port's largest payload
  const std::vector<Bytes> received = pair.carry(payloads);
  ASSERT_EQ(received.size(), payloads.size()) << "A: " << boost::json::serialize(pair.a->stats())
                                              << "\nB: " << boost::json::serialize(pair.b->stats());
  std::vector<Bytes> sorted_sent = payloads;
  std::vector<Bytes> sorted_received = received;
  std::sort(sorted_sent.begin(), sorted_sent.end());
  std::sort(sorted_received.begin(), sorted_received.end());
  EXPECT_EQ(sorted_received, sorted_sent);  // byte for byte: no tunnel header, nothing else

  const auto n = static_cast<int64_t>(payloads.size());
  const auto a = pair.a->stats_when([&](const auto& s) {
    return counter(s, {"ports", "0", "io", "tx_packets"}) >= n;
  });
  EXPECT_EQ(counter(a, {"local", "service_rx_packets"}), n);
  EXPECT_EQ(counter(a, {"tunnels", "0", "tx", "sent_on_time_packets"}), n);
  EXPECT_GE(counter(a, {"ports", "0", "io", "tx_packets"}), n);  // + control packets
  EXPECT_EQ(counter(a, {"ports", "0", "io", "tx_errors"}), 0);
  const auto b = pair.b->stats_when([&](const auto& s) {
    return counter(s, {"local", "service_tx_packets"}) >= n;
  });
  EXPECT_EQ(counter(b, {"local", "service_tx_packets"}), n);
  EXPECT_EQ(counter(b, {"tunnels", "0", "rx", "accepted_on_time_packets"}), n);
  EXPECT_EQ(counter(b, {"ports", "0", "io", "rx_errors"}), 0);
  EXPECT_EQ(counter(b, {"local", "service_tx_errors"}), 0);
}

TEST(UringGateway, MalformedWanDatagramsAreCountedWhileGoodTrafficContinues) {
  Pair pair;
  ASSERT_TRUE(pair.ok());
  TestSocket attacker = TestSocket::open();
  const gw::Endpoint target = pair.b->wan();
  ASSERT_TRUE(attacker.send_to(target, "x", 1));  // too_short
  const Bytes zeros(64);
  ASSERT_TRUE(attacker.send_to(target, zeros.data(), zeros.size()));  // bad_magic
  wire::TunnelHeader header;
  header.tunnel_id = 99;
  header.payload_length = 4;
  Bytes unknown(wire::kHeaderSize + 4);
  ASSERT_EQ(wire::encode(header, unknown).status, wire::EncodeStatus::kOk);
  ASSERT_TRUE(attacker.send_to(target, unknown.data(), unknown.size()));  // unknown tunnel
  header.tunnel_id = 7;
  Bytes spoofed(wire::kHeaderSize + 4);
  ASSERT_EQ(wire::encode(header, spoofed).status, wire::EncodeStatus::kOk);
  ASSERT_TRUE(attacker.send_to(target, spoofed.data(), spoofed.size()));  // not from the peer
  Bytes truncated = spoofed;
  truncated.resize(wire::kHeaderSize + 2);  // length_mismatch
  ASSERT_TRUE(attacker.send_to(target, truncated.data(), truncated.size()));

  std::mt19937 random(11);
  std::vector<Bytes> payloads;
  for (uint32_t i = 0; i < 64; ++i) payloads.push_back(random_payload(random, 200, i));
  EXPECT_EQ(pair.carry(payloads).size(), payloads.size());

  const auto b = pair.b->stats_when([](const auto& s) {
    return counter(s, {"drops", "wrong_peer"}) >= 1 &&
           counter(s, {"ports", "0", "rx_drops", "length_mismatch"}) >= 1;
  });
  EXPECT_EQ(counter(b, {"ports", "0", "rx_drops", "too_short"}), 1);
  EXPECT_EQ(counter(b, {"ports", "0", "rx_drops", "bad_magic"}), 1);
  EXPECT_EQ(counter(b, {"ports", "0", "rx_drops", "length_mismatch"}), 1);
  EXPECT_EQ(counter(b, {"drops", "unknown_tunnel"}), 1);
  EXPECT_EQ(counter(b, {"drops", "wrong_peer"}), 1);
  EXPECT_EQ(counter(b, {"tunnels", "0", "rx", "accepted_on_time_packets"}), 64);
}

TEST(UringGateway, OversizedServiceDatagramIsDroppedAsTooBig) {
  Pair pair;
  ASSERT_TRUE(pair.ok());
  TestSocket sender = TestSocket::open();
  const Bytes too_big(1433, std::byte{1});  // max payload of a 1500-byte IPv4 port is 1432
  ASSERT_TRUE(sender.send_to(*pair.a->service(), too_big.data(), too_big.size()));
  const Bytes fits(1432, std::byte{2});
  ASSERT_TRUE(sender.send_to(*pair.a->service(), fits.data(), fits.size()));
  auto received = pair.app.receive();
  ASSERT_TRUE(received);
  EXPECT_EQ(*received, fits);
  const auto a = pair.a->stats();
  EXPECT_EQ(counter(a, {"drops", "too_big"}), 1);
  EXPECT_EQ(counter(a, {"local", "service_rx_packets"}), 2);
}

TEST(UringGateway, Ipv6WanPortsAndBusyTiming) {
  Pair pair(/*ipv6_wan=*/true, gw::TimingMode::kBusy);
  ASSERT_TRUE(pair.ok());
  EXPECT_TRUE(pair.a->wan().ipv6);
  EXPECT_NE(pair.a->wan().port, 0);
  std::mt19937 random(13);
  std::vector<Bytes> payloads;
  for (uint32_t i = 0; i < 64; ++i)
    payloads.push_back(random_payload(random, 1 + random() % 1412, i));
  const std::vector<Bytes> received = pair.carry(payloads);
  ASSERT_EQ(received.size(), payloads.size());
  std::vector<Bytes> sorted_sent = payloads;
  std::vector<Bytes> sorted_received = received;
  std::sort(sorted_sent.begin(), sorted_sent.end());
  std::sort(sorted_received.begin(), sorted_received.end());
  EXPECT_EQ(sorted_received, sorted_sent);
}

// What gateway A puts on the wire, seen by a plain socket standing in for its peer: the tunnel
// header in front of the payload, and the DSCP of the tunnel (46) for frames in its slots, the
// port's best-effort DSCP (10) and flag B for frames the policer downgraded.
// IPv4 carries the DSCP in IP_TOS, IPv6 in IPV6_TCLASS: one test each.
class UringGatewayDscp : public ::testing::TestWithParam<bool> {};

TEST_P(UringGatewayDscp, FramesCarryTheHeaderAndTheirDscp) {
  const bool ipv6 = GetParam();
  TestSocket peer = TestSocket::open(ipv6);
  const int on = 1;
  ASSERT_EQ(ipv6 ? ::setsockopt(peer.fd.get(), IPPROTO_IPV6, IPV6_RECVTCLASS, &on, sizeof on)
                 : ::setsockopt(peer.fd.get(), IPPROTO_IP, IP_RECVTOS, &on, sizeof on),
            0);
  // Tunnel 7 owns slots 0-49, best effort 50-99, of a 100 ms cycle: windows of 50 ms.
  gw::GatewayConfig config = testing::site_config(
      "site-a", "site-b", ipv6 ? loopback6(0) : loopback(0), peer.local, 100'000, 50);
  config.wan_ports[0].cycle_ns = 100 * testing::kMs;
  config.tunnels[0].service_listen = loopback(0);
  config.tunnels[0].burst_bytes = 3000;  // three 1000-byte datagrams, then downgraded
  config.tunnels[0].over_rate = sched::OverRateAction::kBestEffort;
  Site a(config);
  ASSERT_TRUE(a.opened());
  a.start();
  TestSocket sender = TestSocket::open();
  constexpr int kCount = 10;
  for (int i = 0; i < kCount; ++i) {
    const Bytes payload(1000, static_cast<std::byte>(i));
    ASSERT_TRUE(sender.send_to(*a.service(), payload.data(), payload.size()));
  }
  int on_time = 0, best_effort = 0;
  std::vector<uint64_t> sequences;
  // A frame the loop reaches after its window closed is dropped and counted (missed_slot):
  // wait for the rest only while it can still come.
  auto missed = [&] { return counter(a.stats(), {"tunnels", "0", "tx", "missed_slot_packets"}); };
  while (on_time + best_effort < kCount) {
    std::byte buffer[2048];
    alignas(cmsghdr) unsigned char control[64];
    iovec vector{buffer, sizeof buffer};
    msghdr message{};
    message.msg_iov = &vector;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    pollfd readable{peer.fd.get(), POLLIN, 0};
    if (::poll(&readable, 1, 1'000) != 1) {
      if (on_time + best_effort + missed() == kCount) break;
      ASSERT_EQ(::poll(&readable, 1, 10'000), 1)
          << on_time << " on time, " << best_effort << " best effort so far";
    }
    const ssize_t got = ::recvmsg(peer.fd.get(), &message, 0);
    ASSERT_GT(got, 0);
    int tos = -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
      if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) tos = *CMSG_DATA(c);
      if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS) {
        std::memcpy(&tos, CMSG_DATA(c), sizeof tos);
      }
    }
    const auto decoded = wire::decode({buffer, static_cast<size_t>(got)});
    ASSERT_TRUE(decoded);
    if (decoded->header.is_control()) {
      EXPECT_EQ(tos >> 2, 46);  // control packets travel in the tunnel's slots
      continue;
    }
    EXPECT_EQ(decoded->header.tunnel_id, 7u);
    EXPECT_EQ(decoded->header.data_type(), wire::DataType::kDatagram);
    ASSERT_EQ(decoded->payload.size(), 1000u);
    sequences.push_back(decoded->header.sequence);
    if (decoded->header.is_best_effort()) {
      ++best_effort;
      EXPECT_EQ(tos >> 2, 10);
    } else {
      ++on_time;
      EXPECT_EQ(tos >> 2, 46);
    }
  }
  EXPECT_EQ(on_time + best_effort + missed(), kCount);
  EXPECT_GE(on_time, 1);
  EXPECT_GE(best_effort, 1);
  // Sequence numbers are given at departure, to sent frames only: 0, 1, 2, ... without a gap.
  std::sort(sequences.begin(), sequences.end());
  for (size_t i = 0; i < sequences.size(); ++i) EXPECT_EQ(sequences[i], i);
}

INSTANTIATE_TEST_SUITE_P(IpVersions, UringGatewayDscp, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Ipv6" : "Ipv4"; });

// The TUN side through the ring, in a private network namespace: a host datagram routed into
// the gateway's TUN device leaves as a tunnel frame of type ipv4 carrying the whole IP packet; a
// tunnel frame of type ipv4 from the peer is written to the TUN device and reaches a host socket.
// A plain socket stands in for the peer gateway.
TEST(UringGateway, TunPacketsCrossTheTunnel) {
  DETWAN_RUN_IN_NETNS([] {
    TestSocket peer = TestSocket::open();
    gw::GatewayConfig config = testing::site_config("site-a", "site-b", loopback(0), peer.local);
    config.tun.enabled = true;
    config.tun.name = "dtwg0";
    auto route = gw::parse_prefix("10.20.2.0/24");
    ASSERT_TRUE(route);
    config.tun.routes = {*route};
    config.tunnels[0].dst_prefixes = {*route};
    Site a(config);
    ASSERT_TRUE(a.opened());
    testing::set_ipv4_address("dtwg0", "10.77.0.1");
    a.start();

    // Host -> TUN -> tunnel 7 -> the peer.
    common::UniqueFd host(::socket(AF_INET, SOCK_DGRAM, 0));
    sockaddr_in remote{};
    remote.sin_family = AF_INET;
    remote.sin_port = htons(9999);
    ::inet_pton(AF_INET, "10.20.2.5", &remote.sin_addr);
    ASSERT_EQ(
        ::sendto(host.get(), "ping", 4, 0, reinterpret_cast<sockaddr*>(&remote), sizeof remote), 4);
    std::optional<wire::PacketView> frame;
    std::optional<Bytes> datagram;
    do {  // skipping the control packets (keepalives, time requests)
      datagram = peer.receive();
      ASSERT_TRUE(datagram) << "nothing from the gateway";
      const auto decoded = wire::decode(*datagram);
      ASSERT_TRUE(decoded);
      if (decoded->header.is_data()) frame = *decoded;
    } while (!frame);
    EXPECT_EQ(frame->header.tunnel_id, 7u);
    EXPECT_EQ(frame->header.data_type(), wire::DataType::kIpv4);
    ASSERT_EQ(frame->payload.size(), 32u);  // IPv4 + UDP + "ping"
    const auto* ip = reinterpret_cast<const uint8_t*>(frame->payload.data());
    EXPECT_EQ(ip[0], 0x45);
    EXPECT_EQ(std::memcmp(ip + 16, &remote.sin_addr, 4), 0);
    EXPECT_EQ(std::memcmp(ip + 28, "ping", 4), 0);

    // The peer -> tunnel 7 -> TUN -> a host socket on 10.77.0.1:7777.
    common::UniqueFd listener;
    ASSERT_NO_FATAL_FAILURE(testing::bind_udp_v4("10.77.0.1", 7777, &listener));
    const Bytes outer = testing::tunnel_frame(
        7, wire::DataType::kIpv4, ipv4_udp("10.20.2.5", "10.77.0.1", 9999, 7777, "pong"));
    ASSERT_TRUE(peer.send_to(a.wan(), outer.data(), outer.size()));
    char received[16] = {};
    pollfd readable{listener.get(), POLLIN, 0};
    ASSERT_EQ(::poll(&readable, 1, 10'000), 1);
    ASSERT_EQ(::recv(listener.get(), received, sizeof received, 0), 4);
    EXPECT_EQ(std::string(received, 4), "pong");

    const auto stats = a.stats_when([](const auto& s) {
      return counter(s, {"local", "tun_tx_packets"}) >= 1;
    });
    EXPECT_GE(counter(stats, {"local", "tun_rx_packets"}), 1);  // + what the kernel sent itself
    EXPECT_EQ(counter(stats, {"local", "tun_tx_packets"}), 1);
    EXPECT_EQ(counter(stats, {"local", "tun_tx_errors"}), 0);
    EXPECT_EQ(counter(stats, {"tunnels", "0", "tx", "sent_on_time_packets"}), 1);
  });
}

TEST(UringGateway, SetupErrorsNameWhatFailed) {
  gw::GatewayConfig config = testing::site_config("site-a", "site-b", loopback(0), loopback(1));
  config.wan_ports[0].local.address[0] = 192;  // 192.0.2.1 (TEST-NET-1): on no interface here
  config.wan_ports[0].local.address[1] = 0;
  config.wan_ports[0].local.address[2] = 2;
  auto unbindable = Gateway::open(config);
  ASSERT_FALSE(unbindable);
  EXPECT_EQ(unbindable.error().message,
            "WAN port 'wan1' (192.0.2.1:0): bind: Cannot assign requested address (no interface "
            "has this address)");

  config = testing::site_config("site-a", "site-b", loopback(0), loopback(1));
  config.buffer_count = 8;
  auto small = Gateway::open(config);
  ASSERT_FALSE(small);
  EXPECT_EQ(small.error().code, common::ErrorCode::kConfig);
  EXPECT_EQ(small.error().message,
            "buffer_count 8 is too small: the receives in flight alone hold 8 buffers; use at "
            "least 16");

  // The run configuration must describe what open() bound.
  config = testing::site_config("site-a", "site-b", loopback(0), loopback(1));
  auto gateway = Gateway::open(config);
  ASSERT_TRUE(gateway) << gateway.error().message;
  gw::GatewayConfig other = config;
  other.tunnels[0].service_listen = loopback(0);
  auto engine = gw::Engine::create(other, tai_now_ns());
  ASSERT_TRUE(engine) << engine.error().message;
  std::atomic<bool> stop{true};
  gw::RunContext context{**engine, other, nullptr, stop};
  auto outcome = (*gateway)->run(context);
  ASSERT_FALSE(outcome);
  EXPECT_EQ(outcome.error().message,
            "uring gateway: tunnel 7 differs between open and run (or the engine lacks it)");
}

// Local clients hammering the read-only control socket with `stats` (answered on the datapath
// thread) while traffic crosses: every packet still arrives, every request is answered (none
// refused), and the requests beyond the budget waited, counted in control.deferred and
// control.rate_limited. The hammer runs until the traffic has crossed and each thread made its
// requests, so both overlap whatever the machine's speed. No timing assertion.
TEST(UringGateway, AHammeredControlSocketDoesNotStopTheDatapath) {
  Pair pair;
  ASSERT_TRUE(pair.ok());
  constexpr int kThreads = 4;
  constexpr int kRequestsEach = 25;  // 100 in all: beyond the burst of 50 per uid
  std::atomic<bool> carried{false};
  std::atomic<int> answered{0}, failed{0};
  std::vector<std::thread> hammer;
  const auto began = std::chrono::steady_clock::now();
  for (int t = 0; t < kThreads; ++t) {
    hammer.emplace_back([&] {
      for (int i = 0; i < kRequestsEach || !carried.load(); ++i) {
        auto answer = gw::control_request(pair.a->control_name(), R"({"cmd":"stats"})", 10'000);
        if (answer && answer->find("\"tunnels\"") != std::string::npos) {
          ++answered;
        } else {
          ++failed;
        }
      }
    });
  }
  while (answered.load() < kThreads) std::this_thread::yield();  // the hammer is on
  std::mt19937 random(13);
  std::vector<Bytes> payloads;
  for (uint32_t i = 0; i < 512; ++i) payloads.push_back(random_payload(random, 600, i));
  const size_t received = pair.carry(payloads).size();
  carried.store(true);
  for (std::thread& t : hammer) t.join();
  const double elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  EXPECT_EQ(received, payloads.size());  // the datapath kept forwarding throughout
  EXPECT_EQ(failed.load(), 0);           // held requests are answered, not refused
  EXPECT_GE(answered.load(), kThreads * kRequestsEach);
  const auto a = pair.a->stats();
  EXPECT_EQ(counter(a, {"tunnels", "0", "tx", "sent_on_time_packets"}),
            static_cast<int64_t>(payloads.size()));
  // 100 requests of one uid cannot all fit its burst of 50 plus 50/s in less than a second
  // unless some waited: then the rate held some. A slower machine (a sanitizer build) may take
  // longer than that, when none needs to wait; the exact budget is control_server_test's, in
  // virtual time.
  if (elapsed_s < 0.9) {
    EXPECT_GE(counter(a, {"control", "rate_limited"}), 1) << elapsed_s;
  }
  EXPECT_GE(counter(a, {"control", "requests"}), answered.load());
}

// Deferred completion work needs Linux >= 6.1 (IORING_SETUP_DEFER_TASKRUN); without it the
// loop never sleeps blind (timing.h).
bool kernel_at_least(int major, int minor) {
  utsname name{};
  int have_major = 0;
  int have_minor = 0;
  return ::uname(&name) == 0 && std::sscanf(name.release, "%d.%d", &have_major, &have_minor) == 2 &&
         (have_major > major || (have_major == major && have_minor >= minor));
}

// A trickle (one datagram at a time, each waiting for the last to arrive) is a moderate rate:
// every datagram crosses intact, B's coalesced sleeps are taken outside the ring (blind: no
// arrival wakes them, the window's end does), and the loop's counters add up.
TEST(UringGateway, ATrickleIsCarriedByBlindCoalescedSleeps) {
  Pair pair;
  ASSERT_TRUE(pair.ok());
  std::mt19937 random(11);
  std::vector<Bytes> payloads;
  for (uint32_t i = 0; i < 64; ++i) payloads.push_back(random_payload(random, 200, i));
  TestSocket sender = TestSocket::open();
  std::vector<Bytes> received;
  for (const Bytes& payload : payloads) {
    ASSERT_TRUE(sender.send_to(*pair.a->service(), payload.data(), payload.size()));
    auto datagram = pair.app.receive();
    ASSERT_TRUE(datagram) << "datagram " << received.size() << " lost; B: "
                          << boost::json::serialize(pair.b->stats());
    received.push_back(std::move(*datagram));
  }
  EXPECT_EQ(received, payloads);  // one at a time: in order, byte for byte
  const auto b = pair.b->stats();
  const int64_t sleeps = counter(b, {"local", "loop_sleeps"});
  EXPECT_GT(sleeps, 0);
  EXPECT_EQ(counter(b, {"local", "loop_timer_wakeups"}) + counter(b, {"local", "loop_io_wakeups"}),
            sleeps);
  EXPECT_LE(counter(b, {"local", "loop_blind_sleeps"}),
            counter(b, {"local", "loop_coalesced_sleeps"}));
  EXPECT_LE(counter(b, {"local", "loop_coalesced_sleeps"}), sleeps);
  if (kernel_at_least(6, 1)) {
    EXPECT_GT(counter(b, {"local", "loop_blind_sleeps"}), 0) << boost::json::serialize(b);
  }
}

TEST(UringGateway, StopsWithoutAControlServer) {
  gw::GatewayConfig config = testing::site_config("site-a", "site-b", loopback(0), loopback(1));
  auto gateway = Gateway::open(config);
  ASSERT_TRUE(gateway) << gateway.error().message;
  auto engine = gw::Engine::create(config, tai_now_ns());
  ASSERT_TRUE(engine) << engine.error().message;
  std::atomic<bool> stop{false};
  gw::RunContext context{**engine, config, nullptr, stop};
  common::Result<void> outcome;
  std::thread loop([&] { outcome = (*gateway)->run(context); });
  stop.store(true);
  loop.join();  // returns: the loop wakes at least every 10 ms to look at the flag
  EXPECT_TRUE(outcome) << outcome.error().message;
  auto again = (*gateway)->run(context);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().message, "uring gateway: run() may be called once per open()");
}

}  // namespace
}  // namespace detwan::dataplane::uring

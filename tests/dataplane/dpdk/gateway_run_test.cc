// The DPDK gateway beyond the virtual-time datapath: UDP service sockets on loopback (port 0),
// the real busy loop (run_st) on two threads, the run() entry point, and setup errors that
// name what is wrong.
#include <chrono>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "common/clock.h"
#include "common/unique_fd.h"
#include "tests/dataplane/dpdk/gateway_pair.h"

namespace detwan::dataplane::dpdk::testing {
namespace {

common::UniqueFd loopback_socket(uint16_t* port) {
  common::UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  socklen_t length = sizeof(address);
  EXPECT_EQ(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length), 0);
  *port = ntohs(address.sin_port);
  return fd;
}

void send_to(int fd, uint16_t port, const std::string& text) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  ASSERT_EQ(::sendto(fd, text.data(), text.size(), 0, reinterpret_cast<sockaddr*>(&address),
                     sizeof(address)),
            static_cast<ssize_t>(text.size()));
}

std::vector<std::string> receive_all(int fd) {
  std::vector<std::string> got;
  char buffer[2048];
  for (;;) {
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n < 0) break;
    got.emplace_back(buffer, static_cast<std::size_t>(n));
  }
  return got;
}

class ServiceTest : public GatewayPairTest {
 protected:
  void customise(gw::GatewayConfig& a, gw::GatewayConfig& b) override {
    sink_ = loopback_socket(&sink_port_);
    a.tunnels[0].service_listen = endpoint("127.0.0.1:0");
    b.tunnels[0].service_deliver = endpoint(fmt::format("127.0.0.1:{}", sink_port_).c_str());
  }
  common::UniqueFd sink_;
  uint16_t sink_port_ = 0;
};

TEST_F(ServiceTest, DatagramsCrossTheTunnelToTheDeliverEndpoint) {
  open_gateways(false);
  const uint16_t listen_port = gateway_a_->service_port(engine_a_->tunnel_index(7));
  ASSERT_NE(listen_port, 0);
  uint16_t client_port = 0;
  const common::UniqueFd client = loopback_socket(&client_port);
  std::vector<std::string> sent;
  for (int i = 0; i < 5; ++i) {
    sent.push_back(fmt::format("datagram {} {}", i, std::string(static_cast<std::size_t>(i * 100), 'x')));
    send_to(client.get(), listen_port, sent.back());
  }
  step(600);
  EXPECT_EQ(receive_all(sink_.get()), sent);
  const auto stats_a = stats(*engine_a_, now_ns_);
  const auto stats_b = stats(*engine_b_, now_ns_);
  EXPECT_EQ(stats_a.at("local").at("service_rx_packets").to_number<uint64_t>(), 5u);
  EXPECT_EQ(stats_b.at("local").at("service_tx_packets").to_number<uint64_t>(), 5u);
  EXPECT_EQ(stats_b.at("local").at("service_tx_errors").to_number<uint64_t>(), 0u);
}

using RunLoopTest = GatewayPairTest;

// The real loop: both gateways busy-poll (timing low-cpu: idle sleeps) on their own threads
// with the TSC read as TAI, until the test has seen every packet or a generous deadline passes.
TEST_F(RunLoopTest, TwoThreadsForwardWithRealTime) {
  config_a_.timing = gw::TimingMode::kLowCpu;
  config_b_.timing = gw::TimingMode::kLowCpu;
  // Real time on a shared machine: a preempted loop may find a frame past its window and must
  // not send it (missed_slot, tested in virtual time). A tunnel owning every slot has one
  // endless window, so here every frame is sent and the test can expect all of them.
  for (gw::GatewayConfig* config : {&config_a_, &config_b_}) {
    config->tunnels[0].slots.clear();
    for (uint32_t slot = 0; slot < 100; ++slot) config->tunnels[0].slots.push_back(slot);
  }
  const int64_t start_ns = common::TaiClock().now_ns();
  now_ns_ = start_ns;
  auto engine_a = gw::Engine::create(config_a_, start_ns);
  auto engine_b = gw::Engine::create(config_b_, start_ns);
  ASSERT_TRUE(engine_a && engine_b);
  engine_a_ = std::move(*engine_a);
  engine_b_ = std::move(*engine_b);
  GatewayOptions options_a;
  options_a.local_port = LocalPortOptions{device("hostA"), kHostMacA, 256, 256};
  GatewayOptions options_b;
  options_b.local_port = LocalPortOptions{device("hostB"), kHostMacB, 256, 256};
  auto gateway_a = Gateway::open(*engine_a_, config_a_, options_a);
  auto gateway_b = Gateway::open(*engine_b_, config_b_, options_b);
  ASSERT_TRUE(gateway_a && gateway_b);
  gateway_a_ = std::move(*gateway_a);
  gateway_b_ = std::move(*gateway_b);

  std::atomic<bool> stop{false};
  std::thread thread_a([&] { gateway_a_->run_st(stop, nullptr); });
  std::thread thread_b([&] { gateway_b_->run_st(stop, nullptr); });
  constexpr unsigned kPackets = 200;
  for (uint32_t i = 0; i < kPackets; ++i) {
    inject(host_a_in_.get(),
           host_frame("10.20.1.5:5000", "10.20.2.9:6000", kHostMacA, 500, i));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (rte_ring_count(host_b_out_.get()) < kPackets &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  stop = true;
  thread_a.join();
  thread_b.join();
  const auto frames = drain(host_b_out_.get());
  ASSERT_EQ(frames.size(), kPackets) << gateway_a_->counters_json() << "\n"
                                     << engine_a_->stats_json(common::TaiClock().now_ns())
                                     << "\n" << gateway_b_->counters_json();
  for (uint32_t i = 0; i < kPackets; ++i) {
    const auto expected = host_frame("10.20.1.5:5000", "10.20.2.9:6000", kHostMacA, 500, i);
    EXPECT_TRUE(std::equal(frames[i].begin() + 14, frames[i].end(), expected.begin() + 14,
                           expected.end()))
        << i;
  }
  EXPECT_GT(counters(*gateway_a_).at("loop_iterations").to_number<uint64_t>(), 0u);
}

using RunEntryTest = GatewayPairTest;

TEST_F(RunEntryTest, RunOpensServesUntilStopAndCloses) {
  auto engine = gw::Engine::create(config_a_, kStartNs);
  ASSERT_TRUE(engine);
  std::atomic<bool> stop{true};  // stop at once: open, zero iterations, close
  gw::RunContext context{**engine, config_a_, nullptr, stop};
  const auto first = run(context);
  ASSERT_TRUE(first) << first.error().describe();
  // The device was closed: a second run reports it by name instead of crashing.
  const auto second = run(context);
  ASSERT_FALSE(second);
  EXPECT_NE(second.error().message.find(device("wanA")), std::string::npos)
      << second.error().message;
}

TEST_F(RunEntryTest, RunRejectsADisabledLcore) {
  auto engine = gw::Engine::create(config_b_, kStartNs);
  ASSERT_TRUE(engine);
  config_b_.dpdk.lcore = 7;  // the test EAL enables lcores 0 and 1
  std::atomic<bool> stop{true};
  gw::RunContext context{**engine, config_b_, nullptr, stop};
  const auto result = run(context);
  ASSERT_FALSE(result);
  EXPECT_NE(result.error().message.find("dpdk.lcore"), std::string::npos)
      << result.error().message;
}

TEST_F(RunEntryTest, OpenErrorsNameTheField) {
  auto engine = gw::Engine::create(config_a_, kStartNs);
  ASSERT_TRUE(engine);
  auto expect_error = [&](const gw::GatewayConfig& config, const std::string& needle,
                          const GatewayOptions& options = {}) {
    auto gateway = Gateway::open(**engine, config, options);
    ASSERT_FALSE(gateway) << needle;
    EXPECT_NE(gateway.error().message.find(needle), std::string::npos)
        << gateway.error().message;
  };
  gw::GatewayConfig config = config_a_;
  config.wan_ports[0].dpdk->next_hop_mac = "02:00:00:00:00";
  expect_error(config, "wan_ports[0] (wan0): field 'dpdk.next_hop_mac': '02:00:00:00:00'");
  config = config_a_;
  config.wan_ports[0].dpdk.reset();
  expect_error(config, "wan_ports[0] (wan0): the dpdk backend needs a 'dpdk' section");
  config = config_a_;
  config.wan_ports[0].dpdk->device = "net_nope0";
  expect_error(config, "no DPDK device 'net_nope0' (devices: ");
  config = config_a_;
  config.wan_ports[0].dpdk->local_mac = "zz:00:00:00:00:01";
  expect_error(config, "local_mac 'zz:00:00:00:00:01'");
  GatewayOptions options;
  options.local_port = LocalPortOptions{device("hostA"), "not-a-mac", 64, 64};
  expect_error(config_a_, "peer_mac 'not-a-mac'", options);
  config = config_a_;
  config.dpdk.mbuf_count = 1'000'000'000;
  expect_error(config, "field 'dpdk.mbufs'");
}

}  // namespace
}  // namespace detwan::dataplane::dpdk::testing

namespace detwan::dataplane::dpdk {
namespace {

// The low-cpu loop's idle sleep grows with the idle time (idle / 8) between its two limits, so
// an idle gateway wakes ~1,000 times a second instead of 20,000 and a busy one stays at 50 µs.
TEST(IdleSleepCap, GrowsWithIdleTimeBetweenTheLimits) {
  constexpr int64_t kMin = 50'000, kMax = 1'000'000;
  EXPECT_EQ(idle_sleep_cap_ns(0, kMin, kMax), kMin);
  EXPECT_EQ(idle_sleep_cap_ns(400'000, kMin, kMax), kMin);      // 0.4 ms idle: still 50 µs
  EXPECT_EQ(idle_sleep_cap_ns(800'000, kMin, kMax), 100'000);   // 0.8 ms: 100 µs
  EXPECT_EQ(idle_sleep_cap_ns(4'000'000, kMin, kMax), 500'000);
  EXPECT_EQ(idle_sleep_cap_ns(8'000'000, kMin, kMax), kMax);
  EXPECT_EQ(idle_sleep_cap_ns(INT64_MAX, kMin, kMax), kMax);
  // A maximum below the minimum (a misconfiguration) never shortens the minimum.
  EXPECT_EQ(idle_sleep_cap_ns(8'000'000, kMin, 10'000), kMin);
}

}  // namespace
}  // namespace detwan::dataplane::dpdk

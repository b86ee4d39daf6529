// Two DPDK gateways (net_ring devices, virtual time) changed at run time over their admin
// sockets: a tunnel added on both carries host traffic, tunnel 7 is undisturbed, and after its
// removal the new tunnel's traffic is refused again (no_route). The admin servers are polled by
// the stepping thread exactly as run_st() polls them, between two loop iterations.
#include <chrono>
#include <filesystem>
#include <future>
#include <string>

#include "dataplane/gw/control_server.h"
#include "tests/dataplane/dpdk/gateway_pair.h"

namespace detwan::dataplane::dpdk::testing {
namespace {

constexpr std::size_t kIpOffset = kEtherHeaderBytes;

uint64_t no_route(const gw::Engine& engine) { return engine.drops(gw::EngineDrop::kNoRoute); }

class RuntimeTest : public GatewayPairTest {
 protected:
  // A run-time change is checked with the configuration file's rules, which this in-code
  // configuration must then meet like a file would: backend dpdk needs EAL arguments (unused
  // here: the test's EAL runs already), and match rules need tun enabled (the local port takes
  // its place, as GatewayOptions::local_port says).
  void customise(gw::GatewayConfig& a, gw::GatewayConfig& b) override {
    for (gw::GatewayConfig* config : {&a, &b}) {
      config->tun.enabled = true;
      config->dpdk.eal_args = {"--no-huge"};
    }
  }
  void SetUp() override {
    GatewayPairTest::SetUp();
    if (IsSkipped()) return;
    directory_ = std::filesystem::temp_directory_path() /
                 ("detwan-dpdk-admin-" + std::to_string(::getpid()) + "-" + prefix_);
    std::filesystem::create_directories(directory_);
    open_gateways();
    gw::ControlServerOptions options;
    options.admin = true;
    options.max_request_bytes = gw::ControlServer::kMaxAdminRequestBytes;
    for (int i = 0; i < 2; ++i) {
      paths_[i] = (directory_ / (i == 0 ? "a.sock" : "b.sock")).string();
      auto server = gw::ControlServer::start(paths_[i], options);
      ASSERT_TRUE(server) << server.error().message;
      admin_[i] = std::move(*server);
    }
  }
  void TearDown() override {
    admin_[0].reset();
    admin_[1].reset();
    std::filesystem::remove_all(directory_);
    GatewayPairTest::TearDown();
  }

  // Sends `request` to gateway i's admin socket while both gateways keep running.
  boost::json::value ask(int i, const std::string& request) {
    auto answer = std::async(std::launch::async,
                             [&] { return gw::control_request(paths_[i], request, 10'000); });
    while (answer.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      step(1);
      admin_[0]->poll_st(*engine_a_, now_ns_);
      admin_[1]->poll_st(*engine_b_, now_ns_);
    }
    auto result = answer.get();
    EXPECT_TRUE(result) << result.error().message;
    return result ? boost::json::parse(*result) : boost::json::value();
  }

  // Host A sends `count` packets to `to`; how many host B received.
  std::size_t carry(const char* to, uint32_t count, uint32_t tag) {
    std::vector<std::vector<std::byte>> sent;
    for (uint32_t i = 0; i < count; ++i) {
      sent.push_back(host_frame("10.20.1.5:5000", to, kHostMacA, 200 + i, tag + i));
      inject(host_a_in_.get(), sent.back());
    }
    step(1000);  // 2 ms: two cycles, every frame finds its slots
    const auto received = drain(host_b_out_.get());
    std::size_t matched = 0;
    for (std::size_t i = 0; i < received.size() && i < sent.size(); ++i) {
      if (std::equal(received[i].begin() + kIpOffset, received[i].end(),
                     sent[i].begin() + kIpOffset, sent[i].end())) {
        ++matched;
      }
    }
    return received.size() == matched ? matched : 0;
  }

  std::filesystem::path directory_;
  std::string paths_[2];
  std::unique_ptr<gw::ControlServer> admin_[2];
};

TEST_F(RuntimeTest, TunnelAddedThenRemovedOverTheAdminSockets) {
  // Before: 10.20.5.0/24 has no tunnel at A; tunnel 7 (10.20.2.0/24) works.
  EXPECT_EQ(carry("10.20.5.9:6000", 3, 100), 0u);
  EXPECT_EQ(no_route(*engine_a_), 3u);
  EXPECT_EQ(carry("10.20.2.9:6000", 5, 200), 5u);

  const std::string add_a =
      R"({"cmd":"add_tunnel","tunnel":{"id":8,"peer":"b","auth":"none","rate":"100mbit","slots":"60-69",)"
      R"("match":{"dst":["10.20.5.0/24"]}}})";
  const std::string add_b =
      R"({"cmd":"add_tunnel","tunnel":{"id":8,"peer":"a","auth":"none","rate":"100mbit","slots":"60-69"}})";
  EXPECT_EQ(boost::json::serialize(ask(0, add_a)),
            R"({"ok":true,"generation":1,"added":[8],"modified":[],"removed":[]})");
  EXPECT_EQ(ask(1, add_b).at("generation").to_number<uint64_t>(), 1u);
  EXPECT_EQ(engine_a_->tunnel_index(8), 1u);

  EXPECT_EQ(carry("10.20.5.9:6000", 10, 300), 10u);
  EXPECT_EQ(carry("10.20.2.9:6000", 5, 400), 5u);  // 7 undisturbed
  const auto stats_a = stats(*engine_a_, now_ns_);
  EXPECT_EQ(stats_a.at("tunnels").as_array().size(), 2u);
  EXPECT_EQ(stats_a.at("tunnels").at(0).at("tx").at("sent_on_time_packets").to_number<uint64_t>(),
            10u);
  EXPECT_EQ(stats_a.at("tunnels").at(1).at("tx").at("sent_on_time_packets").to_number<uint64_t>(),
            10u);
  // Tunnel 8 has no service socket: its index is beyond the file's, looked up in bounds.
  EXPECT_EQ(gateway_a_->service_port(engine_a_->tunnel_index(8)), 0u);

  EXPECT_EQ(ask(0, R"({"cmd":"remove_tunnel","id":8})").at("generation").to_number<uint64_t>(), 2u);
  EXPECT_EQ(ask(1, R"({"cmd":"remove_tunnel","id":8})").at("generation").to_number<uint64_t>(), 2u);
  EXPECT_EQ(carry("10.20.5.9:6000", 4, 500), 0u);
  EXPECT_EQ(no_route(*engine_a_), 7u);
  EXPECT_EQ(carry("10.20.2.9:6000", 5, 600), 5u);
  EXPECT_EQ(stats(*engine_b_, now_ns_).at("drops").at("unknown_tunnel").to_number<uint64_t>(), 0u);
  // Every test mbuf came back.
  EXPECT_EQ(rte_mempool_avail_count(pool_), kTestPoolMbufs);
}

}  // namespace
}  // namespace detwan::dataplane::dpdk::testing

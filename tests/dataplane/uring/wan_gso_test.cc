// UDP GSO and GRO on the uring gateway's WAN port (dataplane/uring/wan_batch.h): frames due
// together leave in one sendmsg with UDP_SEGMENT; the far gateway receives such a run in one
// recvmsg (UDP_GRO) and cuts it into frames, or (GRO off) receives them one by one; either way
// every frame is delivered intact. With both off every frame leaves and arrives alone. Two
// gateways on loopback, port 0 everywhere.
#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "dataplane/uring/gateway.h"
#include "tests/dataplane/uring/uring_site.h"
#include "tests/dataplane/uring/uring_test_util.h"

namespace detwan::dataplane::uring {
namespace {

using testing::counter;
using testing::loopback;
using testing::Site;
using testing::TestSocket;
using Bytes = std::vector<std::byte>;

// Tunnel 7 from A to B; B delivers to `app`. The WAN port's line rate is 100 Gbit/s, so a
// burst's frames are due within a few microseconds of each other: the loop finds several due at
// once, which is when a batch forms.
struct GsoPair {
  TestSocket app = TestSocket::open();
  std::unique_ptr<Site> a;
  std::unique_ptr<Site> b;

  GsoPair(bool wan_gso, bool wan_gro) {
    gw::GatewayConfig config_a =
        testing::site_config("site-a", "site-b", loopback(0), loopback(0), 4'000'000'000);
    gw::GatewayConfig config_b =
        testing::site_config("site-b", "site-a", loopback(0), loopback(0), 4'000'000'000);
    for (gw::GatewayConfig* config : {&config_a, &config_b}) {
      config->wan_gso = wan_gso;
      config->wan_gro = wan_gro;
      config->wan_ports[0].line_rate_bps = 100'000'000'000;
    }
    config_a.tunnels[0].service_listen = loopback(0);
    config_a.tunnels[0].burst_bytes = 4 << 20;
    config_b.tunnels[0].service_deliver = app.local;
    a = std::make_unique<Site>(config_a);
    b = std::make_unique<Site>(config_b);
    if (!a->opened() || !b->opened()) return;
    a->config().peers[0].endpoint = b->wan();
    b->config().peers[0].endpoint = a->wan();
    a->start();
    b->start();
  }
  [[nodiscard]] bool ok() const { return a->opened() && b->opened(); }
};

// Bursts of `burst` datagrams: all of `size` bytes but the last, which is shorter (it closes a
// batch). Each starts with its index; the rest is random.
std::vector<Bytes> bursts_of(uint32_t bursts, uint32_t burst, size_t size) {
  std::mt19937 random(11);
  std::vector<Bytes> payloads;
  for (uint32_t i = 0; i < bursts * burst; ++i) {
    Bytes data(i % burst == burst - 1 ? size / 2 : size);
    for (auto& b : data) b = static_cast<std::byte>(random());
    std::memcpy(data.data(), &i, sizeof i);
    payloads.push_back(std::move(data));
  }
  return payloads;
}

// Sends each burst to A's service port at once, then collects it at the app.
std::vector<Bytes> carry(const GsoPair& pair, const std::vector<Bytes>& payloads, uint32_t burst) {
  TestSocket sender = TestSocket::open();
  std::vector<Bytes> received;
  for (size_t i = 0; i < payloads.size(); i += burst) {
    const size_t end = std::min(payloads.size(), i + burst);
    for (size_t j = i; j < end; ++j) {
      EXPECT_TRUE(sender.send_to(*pair.a->service(), payloads[j].data(), payloads[j].size()));
    }
    for (size_t j = i; j < end; ++j) {
      auto datagram = pair.app.receive();
      if (!datagram) return received;
      received.push_back(std::move(*datagram));
    }
  }
  return received;
}

void expect_same_set(std::vector<Bytes> sent, std::vector<Bytes> received) {
  std::sort(sent.begin(), sent.end());
  std::sort(received.begin(), received.end());
  EXPECT_EQ(received, sent);  // byte for byte, none lost, none twice
}

// Carries 20 bursts of 48 through the pair and checks every frame's fate; returns A's and B's
// stats.
std::pair<boost::json::value, boost::json::value> carry_bursts(const GsoPair& pair) {
  constexpr uint32_t kBurst = 48;
  const std::vector<Bytes> payloads = bursts_of(20, kBurst, 1200);
  const std::vector<Bytes> received = carry(pair, payloads, kBurst);
  EXPECT_EQ(received.size(), payloads.size()) << "A: " << boost::json::serialize(pair.a->stats())
                                              << "\nB: " << boost::json::serialize(pair.b->stats());
  expect_same_set(payloads, received);

  const auto n = static_cast<int64_t>(payloads.size());
  const auto a = pair.a->stats_when([&](const auto& s) {
    return counter(s, {"ports", "0", "io", "tx_packets"}) >= n;
  });
  // Each frame is counted once whether it left in a batch or alone.
  EXPECT_GE(counter(a, {"ports", "0", "io", "tx_packets"}), n);
  EXPECT_EQ(counter(a, {"ports", "0", "io", "tx_errors"}), 0);
  EXPECT_EQ(counter(a, {"ports", "0", "io", "gso_refused"}), 0);
  EXPECT_EQ(counter(a, {"tunnels", "0", "tx", "sent_on_time_packets"}), n);
  const auto b = pair.b->stats_when([&](const auto& s) {
    return counter(s, {"local", "service_tx_packets"}) >= n;
  });
  // B took every frame as a tunnel frame of its own, merged on receive or not.
  EXPECT_EQ(counter(b, {"tunnels", "0", "rx", "accepted_on_time_packets"}), n);
  EXPECT_GE(counter(b, {"ports", "0", "io", "rx_packets"}), n);
  EXPECT_EQ(counter(b, {"ports", "0", "io", "rx_errors"}), 0);
  EXPECT_EQ(counter(b, {"ports", "0", "io", "no_buffer"}), 0);
  int64_t wire_drops = 0;
  for (const auto& [reason, count] : b.at("ports").at(0).at("rx_drops").as_object()) {
    wire_drops += count.to_number<int64_t>();
  }
  EXPECT_EQ(wire_drops, 0);
  ::testing::Test::RecordProperty("tx_batches",
                                  std::to_string(counter(a, {"ports", "0", "io", "tx_batches"})));
  ::testing::Test::RecordProperty("rx_batches",
                                  std::to_string(counter(b, {"ports", "0", "io", "rx_batches"})));
  return {a, b};
}

TEST(UringWanGso, BurstsLeaveInBatchesAndArriveMergedThenCutIntoIntactFrames) {
  GsoPair pair(true, true);
  ASSERT_TRUE(pair.ok());
  const auto [a, b] = carry_bursts(pair);
  EXPECT_GE(counter(a, {"ports", "0", "io", "tx_batches"}), 1) << boost::json::serialize(a);
  EXPECT_LT(counter(a, {"ports", "0", "io", "tx_batches"}),
            counter(a, {"ports", "0", "io", "tx_packets"}));
  // Loopback hands a GSO run to a UDP_GRO socket whole: B received runs and cut them.
  EXPECT_GE(counter(b, {"ports", "0", "io", "rx_batches"}), 1) << boost::json::serialize(b);
}

TEST(UringWanGso, BatchesArriveAsSeparateDatagramsWhenTheReceiverHasNoGro) {
  GsoPair pair(true, false);
  ASSERT_TRUE(pair.ok());
  const auto [a, b] = carry_bursts(pair);
  EXPECT_GE(counter(a, {"ports", "0", "io", "tx_batches"}), 1) << boost::json::serialize(a);
  EXPECT_EQ(counter(b, {"ports", "0", "io", "rx_batches"}), 0);
}

TEST(UringWanGso, OffEveryFrameLeavesAndArrivesAlone) {
  GsoPair pair(false, false);
  ASSERT_TRUE(pair.ok());
  const auto [a, b] = carry_bursts(pair);
  EXPECT_EQ(counter(a, {"ports", "0", "io", "tx_batches"}), 0);
  EXPECT_EQ(counter(b, {"ports", "0", "io", "rx_batches"}), 0);
}

}  // namespace
}  // namespace detwan::dataplane::uring

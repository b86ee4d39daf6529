#pragma once
// A test fixture of two DPDK gateways back to back in one process:
//
//   host A ring --> [local port A | gateway A | wanA] == wan_ab ==> [wanB | gateway B | local
//   port B] --> host B ring   (and the mirror path back)
//
// Every link is a pair of rte_rings the test can also reach directly (inject hostile frames on
// wan_ab, read what a gateway sent before the other sees it). Both gateways are stepped in one
// thread in virtual time (poll_once_st), so every test is deterministic.
#include <atomic>
#include <memory>
#include <string>

#include <boost/json.hpp>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <rte_mempool.h>

#include "dataplane/dpdk/gateway.h"
#include "dataplane/gw/engine.h"
#include "tests/dataplane/dpdk/dpdk_test_util.h"

namespace detwan::dataplane::dpdk::testing {

inline constexpr int64_t kStartNs = 1'000'000'000'000;  // virtual TAI, cycle-aligned
inline constexpr uint32_t kTestPoolMbufs = 1023;

class GatewayPairTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test_eal()) {
      GTEST_SKIP() << "the DPDK EAL cannot start here (" << test_eal().error().describe()
                   << "): DPDK backend tests skipped";
    }
    static std::atomic<int> next{0};
    prefix_ = fmt::format("p{}", next.fetch_add(1));
    host_a_in_ = make_ring(prefix_ + "hai");
    host_a_out_ = make_ring(prefix_ + "hao");
    host_b_in_ = make_ring(prefix_ + "hbi");
    host_b_out_ = make_ring(prefix_ + "hbo");
    wan_ab_ = make_ring(prefix_ + "ab", wan_ring_size_);
    wan_ba_ = make_ring(prefix_ + "ba", wan_ring_size_);
    ASSERT_TRUE(host_a_in_ && host_a_out_ && host_b_in_ && host_b_out_ && wan_ab_ && wan_ba_);
    ASSERT_GE(ring_port(prefix_ + "hostA", host_a_in_.get(), host_a_out_.get()), 0);
    ASSERT_GE(ring_port(prefix_ + "wanA", wan_ba_.get(), wan_ab_.get()), 0);
    ASSERT_GE(ring_port(prefix_ + "wanB", wan_ab_.get(), wan_ba_.get()), 0);
    ASSERT_GE(ring_port(prefix_ + "hostB", host_b_in_.get(), host_b_out_.get()), 0);
    pool_ = rte_pktmbuf_pool_create((prefix_ + "pool").c_str(), kTestPoolMbufs, 0, 0,
                                    RTE_MBUF_DEFAULT_BUF_SIZE, 0);
    ASSERT_NE(pool_, nullptr);
    config_a_ = pair_config(true, device("wanA"));
    config_b_ = pair_config(false, device("wanB"));
    customise(config_a_, config_b_);
  }

  // The ethdev name of one of this test's ring ports (rte_eth_from_rings adds "net_ring_").
  std::string device(const char* role) const { return "net_ring_" + prefix_ + role; }

  // Tests adjust the configurations here before open_gateways().
  virtual void customise(gw::GatewayConfig&, gw::GatewayConfig&) {}

  void open_gateways(bool with_local_ports = true) {
    auto engine_a = gw::Engine::create(config_a_, kStartNs);
    ASSERT_TRUE(engine_a) << engine_a.error().describe();
    auto engine_b = gw::Engine::create(config_b_, kStartNs);
    ASSERT_TRUE(engine_b) << engine_b.error().describe();
    engine_a_ = std::move(*engine_a);
    engine_b_ = std::move(*engine_b);
    GatewayOptions options_a;
    GatewayOptions options_b;
    if (with_local_ports) {
      options_a.local_port = LocalPortOptions{device("hostA"), kHostMacA, 256, 256};
      options_b.local_port = LocalPortOptions{device("hostB"), kHostMacB, 256, 256};
    }
    auto gateway_a = Gateway::open(*engine_a_, config_a_, options_a);
    ASSERT_TRUE(gateway_a) << gateway_a.error().describe();
    auto gateway_b = Gateway::open(*engine_b_, config_b_, options_b);
    ASSERT_TRUE(gateway_b) << gateway_b.error().describe();
    gateway_a_ = std::move(*gateway_a);
    gateway_b_ = std::move(*gateway_b);
  }

  void TearDown() override {
    gateway_a_.reset();
    gateway_b_.reset();
    engine_a_.reset();
    engine_b_.reset();
    if (pool_ != nullptr) rte_mempool_free(pool_);
  }

  // Steps both gateways 2 us apart in virtual time, `iterations` times.
  void step(int iterations) {
    for (int i = 0; i < iterations; ++i) {
      now_ns_ += 2'000;
      (void)gateway_a_->poll_once_st(now_ns_);
      (void)gateway_b_->poll_once_st(now_ns_);
    }
  }

  void inject(rte_ring* ring, const std::vector<std::byte>& frame) {
    rte_mbuf* m = mbuf_from(pool_, frame);
    ASSERT_NE(m, nullptr);
    ASSERT_EQ(rte_ring_enqueue(ring, m), 0);
  }

  // Everything queued on `ring`, as byte vectors; the mbufs are freed.
  static std::vector<std::vector<std::byte>> drain(rte_ring* ring) {
    std::vector<std::vector<std::byte>> frames;
    void* object = nullptr;
    while (rte_ring_dequeue(ring, &object) == 0) {
      auto* m = static_cast<rte_mbuf*>(object);
      frames.push_back(bytes_of(m));
      rte_pktmbuf_free(m);
    }
    return frames;
  }

  static boost::json::value stats(const gw::Engine& engine, int64_t now_ns) {
    return boost::json::parse(engine.stats_json(now_ns));
  }
  static boost::json::value counters(const Gateway& gateway) {
    return boost::json::parse(gateway.counters_json());
  }

  unsigned wan_ring_size_ = 1024;
  std::string prefix_;
  RingPtr host_a_in_, host_a_out_, host_b_in_, host_b_out_, wan_ab_, wan_ba_;
  rte_mempool* pool_ = nullptr;
  gw::GatewayConfig config_a_, config_b_;
  std::unique_ptr<gw::Engine> engine_a_, engine_b_;
  std::unique_ptr<Gateway> gateway_a_, gateway_b_;
  int64_t now_ns_ = kStartNs;
};

}  // namespace detwan::dataplane::dpdk::testing

// FEC: parity rebuilds lost segments without retransmission; tail protection; adaptive m.
#include <gtest/gtest.h>

#include "tests/transport/proto/test_util.h"
#include "transport/proto/wire.h"

namespace detwan::transport::proto::testing {
namespace {

ChannelOptions fec_options(int k, int m, bool adaptive) {
  ChannelOptions o = reserved_options();
  o.fec.enabled = true;
  o.fec.data_segments = k;
  o.fec.parity_segments = m;
  o.fec.adaptive = adaptive;
  return o;
}

bool is_type(const std::vector<std::byte>& d, wire::Type t) {
  if (t == wire::Type::kData) return wire::is_data(d);
  return !wire::is_data(d) && d.size() > wire::kHeaderBytes && d[3] == std::byte{uint8_t(t)};
}

// Drops the data segments whose send index (0-based, first transmissions) is in `drop`.
struct DropSegments {
  std::vector<int> drop;
  int seen = 0;
  bool operator()(int side, std::vector<std::byte>& d) {
    if (side != 0 || !is_type(d, wire::Type::kData)) return true;
    const int i = seen++;
    return std::find(drop.begin(), drop.end(), i) == drop.end();
  }
};

TEST(Fec, SingleLossRecoveredWithoutRetransmission) {
  VirtualNet net(fec_options(8, 2, false), fec_options(8, 2, false), 1);
  LinkFaults f;
  f.delay_ns = 10'000'000;
  net.set_faults(0, f);
  net.set_faults(1, f);
  net.tamper = DropSegments{{3}};
  ASSERT_TRUE(transfer(net, random_messages({20 * 1424}, 1)));
  EXPECT_GE(net.server().stats().fec_recovered, 1u);
  EXPECT_EQ(net.client().stats().segments_retransmitted, 0u);
  EXPECT_GT(net.client().stats().fec_parity_sent, 0u);
  EXPECT_EQ(net.client().stats().fec_parity_current, 2);
}

TEST(Fec, TwoLossesInOneBlockAndTailBlock) {
  VirtualNet net(fec_options(8, 2, false), fec_options(8, 2, false), 1);
  LinkFaults f;
  f.delay_ns = 10'000'000;
  net.set_faults(0, f);
  net.set_faults(1, f);
  // 14 segments: block 0 = 0..7 loses 1 and 6; the tail block 8..13 (k = 6) loses 9.
  net.tamper = DropSegments{{1, 6, 9}};
  ASSERT_TRUE(transfer(net, random_messages({5000, 10 * 1424}, 3)));
  EXPECT_EQ(net.server().stats().fec_recovered, 3u);
  EXPECT_EQ(net.client().stats().segments_retransmitted, 0u);
}

TEST(Fec, TooManyLossesFallBackToRetransmission) {
  VirtualNet net(fec_options(8, 1, false), fec_options(8, 1, false), 1);
  net.tamper = DropSegments{{0, 1, 2}};
  ASSERT_TRUE(transfer(net, random_messages({16 * 1424}, 4)));
  EXPECT_GT(net.client().stats().segments_retransmitted, 0u);
}

TEST(Fec, RandomLossWithAdaptiveParity) {
  VirtualNet net(fec_options(16, 4, true), fec_options(16, 4, true), 9);
  LinkFaults f;
  f.loss = 0.03;
  f.delay_ns = 5'000'000;
  net.set_faults(0, f);
  net.set_faults(1, f);
  ASSERT_TRUE(transfer(net, random_messages({6'000'000, 1, 0, 70'000}, 5)));
  const ChannelStats tx = net.client().stats();
  const ChannelStats rx = net.server().stats();
  EXPECT_GT(tx.fec_parity_current, 0);
  EXPECT_LE(tx.fec_parity_current, 4);
  EXPECT_GT(tx.fec_parity_sent, 0u);
  EXPECT_GT(rx.fec_recovered, 0u);
}

TEST(Fec, AdaptiveWithoutLossSendsNoParity) {
  VirtualNet net(fec_options(16, 4, true), fec_options(16, 4, true), 9);
  ASSERT_TRUE(transfer(net, random_messages({2'000'000}, 6)));
  EXPECT_EQ(net.client().stats().fec_parity_sent, 0u);
  EXPECT_EQ(net.client().stats().fec_parity_current, 0);
}

}  // namespace
}  // namespace detwan::transport::proto::testing

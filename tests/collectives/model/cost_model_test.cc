// The cost model on the configurations the issue names: 2 sites x 2 ranks over a 200 Mbit/s,
// 20 ms RTT tunnel (100 Mbit/s per channel), and one site of 4 ranks.
#include "collectives/topology/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace detwan::collectives {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr std::array<Algorithm, 4> kAlgorithms = {Algorithm::kRing, Algorithm::kHalvingDoubling,
                                                  Algorithm::kTree, Algorithm::kHierarchical};
constexpr std::array<Collective, 8> kCollectives = {
    Collective::kAllReduce, Collective::kBroadcast,  Collective::kReduce,
    Collective::kAllGather, Collective::kReduceScatter, Collective::kAllToAll,
    Collective::kSendRecv,  Collective::kBarrier};

Topology make_topology(const std::vector<std::string>& sites) {
  auto topology = Topology::build(sites);
  EXPECT_TRUE(topology.has_value());
  return *topology;
}

// intra 10 Gbit/s, 20 us; inter: per channel rate (tunnel / local ranks), one-way 10 ms.
NetworkModel wan_model(int sites, int64_t inter_rate_bps = 100'000'000) {
  NetworkModel model;
  model.intra = {20'000, 10'000'000'000};
  model.inter.assign(sites, std::vector<LinkModel>(sites, LinkModel{10'000'000, inter_rate_bps}));
  return model;
}

double predict(Collective collective, Algorithm algorithm, int64_t bytes,
               const Topology& topology, const NetworkModel& model, int64_t chunk = 0) {
  return predict_ns(collective, algorithm, bytes, chunk, topology, model);
}

class TwoByTwo : public ::testing::Test {
 protected:
  Topology topology_ = make_topology({"a", "a", "b", "b"});
  NetworkModel model_ = wan_model(2);
};

TEST_F(TwoByTwo, LargeAllReduceHierarchicalBeatsRingAndHalvingDoubling) {
  const int64_t bytes = 64 * kMiB;
  const Plan plan = choose_plan(Collective::kAllReduce, bytes, topology_, model_, {});
  EXPECT_EQ(plan.algorithm, Algorithm::kHierarchical) << plan.reason;
  const double hier = predict(Collective::kAllReduce, Algorithm::kHierarchical, bytes, topology_,
                              model_, plan.chunk_bytes);
  const double ring = predict(Collective::kAllReduce, Algorithm::kRing, bytes, topology_, model_,
                              plan.chunk_bytes);
  const double hd = predict(Collective::kAllReduce, Algorithm::kHalvingDoubling, bytes, topology_,
                            model_, plan.chunk_bytes);
  EXPECT_LT(hier, hd);
  EXPECT_LT(hier, ring);
  // The bandwidth bound: each channel carries its half of the buffer once each way
  // (32 MiB at 100 Mbit/s = 2.68 s); the flat ring carries 1.5x the buffer on one channel.
  const double bound_ns = 32.0 * kMiB * 8 / 100e6 * 1e9;
  EXPECT_GE(hier, bound_ns);
  EXPECT_LT(hier, 1.1 * bound_ns);
  EXPECT_GT(ring, 2.9 * hier);
  EXPECT_DOUBLE_EQ(plan.predicted_ns, hier);
  // The reason names the winner and every runner-up with a predicted time.
  EXPECT_TRUE(plan.reason.starts_with("hier chunk ")) << plan.reason;
  for (const char* name : {"ring ", "hd ", "tree "}) {
    EXPECT_NE(plan.reason.find(name), std::string::npos) << plan.reason;
  }
  EXPECT_NE(plan.reason.find("2 sites x 2 ranks"), std::string::npos) << plan.reason;
}

TEST_F(TwoByTwo, SmallAllReduceAvoidsTheRingsWanLatencies) {
  const double ring = predict(Collective::kAllReduce, Algorithm::kRing, 8, topology_, model_);
  const double tree = predict(Collective::kAllReduce, Algorithm::kTree, 8, topology_, model_);
  const double hd = predict(Collective::kAllReduce, Algorithm::kHalvingDoubling, 8, topology_,
                            model_);
  const double hier = predict(Collective::kAllReduce, Algorithm::kHierarchical, 8, topology_,
                              model_);
  EXPECT_LT(tree, ring);
  EXPECT_LT(hd, ring);
  // Ring: 6 steps, each crossing the WAN; tree and hd: 2 WAN latencies; hier: 1 (one exchange).
  EXPECT_NEAR(ring, 6 * 10e6, 1e6);
  EXPECT_NEAR(tree, 2 * 10e6, 1e6);
  EXPECT_NEAR(hd, 2 * 10e6, 1e6);
  EXPECT_NEAR(hier, 1 * 10e6, 1e6);
  const Plan plan = choose_plan(Collective::kAllReduce, 8, topology_, model_, {});
  EXPECT_NE(plan.algorithm, Algorithm::kRing) << plan.reason;
  EXPECT_LT(plan.predicted_ns, ring);
}

TEST_F(TwoByTwo, ChunkCoversTheBandwidthDelayProduct) {
  // A window of 16 pieces must cover rate x RTT: at 1 Gbit/s per channel and 100 ms RTT that
  // is 12.5 MB, so pieces of at least 1 MiB; never below 256 KiB or above 16 MiB.
  NetworkModel model = wan_model(2, 1'000'000'000);
  for (auto& row : model.inter) {
    for (auto& link : row) link.alpha_ns = 50'000'000;
  }
  const Plan plan = choose_plan(Collective::kAllReduce, 1024 * kMiB, topology_, model, {});
  EXPECT_EQ(plan.algorithm, Algorithm::kHierarchical) << plan.reason;
  EXPECT_GE(plan.chunk_bytes * 16, 12'500'000) << plan.reason;
  EXPECT_LE(plan.chunk_bytes, 16 * kMiB);
  // Pieces below the bandwidth-delay product are predicted slower.
  EXPECT_GT(predict(Collective::kAllReduce, Algorithm::kHierarchical, 1024 * kMiB, topology_,
                    model, 256 * 1024),
            plan.predicted_ns);
  for (int64_t bytes : {int64_t{8}, kMiB, 64 * kMiB}) {
    const Plan p = choose_plan(Collective::kAllReduce, bytes, topology_, model_, {});
    EXPECT_GE(p.chunk_bytes, 256 * 1024) << p.reason;
    EXPECT_LE(p.chunk_bytes, 16 * kMiB) << p.reason;
  }
}

TEST(CostModel, OneSiteRingWinsForLargeSizes) {
  const Topology topology = make_topology({"lan", "lan", "lan", "lan"});
  NetworkModel model;
  model.intra = {20'000, 10'000'000'000};
  for (int64_t bytes : {64 * kMiB, 256 * kMiB, 1024 * kMiB}) {
    const Plan plan = choose_plan(Collective::kAllReduce, bytes, topology, model, {});
    EXPECT_EQ(plan.algorithm, Algorithm::kRing) << bytes << ": " << plan.reason;
    EXPECT_LT(plan.predicted_ns,
              predict(Collective::kAllReduce, Algorithm::kHalvingDoubling, bytes, topology,
                      model))
        << plan.reason;
  }
  // Small messages on the LAN: fewer latencies beat the ring's 2(n-1) steps.
  const Plan small = choose_plan(Collective::kAllReduce, 8, topology, model, {});
  EXPECT_NE(small.algorithm, Algorithm::kRing) << small.reason;
}

TEST(CostModel, MonotonicInBytes) {
  const std::vector<std::pair<Topology, NetworkModel>> setups = {
      {make_topology({"a", "a", "b", "b"}), wan_model(2)},
      {make_topology({"a", "b", "c", "a", "b", "c"}), wan_model(3)},
      {make_topology({"a", "a", "a", "b", "b"}), wan_model(2)},
      {make_topology(std::vector<std::string>(5, "lan")), wan_model(1)}};
  for (const auto& [topology, model] : setups) {
    for (Collective collective : kCollectives) {
      for (Algorithm algorithm : kAlgorithms) {
        for (int64_t chunk : {int64_t{0}, 256 * int64_t{1024}, 4 * kMiB}) {
          double previous = -1;
          for (int64_t bytes = 1; bytes <= 4096 * kMiB; bytes *= 4) {
            const double ns = predict(collective, algorithm, bytes, topology, model, chunk);
            EXPECT_FALSE(std::isnan(ns));
            EXPECT_GE(ns, previous) << topology.describe() << " " << to_string(collective) << " "
                                    << to_string(algorithm) << " " << bytes;
            previous = ns;
          }
        }
      }
      double previous = -1;
      for (int64_t bytes = 1; bytes <= 4096 * kMiB; bytes *= 2) {
        const Plan plan = choose_plan(collective, bytes, topology, model, {});
        EXPECT_TRUE(std::isfinite(plan.predicted_ns)) << plan.reason;
        EXPECT_GE(plan.predicted_ns, previous) << plan.reason;
        previous = plan.predicted_ns;
      }
    }
  }
}

TEST(CostModel, EveryCollectiveHasARunnablePlan) {
  const Topology topology = make_topology({"a", "a", "a", "b"});
  for (Collective collective : kCollectives) {
    const Plan plan = choose_plan(collective, kMiB, topology, wan_model(2), {});
    EXPECT_TRUE(std::isfinite(plan.predicted_ns)) << to_string(collective);
    EXPECT_GT(plan.predicted_ns, 0) << to_string(collective);
    EXPECT_GT(plan.chunk_bytes, 0);
    EXPECT_FALSE(plan.reason.empty());
  }
  // Zero bytes cost nothing (but a barrier still pays its latencies); one rank is free.
  EXPECT_EQ(predict(Collective::kAllReduce, Algorithm::kRing, 0, topology, wan_model(2)), 0);
  EXPECT_GT(predict(Collective::kBarrier, Algorithm::kRing, 0, topology, wan_model(2)), 10e6);
  const Topology one = make_topology({"solo"});
  EXPECT_EQ(predict(Collective::kAllReduce, Algorithm::kTree, 64 * kMiB, one, wan_model(1)), 0);
}

TEST(CostModel, NotRunnableIsInfinite) {
  const Topology uneven = make_topology({"a", "a", "a", "b"});
  EXPECT_TRUE(std::isinf(predict(Collective::kBroadcast, Algorithm::kHalvingDoubling, kMiB,
                                 uneven, wan_model(2))));
  EXPECT_TRUE(std::isinf(predict(Collective::kAllToAll, Algorithm::kTree, kMiB, uneven,
                                 wan_model(2))));
  // kAuto is the best concrete algorithm.
  const Topology even = make_topology({"a", "a", "b", "b"});
  EXPECT_DOUBLE_EQ(predict(Collective::kAllReduce, Algorithm::kAuto, 64 * kMiB, even,
                           wan_model(2), kMiB),
                   predict(Collective::kAllReduce, Algorithm::kHierarchical, 64 * kMiB, even,
                           wan_model(2), kMiB));
}

TEST(CostModel, OverrideIsHonoured) {
  const Topology topology = make_topology({"a", "a", "b", "b"});
  const NetworkModel model = wan_model(2);
  const Plan plan = choose_plan(Collective::kAllReduce, 64 * kMiB, topology, model,
                                {Algorithm::kRing, 2 * kMiB});
  EXPECT_EQ(plan.algorithm, Algorithm::kRing);
  EXPECT_EQ(plan.chunk_bytes, 2 * kMiB);
  EXPECT_DOUBLE_EQ(plan.predicted_ns, predict(Collective::kAllReduce, Algorithm::kRing,
                                              64 * kMiB, topology, model, 2 * kMiB));
  EXPECT_NE(plan.reason.find("override"), std::string::npos) << plan.reason;
  EXPECT_NE(plan.reason.find("hier "), std::string::npos) << plan.reason;  // runner-up listed

  // Only the chunk overridden: the algorithm is still chosen.
  const Plan chunk_only = choose_plan(Collective::kAllReduce, 64 * kMiB, topology, model,
                                      {Algorithm::kAuto, 512 * 1024});
  EXPECT_EQ(chunk_only.algorithm, Algorithm::kHierarchical);
  EXPECT_EQ(chunk_only.chunk_bytes, 512 * 1024);
}

TEST(CostModel, HierarchicalRunsOnUnevenSites) {
  // 3 + 1 over a 100 Mbit/s WAN: the site-aware algorithm carries the buffer across once each
  // way (b's one rank sends all of it), the ring crosses twice per step: hierarchical wins.
  const Topology uneven = make_topology({"a", "a", "a", "b"});
  const NetworkModel model = wan_model(2);
  const Plan automatic = choose_plan(Collective::kAllReduce, 64 * kMiB, uneven, model, {});
  EXPECT_EQ(automatic.algorithm, Algorithm::kHierarchical) << automatic.reason;
  const double hier = predict(Collective::kAllReduce, Algorithm::kHierarchical, 64 * kMiB,
                              uneven, model, automatic.chunk_bytes);
  const double ring = predict(Collective::kAllReduce, Algorithm::kRing, 64 * kMiB, uneven, model,
                              automatic.chunk_bytes);
  EXPECT_TRUE(std::isfinite(hier));
  EXPECT_LT(hier, ring);
  // At least the time b's rank needs to push 64 MiB through 100 Mbit/s.
  EXPECT_GE(hier, 64.0 * kMiB * 8 / 100e6 * 1e9);
  // The override runs as asked (no fall-back); allgather is site-aware on uneven sites too.
  const Plan forced = choose_plan(Collective::kAllReduce, 64 * kMiB, uneven, model,
                                  {Algorithm::kHierarchical, 0});
  EXPECT_EQ(forced.algorithm, Algorithm::kHierarchical);
  EXPECT_EQ(forced.reason.find("fell back"), std::string::npos) << forced.reason;
  EXPECT_TRUE(std::isfinite(predict(Collective::kAllGather, Algorithm::kHierarchical,
                                    64 * kMiB, uneven, model, 0)));
  // Three sites of 1, 2 and 3 ranks: finite, and cheaper than the ring too.
  const Topology three = make_topology({"a", "b", "b", "c", "c", "c"});
  const NetworkModel model3 = wan_model(3);
  EXPECT_LT(predict(Collective::kAllReduce, Algorithm::kHierarchical, 64 * kMiB, three, model3,
                    0),
            predict(Collective::kAllReduce, Algorithm::kRing, 64 * kMiB, three, model3, 0));
}

TEST(CostModel, Deterministic) {
  const Topology topology = make_topology({"a", "b", "a", "b", "a", "b"});
  const NetworkModel model = wan_model(2, 66'000'000);
  const Plan first = choose_plan(Collective::kAllReduce, 100 * kMiB + 3, topology, model, {});
  for (int i = 0; i < 5; ++i) {
    const Plan again = choose_plan(Collective::kAllReduce, 100 * kMiB + 3, topology, model, {});
    EXPECT_EQ(again.algorithm, first.algorithm);
    EXPECT_EQ(again.chunk_bytes, first.chunk_bytes);
    EXPECT_EQ(again.predicted_ns, first.predicted_ns);
    EXPECT_EQ(again.reason, first.reason);
  }
}

TEST(CostModel, LinkLookup) {
  const Topology topology = make_topology({"a", "b", "a"});
  NetworkModel model = wan_model(2);
  model.inter[0][1] = {1, 2};
  model.inter[1][0] = {3, 4};
  EXPECT_EQ(model.link(topology, 0, 2).alpha_ns, 20'000);
  EXPECT_EQ(model.link(topology, 0, 1).alpha_ns, 1);
  EXPECT_EQ(model.link(topology, 1, 2).rate_bps, 4);
  NetworkModel intra_only;
  intra_only.intra = {7, 8};
  EXPECT_EQ(intra_only.link(topology, 0, 1).alpha_ns, 7);
}

TEST(CostModel, PrintsTheExamples) {
  // Not an assertion of numbers: shows the reasons in the test log for the docs.
  const Topology topology = make_topology({"a", "a", "b", "b"});
  for (int64_t bytes : {int64_t{8}, kMiB, 64 * kMiB, 1024 * kMiB}) {
    const Plan plan = choose_plan(Collective::kAllReduce, bytes, topology, wan_model(2), {});
    std::printf("allreduce %lld B: %s\n", static_cast<long long>(bytes), plan.reason.c_str());
    EXPECT_FALSE(plan.reason.empty());
  }
}

}  // namespace
}  // namespace detwan::collectives

// The C++ API: the network model every rank plans with is the same on every rank (measured
// mode), and in deterministic mode is the configured one exactly; plans agree across ranks.
#include <algorithm>

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collectives/comm/communicator.h"
#include "tests/collectives/comm/comm_util.h"

namespace detwan::collectives::testing {
namespace {

TEST(CommModel, DeterministicModelIsTheConfiguredOne) {
  CommConfig config = test_config();
  config.deterministic = true;
  config.wan_rtt_ns = 20'000'000;
  auto comms = make_comms({"a", "a", "b", "b"}, config);
  for (const auto& comm : comms) {
    ASSERT_NE(comm, nullptr);
    const NetworkModel& model = comm->network_model();
    ASSERT_EQ(model.inter.size(), 2u);
    EXPECT_EQ(model.inter[0][1].alpha_ns, 10'000'000);
    EXPECT_EQ(model.inter[1][0].alpha_ns, 10'000'000);
    EXPECT_EQ(model.inter[0][1].rate_bps, 100'000'000);  // 200mbit shared by 2 local ranks
    EXPECT_EQ(model.intra.alpha_ns, 20'000);
    EXPECT_EQ(comm->topology().num_sites(), 2);
    EXPECT_EQ(comm->topology().site_of(comm->rank()), comm->rank() < 2 ? 0 : 1);
  }
}

TEST(CommModel, MeasuredModelIsTheSameOnEveryRank) {
  auto comms = make_comms({"a", "a", "b", "c"}, test_config());
  ASSERT_EQ(comms.size(), 4u);
  for (const auto& comm : comms) ASSERT_NE(comm, nullptr);
  const NetworkModel& first = comms[0]->network_model();
  ASSERT_EQ(first.inter.size(), 3u);
  for (int s = 0; s < 3; ++s) {
    for (int t = 0; t < 3; ++t) {
      if (s != t) {
        EXPECT_GT(first.inter[s][t].alpha_ns, 0) << s << "->" << t;
      }
    }
  }
  EXPECT_EQ(first.inter[0][1].rate_bps, 100'000'000);  // site a has 2 ranks
  EXPECT_EQ(first.inter[1][0].rate_bps, 200'000'000);  // site b has 1
  for (const auto& comm : comms) {
    const NetworkModel& model = comm->network_model();
    for (int s = 0; s < 3; ++s) {
      for (int t = 0; t < 3; ++t) {
        EXPECT_EQ(model.inter[s][t].alpha_ns, first.inter[s][t].alpha_ns);
        EXPECT_EQ(model.inter[s][t].rate_bps, first.inter[s][t].rate_bps);
      }
    }
    // ... so every rank picks the same plan for every size
    for (int64_t bytes : {int64_t{8}, int64_t{1} << 20, int64_t{64} << 20}) {
      const Plan mine = comm->plan_for(Collective::kAllReduce, bytes);
      const Plan theirs = comms[0]->plan_for(Collective::kAllReduce, bytes);
      EXPECT_EQ(mine.algorithm, theirs.algorithm);
      EXPECT_EQ(mine.chunk_bytes, theirs.chunk_bytes);
    }
  }
  // the C++ blocking API over the same communicators
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      std::vector<int32_t> data(100, r);
      auto ok = comms[r]->all_reduce(data.data(), data.data(), data.size(), DataType::kInt32,
                                     ReduceOp::kSum);
      EXPECT_TRUE(ok) << ok.error().message;
      EXPECT_EQ(data[99], 6);
    });
  }
  for (auto& t : threads) t.join();
}

// A site pair's rate is shared by what its ranks send at once: with 3 + 1 ranks b's one rank
// sends to all three of a's (its segments' owners), each channel at a third, and each of a's
// ranks to b's one at a third; with 2 + 2 every channel carries half. (A rank's channels toward
// a site also pace through one group of its share: transport/pacing_group.h.) Whichever side
// accepted the channel (paced by a guess at first), the rate is the exact share once the
// communicator is up.
TEST(CommModel, EachRanksChannelsTowardASiteShareItsPartOfTheRate) {
  for (const auto& [sites, expected] :
       {std::pair{std::vector<std::string>{"a", "a", "a", "b"}, int64_t{200'000'000} / 3},
        std::pair{std::vector<std::string>{"a", "a", "b", "b"}, int64_t{100'000'000}}}) {
    auto comms = make_comms(sites, test_config());
    const int n = static_cast<int>(sites.size());
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      ASSERT_NE(comms[r], nullptr);
      threads.emplace_back([&, r] {  // traffic on every channel publishes its stats
        std::vector<int32_t> send(static_cast<size_t>(100 * n), r), recv(send.size());
        auto ok = comms[r]->all_to_all(send.data(), recv.data(), 100, DataType::kInt32);
        EXPECT_TRUE(ok) << ok.error().message;
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) {
      for (int p = 0; p < n; ++p) {
        if (sites[r] == sites[p]) continue;
        const auto stats = comms[r]->peer_stats(p);
        ASSERT_TRUE(stats.has_value()) << r << "->" << p;
        EXPECT_EQ(stats->reserved_rate_bps, expected) << comms[r]->topology().describe() << ": "
                                                      << r << "->" << p;
      }
    }
    EXPECT_FALSE(comms[0]->peer_stats(0).has_value());
    EXPECT_FALSE(comms[0]->peer_stats(n).has_value());
  }
}

TEST(CommModel, ValidateNamesTheArgument) {
  auto comms = make_comms({"a"}, test_config());
  ASSERT_NE(comms[0], nullptr);
  OpDesc op;
  op.collective = Collective::kBroadcast;
  op.count = 4;
  op.root = 3;
  auto bad_root = comms[0]->validate(op);
  ASSERT_FALSE(bad_root);
  EXPECT_EQ(bad_root.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(bad_root.error().message.find("root 3"), std::string::npos);
  op.root = 0;
  op.type = static_cast<DataType>(42);
  auto bad_type = comms[0]->validate(op);
  ASSERT_FALSE(bad_type);
  EXPECT_NE(bad_type.error().message.find("datatype"), std::string::npos);
  // one rank: a collective is a copy
  std::vector<double> in(5, 2.5);
  std::vector<double> out(5, 0);
  ASSERT_TRUE(comms[0]->all_reduce(in.data(), out.data(), 5, DataType::kFloat64, ReduceOp::kAvg));
  EXPECT_EQ(out[4], 2.5);
}

}  // namespace
}  // namespace detwan::collectives::testing

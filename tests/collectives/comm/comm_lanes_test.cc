// Operations in flight together (CommConfig::inflight_ops, collectives/comm/lanes.cc): a later
// collective completes while an earlier one still waits, buffers shared by operations see what
// running them one at a time leaves, deterministic results are bit-identical, failures reach
// every lane. Ranks as threads, inter-site channels on the loopback backend.
#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "collectives/comm/communicator.h"
#include "tests/collectives/comm/comm_util.h"

namespace detwan::collectives::testing {
namespace {

CommConfig lanes_config(int inflight) {
  CommConfig config = test_config();
  config.inflight_ops = inflight;
  return config;
}

OpDesc all_reduce_op(const void* send, void* recv, size_t count, DataType type) {
  OpDesc op;
  op.collective = Collective::kAllReduce;
  op.send = send;
  op.recv = recv;
  op.count = count;
  op.type = type;
  op.op = ReduceOp::kSum;
  return op;
}

void on_every_rank(Comms& comms, const std::function<void(int, Communicator&)>& fn) {
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r) {
    ASSERT_NE(comms[r], nullptr);
    threads.emplace_back([&, r] { fn(static_cast<int>(r), *comms[r]); });
  }
  for (auto& t : threads) t.join();
}

TEST(CommLanes, ALaterCollectiveCompletesWhileAnEarlierOperationWaits) {
  // Rank 0 posts a receive from rank 1 (lane 0), then an allreduce (lane 1). Rank 1 joins the
  // allreduce and sends only once it completed. One at a time this cannot finish (rank 0's
  // allreduce would wait behind the receive, which waits for rank 1's allreduce: both would
  // time out); in flight together it does, and the receive gets its message after.
  CommConfig config = lanes_config(2);
  config.timeout_ns = 10'000'000'000;  // one at a time, both ranks would fail after this
  auto comms = make_comms({"a", "b"}, config);
  on_every_rank(comms, [](int r, Communicator& comm) {
    std::vector<int32_t> first(64, r + 1);
    ASSERT_TRUE(comm.all_reduce(first.data(), first.data(), first.size(), DataType::kInt32,
                                ReduceOp::kSum));  // collective 0: lane 0
    std::vector<int32_t> data(1000, r + 1);
    std::vector<int32_t> message(16, r == 1 ? 77 : 0);
    if (r == 0) {
      OpDesc recv;
      recv.collective = Collective::kSendRecv;
      recv.recv = message.data();
      recv.count = message.size();
      recv.type = DataType::kInt32;
      recv.root = 1;
      auto pending = comm.submit(recv);  // lane 0
      ASSERT_TRUE(pending);
      auto reduced = comm.run(all_reduce_op(data.data(), data.data(), data.size(),
                                            DataType::kInt32));  // collective 1: lane 1
      ASSERT_TRUE(reduced) << reduced.error().message;
      auto received = pending->wait(-1);
      ASSERT_TRUE(received && *received);
      EXPECT_EQ(message[15], 77);
    } else {
      auto reduced = comm.run(all_reduce_op(data.data(), data.data(), data.size(),
                                            DataType::kInt32));
      ASSERT_TRUE(reduced) << reduced.error().message;
      ASSERT_TRUE(comm.send(message.data(), message.size(), DataType::kInt32, 0));
    }
    EXPECT_EQ(data[999], 3);
  });
}

TEST(CommLanes, OperationsOnOneBufferSeeWhatRunningThemInOrderLeaves) {
  // 24 operations submitted at once on 3 lanes: chains on the same buffer (allreduce in place,
  // then again, then a broadcast out of it) among independent ones. Every value is what the
  // operations in issue order give.
  auto comms = make_comms({"a", "a", "b", "b"}, lanes_config(3));
  on_every_rank(comms, [](int r, Communicator& comm) {
    constexpr int kChains = 8;
    constexpr size_t kCount = 20'000;
    std::vector<std::vector<int64_t>> chain(kChains), copy(kChains);
    std::vector<Request> requests;
    for (int c = 0; c < kChains; ++c) {
      chain[c].assign(kCount, r + c);
      copy[c].assign(kCount, -1);
      auto a = comm.submit(all_reduce_op(chain[c].data(), chain[c].data(), kCount,
                                         DataType::kInt64));
      auto b = comm.submit(all_reduce_op(chain[c].data(), chain[c].data(), kCount,
                                         DataType::kInt64));
      OpDesc bcast;
      bcast.collective = Collective::kBroadcast;
      bcast.send = chain[c].data();
      bcast.recv = copy[c].data();
      bcast.count = kCount;
      bcast.type = DataType::kInt64;
      bcast.root = c % 4;
      auto d = comm.submit(bcast);
      ASSERT_TRUE(a && b && d);
      requests.push_back(std::move(*a));
      requests.push_back(std::move(*b));
      requests.push_back(std::move(*d));
    }
    for (auto& request : requests) {
      auto done = request.wait(-1);
      ASSERT_TRUE(done && *done) << (done && !*done ? done->error().message : "");
    }
    for (int c = 0; c < kChains; ++c) {
      const int64_t once = 0 + 1 + 2 + 3 + 4 * c;  // sum over ranks of r + c
      EXPECT_EQ(chain[c][kCount - 1], 4 * once) << "chain " << c;
      EXPECT_EQ(copy[c][0], 4 * once) << "chain " << c;
    }
  });
}

TEST(CommLanes, DeterministicResultsAreBitIdenticalToOneAtATime) {
  constexpr int kOps = 9;
  constexpr size_t kCount = 30'001;
  auto run = [&](int inflight) {
    CommConfig config = lanes_config(inflight);
    config.deterministic = true;
    auto comms = make_comms({"a", "a", "a", "b"}, config);
    std::vector<std::vector<std::vector<float>>> out(4);
    on_every_rank(comms, [&](int r, Communicator& comm) {
      std::mt19937 rng(static_cast<uint32_t>(r * 1000 + 7));
      std::uniform_real_distribution<float> value(-1e3f, 1e3f);
      std::vector<std::vector<float>> bufs(kOps, std::vector<float>(kCount));
      std::vector<Request> requests;
      for (auto& buf : bufs) {
        for (float& x : buf) x = value(rng);
        auto request = comm.submit(all_reduce_op(buf.data(), buf.data(), kCount,
                                                 DataType::kFloat32));
        ASSERT_TRUE(request);
        requests.push_back(std::move(*request));
      }
      for (auto& request : requests) ASSERT_TRUE(*request.wait(-1));
      out[r] = std::move(bufs);
    });
    return out;
  };
  const auto serial = run(1);
  const auto lanes = run(3);
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(serial[r].size(), static_cast<size_t>(kOps));
    ASSERT_EQ(lanes[r].size(), static_cast<size_t>(kOps));
    for (int i = 0; i < kOps; ++i) {
      EXPECT_EQ(std::memcmp(serial[r][i].data(), lanes[r][i].data(), kCount * sizeof(float)), 0)
          << "rank " << r << " op " << i;
    }
  }
}

TEST(CommLanes, AbortFailsTheOperationsOfEveryLane) {
  // Rank 1 never joins: rank 0's allreduces on both lanes wait until it aborts, then fail.
  auto comms = make_comms({"a", "b"}, lanes_config(2));
  ASSERT_NE(comms[0], nullptr);
  std::vector<int32_t> x(100, 1), y(100, 2);
  auto a = comms[0]->submit(all_reduce_op(x.data(), x.data(), x.size(), DataType::kInt32));
  auto b = comms[0]->submit(all_reduce_op(y.data(), y.data(), y.size(), DataType::kInt32));
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(a->wait(50'000'000).has_value());
  comms[0]->abort();
  for (auto* request : {&*a, &*b}) {
    auto done = request->wait(-1);
    ASSERT_TRUE(done.has_value());
    EXPECT_FALSE(*done);
  }
  ASSERT_TRUE(comms[0]->async_error().has_value());
  EXPECT_TRUE(comms[0]->async_error()->aborted);
  comms[1]->abort();
}

}  // namespace
}  // namespace detwan::collectives::testing

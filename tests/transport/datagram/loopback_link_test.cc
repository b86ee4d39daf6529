// The loopback backend's fabric and fault injection, driven directly through LoopbackLink (no
// protocol): seeded loss within a binomial bound, duplication, corruption, delay ordering,
// reordering, rate, partitions, and strict parsing of backend_config. Also the driver's option
// normalisation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/clock.h"
#include "transport/datagram/session.h"
#include "transport/loopback/fabric.h"
#include "transport/loopback/faults.h"
#include "transport/loopback/link.h"

namespace detwan::transport::loopback {
namespace {

struct Arrival {
  uint32_t index = 0;
  int64_t at_ns = 0;
  std::vector<std::byte> bytes;
};

// A sender link with `faults` and a clean receiver, both listening on unique names.
class Pair {
 public:
  explicit Pair(const FaultConfig& faults) : sender_(faults), receiver_(FaultConfig{}) {
    sender_socket_ = sender_.open_listen("").value().first;
    auto listened = receiver_.open_listen("").value();
    receiver_name_ = listened.second;
    destination_ = Fabric::instance().resolve(receiver_name_).value();
  }

  // Sends datagram `index`: 4 index bytes + a fixed pattern, `size_bytes` in all (>= 4).
  int64_t send(uint32_t index, size_t size_bytes = 64) {
    std::span<std::byte> buffer = sender_.tx_buffer();
    std::memcpy(buffer.data(), &index, sizeof index);
    for (size_t i = sizeof index; i < size_bytes; ++i) buffer[i] = static_cast<std::byte>(i * 7);
    const int64_t now_ns = clock_.now_ns();
    (void)sender_.send(sender_socket_, destination_, size_bytes);
    return now_ns;
  }

  // Receives until `count` datagrams arrived or nothing came for `quiet_ns`.
  std::vector<Arrival> receive(size_t count, int64_t quiet_ns = 300'000'000) {
    std::vector<Arrival> arrivals;
    while (arrivals.size() < count) {
      const size_t before = arrivals.size();
      receiver_.receive(clock_.now_ns() + quiet_ns,
                        [&](SocketId, const Port&, std::span<const std::byte> bytes) {
                          Arrival arrival;
                          std::memcpy(&arrival.index, bytes.data(), sizeof arrival.index);
                          arrival.at_ns = clock_.now_ns();
                          arrival.bytes.assign(bytes.begin(), bytes.end());
                          arrivals.push_back(std::move(arrival));
                        });
      if (arrivals.size() == before) break;  // quiet: everything that will arrive has
    }
    return arrivals;
  }

  LoopbackLink& sender() { return sender_; }
  LoopbackLink& receiver() { return receiver_; }
  const std::string& receiver_name() const { return receiver_name_; }

 private:
  common::MonotonicClock clock_;
  LoopbackLink sender_;
  LoopbackLink receiver_;
  SocketId sender_socket_ = 0;
  std::string receiver_name_;
  Port destination_;
};

FaultConfig faults(const std::string& text) { return parse_faults(text).value(); }

TEST(LoopbackFaults, LossRateWithinBinomialBoundAndSeedDeterministic) {
  constexpr uint32_t kCount = 20000;
  constexpr double kLoss = 0.1;
  auto run = [&] {
    Pair pair(faults("loss=10%,seed=7"));
    for (uint32_t i = 0; i < kCount; ++i) pair.send(i);
    std::vector<uint32_t> received;
    for (const Arrival& arrival : pair.receive(kCount, 50'000'000)) received.push_back(arrival.index);
    EXPECT_EQ(pair.sender().counters().dropped_loss + received.size(), kCount);
    return received;
  };
  const std::vector<uint32_t> first = run();
  const double mean = kCount * (1 - kLoss);
  const double sigma = std::sqrt(kCount * kLoss * (1 - kLoss));
  EXPECT_NEAR(static_cast<double>(first.size()), mean, 5 * sigma);
  EXPECT_EQ(run(), first);  // same seed, same fault pattern
}

TEST(LoopbackFaults, DuplicationDeliversIdenticalCopies) {
  constexpr uint32_t kCount = 5000;
  Pair pair(faults("duplicate=0.2,seed=3"));
  for (uint32_t i = 0; i < kCount; ++i) pair.send(i);
  const std::vector<Arrival> arrivals = pair.receive(kCount * 2, 50'000'000);
  const uint64_t duplicated = pair.sender().counters().duplicated;
  EXPECT_EQ(arrivals.size(), kCount + duplicated);
  EXPECT_NEAR(static_cast<double>(duplicated), kCount * 0.2, 5 * std::sqrt(kCount * 0.2 * 0.8));
  std::map<uint32_t, std::vector<std::byte>> first_copy;
  for (const Arrival& arrival : arrivals) {
    auto [it, inserted] = first_copy.emplace(arrival.index, arrival.bytes);
    if (!inserted) {
      EXPECT_EQ(it->second, arrival.bytes);
    }
  }
  EXPECT_EQ(first_copy.size(), kCount);
}

TEST(LoopbackFaults, CorruptionFlipsExactlyOneByte) {
  constexpr uint32_t kCount = 200;
  constexpr size_t kSize = 256;
  Pair clean(FaultConfig{});
  clean.send(0, kSize);
  const std::vector<std::byte> original = clean.receive(1).at(0).bytes;

  Pair pair(faults("corrupt=1,seed=11"));
  for (uint32_t i = 0; i < kCount; ++i) pair.send(0, kSize);  // same bytes every time
  const std::vector<Arrival> arrivals = pair.receive(kCount);
  ASSERT_EQ(arrivals.size(), kCount);
  for (const Arrival& arrival : arrivals) {
    ASSERT_EQ(arrival.bytes.size(), kSize);
    size_t differing = 0;
    for (size_t i = 0; i < kSize; ++i) differing += arrival.bytes[i] != original[i];
    EXPECT_EQ(differing, 1u);
  }
  EXPECT_EQ(pair.sender().counters().corrupted, kCount);
}

TEST(LoopbackFaults, DelayKeepsOrderAndIsNeverShort) {
  constexpr uint32_t kCount = 50;
  constexpr int64_t kDelayNs = 2'000'000;
  Pair pair(faults("delay=2ms"));
  std::vector<int64_t> sent_ns;
  for (uint32_t i = 0; i < kCount; ++i) sent_ns.push_back(pair.send(i));
  const std::vector<Arrival> arrivals = pair.receive(kCount);
  ASSERT_EQ(arrivals.size(), kCount);
  for (uint32_t i = 0; i < kCount; ++i) {
    EXPECT_EQ(arrivals[i].index, i);
    EXPECT_GE(arrivals[i].at_ns - sent_ns[i], kDelayNs);  // a lower bound: load cannot break it
  }
}

TEST(LoopbackFaults, ReorderLetsLaterDatagramsOvertake) {
  constexpr uint32_t kCount = 400;
  Pair pair(faults("reorder=0.2,seed=5"));
  for (uint32_t i = 0; i < kCount; ++i) pair.send(i);
  const std::vector<Arrival> arrivals = pair.receive(kCount);
  ASSERT_EQ(arrivals.size(), kCount);  // reordering loses nothing
  size_t inversions = 0;
  for (size_t i = 1; i < arrivals.size(); ++i) inversions += arrivals[i].index < arrivals[i - 1].index;
  EXPECT_GT(pair.sender().counters().reordered, 0u);
  EXPECT_GT(inversions, 0u);
}

TEST(LoopbackFaults, RateSpacesDatagrams) {
  // 100 x 1000 bytes at 8 Mbit/s: one per ms, so the last leaves >= 99 ms after the first.
  constexpr uint32_t kCount = 100;
  Pair pair(faults("rate=8mbit"));
  const int64_t first_ns = pair.send(0, 1000);
  for (uint32_t i = 1; i < kCount; ++i) pair.send(i, 1000);
  const std::vector<Arrival> arrivals = pair.receive(kCount);
  ASSERT_EQ(arrivals.size(), kCount);
  EXPECT_GE(arrivals.back().at_ns - first_ns, 99'000'000);
}

TEST(LoopbackFaults, PartitionDropsBothWaysUntilHealed) {
  Pair pair(FaultConfig{});
  ASSERT_TRUE(Fabric::instance().set_partitioned(pair.receiver_name(), true));
  for (uint32_t i = 0; i < 10; ++i) pair.send(i);
  EXPECT_TRUE(pair.receive(10, 20'000'000).empty());
  EXPECT_EQ(pair.sender().counters().dropped_partition, 10u);
  ASSERT_TRUE(Fabric::instance().set_partitioned(pair.receiver_name(), false));
  pair.send(42);
  const std::vector<Arrival> arrivals = pair.receive(1);
  ASSERT_EQ(arrivals.size(), 1u);
  EXPECT_EQ(arrivals[0].index, 42u);
  EXPECT_FALSE(Fabric::instance().set_partitioned("no-such-endpoint", true));
}

TEST(LoopbackFabric, NamesAreExclusiveAndFreedWithTheLink) {
  {
    LoopbackLink first(FaultConfig{});
    ASSERT_TRUE(first.open_listen("fabric-test-name"));
    LoopbackLink second(FaultConfig{});
    auto taken = second.open_listen("fabric-test-name");
    ASSERT_FALSE(taken);
    EXPECT_EQ(taken.error().code, common::ErrorCode::kAlreadyExists);
    EXPECT_NE(taken.error().message.find("fabric-test-name"), std::string::npos);
  }
  LoopbackLink third(FaultConfig{});
  EXPECT_TRUE(third.open_listen("fabric-test-name"));  // released by the destroyed link
  auto missing = third.open_path(PathSpec{}, "nobody-listens-here");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, common::ErrorCode::kNotFound);
}

TEST(LoopbackFabric, WakeInterruptsAnEndlessReceive) {
  LoopbackLink link(FaultConfig{});
  link.wake();
  bool called = false;
  link.receive(INT64_MAX, [&](SocketId, const Port&, std::span<const std::byte>) { called = true; });
  EXPECT_FALSE(called);  // returned because of the wake, with nothing received
}

TEST(LoopbackConfig, ParsesEveryKey) {
  auto config = parse_faults(
      "loss=0.01, delay=2ms,jitter=1ms,reorder=5%,duplicate=0.01,corrupt=0.001,rate=100mbit,seed=7");
  ASSERT_TRUE(config) << config.error().message;
  EXPECT_DOUBLE_EQ(config->loss, 0.01);
  EXPECT_EQ(config->delay_ns, 2'000'000);
  EXPECT_EQ(config->jitter_ns, 1'000'000);
  EXPECT_DOUBLE_EQ(config->reorder, 0.05);
  EXPECT_DOUBLE_EQ(config->duplicate, 0.01);
  EXPECT_DOUBLE_EQ(config->corrupt, 0.001);
  EXPECT_EQ(config->rate_bps, 100'000'000u);
  EXPECT_EQ(config->seed, 7u);
  EXPECT_TRUE(parse_faults(""));
}

TEST(LoopbackConfig, RejectsBadInputNamingIt) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"loss=0.1,lsos=0.2", "unknown key 'lsos'"},
      {"loss=120%", "loss=120%"},
      {"delay=5", "delay=5"},
      {"rate=fast", "rate=fast"},
      {"seed=-1", "seed=-1"},
      {"loss=0.1,loss=0.2", "twice"},
      {"loss", "expected key=value"},
      {"loss=0.1,", "empty setting"},
  };
  for (const auto& [text, needle] : cases) {
    auto config = parse_faults(text);
    ASSERT_FALSE(config) << text;
    EXPECT_EQ(config.error().code, common::ErrorCode::kInvalidArgument) << text;
    EXPECT_NE(config.error().message.find(needle), std::string::npos)
        << text << " -> " << config.error().message;
  }
}

TEST(DriverOptions, FillsOnePathAndTheReceiveWindow) {
  ChannelOptions options;
  options.rate_bps = 10'000'000'000;  // 10 Gbit/s x 100 ms x 2 = 250 MB
  auto normalized = datagram::normalize_options(options, "peer:1");
  ASSERT_TRUE(normalized);
  ASSERT_EQ(normalized->paths.size(), 1u);
  EXPECT_EQ(normalized->paths[0].remote, "peer:1");
  EXPECT_EQ(normalized->paths[0].rate_bps, 10'000'000'000);
  EXPECT_EQ(normalized->recv_window_bytes, 250'000'000);
  options.rate_bps = 0;
  EXPECT_EQ(datagram::normalize_options(options, "x")->recv_window_bytes, int64_t{4} << 20);
  options.recv_window_bytes = 12345;
  EXPECT_EQ(datagram::normalize_options(options, "x")->recv_window_bytes, 12345);
  options.mtu_bytes = 100;
  auto bad = datagram::normalize_options(options, "x");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("mtu_bytes"), std::string::npos);
  options.mtu_bytes = 1500;
  options.paths.resize(datagram::kMaxPaths + 1);
  EXPECT_FALSE(datagram::normalize_options(options, "x"));
}

}  // namespace
}  // namespace detwan::transport::loopback

// The communicator's transport key: what build_communicator hands each endpoint it opens
// (seen through its EndpointFactory seam), that every rank of one communicator gets the same
// key and other communicators other keys, DETWAN_ENCRYPT, and split children's keys.
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <future>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "collectives/comm/bootstrap.h"
#include "collectives/comm/comm_impl.h"
#include "common/clock.h"
#include "transport/registry.h"

namespace detwan::collectives {
namespace {

constexpr int64_t kGuardNs = 30'000'000'000;  // hang guard only

Deadline guard() { return Deadline{common::MonotonicClock().now_ns() + kGuardNs}; }

struct Opened {
  std::string backend;
  transport::Security security;
};

// Builds a communicator of `n` ranks (threads) meeting at a fresh root; returns, per rank, the
// key its bootstrap gave and what each of its endpoints was opened with.
struct Built {
  std::vector<CommKey> bootstrap_keys;
  std::vector<std::vector<Opened>> opened;
  std::vector<std::unique_ptr<Communicator::Impl>> impls;
};

Built build(int n, const CommConfig& config) {
  Built built;
  built.bootstrap_keys.resize(n);
  built.opened.resize(n);
  built.impls.resize(n);
  auto spec = start_bootstrap_root("127.0.0.1", kGuardNs);
  EXPECT_TRUE(spec.has_value());
  std::mutex mutex;
  std::vector<std::future<void>> ranks;
  for (int r = 0; r < n; ++r) {
    ranks.push_back(std::async(std::launch::async, [&, r] {
      auto bootstrap = join_bootstrap(*spec, r, n, kGuardNs);
      ASSERT_TRUE(bootstrap.has_value()) << bootstrap.error().message;
      built.bootstrap_keys[r] = (*bootstrap)->communicator_key();
      const EndpointFactory recording = [&, r](std::string_view backend,
                                               const transport::EndpointOptions& options) {
        {
          std::lock_guard lock(mutex);
          built.opened[r].push_back({std::string(backend), options.security});
        }
        return transport::make_endpoint(backend, options);
      };
      auto impl = build_communicator(**bootstrap, r, n, config, recording);
      ASSERT_TRUE(impl.has_value()) << impl.error().message;
      built.impls[r] = std::move(*impl);
    }));
  }
  for (auto& rank : ranks) rank.get();
  return built;
}

CommConfig loopback_config() {
  CommConfig config;
  config.intra_backend = "loopback";
  config.inter_backend = "loopback";
  config.deterministic = true;  // no RTT measurement: setup only
  config.setup_timeout_ns = kGuardNs;
  return config;
}

TEST(CommSecurity, EveryEndpointGetsTheCommunicatorsKeyToAuthenticate) {
  Built built = build(2, loopback_config());
  ASSERT_EQ(built.impls.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    ASSERT_NE(built.impls[r], nullptr);
    ASSERT_EQ(built.opened[r].size(), 2u) << "intra and inter";
    for (const Opened& opened : built.opened[r]) {
      EXPECT_EQ(opened.backend, "loopback");
      EXPECT_EQ(opened.security.mode, transport::SecurityMode::kAuthenticate);
      EXPECT_TRUE(opened.security.has_key);
      EXPECT_EQ(opened.security.key, built.bootstrap_keys[r]);
      EXPECT_EQ(opened.security.context, "detwan collectives v1");
    }
    EXPECT_EQ(built.impls[r]->key, built.bootstrap_keys[r]);
  }
  EXPECT_EQ(built.bootstrap_keys[0], built.bootstrap_keys[1]);
  // The channels work (the mesh hellos verified under that key): one barrier-like exchange.
  std::array<std::byte, 4> ping{std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}};
  std::array<std::byte, 4> got{};
  auto sent = built.impls[0]->peers->send(1, ping);
  ASSERT_TRUE(built.impls[1]->peers->recv_into(0, got, guard()).has_value());
  EXPECT_EQ(got, ping);
  ASSERT_TRUE(built.impls[0]->peers->wait(sent, guard()).has_value());
}

TEST(CommSecurity, TwoCommunicatorsHaveTwoKeys) {
  Built first = build(1, loopback_config());
  Built second = build(1, loopback_config());
  EXPECT_NE(first.bootstrap_keys[0], second.bootstrap_keys[0]);
  EXPECT_NE(first.opened[0][0].security.key, second.opened[0][0].security.key);
}

TEST(CommSecurity, EncryptAskedForInTheEnvironment) {
  ::setenv("DETWAN_ENCRYPT", "1", 1);
  auto config = CommConfig::from_environment();
  ::unsetenv("DETWAN_ENCRYPT");
  ASSERT_TRUE(config.has_value());
  EXPECT_EQ(config->channel_security, transport::SecurityMode::kEncrypt);
  EXPECT_NE(config->describe().find("channels=encrypted"), std::string::npos);
  CommConfig loopback = loopback_config();
  loopback.channel_security = config->channel_security;
  Built built = build(1, loopback);
  for (const Opened& opened : built.opened[0]) {
    EXPECT_EQ(opened.security.mode, transport::SecurityMode::kEncrypt);
  }
  ::setenv("DETWAN_ENCRYPT", "maybe", 1);
  auto bad = CommConfig::from_environment();
  ::unsetenv("DETWAN_ENCRYPT");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("DETWAN_ENCRYPT"), std::string::npos);
}

// The unauthenticated channels exist only when asked for by name (benchmarks of the plain
// protocol); the default is authenticated; a wrong name is refused by name.
TEST(CommSecurity, ChannelSecurityIsChosenByNameOnly) {
  auto defaults = CommConfig::from_environment();
  ASSERT_TRUE(defaults.has_value());
  EXPECT_EQ(defaults->channel_security, transport::SecurityMode::kAuthenticate);
  for (const auto& [name, mode, shown] :
       {std::tuple{"none", transport::SecurityMode::kNone, "channels=UNAUTHENTICATED"},
        std::tuple{"encrypt", transport::SecurityMode::kEncrypt, "channels=encrypted"},
        std::tuple{"authenticate", transport::SecurityMode::kAuthenticate,
                   "channels=authenticated"}}) {
    ::setenv("DETWAN_CHANNEL_SECURITY", name, 1);
    auto config = CommConfig::from_environment();
    ::unsetenv("DETWAN_CHANNEL_SECURITY");
    ASSERT_TRUE(config.has_value()) << name;
    EXPECT_EQ(config->channel_security, mode) << name;
    EXPECT_NE(config->describe().find(shown), std::string::npos) << config->describe();
    CommConfig loopback = loopback_config();
    loopback.channel_security = config->channel_security;
    Built built = build(1, loopback);
    for (const Opened& opened : built.opened[0]) EXPECT_EQ(opened.security.mode, mode) << name;
  }
  ::setenv("DETWAN_CHANNEL_SECURITY", "off", 1);
  auto bad = CommConfig::from_environment();
  ::unsetenv("DETWAN_CHANNEL_SECURITY");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("DETWAN_CHANNEL_SECURITY"), std::string::npos);
}

TEST(CommSecurity, SplitChildrenDeriveTheirOwnKeys) {
  CommKey parent{};
  parent[3] = std::byte{7};
  const auto a = split_key(parent, 0, 1, {0, 2});
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(*a, *split_key(parent, 0, 1, {0, 2}));  // every member computes the same
  EXPECT_NE(*a, parent);
  EXPECT_NE(*a, *split_key(parent, 0, 2, {1, 3}));  // the other color
  EXPECT_NE(*a, *split_key(parent, 1, 1, {0, 2}));  // the next split, same color
  EXPECT_NE(*a, *split_key(parent, 0, 1, {2, 0}));  // another order of ranks
  CommKey other_parent = parent;
  other_parent[0] = std::byte{1};
  EXPECT_NE(*a, *split_key(other_parent, 0, 1, {0, 2}));
}

TEST(CommSecurity, SplitChildrenConnectUnderTheirKeysAndWork) {
  // 4 ranks split by parity: each child's members derive the same key, so their mesh hellos
  // verify and an allreduce runs in each.
  auto id = UniqueId::create_root("127.0.0.1", kGuardNs);
  ASSERT_TRUE(id.has_value()) << id.error().message;
  CommConfig config = loopback_config();
  std::vector<std::future<Result<std::vector<float>>>> ranks;
  for (int r = 0; r < 4; ++r) {
    ranks.push_back(std::async(std::launch::async, [&, r]() -> Result<std::vector<float>> {
      auto comm = Communicator::create(*id, r, 4, config);
      if (!comm) return std::unexpected(comm.error());
      auto child = (*comm)->split(r % 2, r);
      if (!child) return std::unexpected(child.error());
      std::vector<float> values{static_cast<float>(r + 1)};
      if (auto ok = (*child)->all_reduce(values.data(), values.data(), 1, DataType::kFloat32,
                                         ReduceOp::kSum);
          !ok) {
        return std::unexpected(ok.error());
      }
      return values;
    }));
  }
  for (int r = 0; r < 4; ++r) {
    auto result = ranks[r].get();
    ASSERT_TRUE(result.has_value()) << "rank " << r << ": " << result.error().message;
    EXPECT_EQ((*result)[0], r % 2 == 0 ? 1.0f + 3.0f : 2.0f + 4.0f) << "rank " << r;
  }
}

}  // namespace
}  // namespace detwan::collectives

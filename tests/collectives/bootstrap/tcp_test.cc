// The TCP rendezvous: a root thread (or rank 0 in fixed-address mode) and ranks on threads; and
// what strangers get from it: squatters on the root's port, joiners without the secret, floods
// of connections that never prove it, oversized or altered answers.
#include <atomic>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include "collectives/comm/bootstrap.h"
#include "collectives/comm/bootstrap_io.h"
#include "collectives/comm/bootstrap_keys.h"
#include "collectives/comm/bootstrap_tcp.h"
#include "tests/collectives/bootstrap/bootstrap_util.h"
#include "tests/collectives/bootstrap/fake_peers.h"

namespace detwan::collectives {
namespace {

using testing::blob_for_rank;
using testing::expected_blobs;
using testing::FakeRoot;
using testing::join_and_exchange;
using testing::kSecondNs;
using testing::on_threads;
using Blobs = Result<std::vector<std::string>>;

constexpr const char* kSecret = "00112233445566778899aabbccddeeff";
constexpr std::string_view kUnproven = "the process at this address does not know the job's secret";

// A port nothing listens on right now (bound to port 0, then closed).
int free_port() {
  auto listener = bootstrap::listen_tcp("127.0.0.1", 0, /*reuse_address=*/true);
  EXPECT_TRUE(listener.has_value());
  return listener ? listener->port : 1;
}

// A root on 127.0.0.1 with its stats (the internal entry point, so tests can set its limits).
struct TestRoot {
  std::string spec;
  bootstrap::Spec parsed;
  std::shared_ptr<const bootstrap::RootStats> stats;
};
TestRoot start_test_root(int64_t timeout_ns, bootstrap::RootLimits limits = {},
                         const std::string& secret = kSecret) {
  auto listener = bootstrap::listen_tcp("127.0.0.1", 0, false);
  EXPECT_TRUE(listener.has_value());
  TestRoot root;
  root.parsed.host = "127.0.0.1";
  root.parsed.port = listener->port;
  root.parsed.secret = secret;
  root.spec = root.parsed.to_string();
  auto stats = bootstrap::start_root_thread(std::move(*listener), root.parsed.name(), secret,
                                            timeout_ns, limits);
  EXPECT_TRUE(stats.has_value());
  root.stats = *stats;
  return root;
}

TEST(TcpBootstrap, OneToEightRanksWithDifferentBlobs) {
  for (int nranks = 1; nranks <= 8; ++nranks) {
    auto spec = start_bootstrap_root("127.0.0.1", 20 * kSecondNs);
    ASSERT_TRUE(spec.has_value()) << spec.error().message;
    EXPECT_TRUE(spec->starts_with("tcp://127.0.0.1:")) << *spec;
    EXPECT_EQ(spec->size() - spec->find('#') - 1, 32u) << *spec;
    std::vector<std::string> hosts(static_cast<size_t>(nranks));
    std::vector<CommKey> keys(static_cast<size_t>(nranks));
    auto results = on_threads<Blobs>(nranks, [&](int rank) -> Blobs {
      auto bootstrap = join_bootstrap(*spec, rank, nranks, 20 * kSecondNs);
      if (!bootstrap) return std::unexpected(bootstrap.error());
      hosts[rank] = (*bootstrap)->local_host();
      keys[rank] = (*bootstrap)->communicator_key();
      return (*bootstrap)->exchange(blob_for_rank(rank), 20 * kSecondNs);
    });
    const auto expected = expected_blobs(nranks);
    for (int rank = 0; rank < nranks; ++rank) {
      ASSERT_TRUE(results[rank].has_value())
          << "nranks " << nranks << " rank " << rank << ": " << results[rank].error().message;
      EXPECT_EQ(*results[rank], expected) << "nranks " << nranks << " rank " << rank;
      EXPECT_EQ(hosts[rank], "127.0.0.1");
      EXPECT_EQ(keys[rank], keys[0]) << "every rank derives the same communicator key";
    }
  }
}

TEST(TcpBootstrap, TwoRendezvousWithOneSecretGiveTwoCommunicatorKeys) {
  // Fixed-address jobs may reuse one DETWAN_BOOTSTRAP_SECRET: each root's salt still makes
  // each communicator's key its own.
  auto first = start_test_root(5 * kSecondNs);
  auto second = start_test_root(5 * kSecondNs);
  auto a = join_bootstrap(first.spec, 0, 1, 5 * kSecondNs);
  auto b = join_bootstrap(second.spec, 0, 1, 5 * kSecondNs);
  ASSERT_TRUE(a && b);
  EXPECT_NE((*a)->communicator_key(), (*b)->communicator_key());
  CommKey zero{};
  EXPECT_NE((*a)->communicator_key(), zero);
}

// ---- squatters: a process at the root's address that does not know the secret -------------

struct SquatterCase {
  const char* name;
  FakeRoot::Behaviour behaviour;
  const char* detail;  // what the joiner's error says beyond kUnproven
};

class Squatter : public ::testing::TestWithParam<SquatterCase> {};

TEST_P(Squatter, LearnsNothingAndRedirectsNoOne) {
  const SquatterCase& c = GetParam();
  // A genuine root with the job's secret elsewhere: what replaying and relaying squatters use.
  auto genuine = start_test_root(10 * kSecondNs);
  FakeRoot squatter(c.behaviour, genuine.parsed);
  bootstrap::Spec spec;
  spec.host = "127.0.0.1";
  spec.port = squatter.port();
  spec.secret = kSecret;
  auto joined = join_bootstrap(spec.to_string(), 1, 2, 5 * kSecondNs);
  ASSERT_FALSE(joined.has_value());
  EXPECT_EQ(joined.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(joined.error().message.find(kUnproven), std::string::npos) << joined.error().message;
  EXPECT_NE(joined.error().message.find(c.detail), std::string::npos) << joined.error().message;
  // All the squatter ever received: one hello (a random nonce), nothing else.
  const std::string captured = squatter.captured();
  EXPECT_EQ(captured.size(), bootstrap::kHelloBytes);
  EXPECT_TRUE(captured.starts_with("DWBH")) << captured.size();
  EXPECT_EQ(captured.find(kSecret), std::string::npos);
  EXPECT_EQ(squatter.connections(), 1);
}

INSTANTIATE_TEST_SUITE_P(
    TcpBootstrap, Squatter,
    ::testing::Values(SquatterCase{"garbage", FakeRoot::Behaviour::kGarbage, "not a challenge"},
                      SquatterCase{"random_proof", FakeRoot::Behaviour::kRandomProof,
                                   "its proof does not verify"},
                      SquatterCase{"replayed_challenge", FakeRoot::Behaviour::kReplayChallenge,
                                   "its proof does not verify"},
                      SquatterCase{"relay_to_another_root", FakeRoot::Behaviour::kRelayToGenuine,
                                   "its proof does not verify"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(TcpBootstrap, ASquatterThatSaysNothingGetsNothing) {
  bootstrap::Spec unused;
  FakeRoot squatter(FakeRoot::Behaviour::kSilent, unused);
  bootstrap::Spec spec;
  spec.host = "127.0.0.1";
  spec.port = squatter.port();
  spec.secret = kSecret;
  auto joined = join_bootstrap(spec.to_string(), 1, 2, kSecondNs / 2);
  ASSERT_FALSE(joined.has_value());
  EXPECT_EQ(joined.error().code, ErrorCode::kTimeout);
  EXPECT_NE(joined.error().message.find("no challenge"), std::string::npos)
      << joined.error().message;
  EXPECT_EQ(squatter.captured().size(), bootstrap::kHelloBytes);
}

// ---- joiners without the secret ----------------------------------------------------------

TEST(TcpBootstrap, AJoinerWithAnotherSecretIsRefusedAndTheGenuineRanksComplete) {
  auto root = start_test_root(20 * kSecondNs);
  // With another secret, the joiner cannot verify the root's proof: it stops there.
  bootstrap::Spec wrong = root.parsed;
  wrong.secret = "ffeeddccbbaa99887766554433221100";
  auto stranger = join_bootstrap(wrong.to_string(), 1, 2, 5 * kSecondNs);
  ASSERT_FALSE(stranger.has_value());
  EXPECT_NE(stranger.error().message.find(kUnproven), std::string::npos)
      << stranger.error().message;
  // A stranger that answers the challenge with a made-up proof (and a frame after it) is
  // closed without a word, and nothing after its 37 proof bytes is read.
  auto fd = bootstrap::connect_tcp("127.0.0.1", root.parsed.port,
                                   bootstrap::now_ns() + 5 * kSecondNs, "stranger");
  ASSERT_TRUE(fd.has_value());
  bootstrap::Nonce nonce{};
  std::string forged = bootstrap::encode_hello(nonce) + bootstrap::encode_proof({}) +
                       bootstrap::length_prefix(bootstrap::kMaxBlobBytes) + "forged join";
  ASSERT_TRUE(bootstrap::send_all(fd->get(), forged, bootstrap::now_ns() + 5 * kSecondNs));
  auto challenge = bootstrap::recv_exact(fd->get(), bootstrap::kChallengeBytes,
                                         bootstrap::now_ns() + 5 * kSecondNs);
  ASSERT_TRUE(challenge.has_value()) << challenge.error().message;
  auto after = bootstrap::recv_exact(fd->get(), 1, bootstrap::now_ns() + 5 * kSecondNs);
  ASSERT_FALSE(after.has_value());
  EXPECT_EQ(after.error().code, ErrorCode::kUnavailable) << after.error().message;
  EXPECT_EQ(root.stats->wrong_proof.load(), 1u);
  // The genuine ranks complete.
  auto results = on_threads<Blobs>(
      2, [&](int rank) { return join_and_exchange(root.spec, rank, 2, 20 * kSecondNs); });
  for (const auto& result : results) {
    ASSERT_TRUE(result.has_value()) << result.error().message;
    EXPECT_EQ(*result, expected_blobs(2));
  }
}

TEST(TcpBootstrap, AFloodOfConnectionsThatNeverProveDoesNotStopTheGenuineRanks) {
  bootstrap::RootLimits limits;
  limits.handshake_timeout_ns = kSecondNs / 5;
  limits.max_unauthenticated = 32;
  auto root = start_test_root(60 * kSecondNs, limits);
  // Connections that say nothing, and connections that say hello and never prove anything,
  // opened without pause (keeping the newest 200 open) while the genuine ranks join.
  std::atomic<bool> stop{false};
  std::atomic<int> opened{0};
  std::thread flood([&] {
    std::vector<common::UniqueFd> held;
    for (int i = 0; !stop.load() && i < 100'000; ++i) {
      auto fd = bootstrap::connect_tcp("127.0.0.1", root.parsed.port,
                                       bootstrap::now_ns() + kSecondNs, "flood");
      if (!fd) continue;
      if (i % 2 == 1) {
        (void)bootstrap::send_all(fd->get(), bootstrap::encode_hello({}),
                                  bootstrap::now_ns() + kSecondNs);
      }
      held.push_back(std::move(*fd));
      if (held.size() > 200) held.erase(held.begin());
      opened.fetch_add(1);
    }
  });
  while (opened.load() < 300) std::this_thread::yield();
  auto results = on_threads<Blobs>(
      4, [&](int rank) { return join_and_exchange(root.spec, rank, 4, 50 * kSecondNs); });
  stop.store(true);
  flood.join();
  for (const auto& result : results) {
    ASSERT_TRUE(result.has_value()) << result.error().message;
    EXPECT_EQ(*result, expected_blobs(4));
  }
  // The flood was real: the root closed connections to make room or at their deadline.
  EXPECT_GT(root.stats->evicted.load() + root.stats->handshake_timeouts.load(), 0u);
  EXPECT_GE(root.stats->authenticated.load(), 4u);
}

TEST(TcpBootstrap, ASilentConnectionIsClosedAtItsDeadline) {
  bootstrap::RootLimits limits;
  limits.handshake_timeout_ns = kSecondNs / 10;
  auto root = start_test_root(20 * kSecondNs, limits);
  auto fd = bootstrap::connect_tcp("127.0.0.1", root.parsed.port,
                                   bootstrap::now_ns() + 5 * kSecondNs, "silent");
  ASSERT_TRUE(fd.has_value());
  // Nothing sent: the root closes it after 0.1 s (the read is only bounded by a hang guard).
  auto read = bootstrap::recv_exact(fd->get(), 1, bootstrap::now_ns() + 20 * kSecondNs);
  ASSERT_FALSE(read.has_value());
  EXPECT_EQ(read.error().code, ErrorCode::kUnavailable) << read.error().message;
  EXPECT_EQ(root.stats->handshake_timeouts.load(), 1u);
}

// ---- what a rank accepts from a root that knows the secret --------------------------------

TEST(TcpBootstrap, AnAnswerLargerThanTheJobCanNeedIsRefusedBeforeAllocating) {
  FakeRoot root(FakeRoot::Behaviour::kOversizedAnswer, bootstrap::Spec{}, kSecret);
  const std::string spec = root.spec(kSecret);
  auto result = join_and_exchange(spec, 0, 2, 5 * kSecondNs);
  ASSERT_FALSE(result.has_value());
  const size_t limit = bootstrap::max_answer_payload_bytes(2) + crypto::kTagBytes;
  EXPECT_NE(result.error().message.find(fmt::format("a frame of {} bytes exceeds the limit of {}",
                                                    FakeRoot::kOversizedLength, limit)),
            std::string::npos)
      << result.error().message;
  // Two ranks: the answer's header and two blobs at their bound, not "anything".
  EXPECT_EQ(limit, 5 + 1 + 4 + 2 * (4 + bootstrap::kMaxBlobBytes) + crypto::kTagBytes);
}

TEST(TcpBootstrap, AnAlteredAnswerIsRefused) {
  FakeRoot root(FakeRoot::Behaviour::kAlteredAnswer, bootstrap::Spec{}, kSecret);
  auto result = join_and_exchange(root.spec(kSecret), 0, 2, 5 * kSecondNs);
  ASSERT_FALSE(result.has_value());
  EXPECT_NE(result.error().message.find("does not authenticate"), std::string::npos)
      << result.error().message;
}

TEST(TcpBootstrap, TheJoinAndTheAnswerAreSealed) {
  // A root that knows the secret records the join's bytes as they travel: the blob is not
  // among them.
  FakeRoot root(FakeRoot::Behaviour::kOversizedAnswer, bootstrap::Spec{}, kSecret);
  auto bootstrap = join_bootstrap(root.spec(kSecret), 1, 2, 5 * kSecondNs);
  ASSERT_TRUE(bootstrap.has_value()) << bootstrap.error().message;
  const std::string blob = "a|10.1.2.3:4567|10.1.2.3:4568";
  EXPECT_FALSE((*bootstrap)->exchange(blob, 5 * kSecondNs).has_value());
  const std::string captured = root.captured();
  EXPECT_GT(captured.size(), bootstrap::kHelloBytes + bootstrap::kProofBytes + blob.size());
  EXPECT_EQ(captured.find("10.1.2.3"), std::string::npos);
  EXPECT_EQ(captured.find(kSecret), std::string::npos);
}

// ---- fixed-address mode ---------------------------------------------------------------

struct WithSecret {
  explicit WithSecret(const char* value) {
    if (value == nullptr) {
      ::unsetenv("DETWAN_BOOTSTRAP_SECRET");
    } else {
      ::setenv("DETWAN_BOOTSTRAP_SECRET", value, 1);
    }
  }
  ~WithSecret() { ::unsetenv("DETWAN_BOOTSTRAP_SECRET"); }
};

TEST(TcpBootstrap, FixedAddressNeedsASecret) {
  for (const char* bad : {static_cast<const char*>(nullptr), "", "abcd",
                          "not-hex-but-long-enough-"
                          "xxxxxxxxxxxxxxxx"}) {
    WithSecret secret(bad);
    auto joined = join_bootstrap("tcp://127.0.0.1:" + std::to_string(free_port()), 0, 2, kSecondNs);
    ASSERT_FALSE(joined.has_value());
    EXPECT_EQ(joined.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(joined.error().message.find("DETWAN_BOOTSTRAP_SECRET"), std::string::npos)
        << joined.error().message;
  }
}

TEST(TcpBootstrap, FixedAddressRankZeroHostsTheRoot) {
  WithSecret secret(kSecret);
  const int port = free_port();
  const std::string spec = "tcp://127.0.0.1:" + std::to_string(port);
  constexpr int kRanks = 4;
  // Ranks 1..3 may start before rank 0 has its root up: they retry until it is.
  auto results = on_threads<Blobs>(kRanks, [&](int rank) {
    return join_and_exchange(spec, kRanks - 1 - rank, kRanks, 20 * kSecondNs);
  });
  for (int i = 0; i < kRanks; ++i) {
    ASSERT_TRUE(results[i].has_value()) << results[i].error().message;
    EXPECT_EQ(*results[i], expected_blobs(kRanks));
  }
}

TEST(TcpBootstrap, FixedAddressWithAnotherSecretIsRefused) {
  const int port = free_port();
  const std::string spec = "tcp://127.0.0.1:" + std::to_string(port);
  WithSecret secret(kSecret);
  auto rank0 =
      std::async(std::launch::async, [&] { return join_and_exchange(spec, 0, 2, 20 * kSecondNs); });
  // A stranger with another secret (given in the spec) is refused; the real rank 1 completes.
  auto stranger =
      join_and_exchange(spec + "#ffeeddccbbaa99887766554433221100", 1, 2, 10 * kSecondNs);
  ASSERT_FALSE(stranger.has_value());
  EXPECT_NE(stranger.error().message.find(kUnproven), std::string::npos)
      << stranger.error().message;
  auto rank1 = join_and_exchange(spec, 1, 2, 20 * kSecondNs);
  auto rank0_result = rank0.get();
  ASSERT_TRUE(rank0_result.has_value()) << rank0_result.error().message;
  ASSERT_TRUE(rank1.has_value()) << rank1.error().message;
  EXPECT_EQ(*rank1, expected_blobs(2));
}

TEST(TcpBootstrap, FixedAddressPortInUseIsAnError) {
  WithSecret secret(kSecret);
  auto taken = bootstrap::listen_tcp("127.0.0.1", 0, /*reuse_address=*/false);
  ASSERT_TRUE(taken.has_value());
  auto joined = join_bootstrap("tcp://127.0.0.1:" + std::to_string(taken->port), 0, 2, kSecondNs);
  ASSERT_FALSE(joined.has_value());
  EXPECT_NE(joined.error().message.find("rank 0 starting the root"), std::string::npos)
      << joined.error().message;
}

// ---- joins the root refuses -----------------------------------------------------------

TEST(TcpBootstrap, RankOutOfRangeAndTooManyRanksAreRejectedByTheRoot) {
  auto root = start_test_root(5 * kSecondNs);
  // join_bootstrap validates its own arguments, so speak the protocol by hand.
  for (const auto& [join, expected] : std::vector<std::pair<bootstrap::Join, std::string>>{
           {{5, 4, "x"}, "rank 5 is out of range for nranks 4"},
           {{0, bootstrap::kMaxRanks + 1, "x"}, "joined with nranks 65537 (1..65536)"}}) {
    auto answer = testing::raw_join(root.parsed, join, 5 * kSecondNs);
    ASSERT_FALSE(answer.has_value());
    EXPECT_NE(answer.error().message.find(expected), std::string::npos) << answer.error().message;
  }
}

TEST(TcpBootstrap, DuplicateAndWrongNranksAreRejectedAndGoodJoinsKept) {
  auto root = start_test_root(20 * kSecondNs);
  // Two joiners claim rank 0 of 2: whichever the root sees second is told "joined twice".
  auto first = std::async(std::launch::async,
                          [&] { return join_and_exchange(root.spec, 0, 2, 20 * kSecondNs); });
  auto second = std::async(std::launch::async,
                           [&] { return join_and_exchange(root.spec, 0, 2, 20 * kSecondNs); });
  // The refused one returns at once; the kept one waits for rank 1.
  while (first.wait_for(std::chrono::milliseconds(5)) != std::future_status::ready &&
         second.wait_for(std::chrono::milliseconds(5)) != std::future_status::ready) {
  }
  const bool first_refused = first.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  auto refused = first_refused ? first.get() : second.get();
  auto& kept = first_refused ? second : first;
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("rank 0 joined twice"), std::string::npos)
      << refused.error().message;

  // nranks is now fixed at 2 by the kept join.
  auto wrong = join_and_exchange(root.spec, 1, 8, 20 * kSecondNs);
  ASSERT_FALSE(wrong.has_value());
  EXPECT_EQ(wrong.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(wrong.error().message.find("rank 1 joined with nranks 8, expected 2"),
            std::string::npos)
      << wrong.error().message;
  EXPECT_NE(wrong.error().message.find(root.parsed.name()), std::string::npos)
      << wrong.error().message;

  // The good join was kept: rank 1 completes the exchange with the kept rank 0.
  auto good = join_and_exchange(root.spec, 1, 2, 20 * kSecondNs);
  ASSERT_TRUE(good.has_value()) << good.error().message;
  EXPECT_EQ(*good, expected_blobs(2));
  auto kept_result = kept.get();
  ASSERT_TRUE(kept_result.has_value()) << kept_result.error().message;
  EXPECT_EQ(*kept_result, *good);
}

TEST(TcpBootstrap, RanksThatNeverJoinAreNamed) {
  auto spec = start_bootstrap_root("127.0.0.1", kSecondNs / 4);
  ASSERT_TRUE(spec.has_value());
  // Ranks 0 and 2 of 4 join; 1 and 3 never do. The root gives up after 0.25 s.
  auto results = on_threads<Blobs>(
      2, [&](int i) { return join_and_exchange(*spec, 2 * i, 4, 20 * kSecondNs); });
  for (const auto& result : results) {
    ASSERT_FALSE(result.has_value());
    EXPECT_EQ(result.error().code, ErrorCode::kTimeout);
    EXPECT_NE(result.error().message.find("ranks 1, 3 never joined within 0.25 s"),
              std::string::npos)
        << result.error().message;
  }
}

TEST(TcpBootstrap, NoRootWithinTimeout) {
  const std::string spec =
      "tcp://127.0.0.1:" + std::to_string(free_port()) + "#" + std::string(kSecret);
  auto joined = join_bootstrap(spec, 1, 2, kSecondNs / 5);
  ASSERT_FALSE(joined.has_value());
  EXPECT_EQ(joined.error().code, ErrorCode::kTimeout);
  EXPECT_NE(joined.error().message.find("cannot reach the root"), std::string::npos)
      << joined.error().message;
}

TEST(TcpBootstrap, ArgumentErrors) {
  const std::string base = "tcp://127.0.0.1:1#" + std::string(kSecret);
  EXPECT_FALSE(join_bootstrap(base, 2, 2, kSecondNs).has_value());
  EXPECT_FALSE(join_bootstrap(base, 0, 0, kSecondNs).has_value());
  EXPECT_FALSE(join_bootstrap(base, 0, bootstrap::kMaxRanks + 1, kSecondNs).has_value());
  EXPECT_FALSE(join_bootstrap("udp://127.0.0.1:1", 0, 1, kSecondNs).has_value());
  auto bad = join_bootstrap("tcp://127.0.0.1#" + std::string(kSecret), 0, 1, kSecondNs);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("no port"), std::string::npos) << bad.error().message;
  EXPECT_EQ(bad.error().message.find(kSecret), std::string::npos) << bad.error().message;
  auto short_secret = join_bootstrap("tcp://127.0.0.1:1#abcd", 0, 1, kSecondNs);
  ASSERT_FALSE(short_secret.has_value());
  EXPECT_NE(short_secret.error().message.find("32 to 64 hex digits"), std::string::npos)
      << short_secret.error().message;
  EXPECT_FALSE(start_bootstrap_root("", kSecondNs).has_value());
}

TEST(TcpBootstrap, ExchangeOnlyOnce) {
  auto spec = start_bootstrap_root("127.0.0.1", 5 * kSecondNs);
  ASSERT_TRUE(spec.has_value());
  auto bootstrap = join_bootstrap(*spec, 0, 1, 5 * kSecondNs);
  ASSERT_TRUE(bootstrap.has_value());
  auto first = (*bootstrap)->exchange("only", 5 * kSecondNs);
  ASSERT_TRUE(first.has_value()) << first.error().message;
  EXPECT_EQ(*first, std::vector<std::string>{"only"});
  EXPECT_FALSE((*bootstrap)->exchange("again", kSecondNs).has_value());
}

}  // namespace
}  // namespace detwan::collectives

// The TCP rendezvous: a root thread (or rank 0 in fixed-address mode) and ranks on threads.
#include <poll.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "collectives/comm/bootstrap.h"
#include "collectives/comm/bootstrap_io.h"
#include "tests/collectives/bootstrap/bootstrap_util.h"

namespace detwan::collectives {
namespace {

using testing::blob_for_rank;
using testing::expected_blobs;
using testing::join_and_exchange;
using testing::kSecondNs;
using testing::on_threads;
using Blobs = Result<std::vector<std::string>>;

// A port nothing listens on right now (bound to port 0, then closed).
int free_port() {
  auto listener = bootstrap::listen_tcp("127.0.0.1", 0, /*reuse_address=*/true);
  EXPECT_TRUE(listener.has_value());
  return listener ? listener->port : 1;
}

TEST(TcpBootstrap, OneToEightRanksWithDifferentBlobs) {
  for (int nranks = 1; nranks <= 8; ++nranks) {
    auto spec = start_bootstrap_root("127.0.0.1", 20 * kSecondNs);
    ASSERT_TRUE(spec.has_value()) << spec.error().message;
    EXPECT_TRUE(spec->starts_with("tcp://127.0.0.1:")) << *spec;
    EXPECT_NE(spec->find('#'), std::string::npos) << *spec;
    std::vector<std::string> hosts(static_cast<size_t>(nranks));
    auto results = on_threads<Blobs>(nranks, [&](int rank) {
      return join_and_exchange(*spec, rank, nranks, 20 * kSecondNs, &hosts[rank]);
    });
    const auto expected = expected_blobs(nranks);
    for (int rank = 0; rank < nranks; ++rank) {
      ASSERT_TRUE(results[rank].has_value()) << "nranks " << nranks << " rank " << rank << ": "
                                             << results[rank].error().message;
      EXPECT_EQ(*results[rank], expected) << "nranks " << nranks << " rank " << rank;
      EXPECT_EQ(hosts[rank], "127.0.0.1");
    }
  }
}

// The shared secret of fixed-address mode, for the tests that use it (the environment is the
// process's: every rank thread sees it).
constexpr const char* kSecret = "00112233445566778899aabbccddeeff";
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
  for (const char* bad : {static_cast<const char*>(nullptr), "", "abcd", "not-hex-but-long-enough-"
                                                                       "xxxxxxxxxxxxxxxx"}) {
    WithSecret secret(bad);
    auto joined = join_bootstrap("tcp://127.0.0.1:" + std::to_string(free_port()), 0, 2,
                                 kSecondNs);
    ASSERT_FALSE(joined.has_value());
    EXPECT_EQ(joined.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(joined.error().message.find("DETWAN_BOOTSTRAP_SECRET"), std::string::npos)
        << joined.error().message;
  }
}

TEST(TcpBootstrap, FixedAddressWithAnotherSecretIsRejected) {
  const int port = free_port();
  const std::string spec = "tcp://127.0.0.1:" + std::to_string(port);
  WithSecret secret(kSecret);
  // Rank 0 hosts the root with kSecret; a stranger claiming rank 1 with another secret is
  // refused, and the real rank 1 then completes the exchange.
  auto results = on_threads<Blobs>(2, [&](int thread) -> Blobs {
    if (thread == 0) return join_and_exchange(spec, 0, 2, 10 * kSecondNs);
    auto fd = bootstrap::connect_tcp("127.0.0.1", port, bootstrap::now_ns() + 5 * kSecondNs,
                                     "stranger");
    if (!fd) return std::unexpected(fd.error());
    const std::string join =
        bootstrap::encode_join({"ffeeddccbbaa99887766554433221100", 1, 2, "forged"});
    if (!bootstrap::send_all(fd->get(), bootstrap::frame(join),
                             bootstrap::now_ns() + 5 * kSecondNs)) {
      return make_error(ErrorCode::kIo, "send failed");
    }
    auto answer =
        bootstrap::recv_frame(fd->get(), 1 << 20, bootstrap::now_ns() + 5 * kSecondNs);
    if (!answer) return std::unexpected(answer.error());
    auto refused = bootstrap::decode_answer(*answer);
    if (refused) return make_error(ErrorCode::kInternal, "the stranger was accepted");
    if (refused.error().message.find("wrong secret") == std::string::npos) {
      return std::unexpected(refused.error());
    }
    return join_and_exchange(spec, 1, 2, 10 * kSecondNs);  // the real rank 1
  });
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(results[i].has_value()) << i << ": " << results[i].error().message;
    EXPECT_EQ(*results[i], expected_blobs(2));
  }
}

TEST(TcpBootstrap, AStrangerIsRefusedBeforeTheRootBuffersItsFrame) {
  auto spec = bootstrap::parse_spec(*start_bootstrap_root("127.0.0.1", 5 * kSecondNs));
  ASSERT_TRUE(spec.has_value());
  auto fd = bootstrap::connect_tcp(spec->host, spec->port, bootstrap::now_ns() + 5 * kSecondNs,
                                   "test");
  ASSERT_TRUE(fd.has_value());
  // A join frame announcing 64 MB with a wrong secret: only its first bytes are sent. The root
  // answers the refusal at once, without waiting for (or buffering) the rest.
  std::string join = bootstrap::encode_join({std::string(32, 'e'), 0, 1, std::string(64, 'x')});
  std::string head = bootstrap::frame(join).substr(0, 4 + bootstrap::kJoinNoncePrefixBytes);
  const uint32_t announced = bootstrap::kMaxBlobBytes;
  head[0] = static_cast<char>(announced >> 24);
  head[1] = static_cast<char>(announced >> 16);
  head[2] = static_cast<char>(announced >> 8);
  head[3] = static_cast<char>(announced);
  ASSERT_TRUE(bootstrap::send_all(fd->get(), head, bootstrap::now_ns() + 5 * kSecondNs));
  auto answer = bootstrap::recv_frame(fd->get(), 1 << 20, bootstrap::now_ns() + 3 * kSecondNs);
  ASSERT_TRUE(answer.has_value()) << answer.error().message;
  auto blobs = bootstrap::decode_answer(*answer);
  ASSERT_FALSE(blobs.has_value());
  EXPECT_NE(blobs.error().message.find("wrong secret"), std::string::npos)
      << blobs.error().message;
  // The real rank still joins.
  auto good = join_and_exchange(spec->to_string(), 0, 1, 5 * kSecondNs);
  ASSERT_TRUE(good.has_value()) << good.error().message;
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

TEST(TcpBootstrap, FixedAddressPortInUseIsAnError) {
  WithSecret secret(kSecret);
  auto taken = bootstrap::listen_tcp("127.0.0.1", 0, /*reuse_address=*/false);
  ASSERT_TRUE(taken.has_value());
  auto joined = join_bootstrap("tcp://127.0.0.1:" + std::to_string(taken->port), 0, 2,
                               kSecondNs);
  ASSERT_FALSE(joined.has_value());
  EXPECT_NE(joined.error().message.find("rank 0 starting the root"), std::string::npos)
      << joined.error().message;
}

TEST(TcpBootstrap, WrongNonceIsRejected) {
  auto spec = start_bootstrap_root("127.0.0.1", 5 * kSecondNs);
  ASSERT_TRUE(spec.has_value());
  const std::string wrong = spec->substr(0, spec->find('#')) + "#00ff";
  auto result = join_and_exchange(wrong, 0, 1, 5 * kSecondNs);
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(result.error().message.find("wrong secret"), std::string::npos)
      << result.error().message;
}

TEST(TcpBootstrap, RankOutOfRangeIsRejectedByTheRoot) {
  auto spec = bootstrap::parse_spec(*start_bootstrap_root("127.0.0.1", 5 * kSecondNs));
  ASSERT_TRUE(spec.has_value());
  // join_bootstrap validates its own arguments, so speak the wire protocol directly.
  auto fd = bootstrap::connect_tcp(spec->host, spec->port, bootstrap::now_ns() + 5 * kSecondNs,
                                   "test");
  ASSERT_TRUE(fd.has_value());
  const std::string join = bootstrap::encode_join({*spec->nonce, 5, 4, "x"});
  ASSERT_TRUE(bootstrap::send_all(fd->get(), bootstrap::frame(join),
                                  bootstrap::now_ns() + 5 * kSecondNs));
  auto answer = bootstrap::recv_frame(fd->get(), 1 << 20, bootstrap::now_ns() + 5 * kSecondNs);
  ASSERT_TRUE(answer.has_value()) << answer.error().message;
  auto blobs = bootstrap::decode_answer(*answer);
  ASSERT_FALSE(blobs.has_value());
  EXPECT_NE(blobs.error().message.find("rank 5 is out of range for nranks 4"), std::string::npos)
      << blobs.error().message;
}

TEST(TcpBootstrap, DuplicateAndWrongNranksAreRejectedAndGoodJoinsKept) {
  auto spec_text = start_bootstrap_root("127.0.0.1", 20 * kSecondNs);
  ASSERT_TRUE(spec_text.has_value());
  auto spec = bootstrap::parse_spec(*spec_text);
  ASSERT_TRUE(spec.has_value());
  const int64_t deadline = bootstrap::now_ns() + 20 * kSecondNs;
  auto connect = [&] {
    auto fd = bootstrap::connect_tcp(spec->host, spec->port, deadline, "test");
    EXPECT_TRUE(fd.has_value());
    return std::move(*fd);
  };
  auto send_join = [&](int fd, int rank, int nranks) {
    const std::string join = bootstrap::encode_join({*spec->nonce, rank, nranks, "r0"});
    EXPECT_TRUE(bootstrap::send_all(fd, bootstrap::frame(join), deadline));
  };
  // Two connections claim rank 0 of 2: whichever the root sees second is told "joined twice".
  common::UniqueFd a = connect();
  common::UniqueFd b = connect();
  send_join(a.get(), 0, 2);
  send_join(b.get(), 0, 2);
  pollfd fds[2] = {{a.get(), POLLIN, 0}, {b.get(), POLLIN, 0}};
  ASSERT_GT(::poll(fds, 2, 20'000), 0);
  const bool a_rejected = fds[0].revents != 0;
  common::UniqueFd& rejected = a_rejected ? a : b;
  common::UniqueFd& kept = a_rejected ? b : a;
  auto duplicate = bootstrap::recv_frame(rejected.get(), 1 << 20, deadline);
  ASSERT_TRUE(duplicate.has_value());
  auto duplicate_answer = bootstrap::decode_answer(*duplicate);
  ASSERT_FALSE(duplicate_answer.has_value());
  EXPECT_NE(duplicate_answer.error().message.find("rank 0 joined twice"), std::string::npos)
      << duplicate_answer.error().message;

  // nranks is now fixed at 2 by the kept join.
  auto wrong = join_and_exchange(*spec_text, 1, 8, 20 * kSecondNs);
  ASSERT_FALSE(wrong.has_value());
  EXPECT_EQ(wrong.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(wrong.error().message.find("rank 1 joined with nranks 8, expected 2"),
            std::string::npos)
      << wrong.error().message;
  EXPECT_NE(wrong.error().message.find(spec->name()), std::string::npos)
      << wrong.error().message;

  // The good joins were kept: rank 1 completes the exchange with the kept rank 0.
  auto good = join_and_exchange(*spec_text, 1, 2, 20 * kSecondNs);
  ASSERT_TRUE(good.has_value()) << good.error().message;
  EXPECT_EQ(*good, (std::vector<std::string>{"r0", blob_for_rank(1)}));
  auto kept_answer = bootstrap::recv_frame(kept.get(), 1u << 30, deadline);
  ASSERT_TRUE(kept_answer.has_value());
  auto kept_blobs = bootstrap::decode_answer(*kept_answer);
  ASSERT_TRUE(kept_blobs.has_value()) << kept_blobs.error().message;
  EXPECT_EQ(*kept_blobs, *good);
}

TEST(TcpBootstrap, RanksThatNeverJoinAreNamed) {
  auto spec = start_bootstrap_root("127.0.0.1", kSecondNs / 4);
  ASSERT_TRUE(spec.has_value());
  // Ranks 0 and 2 of 4 join; 1 and 3 never do. The root gives up after 0.25 s.
  auto results = on_threads<Blobs>(2, [&](int i) {
    return join_and_exchange(*spec, 2 * i, 4, 20 * kSecondNs);
  });
  for (const auto& result : results) {
    ASSERT_FALSE(result.has_value());
    EXPECT_EQ(result.error().code, ErrorCode::kTimeout);
    EXPECT_NE(result.error().message.find("ranks 1, 3 never joined within 0.25 s"),
              std::string::npos)
        << result.error().message;
  }
}

TEST(TcpBootstrap, NoRootWithinTimeout) {
  const std::string spec = "tcp://127.0.0.1:" + std::to_string(free_port()) + "#abcd";
  auto joined = join_bootstrap(spec, 1, 2, kSecondNs / 5);
  ASSERT_FALSE(joined.has_value());
  EXPECT_EQ(joined.error().code, ErrorCode::kTimeout);
  EXPECT_NE(joined.error().message.find("cannot reach the root"), std::string::npos)
      << joined.error().message;
}

TEST(TcpBootstrap, ArgumentErrors) {
  EXPECT_FALSE(join_bootstrap("tcp://127.0.0.1:1#ab", 2, 2, kSecondNs).has_value());
  EXPECT_FALSE(join_bootstrap("tcp://127.0.0.1:1#ab", 0, 0, kSecondNs).has_value());
  EXPECT_FALSE(join_bootstrap("udp://127.0.0.1:1", 0, 1, kSecondNs).has_value());
  auto bad = join_bootstrap("tcp://127.0.0.1#ab", 0, 1, kSecondNs);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("missing :PORT"), std::string::npos) << bad.error().message;
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

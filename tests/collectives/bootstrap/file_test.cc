// The shared-directory rendezvous, in a fresh mkdtemp directory per test.
#include <sys/stat.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "collectives/comm/bootstrap.h"
#include "tests/collectives/bootstrap/bootstrap_util.h"

namespace detwan::collectives {
namespace {

using testing::expected_blobs;
using testing::join_and_exchange;
using testing::kSecondNs;
using testing::on_threads;
using Blobs = Result<std::vector<std::string>>;

class FileBootstrap : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "detwan-bs-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  [[nodiscard]] std::string spec(const std::string& nonce = "") const {
    return "file://" + dir_ + (nonce.empty() ? "" : "#" + nonce);
  }
  [[nodiscard]] bool dir_empty() const { return std::filesystem::is_empty(dir_); }

  std::string dir_;
};

TEST_F(FileBootstrap, OneToEightRanksWithDifferentBlobs) {
  for (int nranks = 1; nranks <= 8; ++nranks) {
    const std::string nonce = "a1b2c" + std::to_string(nranks);
    std::vector<std::string> hosts(static_cast<size_t>(nranks));
    auto results = on_threads<Blobs>(nranks, [&](int rank) {
      return join_and_exchange(spec(nonce), rank, nranks, 20 * kSecondNs, &hosts[rank]);
    });
    const auto expected = expected_blobs(nranks);
    for (int rank = 0; rank < nranks; ++rank) {
      ASSERT_TRUE(results[rank].has_value()) << results[rank].error().message;
      EXPECT_EQ(*results[rank], expected) << "nranks " << nranks;
    }
    // The last rank to finish reading removes every file.
    EXPECT_TRUE(dir_empty()) << "nranks " << nranks;
  }
}

TEST_F(FileBootstrap, WithoutNonceTheDirectoryCanBeReused) {
  for (int round = 0; round < 2; ++round) {
    auto results = on_threads<Blobs>(3, [&](int rank) {
      return join_and_exchange(spec(), rank, 3, 20 * kSecondNs);
    });
    for (const auto& result : results) {
      ASSERT_TRUE(result.has_value()) << result.error().message;
      EXPECT_EQ(*result, expected_blobs(3));
    }
    EXPECT_TRUE(dir_empty());
  }
}

TEST_F(FileBootstrap, LocalHostFollowsTheEnvironment) {
  ::setenv("DETWAN_LISTEN_HOST", "10.9.8.7", 1);
  auto with_env = join_bootstrap(spec("ab"), 0, 1, kSecondNs);
  ::unsetenv("DETWAN_LISTEN_HOST");
  auto without_env = join_bootstrap(spec("ab"), 0, 1, kSecondNs);
  ASSERT_TRUE(with_env.has_value());
  ASSERT_TRUE(without_env.has_value());
  EXPECT_EQ((*with_env)->local_host(), "10.9.8.7");
  EXPECT_EQ((*without_env)->local_host(), "127.0.0.1");
}

TEST_F(FileBootstrap, RankThatNeverJoinsIsNamed) {
  auto results = on_threads<Blobs>(3, [&](int rank) {
    return join_and_exchange(spec("ff"), rank, 4, kSecondNs / 5);
  });
  for (const auto& result : results) {
    ASSERT_FALSE(result.has_value());
    EXPECT_EQ(result.error().code, ErrorCode::kTimeout);
    EXPECT_NE(result.error().message.find("rank 3 never joined within 0.2 s"), std::string::npos)
        << result.error().message;
  }
}

TEST_F(FileBootstrap, WrongNranksIsNamed) {
  // Rank 0 believes in 2 ranks, rank 1 in 3: each finds the other's file inconsistent.
  auto results = on_threads<Blobs>(2, [&](int rank) {
    return join_and_exchange(spec("ee"), rank, rank == 0 ? 2 : 3, 20 * kSecondNs);
  });
  ASSERT_FALSE(results[0].has_value());
  EXPECT_NE(results[0].error().message.find("rank 1 joined with nranks 3, expected 2"),
            std::string::npos)
      << results[0].error().message;
  ASSERT_FALSE(results[1].has_value());
  EXPECT_NE(results[1].error().message.find("rank 0 joined with nranks 2, expected 3"),
            std::string::npos)
      << results[1].error().message;
}

TEST_F(FileBootstrap, DuplicateRankIsAnError) {
  // Two threads both claim rank 0 of 2; exactly one publishes, the other is told.
  auto results = on_threads<Blobs>(3, [&](int i) {
    return join_and_exchange(spec("dd"), i == 2 ? 1 : 0, 2, 20 * kSecondNs);
  });
  int duplicates = 0;
  for (const auto& result : results) {
    if (result.has_value()) {
      EXPECT_EQ(*result, expected_blobs(2));
      continue;
    }
    ++duplicates;
    EXPECT_EQ(result.error().code, ErrorCode::kAlreadyExists);
    EXPECT_NE(result.error().message.find("rank 0 joined twice"), std::string::npos)
        << result.error().message;
  }
  EXPECT_EQ(duplicates, 1);
}

TEST_F(FileBootstrap, GarbageFileIsNamed) {
  { std::ofstream(dir_ + "/cc.1") << "not a join"; }
  auto result = join_and_exchange(spec("cc"), 0, 2, 20 * kSecondNs);
  ASSERT_FALSE(result.has_value());
  EXPECT_NE(result.error().message.find("cc.1: malformed join: no magic"), std::string::npos)
      << result.error().message;
}

TEST_F(FileBootstrap, MissingDirectory) {
  auto joined = join_bootstrap("file://" + dir_ + "/nope#ab", 0, 1, kSecondNs);
  ASSERT_FALSE(joined.has_value());
  EXPECT_EQ(joined.error().code, ErrorCode::kNotFound);
  EXPECT_FALSE(join_bootstrap("file://relative/dir", 0, 1, kSecondNs).has_value());
}

TEST_F(FileBootstrap, ADirectoryEveryoneMayWriteIsRefused) {
  ASSERT_EQ(::chmod(dir_.c_str(), 01777), 0);  // like /tmp
  auto joined = join_bootstrap(spec("ab"), 0, 1, kSecondNs);
  ASSERT_FALSE(joined.has_value());
  EXPECT_EQ(joined.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(joined.error().message.find("writable by every user"), std::string::npos)
      << joined.error().message;
  ASSERT_EQ(::chmod(dir_.c_str(), 0770), 0);  // a group's directory is fine
  auto group = join_and_exchange(spec("ab"), 0, 1, 5 * kSecondNs);
  ASSERT_TRUE(group.has_value()) << group.error().message;
}

}  // namespace
}  // namespace detwan::collectives

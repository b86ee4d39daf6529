// The shared-directory rendezvous, in a fresh mkdtemp directory per test.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "collectives/comm/bootstrap.h"
#include "collectives/comm/bootstrap_keys.h"
#include "tests/collectives/bootstrap/bootstrap_util.h"

namespace detwan::collectives {
namespace {

using testing::expected_blobs;
using testing::join_and_exchange;
using testing::kSecondNs;
using testing::on_threads;
using Blobs = Result<std::vector<std::string>>;

// A distinct 128-bit secret per use ("<tag>" padded with zeros to 32 hex digits).
std::string secret(const std::string& tag) { return tag + std::string(32 - tag.size(), '0'); }

class FileBootstrap : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "detwan-bs-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  [[nodiscard]] std::string spec(const std::string& tag) const {
    return "file://" + dir_ + "#" + secret(tag);
  }
  [[nodiscard]] bool dir_empty() const { return std::filesystem::is_empty(dir_); }
  // Where rank `rank` of the rendezvous with secret(tag) publishes its record.
  [[nodiscard]] std::string path_of(const std::string& tag, int rank) const {
    auto keys = bootstrap::RendezvousKeys::make(secret(tag), "file");
    EXPECT_TRUE(keys.has_value());
    return dir_ + "/" + *keys->file_prefix() + "." + std::to_string(rank);
  }
  // Waits (a hang guard only) until `path` exists.
  static bool wait_for_file(const std::string& path) {
    for (int i = 0; i < 2000; ++i) {
      if (std::filesystem::exists(path)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  std::string dir_;
};

TEST_F(FileBootstrap, OneToEightRanksWithDifferentBlobs) {
  for (int nranks = 1; nranks <= 8; ++nranks) {
    const std::string tag = "a1b2c" + std::to_string(nranks);
    std::vector<std::string> hosts(static_cast<size_t>(nranks));
    auto results = on_threads<Blobs>(nranks, [&](int rank) {
      return join_and_exchange(spec(tag), rank, nranks, 20 * kSecondNs, &hosts[rank]);
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

TEST_F(FileBootstrap, WithoutASecretIsRefused) {
  ::unsetenv("DETWAN_BOOTSTRAP_SECRET");
  auto joined = join_bootstrap("file://" + dir_, 0, 1, kSecondNs);
  ASSERT_FALSE(joined.has_value());
  EXPECT_EQ(joined.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(joined.error().message.find("a file rendezvous needs a secret"), std::string::npos)
      << joined.error().message;
  EXPECT_TRUE(dir_empty());
}

TEST_F(FileBootstrap, TheSecretMayComeFromTheEnvironment) {
  // As for a fixed tcp address: keeps the secret off the command line (`ps` shows it).
  ::setenv("DETWAN_BOOTSTRAP_SECRET", secret("e5").c_str(), 1);
  auto results = on_threads<Blobs>(
      2, [&](int rank) { return join_and_exchange("file://" + dir_, rank, 2, 20 * kSecondNs); });
  ::unsetenv("DETWAN_BOOTSTRAP_SECRET");
  for (const auto& result : results) {
    ASSERT_TRUE(result.has_value()) << result.error().message;
    EXPECT_EQ(*result, expected_blobs(2));
  }
  // The same rendezvous as the one named with "#<that secret>": same key, same file names.
  auto named = join_bootstrap(spec("e5"), 0, 1, kSecondNs);
  ::setenv("DETWAN_BOOTSTRAP_SECRET", secret("e5").c_str(), 1);
  auto from_env = join_bootstrap("file://" + dir_, 0, 1, kSecondNs);
  ::unsetenv("DETWAN_BOOTSTRAP_SECRET");
  ASSERT_TRUE(named && from_env);
  EXPECT_EQ((*named)->communicator_key(), (*from_env)->communicator_key());
}

TEST_F(FileBootstrap, RecordsAreThisUsersOnlyAndNeverShowTheSecret) {
  // Rank 0 of 2 publishes and waits; its record is inspected before rank 1 joins.
  std::thread rank0([&] {
    auto result = join_and_exchange(spec("f00d"), 0, 2, 20 * kSecondNs);
    EXPECT_TRUE(result.has_value()) << result.error().message;
  });
  const std::string path = path_of("f00d", 0);
  ASSERT_TRUE(wait_for_file(path));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(path.find(secret("f00d")), std::string::npos) << path;
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes.find(secret("f00d")), std::string::npos);
  auto rank1 = join_and_exchange(spec("f00d"), 1, 2, 20 * kSecondNs);
  rank0.join();
  ASSERT_TRUE(rank1.has_value()) << rank1.error().message;
  EXPECT_EQ(*rank1, expected_blobs(2));
}

TEST_F(FileBootstrap, ATamperedRecordIsRefused) {
  std::thread rank0([&] {
    // Whether it read its own record before the change decides its fate: not checked.
    (void)join_and_exchange(spec("7a3e"), 0, 2, 20 * kSecondNs);
  });
  const std::string path = path_of("7a3e", 0);
  ASSERT_TRUE(wait_for_file(path));
  {
    // Rank 0's blob is empty: change its nranks field (bytes 9..12 of the record) to 3.
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(12);
    file.put('\x03');
  }
  auto rank1 = join_and_exchange(spec("7a3e"), 1, 2, 20 * kSecondNs);
  rank0.join();
  ASSERT_FALSE(rank1.has_value());
  EXPECT_EQ(rank1.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(rank1.error().message.find("not written with the job's secret"), std::string::npos)
      << rank1.error().message;
}

TEST_F(FileBootstrap, ARecordMadeWithAnotherSecretIsRefused) {
  // Another job (secret "0be") leaves rank 1's record behind (it times out alone); someone
  // renames it to the name rank 1 of this job (secret "900d") would use.
  auto other = join_and_exchange(spec("0be"), 1, 2, kSecondNs / 10);
  ASSERT_FALSE(other.has_value());
  ASSERT_TRUE(std::filesystem::exists(path_of("0be", 1)));
  std::filesystem::rename(path_of("0be", 1), path_of("900d", 1));
  auto mine = join_and_exchange(spec("900d"), 0, 2, 20 * kSecondNs);
  ASSERT_FALSE(mine.has_value());
  EXPECT_NE(mine.error().message.find("not written with the job's secret"), std::string::npos)
      << mine.error().message;
}

TEST_F(FileBootstrap, ARecordOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a file to another user";
  auto other = join_and_exchange(spec("0be2"), 1, 2, kSecondNs / 10);
  ASSERT_FALSE(other.has_value());
  ASSERT_EQ(::chown(path_of("0be2", 1).c_str(), 65534, 65534), 0);
  auto mine = join_and_exchange(spec("0be2"), 0, 2, 20 * kSecondNs);
  ASSERT_FALSE(mine.has_value());
  EXPECT_NE(mine.error().message.find("owned by uid 65534"), std::string::npos)
      << mine.error().message;
}

TEST_F(FileBootstrap, ASymbolicLinkIsNeverFollowed) {
  { std::ofstream(dir_ + "/elsewhere") << "whatever"; }
  std::filesystem::create_symlink(dir_ + "/elsewhere", path_of("5e1f", 1));
  auto mine = join_and_exchange(spec("5e1f"), 0, 2, 20 * kSecondNs);
  ASSERT_FALSE(mine.has_value());
  EXPECT_NE(mine.error().message.find("cannot open"), std::string::npos) << mine.error().message;
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

TEST_F(FileBootstrap, RanksOfOneRendezvousShareACommunicatorKeyAndOthersDiffer) {
  auto a0 = join_bootstrap(spec("ab"), 0, 2, kSecondNs);
  auto a1 = join_bootstrap(spec("ab"), 1, 2, kSecondNs);
  auto b0 = join_bootstrap(spec("cd"), 0, 2, kSecondNs);
  ASSERT_TRUE(a0 && a1 && b0);
  EXPECT_EQ((*a0)->communicator_key(), (*a1)->communicator_key());
  EXPECT_NE((*a0)->communicator_key(), (*b0)->communicator_key());
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
  // Two joiners both claim rank 0 of 2; exactly one publishes, the other is told at once.
  // Rank 1 joins only then (else the exchange could finish and clean up before the second
  // claimant even looks, which would then wait alone).
  auto first = std::async(std::launch::async,
                          [&] { return join_and_exchange(spec("dd"), 0, 2, 20 * kSecondNs); });
  auto second = std::async(std::launch::async,
                           [&] { return join_and_exchange(spec("dd"), 0, 2, 20 * kSecondNs); });
  while (first.wait_for(std::chrono::milliseconds(5)) != std::future_status::ready &&
         second.wait_for(std::chrono::milliseconds(5)) != std::future_status::ready) {
  }
  const bool first_refused = first.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  auto refused = first_refused ? first.get() : second.get();
  auto& kept = first_refused ? second : first;
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kAlreadyExists);
  EXPECT_NE(refused.error().message.find("rank 0 joined twice"), std::string::npos)
      << refused.error().message;
  auto rank1 = join_and_exchange(spec("dd"), 1, 2, 20 * kSecondNs);
  ASSERT_TRUE(rank1.has_value()) << rank1.error().message;
  EXPECT_EQ(*rank1, expected_blobs(2));
  auto kept_result = kept.get();
  ASSERT_TRUE(kept_result.has_value()) << kept_result.error().message;
  EXPECT_EQ(*kept_result, expected_blobs(2));
}

TEST_F(FileBootstrap, GarbageFileIsNamed) {
  { std::ofstream(path_of("cc", 1)) << "not a record, but longer than a MAC is: 0123456789"; }
  auto result = join_and_exchange(spec("cc"), 0, 2, 20 * kSecondNs);
  ASSERT_FALSE(result.has_value());
  EXPECT_NE(result.error().message.find(path_of("cc", 1) + ": not written with the job's secret"),
            std::string::npos)
      << result.error().message;
}

TEST_F(FileBootstrap, MissingDirectory) {
  auto joined = join_bootstrap("file://" + dir_ + "/nope#" + secret("ab"), 0, 1, kSecondNs);
  ASSERT_FALSE(joined.has_value());
  EXPECT_EQ(joined.error().code, ErrorCode::kNotFound);
  EXPECT_FALSE(join_bootstrap("file://relative/dir#" + secret("ab"), 0, 1, kSecondNs));
}

TEST_F(FileBootstrap, DirectoryPermissions) {
  ASSERT_EQ(::chmod(dir_.c_str(), 0777), 0);  // anyone may remove or rename the job's files
  auto joined = join_bootstrap(spec("ab"), 0, 1, kSecondNs);
  ASSERT_FALSE(joined.has_value());
  EXPECT_EQ(joined.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(joined.error().message.find("writable by every user without the sticky bit"),
            std::string::npos)
      << joined.error().message;
  for (const mode_t mode : {01777, 0770, 0700}) {  // like /tmp; a group's; a user's
    ASSERT_EQ(::chmod(dir_.c_str(), mode), 0);
    auto ok = join_and_exchange(spec("ab"), 0, 1, 5 * kSecondNs);
    ASSERT_TRUE(ok.has_value()) << std::oct << mode << ": " << ok.error().message;
  }
}

}  // namespace
}  // namespace detwan::collectives

// common/secret_file.h: a secret is read only from a regular file of root or of this process's
// uid that gives group and others no access; every refusal names the file, its owner and mode.
#include "common/secret_file.h"

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace detwan::common {
namespace {

using ::testing::HasSubstr;

class SecretFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/detwan-secret-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  std::string write(const std::string& name, const std::string& text, mode_t mode) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    EXPECT_EQ(::chmod(path.c_str(), mode), 0);
    return path;
  }
  std::string dir_;
};

TEST_F(SecretFileTest, AnOwnersOnlyFileIsRead) {
  for (const mode_t mode : {mode_t{0600}, mode_t{0400}}) {
    const std::string path = write("key", "abc\n", mode);
    const auto text = read_secret_file(path, "key file");
    ASSERT_TRUE(text) << text.error().message;
    EXPECT_EQ(*text, "abc\n");
  }
}

TEST_F(SecretFileTest, GroupOrOthersAccessIsRefusedNamingOwnerAndMode) {
  for (const mode_t mode : {mode_t{0640}, mode_t{0604}, mode_t{0620}, mode_t{0602}, mode_t{0610},
                            mode_t{0644}, mode_t{0666}}) {
    const std::string path = write("key", "abc", mode);
    const auto refused = read_secret_file(path, "key file");
    ASSERT_FALSE(refused) << std::oct << mode;
    EXPECT_EQ(refused.error().code, ErrorCode::kConfig);
    EXPECT_THAT(refused.error().message,
                HasSubstr(fmt::format("key file '{}' (owner uid {}, mode {:04o})", path,
                                      ::geteuid(), mode)));
    EXPECT_THAT(refused.error().message, HasSubstr("chmod 600"));
  }
}

TEST_F(SecretFileTest, AnotherUsersFileIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "chown needs root (CI runs as root)";
  const std::string path = write("key", "abc", 0600);
  ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
  const auto refused = read_secret_file(path, "key file");
  ASSERT_FALSE(refused);
  EXPECT_THAT(refused.error().message, HasSubstr("owner uid 65534, mode 0600"));
  EXPECT_THAT(refused.error().message, HasSubstr("must belong to root or to uid 0"));
}

TEST_F(SecretFileTest, NotARegularFileTooLongOrAbsentIsRefused) {
  const auto directory = read_secret_file(dir_, "key file");
  ASSERT_FALSE(directory);
  EXPECT_THAT(directory.error().message, HasSubstr("is not a regular file"));
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto pipe = read_secret_file(fifo, "key file");  // does not block on the FIFO
  ASSERT_FALSE(pipe);
  EXPECT_THAT(pipe.error().message, HasSubstr("is not a regular file"));
  const std::string big = write("big", std::string(5000, 'x'), 0600);
  const auto too_long = read_secret_file(big, "key file");
  ASSERT_FALSE(too_long);
  EXPECT_THAT(too_long.error().message, HasSubstr("5000 bytes, at most 4096"));
  const auto absent = read_secret_file(dir_ + "/absent", "key file");
  ASSERT_FALSE(absent);
  EXPECT_THAT(absent.error().message, HasSubstr(dir_ + "/absent"));
}

// The checks and the read are on one descriptor: a symlink to a private file is the private
// file; a symlink to an open one is refused for the file it names.
TEST_F(SecretFileTest, TheFileReadIsTheFileChecked) {
  const std::string open_file = write("open", "abc", 0644);
  const std::string link = dir_ + "/link";
  ASSERT_EQ(::symlink(open_file.c_str(), link.c_str()), 0);
  const auto refused = read_secret_file(link, "key file");
  ASSERT_FALSE(refused);
  EXPECT_THAT(refused.error().message, HasSubstr("mode 0644"));
  ASSERT_EQ(::chmod(open_file.c_str(), 0600), 0);
  const auto read = read_secret_file(link, "key file");
  ASSERT_TRUE(read) << read.error().message;
  EXPECT_EQ(*read, "abc");
}

}  // namespace
}  // namespace detwan::common

// tunnels[].auth.keys[].secret_file (issue 31, item 8): a key file is read only when it belongs
// to root or to the gateway's user and is private to its owner; the error names the file, its
// owner and mode, at the config line that named it.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/dataplane/gw/config_test_util.h"

namespace detwan::dataplane::gw {
namespace {

using ::testing::HasSubstr;
using testing::load_error;
using testing::load_ok;

const std::string kKeyHex(64, 'e');

class SecretFileConfig : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/detwan-gw-key-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    key_ = dir_ + "/tunnel-7.key";
    std::ofstream(key_) << kKeyHex << "\n";
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  // kBase with tunnels 7 and 9 (both to site-b: all of a peer's tunnels are keyed or none)
  // keyed from key_.
  [[nodiscard]] std::string yaml() const {
    const std::string auth = "    auth: {keys: [{id: 1, secret_file: " + key_ + "}]}";
    // kBase's lines 31 and 38 are tunnels 7's and 9's "auth: none".
    return testing::replace_line(testing::replace_line(testing::kBase, 38, auth), 31, auth);
  }
  std::string dir_, key_;
};

TEST_F(SecretFileConfig, APrivateKeyFileIsRead) {
  ASSERT_EQ(::chmod(key_.c_str(), 0600), 0);
  const GatewayConfig config = load_ok(yaml());
  ASSERT_FALSE(config.tunnels.empty());
  ASSERT_TRUE(config.tunnels[0].auth.has_value());
  ASSERT_EQ(config.tunnels[0].auth->keys.size(), 1u);
}

TEST_F(SecretFileConfig, AKeyFileOthersMayReadIsRefusedNamingOwnerAndMode) {
  ASSERT_EQ(::chmod(key_.c_str(), 0644), 0);
  const std::string error = load_error(yaml());
  EXPECT_THAT(error, HasSubstr("gw.yaml:31:"));  // the line that names the file
  EXPECT_THAT(error, HasSubstr(fmt::format("key file '{}' (owner uid {}, mode 0644)", key_,
                                           ::geteuid())));
  EXPECT_THAT(error, HasSubstr("chmod 600"));
}

TEST_F(SecretFileConfig, AKeyFileOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "chown needs root (CI runs as root)";
  ASSERT_EQ(::chmod(key_.c_str(), 0600), 0);
  ASSERT_EQ(::chown(key_.c_str(), 65534, 65534), 0);
  EXPECT_THAT(load_error(yaml()), HasSubstr("owner uid 65534, mode 0600"));
}

}  // namespace
}  // namespace detwan::dataplane::gw

#include "common/logging.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace detwan::common {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

class LoggingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "detwan_logging_test_" +
            std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + ".log";
    std::remove(path_.c_str());
  }
  void TearDown() override {
    // Back to stderr only, so no logger keeps the file open.
    ASSERT_TRUE(init_logging("test", LogOptions{}).has_value());
    std::remove(path_.c_str());
  }

  std::string contents() const {
    spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& l) { l->flush(); });
    std::ifstream in(path_);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }

  std::string path_;
};

TEST_F(LoggingTest, UnknownLevelNamesLevelAndValidOnes) {
  const auto result =
      init_logging("prog", LogOptions{.level = "verbose", .json = false, .file = ""});
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(result.error().message,
            "unknown log level 'verbose' (use trace, debug, info, warn, error, critical, off)");
}

TEST_F(LoggingTest, NamedLoggersShareTheFileSinkAndLevel) {
  auto early = logger("early");  // created before init: must follow the new sinks
  ASSERT_TRUE(
      init_logging("prog", LogOptions{.level = "info", .json = false, .file = path_}).has_value());
  logger("wanem")->info("hello {}", 42);
  logger("wanem")->debug("hidden detail");
  early->warn("early bird");
  spdlog::info("from default");
  EXPECT_EQ(logger("wanem"), logger("wanem"));
  const std::string text = contents();
  EXPECT_THAT(text, HasSubstr("[wanem] [info] hello 42"));
  EXPECT_THAT(text, HasSubstr("[early] [warning] early bird"));
  EXPECT_THAT(text, HasSubstr("[prog] [info] from default"));
  EXPECT_THAT(text, Not(HasSubstr("hidden detail")));
}

TEST_F(LoggingTest, JsonLinesNameProgramLoggerAndLevel) {
  ASSERT_TRUE(
      init_logging("prog", LogOptions{.level = "debug", .json = true, .file = path_}).has_value());
  logger("probe")->debug("rtt {}us", 17);
  const std::string text = contents();
  EXPECT_THAT(text, StartsWith("{\"time\":\""));
  EXPECT_THAT(text, HasSubstr("\"program\":\"prog\",\"logger\":\"probe\",\"level\":\"debug\""));
  EXPECT_THAT(text, HasSubstr("\"msg\":\"rtt 17us\"}"));
}

TEST_F(LoggingTest, LevelOffSilencesEverything) {
  ASSERT_TRUE(
      init_logging("prog", LogOptions{.level = "off", .json = false, .file = path_}).has_value());
  logger("quiet")->critical("nobody hears this");
  EXPECT_EQ(contents(), "");
}

TEST_F(LoggingTest, UnwritableFileIsAnIoError) {
  // spdlog creates missing directories (and tests run as root), so use a regular file as the
  // parent directory.
  std::ofstream(path_) << "not a directory";
  const std::string bad = path_ + "/x.log";
  const auto result = init_logging("prog", LogOptions{.level = "info", .json = false, .file = bad});
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().code, ErrorCode::kIo);
  EXPECT_THAT(result.error().message, StartsWith("cannot open log file '" + bad + "'"));
}

}  // namespace
}  // namespace detwan::common

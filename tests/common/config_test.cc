#include "common/config.h"

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace detwan::common {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Runs `body`, which must throw Failure, and returns its Error.
Error failure_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Failure& failure) {
    return failure.error();
  }
  ADD_FAILURE() << "expected a Failure";
  return Error{};
}

std::string message_of(const std::function<void()>& body) {
  const Error error = failure_of(body);
  EXPECT_EQ(error.code, ErrorCode::kConfig);
  return error.message;
}

constexpr const char* kGateway =
    "wan:\n"                  // 1
    "  delay: 10ms\n"         // 2
    "  jitter: 50us\n"        // 3
    "  loss: 0.1%\n"          // 4
    "  queue: 64kb\n"         // 5
    "  tunnels:\n"            // 6
    "    - id: 1\n"           // 7
    "      rate: 4gbit\n"     // 8
    "    - id: 2\n"           // 9
    "      rate: 100mbit\n"   // 10
    "      protected: yes\n"  // 11
    "name: \"gw-a\"\n"        // 12
    "weight: 0.75\n";         // 13

TEST(Config, ReadsValues) {
  const ConfigNode root = ConfigNode::load_string(kGateway, "gw.yaml");
  EXPECT_TRUE(root.is_map());
  EXPECT_THAT(root.keys(), ElementsAre("wan", "name", "weight"));
  EXPECT_EQ(root.child("name").as_string(), "gw-a");
  EXPECT_DOUBLE_EQ(root.child("weight").as_double(), 0.75);
  const ConfigNode wan = root.child("wan");
  EXPECT_EQ(wan.path(), "wan");
  EXPECT_EQ(wan.line(), 2);
  EXPECT_EQ(wan.column(), 3);
  EXPECT_EQ(wan.child("delay").as_duration_ns(), 10'000'000);
  EXPECT_EQ(wan.child("jitter").as_duration_ns(), 50'000);
  EXPECT_DOUBLE_EQ(wan.child("loss").as_fraction(), 0.001);
  EXPECT_EQ(wan.child("queue").as_size_bytes(), 65'536U);
  EXPECT_TRUE(wan.has("tunnels"));
  EXPECT_FALSE(wan.has("mtu"));
  EXPECT_FALSE(wan.maybe_child("mtu").has_value());

  const auto tunnels = wan.child("tunnels").items();
  ASSERT_EQ(tunnels.size(), 2U);
  EXPECT_EQ(tunnels[1].path(), "wan.tunnels[1]");
  EXPECT_EQ(tunnels[0].child("id").as_int(0, 100), 1);
  EXPECT_EQ(tunnels[0].child("rate").as_rate_bps(), 4'000'000'000U);
  EXPECT_EQ(tunnels[1].child("rate").path(), "wan.tunnels[1].rate");
  EXPECT_TRUE(tunnels[1].child("protected").as_bool());
  EXPECT_FALSE(tunnels[0].get_bool("protected", false));

  // Optional getters: fallback when absent, parsed value when present.
  EXPECT_EQ(wan.get_duration_ns("delay", 5), 10'000'000);
  EXPECT_EQ(wan.get_duration_ns("cycle", 1'000'000), 1'000'000);
  EXPECT_EQ(wan.get_int("mtu", 1500, 576, 9000), 1500);
  EXPECT_EQ(wan.get_rate_bps("rate", 7U), 7U);
  EXPECT_EQ(wan.get_size_bytes("queue", 1U), 65'536U);
  EXPECT_DOUBLE_EQ(wan.get_fraction("loss", 0.5), 0.001);
  EXPECT_EQ(root.get_string("name", "x"), "gw-a");
  EXPECT_EQ(root.get_string("site", "a"), "a");
  EXPECT_NO_THROW(wan.check_keys({"delay", "jitter", "loss", "queue", "tunnels"}));
}

TEST(Config, MissingFieldPointsAtParentMap) {
  const ConfigNode root = ConfigNode::load_string(kGateway, "gw.yaml");
  EXPECT_EQ(message_of([&] { (void)root.child("wan").child("cycle"); }),
            "gw.yaml:2:3: field 'wan.cycle': missing required field");
  EXPECT_EQ(message_of([&] { (void)root.child("site"); }),
            "gw.yaml:1:1: field 'site': missing required field");
  const auto tunnels = root.child("wan").child("tunnels").items();
  EXPECT_EQ(message_of([&] { (void)tunnels[1].child("path"); }),
            "gw.yaml:9:7: field 'wan.tunnels[1].path': missing required field");
}

TEST(Config, MissingFieldUnderEmptyValuePointsAtItsKey) {
  const ConfigNode root = ConfigNode::load_string("wan:\nname: x\n", "e.yaml");
  EXPECT_EQ(message_of([&] { (void)root.child("wan").child("delay"); }),
            "e.yaml:1:1: field 'wan.delay': missing required field");
  EXPECT_EQ(message_of([&] { (void)root.child("wan").as_string(); }),
            "e.yaml:1:1: field 'wan': expected a string, got an empty value");
  EXPECT_TRUE(root.child("wan").items().empty());
}

TEST(Config, WrongTypeNamesFieldAndValue) {
  const ConfigNode root = ConfigNode::load_string(
      "wan:\n"
      "  count: abc\n"
      "  slots: 500\n"
      "  ratio: nan\n"
      "  on: maybe\n"
      "  list: [1, 2]\n"
      "  big: 99999999999999999999\n",
      "t.yaml");
  const ConfigNode wan = root.child("wan");
  EXPECT_EQ(message_of([&] { (void)wan.child("count").as_int(0, 100); }),
            "t.yaml:2:10: field 'wan.count': expected an integer, got 'abc'");
  EXPECT_EQ(message_of([&] { (void)wan.child("slots").as_int(1, 100); }),
            "t.yaml:3:10: field 'wan.slots': expected an integer in [1, 100], got '500'");
  EXPECT_EQ(message_of([&] { (void)wan.child("ratio").as_double(); }),
            "t.yaml:4:10: field 'wan.ratio': expected a finite number, got 'nan'");
  EXPECT_EQ(message_of([&] { (void)wan.child("on").as_bool(); }),
            "t.yaml:5:7: field 'wan.on': expected a boolean (true/false), got 'maybe'");
  EXPECT_EQ(message_of([&] { (void)wan.child("list").as_string(); }),
            "t.yaml:6:9: field 'wan.list': expected a string, got a sequence");
  EXPECT_EQ(message_of([&] { (void)wan.as_int(0, 1); }),
            "t.yaml:2:3: field 'wan': expected an integer, got a map");
  EXPECT_EQ(message_of([&] { (void)wan.child("count").child("x"); }),
            "t.yaml:2:10: field 'wan.count': expected a map with field 'x', got 'abc'");
  EXPECT_EQ(message_of([&] { (void)wan.child("count").items(); }),
            "t.yaml:2:10: field 'wan.count': expected a sequence, got 'abc'");
  EXPECT_EQ(message_of([&] { (void)wan.child("big").as_int(INT64_MIN, INT64_MAX); }),
            "t.yaml:7:8: field 'wan.big': expected an integer in [-9223372036854775808, "
            "9223372036854775807], got '99999999999999999999'");
  EXPECT_EQ(message_of([&] { (void)wan.get_int("count", 1, 0, 10); }),
            "t.yaml:2:10: field 'wan.count': expected an integer, got 'abc'");
}

TEST(Config, IntegerForms) {
  const ConfigNode root =
      ConfigNode::load_string("a: -42\nb: 0x1F\nc: +7\nd: -9223372036854775808\ne: 1.0\n");
  EXPECT_EQ(root.child("a").as_int(-100, 100), -42);
  EXPECT_EQ(root.child("b").as_int(0, 100), 31);
  EXPECT_EQ(root.child("c").as_int(0, 100), 7);
  EXPECT_EQ(root.child("d").as_int(INT64_MIN, 0), INT64_MIN);
  EXPECT_EQ(message_of([&] { (void)root.child("e").as_int(0, 10); }),
            "<string>:5:4: field 'e': expected an integer, got '1.0'");
}

TEST(Config, UnknownKeyListsAllowedOnes) {
  const ConfigNode root = ConfigNode::load_string(
      "wan:\n"
      "  delay: 10ms\n"
      "  dleay: 20ms\n",
      "k.yaml");
  EXPECT_EQ(message_of([&] {
              root.child("wan").check_keys({"delay", "jitter", "loss"});
            }),
            "k.yaml:3:3: field 'wan.dleay': unknown key 'dleay' (allowed: delay, jitter, loss)");
  EXPECT_EQ(message_of([&] { root.check_keys({"lan"}); }),
            "k.yaml:1:1: field 'wan': unknown key 'wan' (allowed: lan)");
}

TEST(Config, DuplicateKeyIsAnError) {
  const ConfigNode root = ConfigNode::load_string("a: 1\nb: 2\na: 3\n", "d.yaml");
  EXPECT_EQ(message_of([&] {
              root.check_keys({"a", "b"});
            }),
            "d.yaml:3:1: field 'a': duplicate key 'a'");
}

TEST(Config, BadUnitsNameFieldAndToken) {
  const ConfigNode root = ConfigNode::load_string(
      "wan:\n"
      "  delay: 10xs\n"
      "  tunnels:\n"
      "    - rate: 4gbt\n"
      "      loss: 2%%\n"
      "      queue: -1kb\n",
      "gateway.yaml");
  const ConfigNode wan = root.child("wan");
  EXPECT_EQ(message_of([&] { (void)wan.child("delay").as_duration_ns(); }),
            "gateway.yaml:2:10: field 'wan.delay': '10xs': unknown duration unit 'xs' (use ns, "
            "us, ms, s, m, h, d)");
  EXPECT_EQ(message_of([&] { (void)wan.get_duration_ns("delay", 0); }),
            "gateway.yaml:2:10: field 'wan.delay': '10xs': unknown duration unit 'xs' (use ns, "
            "us, ms, s, m, h, d)");
  const auto tunnel = wan.child("tunnels").items().at(0);
  EXPECT_EQ(message_of([&] { (void)tunnel.child("rate").as_rate_bps(); }),
            "gateway.yaml:4:13: field 'wan.tunnels[0].rate': '4gbt': unknown rate unit 'gbt' "
            "(use bit, kbit, mbit, gbit, tbit; 'gbps' = gbit/s, 'GBps' or 'gbyte' = "
            "gigabytes/s)");
  EXPECT_EQ(message_of([&] { (void)tunnel.child("loss").as_fraction(); }),
            "gateway.yaml:5:13: field 'wan.tunnels[0].loss': '2%%': unexpected '%%' after the "
            "number (use '%' or a bare fraction)");
  EXPECT_EQ(message_of([&] { (void)tunnel.child("queue").as_size_bytes(); }),
            "gateway.yaml:6:14: field 'wan.tunnels[0].queue': '-1kb': negative size");
}

TEST(Config, SyntaxErrorHasFileLineColumn) {
  const Error error = failure_of([] { (void)ConfigNode::load_string("a: b: c\n", "s.yaml"); });
  EXPECT_EQ(error.code, ErrorCode::kConfig);
  EXPECT_EQ(error.message, "s.yaml:1:5: YAML syntax error: illegal map value");
  EXPECT_EQ(error.describe(), "config: s.yaml:1:5: YAML syntax error: illegal map value");

  EXPECT_EQ(message_of([] { (void)ConfigNode::load_string("a:\n  - x\n y: 2\n", "s.yaml"); }),
            "s.yaml:3:2: YAML syntax error: end of map not found");
}

TEST(Config, FailureDescribesAsConfigError) {
  const ConfigNode root = ConfigNode::load_string("x: 1\n", "f.yaml");
  try {
    root.child("x").fail("must be even");
    FAIL() << "fail() returned";
  } catch (const Failure& failure) {
    EXPECT_STREQ(failure.what(), "config: f.yaml:1:4: field 'x': must be even");
  }
}

class ConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "detwan_config_test_" +
            std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + ".yaml";
  }
  void TearDown() override { std::remove(path_.c_str()); }

  void write(const std::string& text) const {
    std::ofstream out(path_);
    out << text;
  }

  std::string path_;
};

TEST_F(ConfigFileTest, LoadFileReportsThePath) {
  write("site: a\nwan:\n  cycle: 1ms\n  slots: many\n");
  const ConfigNode root = ConfigNode::load_file(path_);
  EXPECT_EQ(root.file(), path_);
  EXPECT_EQ(root.child("wan").child("cycle").as_duration_ns(), 1'000'000);
  EXPECT_EQ(message_of([&] { (void)root.child("wan").child("slots").as_int(1, 1000); }),
            path_ + ":4:10: field 'wan.slots': expected an integer, got 'many'");
}

TEST_F(ConfigFileTest, LoadFileSyntaxError) {
  write("wan: [1, 2\n");
  EXPECT_THAT(message_of([&] { (void)ConfigNode::load_file(path_); }),
              StartsWith(path_ + ":2:1: YAML syntax error: "));
}

TEST_F(ConfigFileTest, MissingFileIsAnIoError) {
  const Error error = failure_of([&] { (void)ConfigNode::load_file(path_ + ".missing"); });
  EXPECT_EQ(error.code, ErrorCode::kIo);
  EXPECT_EQ(error.message, path_ + ".missing: cannot open: No such file or directory");
}

TEST(Config, EmptyDocument) {
  const ConfigNode root = ConfigNode::load_string("", "empty.yaml");
  EXPECT_FALSE(root.has("a"));
  EXPECT_TRUE(root.keys().empty());
  EXPECT_NO_THROW(root.check_keys({"a"}));
  EXPECT_EQ(root.get_int("a", 3, 0, 10), 3);
  EXPECT_THAT(message_of([&] { (void)root.child("a"); }),
              HasSubstr("empty.yaml: field 'a': missing required field"));
}

}  // namespace
}  // namespace detwan::common

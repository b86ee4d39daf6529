// CommConfig::from_environment / describe, and the bootstrap blob's escaped text format.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "collectives/comm/comm_impl.h"
#include "collectives/comm/communicator.h"

namespace detwan::collectives {
namespace {

// Sets the variables for one test and clears them afterwards (the test owns the process env:
// nothing else runs on another thread here).
class EnvGuard {
 public:
  explicit EnvGuard(std::vector<std::pair<std::string, std::string>> vars)
      : vars_(std::move(vars)) {
    for (const auto& [name, value] : vars_) ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~EnvGuard() {
    for (const auto& [name, value] : vars_) ::unsetenv(name.c_str());
  }

 private:
  std::vector<std::pair<std::string, std::string>> vars_;
};

TEST(CommConfig, DefaultsWithoutEnvironment) {
  auto config = CommConfig::from_environment();
  ASSERT_TRUE(config) << config.error().message;
  EXPECT_EQ(config->site, "default");
  EXPECT_EQ(config->timeout_ns, 300'000'000'000);
  EXPECT_EQ(config->wan_rate_bps, 0);
  EXPECT_EQ(config->algorithm, Algorithm::kAuto);
  EXPECT_EQ(config->intra_backend, "shm");
  EXPECT_EQ(config->inter_backend, "udp");
  EXPECT_FALSE(config->deterministic);
}

TEST(CommConfig, ReadsEveryVariable) {
  EnvGuard env({{"DETWAN_SITE", "b"},
                {"DETWAN_TIMEOUT_MS", "1500"},
                {"DETWAN_WAN_RATE", "200mbit"},
                {"DETWAN_WAN_RTT", "20ms"},
                {"DETWAN_ALGO", "hier"},
                {"DETWAN_CHUNK_BYTES", "4m"},
                {"DETWAN_DETERMINISTIC", "1"},
                {"DETWAN_INTRA_BACKEND", "tcp"},
                {"DETWAN_INTER_BACKEND", "loopback"},
                {"DETWAN_LISTEN_HOST", "10.0.0.7"},
                {"DETWAN_MTU", "9000"},
                {"DETWAN_PEER_TIMEOUT_MS", "2500"}});
  auto config = CommConfig::from_environment();
  ASSERT_TRUE(config) << config.error().message;
  EXPECT_EQ(config->site, "b");
  EXPECT_EQ(config->timeout_ns, 1'500'000'000);
  EXPECT_EQ(config->wan_rate_bps, 200'000'000);
  EXPECT_EQ(config->wan_rtt_ns, 20'000'000);
  EXPECT_EQ(config->algorithm, Algorithm::kHierarchical);
  EXPECT_EQ(config->chunk_bytes, 4 << 20);
  EXPECT_TRUE(config->deterministic);
  EXPECT_EQ(config->intra_backend, "tcp");
  EXPECT_EQ(config->inter_backend, "loopback");
  EXPECT_EQ(config->listen_host, "10.0.0.7");
  EXPECT_EQ(config->mtu_bytes, 9000);
  EXPECT_EQ(config->peer_timeout_ns, 2'500'000'000);
  const std::string text = config->describe();
  for (const char* part : {"site=b", "wan_rate=200mbit", "algorithm=hier", "intra=tcp",
                           "inter=loopback", "deterministic=1", "mtu=9000"}) {
    EXPECT_NE(text.find(part), std::string::npos) << part << " in " << text;
  }
}

TEST(CommConfig, ATorchBackendInDetwanIntraBackendLeavesTheTransportAlone) {
  // DETWAN_INTRA_BACKEND=gloo names a site's own library for detwan.torch's hybrid groups: the
  // detwan group of those same processes must still start, on its default transport.
  EnvGuard env({{"DETWAN_INTRA_BACKEND", "gloo"}, {"DETWAN_INFLIGHT_OPS", "3"}});
  auto config = CommConfig::from_environment();
  ASSERT_TRUE(config) << config.error().message;
  EXPECT_EQ(config->intra_backend, "shm");
  EXPECT_EQ(config->inflight_ops, 3);
  EnvGuard tcp({{"DETWAN_INTRA_BACKEND", "tcp:nodelay=1"}, {"DETWAN_SITE", "a"}});
  EXPECT_EQ(CommConfig::from_environment()->intra_backend, "tcp:nodelay=1");
}

TEST(CommConfig, BadValuesNameTheVariable) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"DETWAN_WAN_RATE", "fast"},     {"DETWAN_TIMEOUT_MS", "-1"},
      {"DETWAN_TIMEOUT_MS", "0"},      {"DETWAN_ALGO", "quantum"},
      {"DETWAN_CHUNK_BYTES", "lots"},  {"DETWAN_DETERMINISTIC", "maybe"},
      {"DETWAN_INFLIGHT_OPS", "0"},    {"DETWAN_INFLIGHT_OPS", "9"},
      {"DETWAN_MTU", "70000"},         {"DETWAN_WAN_RTT", "20"},
      {"DETWAN_PEER_TIMEOUT_MS", "x"}};
  for (const auto& [name, value] : cases) {
    EnvGuard env({{name, value}});
    auto config = CommConfig::from_environment();
    ASSERT_FALSE(config) << name << "=" << value;
    EXPECT_EQ(config.error().code, ErrorCode::kConfig);
    EXPECT_NE(config.error().message.find(name), std::string::npos) << config.error().message;
    EXPECT_NE(config.error().message.find(value), std::string::npos) << config.error().message;
  }
}

TEST(BootstrapBlob, EscapedFieldsRoundTrip) {
  const std::vector<std::string> fields = {"site|with|bars", "back\\slash", "", "127.0.0.1:99"};
  const std::string text = encode_fields(fields);
  auto decoded = decode_fields(text);
  ASSERT_TRUE(decoded) << decoded.error().message;
  EXPECT_EQ(*decoded, fields);
  EXPECT_FALSE(decode_fields("abc\\"));  // a lone trailing escape
}

TEST(HumanUnits, PlanLogFormats) {
  EXPECT_EQ(human_bytes(64 << 20), "64 MiB");
  EXPECT_EQ(human_bytes(8), "8 B");
  EXPECT_EQ(human_bytes(1536), "1.5 KiB");
  EXPECT_EQ(human_ns(2.9e9), "2.9 s");
  EXPECT_EQ(human_ns(14e6), "14 ms");
}

}  // namespace
}  // namespace detwan::collectives

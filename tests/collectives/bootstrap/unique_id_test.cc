// UniqueId: spec validation, the 128-byte form, and a root it creates serving a real exchange.
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "collectives/comm/communicator.h"
#include "tests/collectives/bootstrap/bootstrap_util.h"

namespace detwan::collectives {
namespace {

using testing::kSecondNs;
using Bytes = std::array<char, kUniqueIdBytes>;

// Secrets of the minimum (128-bit) and maximum (256-bit) length.
const std::string kSecret32 = "0123456789abcdef0123456789abcdef";
const std::string kSecret64 = kSecret32 + kSecret32;

TEST(UniqueId, CreateRootRoundTripsThroughBytesAndServesAnExchange) {
  auto id = UniqueId::create_root("127.0.0.1", 20 * kSecondNs);
  ASSERT_TRUE(id.has_value()) << id.error().message;
  EXPECT_TRUE(id->to_string().starts_with("tcp://127.0.0.1:")) << id->to_string();
  const Bytes bytes = id->to_bytes();
  auto back = UniqueId::from_bytes(bytes);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(back->to_string(), id->to_string());
  EXPECT_EQ(back->to_bytes(), bytes);

  auto results = testing::on_threads<Result<std::vector<std::string>>>(3, [&](int rank) {
    return testing::join_and_exchange(back->to_string(), rank, 3, 20 * kSecondNs);
  });
  for (const auto& result : results) {
    ASSERT_TRUE(result.has_value()) << result.error().message;
    EXPECT_EQ(*result, testing::expected_blobs(3));
  }
}

TEST(UniqueId, ARootWithTheSharedSecretLetsTheIdTravelWithoutIt) {
  auto id = UniqueId::create_root_with_secret(kSecret32, "127.0.0.1", 20 * kSecondNs);
  ASSERT_TRUE(id.has_value()) << id.error().message;
  EXPECT_TRUE(id->to_string().ends_with("#" + kSecret32)) << id->to_string();
  const std::string published = id->without_secret().to_string();
  EXPECT_EQ(published.find('#'), std::string::npos) << published;
  ::setenv("DETWAN_BOOTSTRAP_SECRET", kSecret32.c_str(), 1);
  // Rank 0 joins with the whole id; the others with the published one and their environment.
  auto results = testing::on_threads<Result<std::vector<std::string>>>(3, [&](int rank) {
    return testing::join_and_exchange(rank == 0 ? id->to_string() : published, rank, 3,
                                      20 * kSecondNs);
  });
  ::unsetenv("DETWAN_BOOTSTRAP_SECRET");
  for (const auto& result : results) {
    ASSERT_TRUE(result.has_value()) << result.error().message;
    EXPECT_EQ(*result, testing::expected_blobs(3));
  }
  auto short_secret = UniqueId::create_root_with_secret("abcd", "127.0.0.1", kSecondNs);
  ASSERT_FALSE(short_secret.has_value());
  EXPECT_NE(short_secret.error().message.find("32 to 64 hex digits"), std::string::npos)
      << short_secret.error().message;
}

TEST(UniqueId, CreateRootPicksAHostByItself) {
  auto id = UniqueId::create_root("", kSecondNs / 10);
  ASSERT_TRUE(id.has_value()) << id.error().message;
  auto parsed = UniqueId::from_string(id->to_string());
  EXPECT_TRUE(parsed.has_value());
}

TEST(UniqueId, FromStringAcceptsAndNormalises) {
  for (const std::string& spec :
       std::vector<std::string>{"tcp://10.0.0.1:5000", "tcp://10.0.0.1:5000#" + kSecret32,
                                "tcp://[::1]:29500#" + kSecret64, "tcp://master-0.local:1",
                                "file:///tmp", "file:///shared/job7#" + kSecret32}) {
    auto id = UniqueId::from_string(spec);
    ASSERT_TRUE(id.has_value()) << spec << ": " << id.error().message;
    EXPECT_EQ(id->to_string(), spec);
    auto back = UniqueId::from_bytes(id->to_bytes());
    ASSERT_TRUE(back.has_value()) << spec;
    EXPECT_EQ(back->to_string(), spec);
  }
  auto upper = UniqueId::from_string("file:///tmp/x/#0123456789ABCDEF0123456789ABCDEF");
  ASSERT_TRUE(upper.has_value());
  EXPECT_EQ(upper->to_string(), "file:///tmp/x#" + kSecret32);
}

TEST(UniqueId, FromStringRejects) {
  for (const std::string& spec : std::vector<std::string>{
           "", "udp://1.2.3.4:5", "tcp://", "tcp://host", "tcp://:5000", "tcp://host:0",
           "tcp://host:65536", "tcp://host:12ab", "tcp://::1:5000", "tcp://host:5000#",
           "tcp://host:5000#xyz", "tcp://ho st:5000", "file://relative", "file:///tmp#",
           "tcp://h:1#" + std::string(65, 'a'), "file:///" + std::string(130, 'd'),
           "tcp://h:1#abcd", "tcp://h:1#" + std::string(31, 'a'), "file:///tmp#a1b2"}) {
    auto id = UniqueId::from_string(spec);
    EXPECT_FALSE(id.has_value()) << spec;
    if (!id) {
      EXPECT_EQ(id.error().code, ErrorCode::kInvalidArgument) << spec;
    }
  }
}

TEST(UniqueId, AShortSecretIsRefusedWithoutEchoingIt) {
  const std::string secret = "a1b2c3d4e5f6";  // 48 bits: guessable
  auto id = UniqueId::from_string("tcp://10.0.0.1:5000#" + secret);
  ASSERT_FALSE(id.has_value());
  EXPECT_NE(id.error().message.find("32 to 64 hex digits"), std::string::npos)
      << id.error().message;
  EXPECT_EQ(id.error().message.find(secret), std::string::npos) << id.error().message;
  // Nor does any other spec error show the secret.
  auto bad_port = UniqueId::from_string("tcp://10.0.0.1:0#" + kSecret32);
  ASSERT_FALSE(bad_port.has_value());
  EXPECT_EQ(bad_port.error().message.find(kSecret32), std::string::npos)
      << bad_port.error().message;
}

TEST(UniqueId, GarbageBytesAreRejected) {
  std::mt19937 random(7);
  for (int trial = 0; trial < 100; ++trial) {
    Bytes bytes{};
    for (char& c : bytes) c = static_cast<char>(random());
    auto id = UniqueId::from_bytes(bytes);
    ASSERT_FALSE(id.has_value());
    EXPECT_EQ(id.error().message, "bad unique id (no magic)");
  }
  const Bytes good = UniqueId::from_string("tcp://10.0.0.1:5000#" + kSecret32)->to_bytes();
  auto corrupt = [&](size_t at, char value) {
    Bytes bytes = good;
    bytes[at] = value;
    auto id = UniqueId::from_bytes(bytes);
    EXPECT_FALSE(id.has_value()) << "byte " << at;
    return id ? std::string() : id.error().message;
  };
  EXPECT_NE(corrupt(4, 9).find("version 9"), std::string::npos);
  EXPECT_NE(corrupt(5, 0).find("spec length 0"), std::string::npos);
  EXPECT_NE(corrupt(5, 127).find("spec length"), std::string::npos);
  EXPECT_NE(corrupt(100, 'x').find("garbage after the spec"), std::string::npos);
  EXPECT_NE(corrupt(6, 'u').find("bad unique id"), std::string::npos);  // "ucp://..."
  EXPECT_EQ(UniqueId::from_bytes(Bytes{}).error().message, "bad unique id (no magic)");
}

}  // namespace
}  // namespace detwan::collectives

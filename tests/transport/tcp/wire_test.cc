// The tcp backend's hello: round trip and validation errors that name the offending field.
#include <gtest/gtest.h>

#include <array>
#include <cstring>

#include "transport/tcp/wire.h"

namespace detwan::transport::tcp {
namespace {

TEST(TcpHelloTest, RoundTrips) {
  std::array<std::byte, kHelloBytes> bytes{};
  encode_hello(Hello{kProtocolVersion, 123'456'789'012}, bytes);
  EXPECT_EQ(std::memcmp(bytes.data(), "DWT1", 4), 0);
  auto hello = decode_hello(bytes, "peer");
  ASSERT_TRUE(hello) << hello.error().describe();
  EXPECT_EQ(hello->version, kProtocolVersion);
  EXPECT_EQ(hello->max_message_bytes, 123'456'789'012u);
}

TEST(TcpHelloTest, BadMagicIsNamed) {
  std::array<std::byte, kHelloBytes> bytes{};
  std::memcpy(bytes.data(), "HTTP/1.1 200 OK\n", kHelloBytes);
  auto hello = decode_hello(bytes, "10.0.0.1:80");
  ASSERT_FALSE(hello);
  EXPECT_EQ(hello.error().code, common::ErrorCode::kInvalidArgument);
  EXPECT_NE(hello.error().message.find("bad hello magic 'HTTP'"), std::string::npos)
      << hello.error().message;
  EXPECT_NE(hello.error().message.find("10.0.0.1:80"), std::string::npos);
}

TEST(TcpHelloTest, UnprintableMagicIsShownSafely) {
  std::array<std::byte, kHelloBytes> bytes{};
  bytes[0] = std::byte{0xff};
  auto hello = decode_hello(bytes, "peer");
  ASSERT_FALSE(hello);
  EXPECT_NE(hello.error().message.find("'....' (0xff000000)"), std::string::npos)
      << hello.error().message;
}

TEST(TcpHelloTest, WrongVersionIsNamed) {
  std::array<std::byte, kHelloBytes> bytes{};
  encode_hello(Hello{7, 1}, bytes);
  auto hello = decode_hello(bytes, "peer");
  ASSERT_FALSE(hello);
  EXPECT_NE(hello.error().message.find("version 7"), std::string::npos) << hello.error().message;
}

}  // namespace
}  // namespace detwan::transport::tcp

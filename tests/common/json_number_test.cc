// common/json_number.h: which JSON numbers are integers of which type.
#include "common/json_number.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace detwan::common {
namespace {

boost::json::value parse(const char* text) { return boost::json::parse(text); }

TEST(JsonNumber, SignedIntegersThatFit) {
  EXPECT_EQ(json_int64(parse("-5")), -5);
  EXPECT_EQ(json_int64(parse("9223372036854775807")), INT64_MAX);
  EXPECT_EQ(json_int64(parse("9223372036854775808")), std::nullopt);  // uint64, above INT64_MAX
  EXPECT_EQ(json_int64(parse("1.0")), std::nullopt);  // a double, however whole
  EXPECT_EQ(json_int64(parse("1e3")), std::nullopt);
  EXPECT_EQ(json_int64(parse("\"7\"")), std::nullopt);
  EXPECT_EQ(json_int64(parse("null")), std::nullopt);
  EXPECT_EQ(json_int64(parse("true")), std::nullopt);
}

TEST(JsonNumber, UnsignedIntegersThatFit) {
  EXPECT_EQ(json_uint64(parse("0")), 0u);
  EXPECT_EQ(json_uint64(parse("18446744073709551615")), UINT64_MAX);
  EXPECT_EQ(json_uint64(parse("-1")), std::nullopt);
  EXPECT_EQ(json_uint64(parse("2.5")), std::nullopt);
}

TEST(JsonNumber, BoundsAreInclusive) {
  EXPECT_EQ(json_int64_in(parse("1"), 1, 3), 1);
  EXPECT_EQ(json_int64_in(parse("3"), 1, 3), 3);
  EXPECT_EQ(json_int64_in(parse("0"), 1, 3), std::nullopt);
  EXPECT_EQ(json_int64_in(parse("4"), 1, 3), std::nullopt);
  EXPECT_EQ(json_uint64_in(parse("65535"), 0, 65535), 65535u);
  EXPECT_EQ(json_uint64_in(parse("65536"), 0, 65535), std::nullopt);
  EXPECT_EQ(json_uint64_in(parse("-1"), 0, 65535), std::nullopt);
}

}  // namespace
}  // namespace detwan::common

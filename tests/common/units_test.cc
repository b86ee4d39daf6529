#include "common/units.h"

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/split.h"
#include "common/strings.h"

namespace detwan::common {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

struct DurationCase {
  const char* text;
  int64_t ns;
};

TEST(Units, ParseDurationAccepts) {
  const DurationCase cases[] = {
      {"0", 0},
      {"0ns", 0},
      {"100ns", 100},
      {"250us", 250'000},
      {"250\xc2\xb5s", 250'000},
      {"10ms", 10'000'000},
      {"1.5ms", 1'500'000},
      {"1.5s", 1'500'000'000},
      {"0.000001s", 1'000},
      {".5s", 500'000'000},
      {"2.s", 2'000'000'000},
      {"10MS", 10'000'000},
      {" 7us ", 7'000},
      {"+3ms", 3'000'000},
      {"9223372036854775807ns", kI64Max},
      {"9223372036.854775807s", kI64Max},
      {"1.000000000s", 1'000'000'000},
  };
  for (const auto& c : cases) {
    auto got = parse_duration_ns(c.text);
    ASSERT_TRUE(got.has_value()) << c.text << ": " << got.error().message;
    EXPECT_EQ(*got, c.ns) << c.text;
  }
}

TEST(Units, ParseDurationNegativeOnlyWhenAllowed) {
  EXPECT_EQ(parse_duration_ns("-5ms", true).value(), -5'000'000);
  EXPECT_EQ(parse_duration_ns("-9223372036854775808ns", true).value(), kI64Min);
  EXPECT_EQ(parse_duration_ns("-0", false).value(), 0);
  auto refused = parse_duration_ns("-5ms");
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(refused.error().message, "'-5ms': negative duration not allowed");
}

struct ErrorCase {
  const char* text;
  const char* message;  // exact
};

TEST(Units, ParseDurationErrorsNameTheText) {
  const ErrorCase cases[] = {
      {"10xs", "'10xs': unknown duration unit 'xs' (use ns, us, ms, s, m, h, d)"},
      {"", "empty duration (expected e.g. '10ms')"},
      {"   ", "empty duration (expected e.g. '10ms')"},
      {"10", "'10': missing duration unit (use ns, us, ms, s, m, h, d; only 0 may be written without one)"},
      {"nan", "'nan': not a number (expected e.g. '10ms')"},
      {"ms", "'ms': not a number (expected e.g. '10ms')"},
      {"10ms junk", "'10ms junk': unknown duration unit 'ms junk' (use ns, us, ms, s, m, h, d)"},
      {"10ms5", "'10ms5': unknown duration unit 'ms5' (use ns, us, ms, s, m, h, d)"},
      {"1.2.3s", "'1.2.3s': unknown duration unit '.3s' (use ns, us, ms, s, m, h, d)"},
      {"1e3ms", "'1e3ms': unknown duration unit 'e3ms' (use ns, us, ms, s, m, h, d)"},
      {"1.5ns", "'1.5ns': finer than 1 ns resolution"},
      {"9223372036854775808ns", "'9223372036854775808ns': out of range"},
      {"10000000000s", "'10000000000s': out of range"},
      {"1000000000000000000000000000s",
       "'1000000000000000000000000000s': too many digits (out of range)"},
  };
  for (const auto& c : cases) {
    auto got = parse_duration_ns(c.text);
    ASSERT_FALSE(got.has_value()) << c.text;
    EXPECT_EQ(got.error().message, c.message) << c.text;
  }
}

struct UnsignedCase {
  const char* text;
  uint64_t value;
};

TEST(Units, ParseRateAccepts) {
  const UnsignedCase cases[] = {
      {"1gbit", 1'000'000'000},
      {"100mbit", 100'000'000},
      {"64kbit", 64'000},
      {"1500bit", 1500},
      {"1gbps", 1'000'000'000},
      {"1Gbps", 1'000'000'000},
      {"1GBps", 8'000'000'000},
      {"1MBps", 8'000'000},
      {"2mbyte", 16'000'000},
      {"1.5gbit", 1'500'000'000},
      {"4GBIT", 4'000'000'000},
      {"10bps", 10},
      {"10Bps", 80},
      {"2tbit", 2'000'000'000'000},
      {"0bit", 0},
      {"18446744073709551615bit", kU64Max},
      {"18446744073709551.615kbit", kU64Max},
  };
  for (const auto& c : cases) {
    auto got = parse_rate_bps(c.text);
    ASSERT_TRUE(got.has_value()) << c.text << ": " << got.error().message;
    EXPECT_EQ(*got, c.value) << c.text;
  }
}

TEST(Units, ParseRateErrorsNameTheText) {
  const ErrorCase cases[] = {
      {"4gbt",
       "'4gbt': unknown rate unit 'gbt' (use bit, kbit, mbit, gbit, tbit; 'gbps' = gbit/s, "
       "'GBps' or 'gbyte' = gigabytes/s)"},
      {"", "empty rate (expected e.g. '1gbit')"},
      {"100", "'100': missing rate unit (e.g. bit, kbit, mbit, gbit)"},
      {"-1gbit", "'-1gbit': negative rate"},
      {"inf", "'inf': not a number (expected e.g. '1gbit')"},
      {"1.5bit", "'1.5bit': finer than 1 bit/s resolution"},
      {"18446744073709551616bit", "'18446744073709551616bit': out of range"},
      {"20000000tbit", "'20000000tbit': out of range"},
  };
  for (const auto& c : cases) {
    auto got = parse_rate_bps(c.text);
    ASSERT_FALSE(got.has_value()) << c.text;
    EXPECT_EQ(got.error().message, c.message) << c.text;
  }
  EXPECT_THAT(parse_rate_bps("1gbit/x").error().message, HasSubstr("'gbit/x'"));
}

TEST(Units, ParseSizeAccepts) {
  const UnsignedCase cases[] = {
      {"1500", 1500},
      {"1500b", 1500},
      {"1500bytes", 1500},
      {"64kb", 65'536},
      {"64k", 65'536},
      {"64KiB", 65'536},
      {"1mb", 1'048'576},
      {"1.5mb", 1'572'864},
      {"2gib", 2'147'483'648},
      {"1tb", uint64_t{1} << 40},
      {"0", 0},
      {"18446744073709551615", kU64Max},
  };
  for (const auto& c : cases) {
    auto got = parse_size_bytes(c.text);
    ASSERT_TRUE(got.has_value()) << c.text << ": " << got.error().message;
    EXPECT_EQ(*got, c.value) << c.text;
  }
}

TEST(Units, ParseSizeErrorsNameTheText) {
  const ErrorCase cases[] = {
      {"1xb", "'1xb': unknown size unit 'xb' (use b, kb, mb, gb, tb; 1kb = 1024 b)"},
      {"1bb", "'1bb': unknown size unit 'bb' (use b, kb, mb, gb, tb; 1kb = 1024 b)"},
      {"", "empty size (expected e.g. '64kb')"},
      {"-1kb", "'-1kb': negative size"},
      {"kb", "'kb': not a number (expected e.g. '64kb')"},
      {"1.5b", "'1.5b': finer than 1 byte resolution"},
      {"16777216tb", "'16777216tb': out of range"},
  };
  for (const auto& c : cases) {
    auto got = parse_size_bytes(c.text);
    ASSERT_FALSE(got.has_value()) << c.text;
    EXPECT_EQ(got.error().message, c.message) << c.text;
  }
}

TEST(Units, ParseFraction) {
  EXPECT_DOUBLE_EQ(parse_fraction("0.1%").value(), 0.001);
  EXPECT_DOUBLE_EQ(parse_fraction("50%").value(), 0.5);
  EXPECT_DOUBLE_EQ(parse_fraction("100%").value(), 1.0);
  EXPECT_DOUBLE_EQ(parse_fraction("0").value(), 0.0);
  EXPECT_DOUBLE_EQ(parse_fraction("1").value(), 1.0);
  EXPECT_DOUBLE_EQ(parse_fraction("0.25").value(), 0.25);
  EXPECT_DOUBLE_EQ(parse_fraction(".5").value(), 0.5);
  EXPECT_DOUBLE_EQ(parse_fraction("1e-4").value(), 1e-4);

  const ErrorCase cases[] = {
      {"1.5", "'1.5': must be in [0, 1] (or 0%..100%)"},
      {"101%", "'101%': must be in [0, 1] (or 0%..100%)"},
      {"-0.1", "'-0.1': negative fraction (must be in [0, 1] or 0%..100%)"},
      {"nan", "'nan': not a number (expected e.g. '0.1%' or '0.001')"},
      {"inf", "'inf': not a number (expected e.g. '0.1%' or '0.001')"},
      {"", "empty fraction (expected e.g. '0.1%')"},
      {"0.5x", "'0.5x': unexpected 'x' after the number (use '%' or a bare fraction)"},
      {"5%%", "'5%%': unexpected '%%' after the number (use '%' or a bare fraction)"},
      {"1e999", "'1e999': out of range"},
  };
  for (const auto& c : cases) {
    auto got = parse_fraction(c.text);
    ASSERT_FALSE(got.has_value()) << c.text;
    EXPECT_EQ(got.error().message, c.message) << c.text;
  }
}

TEST(Units, FormatIsReadable) {
  EXPECT_EQ(format_duration_ns(10'000'000), "10ms");
  EXPECT_EQ(format_duration_ns(1'500'000), "1.5ms");
  EXPECT_EQ(format_duration_ns(0), "0ns");
  EXPECT_EQ(format_duration_ns(999), "999ns");
  EXPECT_EQ(format_duration_ns(-250'000), "-250us");
  EXPECT_EQ(format_duration_ns(2'000'000'000), "2s");
  EXPECT_EQ(format_duration_ns(1'234'567), "1234.567us");
  EXPECT_EQ(format_rate_bps(1'000'000'000), "1gbit");
  EXPECT_EQ(format_rate_bps(1'500), "1.5kbit");
  EXPECT_EQ(format_rate_bps(0), "0bit");
  EXPECT_EQ(format_rate_bps(4'250'000'000), "4.25gbit");
  EXPECT_EQ(format_size_bytes(1'572'864), "1.5mb");
  EXPECT_EQ(format_size_bytes(65'536), "64kb");
  EXPECT_EQ(format_size_bytes(1000), "1000b");
  EXPECT_EQ(format_size_bytes(0), "0b");
}

TEST(Units, FormattersRoundTrip) {
  std::mt19937_64 rng(2024);
  std::vector<int64_t> durations = {0, 1, 999, 1000, 1500, kI64Max, kI64Min, -1, 1'500'000};
  std::vector<uint64_t> unsigned_values = {0, 1, 1000, 1024, 1'572'864, kU64Max, 8'000'000'000};
  for (int i = 0; i < 2000; ++i) {
    const int shift = static_cast<int>(rng() % 64);
    durations.push_back(static_cast<int64_t>(rng()) >> shift);
    unsigned_values.push_back(rng() >> shift);
    // Round values, which print with units and decimals.
    durations.push_back(static_cast<int64_t>(rng() % 100'000) * 1'000'000);
    unsigned_values.push_back((rng() % 100'000) * 1'000'000);
    unsigned_values.push_back((rng() % 100'000) << 17);
  }
  for (int64_t ns : durations) {
    const std::string text = format_duration_ns(ns);
    auto back = parse_duration_ns(text, /*allow_negative=*/true);
    ASSERT_TRUE(back.has_value()) << text << ": " << back.error().message;
    EXPECT_EQ(*back, ns) << text;
  }
  for (uint64_t v : unsigned_values) {
    const std::string rate = format_rate_bps(v);
    auto rate_back = parse_rate_bps(rate);
    ASSERT_TRUE(rate_back.has_value()) << rate << ": " << rate_back.error().message;
    EXPECT_EQ(*rate_back, v) << rate;
    const std::string size = format_size_bytes(v);
    auto size_back = parse_size_bytes(size);
    ASSERT_TRUE(size_back.has_value()) << size << ": " << size_back.error().message;
    EXPECT_EQ(*size_back, v) << size;
  }
}

// ---- split (common/split.h) ----

TEST(Strings, SplitKeepsEveryPieceEmptyOnesIncluded) {
  using Pieces = std::vector<std::string_view>;
  EXPECT_EQ(split("3,1", ','), (Pieces{"3", "1"}));
  EXPECT_EQ(split("a,,b,", ','), (Pieces{"a", "", "b", ""}));
  EXPECT_EQ(split("", ','), (Pieces{""}));
  EXPECT_EQ(split("no separator", ','), (Pieces{"no separator"}));
}

// ---- printable_utf8 (common/strings.h) ----

TEST(PrintableUtf8, KeepsValidUtf8AndEscapesEveryOtherByte) {
  EXPECT_EQ(printable_utf8("r-1 ok"), "r-1 ok");
  EXPECT_EQ(printable_utf8("gr\xC3\xBC\xC3\x9F \xE2\x82\xAC \xF0\x9F\x98\x80"),
            "gr\xC3\xBC\xC3\x9F \xE2\x82\xAC \xF0\x9F\x98\x80");
  EXPECT_EQ(printable_utf8("r\x97-1"), "r\\x97-1");               // lone continuation byte
  EXPECT_EQ(printable_utf8("\xC3"), "\\xc3");                     // truncated sequence
  EXPECT_EQ(printable_utf8("\xC0\xAF"), "\\xc0\\xaf");            // overlong '/'
  EXPECT_EQ(printable_utf8("\xED\xA0\x80"), "\\xed\\xa0\\x80");   // surrogate U+D800
  EXPECT_EQ(printable_utf8("\xF4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
  EXPECT_EQ(printable_utf8("\xE2\x82"), "\\xe2\\x82");            // cut at the end
  EXPECT_EQ(printable_utf8(std::string("a\0b", 3)), std::string("a\0b", 3));
}

TEST(PrintableUtf8, EveryOutputIsValidUtf8) {
  // Random bytes: the output decodes as UTF-8 (a second pass changes nothing).
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string bytes(static_cast<size_t>(rng() % 24), '\0');
    for (char& c : bytes) c = static_cast<char>(rng() % 256);
    const std::string once = printable_utf8(bytes);
    EXPECT_EQ(printable_utf8(once), once);
  }
}

}  // namespace
}  // namespace detwan::common

#include "common/units.h"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <system_error>

#include <fmt/format.h>

#include "common/strings.h"

namespace detwan::common {
namespace {

// -Wpedantic rejects the spelling __int128; __extension__ on the alias silences it.
__extension__ typedef unsigned __int128 u128;

// More significant digits than this cannot be scaled by a unit inside 128 bits, and no real
// quantity needs them.
constexpr int kMaxDigits = 24;

struct Unit {
  std::string_view name;
  uint64_t multiplier;
};

constexpr std::array<Unit, 9> kDurationUnits = {{
    {"ns", 1},
    {"us", 1'000},
    {"\xc2\xb5s", 1'000},  // µs
    {"ms", 1'000'000},
    {"s", 1'000'000'000},
    {"m", 60'000'000'000},  // minutes (reservation windows: "10m", "6h")
    {"min", 60'000'000'000},
    {"h", 3'600'000'000'000},
    {"d", 86'400'000'000'000},
}};

constexpr std::array<Unit, 5> kSizeUnits = {{
    {"b", 1},
    {"k", uint64_t{1} << 10},
    {"m", uint64_t{1} << 20},
    {"g", uint64_t{1} << 30},
    {"t", uint64_t{1} << 40},
}};

// A decimal number as written: value = digits / 10^frac_digits, sign separate.
struct Decimal {
  bool negative = false;
  u128 digits = 0;
  int frac_digits = 0;
  std::string_view suffix;  // what follows the number
};

// Parses "[+-]digits[.digits]" at the start of `text`. Errors name `text`.
Result<Decimal> parse_decimal(std::string_view text, std::string_view example) {
  Decimal out;
  size_t pos = 0;
  if (pos < text.size() && (text[pos] == '-' || text[pos] == '+')) {
    out.negative = text[pos] == '-';
    ++pos;
  }
  int significant = 0;
  int total_digits = 0;
  bool seen_point = false;
  for (; pos < text.size(); ++pos) {
    const char c = text[pos];
    if (c == '.' && !seen_point) {
      seen_point = true;
      continue;
    }
    if (c < '0' || c > '9') break;
    ++total_digits;
    if (seen_point) ++out.frac_digits;
    if (significant > 0 || c != '0') ++significant;
    if (significant > kMaxDigits) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("'{}': too many digits (out of range)", text));
    }
    out.digits = out.digits * 10 + static_cast<u128>(c - '0');
  }
  if (total_digits == 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("'{}': not a number (expected e.g. '{}')", text, example));
  }
  out.suffix = text.substr(pos);
  return out;
}

u128 pow10(int n) {
  u128 p = 1;
  for (int i = 0; i < n; ++i) p *= 10;
  return p;
}

// digits / 10^frac * multiplier, exact, or an error when it is not a whole number of the base
// unit or exceeds `limit`.
Result<u128> scale(std::string_view text, const Decimal& d, uint64_t multiplier, u128 limit,
                   std::string_view base_unit) {
  const u128 scaled = d.digits * multiplier;  // < 10^24 * 2^40: fits
  const u128 divisor = pow10(d.frac_digits);
  if (scaled % divisor != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("'{}': finer than 1 {} resolution", text, base_unit));
  }
  const u128 value = scaled / divisor;
  if (value > limit) {
    return make_error(ErrorCode::kInvalidArgument, fmt::format("'{}': out of range", text));
  }
  return value;
}

template <size_t N>
std::optional<uint64_t> find_unit(const std::array<Unit, N>& units, std::string_view name) {
  for (const Unit& unit : units) {
    if (unit.name == name) return unit.multiplier;
  }
  return std::nullopt;
}

struct FormatUnit {
  uint64_t multiplier;
  std::string_view name;
};

// Picks the largest unit in which `magnitude` is written with at most three decimals, so the
// text is exact and reads back to the same value.
template <size_t N>
std::string format_scaled(uint64_t magnitude, bool negative,
                          const std::array<FormatUnit, N>& units) {
  const std::string_view sign = negative ? "-" : "";
  for (const FormatUnit& unit : units) {
    if (unit.multiplier != 1 && (magnitude < unit.multiplier ||
                                 (static_cast<u128>(magnitude) * 1000) % unit.multiplier != 0)) {
      continue;
    }
    const uint64_t whole = magnitude / unit.multiplier;
    const uint64_t rest = magnitude % unit.multiplier;
    if (rest == 0) return fmt::format("{}{}{}", sign, whole, unit.name);
    auto millis = static_cast<uint64_t>(static_cast<u128>(rest) * 1000 / unit.multiplier);
    std::string frac = fmt::format("{:03}", millis);
    while (frac.back() == '0') frac.pop_back();
    return fmt::format("{}{}.{}{}", sign, whole, frac, unit.name);
  }
  return fmt::format("{}{}", sign, magnitude);  // unreachable: the last unit has multiplier 1
}

}  // namespace

Result<int64_t> parse_duration_ns(std::string_view raw, bool allow_negative) {
  const std::string_view text = trim(raw);
  if (text.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "empty duration (expected e.g. '10ms')");
  }
  auto decimal = parse_decimal(text, "10ms");
  if (!decimal) return std::unexpected(decimal.error());
  if (decimal->negative && !allow_negative && decimal->digits != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("'{}': negative duration not allowed", text));
  }
  const std::string unit_name = lower(decimal->suffix);
  uint64_t multiplier = 1;
  if (unit_name.empty()) {
    if (decimal->digits != 0) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("'{}': missing duration unit (use ns, us, ms, s, m, h, d; only 0 may "
                                    "be written without one)",
                                    text));
    }
  } else if (auto m = find_unit(kDurationUnits, unit_name)) {
    multiplier = *m;
  } else {
    return make_error(
        ErrorCode::kInvalidArgument,
        fmt::format("'{}': unknown duration unit '{}' (use ns, us, ms, s, m, h, d)", text, decimal->suffix));
  }
  // |INT64_MIN| = INT64_MAX + 1 is representable as a negative duration.
  const u128 limit =
      static_cast<u128>(std::numeric_limits<int64_t>::max()) + (decimal->negative ? 1 : 0);
  auto value = scale(text, *decimal, multiplier, limit, "ns");
  if (!value) return std::unexpected(value.error());
  const auto magnitude = static_cast<uint64_t>(*value);
  return decimal->negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
}

Result<uint64_t> parse_rate_bps(std::string_view raw) {
  const std::string_view text = trim(raw);
  if (text.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "empty rate (expected e.g. '1gbit')");
  }
  auto decimal = parse_decimal(text, "1gbit");
  if (!decimal) return std::unexpected(decimal.error());
  if (decimal->negative) {
    return make_error(ErrorCode::kInvalidArgument, fmt::format("'{}': negative rate", text));
  }
  const std::string_view suffix = decimal->suffix;
  if (suffix.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("'{}': missing rate unit (e.g. bit, kbit, mbit, gbit)", text));
  }
  // Rest after an optional decimal prefix: bits unless it says bytes ("Bps" with a capital B,
  // or "byte").
  auto unit_bits = [](std::string_view rest) -> std::optional<uint64_t> {
    const std::string l = lower(rest);
    if (!rest.empty() && rest.front() == 'B' && (l == "bps" || l == "b/s")) return 8;
    if (l == "bit" || l == "bits" || l == "bit/s" || l == "bps" || l == "b/s") return 1;
    if (l == "byte" || l == "bytes" || l == "byte/s" || l == "bytes/s") return 8;
    return std::nullopt;
  };
  uint64_t prefix = 1;
  std::optional<uint64_t> per_unit = unit_bits(suffix);
  if (!per_unit) {
    switch (std::tolower(static_cast<unsigned char>(suffix.front()))) {
      case 'k':
        prefix = 1'000;
        break;
      case 'm':
        prefix = 1'000'000;
        break;
      case 'g':
        prefix = 1'000'000'000;
        break;
      case 't':
        prefix = 1'000'000'000'000;
        break;
      default:
        prefix = 0;
        break;
    }
    if (prefix != 0) per_unit = unit_bits(suffix.substr(1));
  }
  if (!per_unit) {
    return make_error(
        ErrorCode::kInvalidArgument,
        fmt::format("'{}': unknown rate unit '{}' (use bit, kbit, mbit, gbit, tbit; 'gbps' = "
                    "gbit/s, 'GBps' or 'gbyte' = gigabytes/s)",
                    text, suffix));
  }
  auto value =
      scale(text, *decimal, prefix * *per_unit, std::numeric_limits<uint64_t>::max(), "bit/s");
  if (!value) return std::unexpected(value.error());
  return static_cast<uint64_t>(*value);
}

Result<uint64_t> parse_size_bytes(std::string_view raw) {
  const std::string_view text = trim(raw);
  if (text.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "empty size (expected e.g. '64kb')");
  }
  auto decimal = parse_decimal(text, "64kb");
  if (!decimal) return std::unexpected(decimal.error());
  if (decimal->negative) {
    return make_error(ErrorCode::kInvalidArgument, fmt::format("'{}': negative size", text));
  }
  const std::string unit_name = lower(decimal->suffix);
  uint64_t multiplier = 1;
  if (!unit_name.empty() && unit_name != "byte" && unit_name != "bytes") {
    // "k", "kb" and "kib" are all 1024 bytes, as in tc.
    std::string_view prefix = unit_name;
    if (prefix.size() == 3 && prefix.ends_with("ib")) prefix = prefix.substr(0, 1);
    if (prefix.size() == 2 && prefix.front() != 'b' && prefix.back() == 'b') {
      prefix = prefix.substr(0, 1);
    }
    auto m = find_unit(kSizeUnits, prefix);
    if (!m) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("'{}': unknown size unit '{}' (use b, kb, mb, gb, tb; "
                                    "1kb = 1024 b)",
                                    text, decimal->suffix));
    }
    multiplier = *m;
  }
  auto value = scale(text, *decimal, multiplier, std::numeric_limits<uint64_t>::max(), "byte");
  if (!value) return std::unexpected(value.error());
  return static_cast<uint64_t>(*value);
}

Result<double> parse_fraction(std::string_view raw) {
  const std::string_view text = trim(raw);
  if (text.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "empty fraction (expected e.g. '0.1%')");
  }
  const char first = text.front();
  if (first == '-') {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("'{}': negative fraction (must be in [0, 1] or 0%..100%)", text));
  }
  if (!((first >= '0' && first <= '9') || first == '.')) {  // also rejects nan, inf, +x
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("'{}': not a number (expected e.g. '0.1%' or '0.001')", text));
  }
  double value = 0.0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range) {
    return make_error(ErrorCode::kInvalidArgument, fmt::format("'{}': out of range", text));
  }
  if (ec != std::errc() || !std::isfinite(value)) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("'{}': not a number (expected e.g. '0.1%' or '0.001')", text));
  }
  const std::string_view rest(end, static_cast<size_t>(text.data() + text.size() - end));
  if (rest == "%") {
    value /= 100.0;
  } else if (!rest.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("'{}': unexpected '{}' after the number (use '%' or a bare "
                                  "fraction)",
                                  text, rest));
  }
  if (value < 0.0 || value > 1.0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("'{}': must be in [0, 1] (or 0%..100%)", text));
  }
  return value;
}

std::string format_duration_ns(int64_t ns) {
  static constexpr std::array<FormatUnit, 4> kUnits = {
      {{1'000'000'000, "s"}, {1'000'000, "ms"}, {1'000, "us"}, {1, "ns"}}};
  const uint64_t magnitude = ns < 0 ? 0 - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
  return format_scaled(magnitude, ns < 0, kUnits);
}

std::string format_rate_bps(uint64_t bps) {
  static constexpr std::array<FormatUnit, 5> kUnits = {{{1'000'000'000'000, "tbit"},
                                                        {1'000'000'000, "gbit"},
                                                        {1'000'000, "mbit"},
                                                        {1'000, "kbit"},
                                                        {1, "bit"}}};
  return format_scaled(bps, false, kUnits);
}

std::string format_size_bytes(uint64_t bytes) {
  static constexpr std::array<FormatUnit, 5> kUnits = {{{uint64_t{1} << 40, "tb"},
                                                        {uint64_t{1} << 30, "gb"},
                                                        {uint64_t{1} << 20, "mb"},
                                                        {uint64_t{1} << 10, "kb"},
                                                        {1, "b"}}};
  return format_scaled(bytes, false, kUnits);
}

}  // namespace detwan::common

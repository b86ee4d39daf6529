#pragma once
// Parsing and printing of quantities with units, shared by config files and command lines.
// Every parser returns Result<>; the error message names the offending text and what was
// expected ("'10xs': unknown duration unit 'xs' (use ns, us, ms, s, m, h, d)").
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace detwan::common {

// "10ms", "250us", "1.5s", "100ns", "10m" (minutes), "6h", "1d", "0" (a bare 0 is allowed; other bare numbers are not).
// Negative values are rejected unless allow_negative.
Result<int64_t> parse_duration_ns(std::string_view text, bool allow_negative = false);

// "1gbit", "100mbit", "64kbit", "1500bit" (also "bps" suffix forms: "1gbps" = 1e9 bit/s,
// and "mbyte"/"MBps" forms for bytes/s). Decimal prefixes (k=1e3, m=1e6, g=1e9, t=1e12),
// case-insensitive. Result in bits per second.
Result<uint64_t> parse_rate_bps(std::string_view text);

// "1mb", "64kb", "1500b", "1500" (bytes). Binary prefixes: kb/kib = 1024, mb/mib = 2^20,
// gb/gib = 2^30, as tc does. Result in bytes.
Result<uint64_t> parse_size_bytes(std::string_view text);

// "0.1%" -> 0.001, "50%" -> 0.5; a bare number in [0,1] is a fraction. Must be in [0, 1].
Result<double> parse_fraction(std::string_view text);

// Human-readable forms used in printed configurations: "10ms", "1.5ms", "1gbit", "1.5mb".
std::string format_duration_ns(int64_t ns);
std::string format_rate_bps(uint64_t bps);
std::string format_size_bytes(uint64_t bytes);

}  // namespace detwan::common

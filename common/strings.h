#pragma once
// Small text helpers shared by the parsers (common/units.cc, the wanem SPEC parser).
#include <cctype>
#include <cstddef>
#include <string>
#include <string_view>

namespace detwan::common {

// `text` without leading and trailing whitespace (a view into the same characters).
inline std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

// ASCII lower-case copy.
inline std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Hex digits (either case, two per byte) into `out`, which must be exactly half as long as
// `hex`. False on any other character or length; `out` is then unspecified.
inline bool decode_hex(std::string_view hex, unsigned char* out, std::size_t out_bytes) noexcept {
  if (hex.size() != 2 * out_bytes) return false;
  const auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < out_bytes; ++i) {
    const int high = digit(hex[2 * i]);
    const int low = digit(hex[2 * i + 1]);
    if (high < 0 || low < 0) return false;
    out[i] = static_cast<unsigned char>(high * 16 + low);
  }
  return true;
}

}  // namespace detwan::common

#pragma once
// Small text helpers shared by the parsers (common/units.cc, the wanem SPEC parser).
#include <cctype>
#include <cstddef>
#include <cstdint>
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

// The value of `key` in a URL query ("a=1&state=held" -> "held"; "" when absent), as sent
// (not percent-decoded).
inline std::string query_value(const std::string& query, std::string_view key) {
  const std::string prefix = std::string(key) + "=";
  for (std::size_t start = 0; start <= query.size();) {
    const std::size_t amp = query.find('&', start);
    const std::string part =
        query.substr(start, amp == std::string::npos ? std::string::npos : amp - start);
    if (part.rfind(prefix, 0) == 0) return part.substr(prefix.size());
    if (amp == std::string::npos) break;
    start = amp + 1;
  }
  return "";
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

// `text` as valid UTF-8 for a JSON document or a log line: every byte that is not part of a
// well-formed UTF-8 sequence (RFC 3629: no overlongs, surrogates or code points above
// U+10FFFF) becomes the four characters \xNN. Echoing a client's bytes (a URL path, a header)
// into an answer goes through this first.
inline std::string printable_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  std::size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = byte(i);
    std::size_t n = 0;  // continuation bytes
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the first continuation byte
    if (c < 0x80) {
      n = 0;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      n = SIZE_MAX;  // never a first byte
    }
    // The n continuation bytes are text[i + 1 .. i + n]: all present, the first within
    // [lo, hi], the others 10xxxxxx.
    bool valid = n != SIZE_MAX && i + n < text.size();
    if (valid && n > 0) {
      valid = byte(i + 1) >= lo && byte(i + 1) <= hi;
      for (std::size_t k = 2; valid && k <= n; ++k) valid = (byte(i + k) & 0xC0) == 0x80;
    }
    if (valid) {
      out.append(text.substr(i, n + 1));
      i += n + 1;
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0x0F];
      i += 1;
    }
  }
  return out;
}

}  // namespace detwan::common

#pragma once
// Small text helpers shared by the parsers (common/units.cc, the wanem SPEC parser).
#include <cctype>
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

}  // namespace detwan::common

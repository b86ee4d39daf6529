#pragma once
// Splitting a list such as "3,1" or "r-3,r-4" into its pieces (the command-line and
// environment parsers). Not in common/strings.h: that name shadows libc's <strings.h> for the
// targets that put common/ on their include path, so it must stay free of standard headers
// that include it back.
#include <cstddef>
#include <string_view>
#include <vector>

namespace detwan::common {

// The pieces of `text` between `separator`s, empty ones included ("a,,b" -> "a", "", "b";
// "" -> ""): views into the same characters.
inline std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> pieces;
  for (std::size_t start = 0;;) {
    const std::size_t end = text.find(separator, start);
    pieces.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return pieces;
    start = end + 1;
  }
}

}  // namespace detwan::common

#pragma once
// A Prometheus text exposition read back for tests: "name{labels}" -> value of every sample line
// (comments and blank lines skipped), so that a test can look a series up by its full name.
#include <istream>
#include <map>
#include <sstream>
#include <string>

namespace detwan::test_support {

inline std::map<std::string, double> exposition_samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

}  // namespace detwan::test_support

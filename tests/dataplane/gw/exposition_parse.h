#pragma once
// The Prometheus text exposition 0.0.4 parsed by hand, strictly (the engine tests check the
// gateway's exposition with it): one sample line into its name, labels and value.
#include <cctype>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>

namespace detwan::dataplane::gw::testing_exposition {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

inline bool name_char(char c, bool first) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':' ||
         (!first && std::isdigit(static_cast<unsigned char>(c)));
}

// name{label="value",...} value — or nullopt if the line does not parse.
inline std::optional<Sample> parse_sample(const std::string& line) {
  Sample s;
  std::size_t i = 0;
  while (i < line.size() && name_char(line[i], i == 0)) s.name += line[i++];
  if (s.name.empty()) return std::nullopt;
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      std::string label;
      while (i < line.size() && line[i] != '=') {
        if (!name_char(line[i], label.empty()) || line[i] == ':') return std::nullopt;
        label += line[i++];
      }
      if (label.empty() || i + 1 >= line.size() || line[i + 1] != '"') return std::nullopt;
      i += 2;
      std::string value;
      while (i < line.size() && line[i] != '"') {
        if (line[i] == '\\') {
          if (i + 1 >= line.size()) return std::nullopt;
          const char e = line[i + 1];
          if (e != '\\' && e != '"' && e != 'n') return std::nullopt;
          value += e == 'n' ? '\n' : e;
          i += 2;
        } else if (line[i] == '\n') {
          return std::nullopt;
        } else {
          value += line[i++];
        }
      }
      if (i >= line.size()) return std::nullopt;
      ++i;  // closing quote
      if (!s.labels.emplace(label, value).second) return std::nullopt;
      if (i < line.size() && line[i] == ',') ++i;
    }
    if (i >= line.size()) return std::nullopt;
    ++i;  // '}'
  }
  if (i >= line.size() || line[i] != ' ') return std::nullopt;
  const std::string number = line.substr(i + 1);
  if (number.empty()) return std::nullopt;
  char* end = nullptr;
  s.value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size()) return std::nullopt;
  return s;
}

inline std::string key_of(const Sample& s, bool without_le = false) {
  std::string key = s.name;
  for (const auto& [k, v] : s.labels) {
    if (without_le && k == "le") continue;
    key += "|" + k + "=" + v;
  }
  return key;
}

}  // namespace detwan::dataplane::gw::testing_exposition

#pragma once
// YAML configuration access whose every error names file, line, column and field:
//   "gateway.yaml:12:7: field 'tunnels[0].rate': '4gbt': unknown rate unit 'gbt'"
//
// ConfigNode wraps a yaml-cpp node together with the file name and its dotted path. Getters
// throw common::Failure (ErrorCode::kConfig) with such a message; load code runs at setup time
// and a boundary (main) prints the message and exits non-zero.
// Unknown keys are errors too (check_keys), so a typo never silently falls back to a default.
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "common/status.h"

namespace detwan::common {

class ConfigNode {
 public:
  ConfigNode(YAML::Node node, std::string file, std::string path);

  // Parses a file / a string. Syntax errors become Failure with file:line:col.
  static ConfigNode load_file(const std::string& file);
  static ConfigNode load_string(const std::string& text, const std::string& name = "<string>");

  [[nodiscard]] bool has(std::string_view key) const;
  [[nodiscard]] ConfigNode child(std::string_view key) const;   // required: error if missing
  [[nodiscard]] std::optional<ConfigNode> maybe_child(std::string_view key) const;
  [[nodiscard]] std::vector<ConfigNode> items() const;          // sequence elements: path "x[i]"
  [[nodiscard]] std::vector<std::string> keys() const;          // map keys in file order
  [[nodiscard]] bool is_map() const;
  [[nodiscard]] bool is_sequence() const;
  [[nodiscard]] bool is_scalar() const;

  // Throws if a key other than `allowed` is present, naming it and listing the allowed keys.
  void check_keys(std::initializer_list<std::string_view> allowed) const;

  // Scalar conversions of this node.
  [[nodiscard]] std::string as_string() const;
  [[nodiscard]] int64_t as_int(int64_t min_value, int64_t max_value) const;
  [[nodiscard]] double as_double() const;
  [[nodiscard]] bool as_bool() const;
  [[nodiscard]] int64_t as_duration_ns(bool allow_negative = false) const;
  [[nodiscard]] uint64_t as_rate_bps() const;
  [[nodiscard]] uint64_t as_size_bytes() const;
  [[nodiscard]] double as_fraction() const;

  // Convenience: optional field with default.
  [[nodiscard]] std::string get_string(std::string_view key, std::string fallback) const;
  [[nodiscard]] int64_t get_int(std::string_view key, int64_t fallback, int64_t min_value,
                                int64_t max_value) const;
  [[nodiscard]] bool get_bool(std::string_view key, bool fallback) const;
  [[nodiscard]] int64_t get_duration_ns(std::string_view key, int64_t fallback) const;
  [[nodiscard]] uint64_t get_rate_bps(std::string_view key, uint64_t fallback) const;
  [[nodiscard]] uint64_t get_size_bytes(std::string_view key, uint64_t fallback) const;
  [[nodiscard]] double get_fraction(std::string_view key, double fallback) const;

  // Throws Failure "file:line:col: field 'path': message".
  [[noreturn]] void fail(std::string_view message) const;

  [[nodiscard]] const std::string& file() const noexcept { return file_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] int line() const noexcept;    // 1-based; 0 if unknown
  [[nodiscard]] int column() const noexcept;  // 1-based; 0 if unknown
  [[nodiscard]] const YAML::Node& raw() const noexcept { return node_; }

 private:
  // 1-based line/column that messages about this node point at (see config.cc).
  [[nodiscard]] std::pair<int, int> position() const noexcept;

  YAML::Node node_;
  std::string file_;
  std::string path_;
  // Position of this node's key (or its parent), used when the node has no position of its own
  // (yaml-cpp gives an empty value the mark of the next token).
  int parent_line_ = 0;
  int parent_column_ = 0;
};

}  // namespace detwan::common

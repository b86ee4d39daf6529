#include "common/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "common/strings.h"
#include "common/units.h"

namespace detwan::common {
namespace {

// yaml-cpp marks are 0-based, -1 when unknown; ours are 1-based, 0 when unknown.
int one_based(int zero_based) { return zero_based >= 0 ? zero_based + 1 : 0; }

YAML::Mark mark_of(const YAML::Node& node) {
  try {
    return node.Mark();
  } catch (const YAML::Exception&) {
    return YAML::Mark::null_mark();
  }
}

std::string location(const std::string& file, int line, int column) {
  if (line <= 0) return file;
  return fmt::format("{}:{}:{}", file, line, column);
}

[[noreturn]] void throw_at(const std::string& file, int line, int column, std::string_view path,
                           std::string_view message) {
  std::string text = location(file, line, column);
  if (!path.empty()) text += fmt::format(": field '{}'", path);
  text += ": ";
  text += message;
  throw Failure(Error{ErrorCode::kConfig, std::move(text)});
}

std::string join_path(const std::string& parent, std::string_view key) {
  if (parent.empty()) return std::string(key);
  return fmt::format("{}.{}", parent, key);
}

// What a node is, for "expected X, got Y" messages.
std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Scalar:
      return fmt::format("'{}'", node.Scalar());
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      break;
  }
  return "an empty value";
}

struct Entry {
  YAML::Node key;
  YAML::Node value;
};

// Looks `key` up without yaml-cpp's non-const operator[] (which would insert it).
std::optional<Entry> find_entry(const YAML::Node& map, std::string_view key) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) return Entry{it->first, it->second};
  }
  return std::nullopt;
}

}  // namespace

ConfigNode::ConfigNode(YAML::Node node, std::string file, std::string path)
    : node_(std::move(node)), file_(std::move(file)), path_(std::move(path)) {}

ConfigNode ConfigNode::load_file(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    const int err = errno;
    throw Failure(Error{ErrorCode::kIo, fmt::format("{}: cannot open: {}", file,
                                                    err != 0 ? std::strerror(err) : "failed")});
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Failure(Error{ErrorCode::kIo, fmt::format("{}: read error", file)});
  return load_string(text.str(), file);
}

ConfigNode ConfigNode::load_string(const std::string& text, const std::string& name) {
  try {
    return ConfigNode(YAML::Load(text), name, "");
  } catch (const YAML::ParserException& e) {
    throw_at(name, one_based(e.mark.line), one_based(e.mark.column), "",
             fmt::format("YAML syntax error: {}", e.msg));
  } catch (const YAML::Exception& e) {
    throw_at(name, one_based(e.mark.line), one_based(e.mark.column), "",
             fmt::format("YAML error: {}", e.msg));
  }
}

int ConfigNode::line() const noexcept { return one_based(mark_of(node_).line); }
int ConfigNode::column() const noexcept { return one_based(mark_of(node_).column); }

bool ConfigNode::is_map() const { return node_.IsMap(); }
bool ConfigNode::is_sequence() const { return node_.IsSequence(); }
bool ConfigNode::is_scalar() const { return node_.IsScalar(); }

// Where messages about this node point. An empty value ("key:") gets the mark of the next
// token from yaml-cpp, which may be lines away: such nodes point at their key instead.
std::pair<int, int> ConfigNode::position() const noexcept {
  const bool empty_value = node_.IsDefined() && node_.IsNull();
  if (line() > 0 && !(empty_value && parent_line_ > 0)) return {line(), column()};
  return {parent_line_, parent_column_};
}

void ConfigNode::fail(std::string_view message) const {
  const auto [at_line, at_column] = position();
  throw_at(file_, at_line, at_column, path_, message);
}

bool ConfigNode::has(std::string_view key) const {
  return node_.IsMap() && find_entry(node_, key).has_value();
}

std::optional<ConfigNode> ConfigNode::maybe_child(std::string_view key) const {
  if (node_.IsNull() || !node_.IsDefined()) return std::nullopt;
  if (!node_.IsMap()) {
    fail(fmt::format("expected a map with field '{}', got {}", key, describe(node_)));
  }
  auto entry = find_entry(node_, key);
  if (!entry) return std::nullopt;
  ConfigNode child_node(entry->value, file_, join_path(path_, key));
  // Used only when the value has no position of its own (an empty "key:"): point at the key.
  const YAML::Mark key_mark = mark_of(entry->key);
  if (key_mark.line >= 0) {
    child_node.parent_line_ = one_based(key_mark.line);
    child_node.parent_column_ = one_based(key_mark.column);
  } else {
    std::tie(child_node.parent_line_, child_node.parent_column_) = position();
  }
  return child_node;
}

ConfigNode ConfigNode::child(std::string_view key) const {
  if (auto found = maybe_child(key)) return std::move(*found);
  // Point at the map that should have held the field.
  const auto [at_line, at_column] = position();
  throw_at(file_, at_line, at_column, join_path(path_, key), "missing required field");
}

std::vector<ConfigNode> ConfigNode::items() const {
  std::vector<ConfigNode> out;
  if (node_.IsNull() || !node_.IsDefined()) return out;
  if (!node_.IsSequence()) fail(fmt::format("expected a sequence, got {}", describe(node_)));
  out.reserve(node_.size());
  size_t index = 0;
  for (auto it = node_.begin(); it != node_.end(); ++it, ++index) {
    ConfigNode item(*it, file_, fmt::format("{}[{}]", path_, index));
    std::tie(item.parent_line_, item.parent_column_) = position();
    out.push_back(std::move(item));
  }
  return out;
}

std::vector<std::string> ConfigNode::keys() const {
  std::vector<std::string> out;
  if (node_.IsNull() || !node_.IsDefined()) return out;
  if (!node_.IsMap()) fail(fmt::format("expected a map, got {}", describe(node_)));
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    out.push_back(it->first.IsScalar() ? it->first.Scalar() : std::string("<non-scalar key>"));
  }
  return out;
}

void ConfigNode::check_keys(std::initializer_list<std::string_view> allowed) const {
  if (node_.IsNull() || !node_.IsDefined()) return;
  if (!node_.IsMap()) fail(fmt::format("expected a map, got {}", describe(node_)));
  std::vector<std::string> seen;
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    const YAML::Mark mark = mark_of(it->first);
    const int key_line = one_based(mark.line);
    const int key_column = one_based(mark.column);
    if (!it->first.IsScalar()) {
      throw_at(file_, key_line, key_column, path_, "map keys must be plain names");
    }
    const std::string& key = it->first.Scalar();
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string list;
      for (std::string_view name : allowed) {
        if (!list.empty()) list += ", ";
        list += name;
      }
      throw_at(file_, key_line, key_column, join_path(path_, key),
               fmt::format("unknown key '{}' (allowed: {})", key, list.empty() ? "none" : list));
    }
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      throw_at(file_, key_line, key_column, join_path(path_, key),
               fmt::format("duplicate key '{}'", key));
    }
    seen.push_back(key);
  }
}

std::string ConfigNode::as_string() const {
  if (!node_.IsScalar()) fail(fmt::format("expected a string, got {}", describe(node_)));
  return node_.Scalar();
}

int64_t ConfigNode::as_int(int64_t min_value, int64_t max_value) const {
  if (!node_.IsScalar()) fail(fmt::format("expected an integer, got {}", describe(node_)));
  const std::string& text = node_.Scalar();
  std::string_view digits = text;
  bool negative = false;
  if (!digits.empty() && (digits.front() == '+' || digits.front() == '-')) {
    negative = digits.front() == '-';
    digits.remove_prefix(1);
  }
  int base = 10;
  if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
    base = 16;
    digits.remove_prefix(2);
  }
  uint64_t magnitude = 0;
  const auto [end, ec] =
      std::from_chars(digits.data(), digits.data() + digits.size(), magnitude, base);
  if (digits.empty() || end != digits.data() + digits.size() ||
      (ec != std::errc() && ec != std::errc::result_out_of_range)) {
    fail(fmt::format("expected an integer, got '{}'", text));
  }
  const auto limit = static_cast<uint64_t>(INT64_MAX) + (negative ? 1 : 0);
  if (ec == std::errc::result_out_of_range || magnitude > limit) {
    fail(fmt::format("expected an integer in [{}, {}], got '{}'", min_value, max_value, text));
  }
  const int64_t value =
      negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
  if (value < min_value || value > max_value) {
    fail(fmt::format("expected an integer in [{}, {}], got '{}'", min_value, max_value, text));
  }
  return value;
}

double ConfigNode::as_double() const {
  if (!node_.IsScalar()) fail(fmt::format("expected a number, got {}", describe(node_)));
  const std::string& text = node_.Scalar();
  std::string_view digits = text;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  double value = 0.0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() ||
      !std::isfinite(value)) {
    fail(fmt::format("expected a finite number, got '{}'", text));
  }
  return value;
}

bool ConfigNode::as_bool() const {
  if (!node_.IsScalar()) fail(fmt::format("expected a boolean, got {}", describe(node_)));
  const std::string value = lower(node_.Scalar());
  if (value == "true" || value == "yes" || value == "on") return true;
  if (value == "false" || value == "no" || value == "off") return false;
  fail(fmt::format("expected a boolean (true/false), got '{}'", node_.Scalar()));
}

int64_t ConfigNode::as_duration_ns(bool allow_negative) const {
  if (!node_.IsScalar()) fail(fmt::format("expected a duration, got {}", describe(node_)));
  auto value = parse_duration_ns(node_.Scalar(), allow_negative);
  if (!value) fail(value.error().message);
  return *value;
}

uint64_t ConfigNode::as_rate_bps() const {
  if (!node_.IsScalar()) fail(fmt::format("expected a rate, got {}", describe(node_)));
  auto value = parse_rate_bps(node_.Scalar());
  if (!value) fail(value.error().message);
  return *value;
}

uint64_t ConfigNode::as_size_bytes() const {
  if (!node_.IsScalar()) fail(fmt::format("expected a size, got {}", describe(node_)));
  auto value = parse_size_bytes(node_.Scalar());
  if (!value) fail(value.error().message);
  return *value;
}

double ConfigNode::as_fraction() const {
  if (!node_.IsScalar()) fail(fmt::format("expected a fraction, got {}", describe(node_)));
  auto value = parse_fraction(node_.Scalar());
  if (!value) fail(value.error().message);
  return *value;
}

std::string ConfigNode::get_string(std::string_view key, std::string fallback) const {
  auto found = maybe_child(key);
  return found ? found->as_string() : std::move(fallback);
}

int64_t ConfigNode::get_int(std::string_view key, int64_t fallback, int64_t min_value,
                            int64_t max_value) const {
  auto found = maybe_child(key);
  return found ? found->as_int(min_value, max_value) : fallback;
}

bool ConfigNode::get_bool(std::string_view key, bool fallback) const {
  auto found = maybe_child(key);
  return found ? found->as_bool() : fallback;
}

int64_t ConfigNode::get_duration_ns(std::string_view key, int64_t fallback) const {
  auto found = maybe_child(key);
  return found ? found->as_duration_ns() : fallback;
}

uint64_t ConfigNode::get_rate_bps(std::string_view key, uint64_t fallback) const {
  auto found = maybe_child(key);
  return found ? found->as_rate_bps() : fallback;
}

uint64_t ConfigNode::get_size_bytes(std::string_view key, uint64_t fallback) const {
  auto found = maybe_child(key);
  return found ? found->as_size_bytes() : fallback;
}

double ConfigNode::get_fraction(std::string_view key, double fallback) const {
  auto found = maybe_child(key);
  return found ? found->as_fraction() : fallback;
}

}  // namespace detwan::common

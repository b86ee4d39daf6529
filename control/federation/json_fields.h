#pragma once
// Reading fields of a peer's JSON (a request it sends us, an answer it gives) or of a journal
// row (federation/). Never throws: a peer is another owner's agent, untrusted, and an exception
// would take our agent down with whatever it held half-done.
//
// - text/number/object/array: lenient reads for optional fields; a missing or mistyped field
//   reads as empty / 0 (callers check what matters).
// - Reader: strict reads of what a request or an answer must hold; the first missing or
//   mistyped field is recorded (field(), why()) so that the caller can refuse naming it.
// Thread-compatible.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <boost/json.hpp>

namespace detwan::control::federation::fields {

inline std::string text(const boost::json::object& o, const char* key) {
  const boost::json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : "";
}
inline int64_t number(const boost::json::object& o, const char* key) {
  const boost::json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_number()) return 0;
  boost::system::error_code ec;
  const auto n = v->to_number<int64_t>(ec);  // 1e30 or 1.5 do not fit: read as 0
  return ec ? 0 : n;
}
inline double real(const boost::json::object& o, const char* key) {
  const boost::json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_number()) return 0.0;
  boost::system::error_code ec;
  const auto n = v->to_number<double>(ec);
  return ec ? 0.0 : n;
}
inline boost::json::object object(const boost::json::object& o, const char* key) {
  const boost::json::value* v = o.if_contains(key);
  return v != nullptr && v->is_object() ? v->as_object() : boost::json::object{};
}
inline boost::json::array array(const boost::json::object& o, const char* key) {
  const boost::json::value* v = o.if_contains(key);
  return v != nullptr && v->is_array() ? v->as_array() : boost::json::array{};
}

// An integer that fits T exactly (no fraction, in range), or nothing.
template <class T>
std::optional<T> integer_of(const boost::json::value& v) {
  if (!v.is_number()) return std::nullopt;
  boost::system::error_code ec;
  const T n = v.to_number<T>(ec);
  if (ec) return std::nullopt;
  return n;
}

inline bool is_string_array(const boost::json::value& v) {
  if (!v.is_array()) return false;
  for (const boost::json::value& item : v.as_array()) {
    if (!item.is_string()) return false;
  }
  return true;
}
inline bool is_string_object(const boost::json::value& v) {
  if (!v.is_object()) return false;
  for (const auto& item : v.as_object()) {
    if (!item.value().is_string()) return false;
  }
  return true;
}

enum class Need : uint8_t { kOptional, kRequired };

class Reader {
 public:
  // `prefix` names where the object sits ("bound.forward."): field() is prefix + key.
  explicit Reader(const boost::json::object& o, std::string prefix = "")
      : o_(o), prefix_(std::move(prefix)) {}

  std::string text(const char* key, Need need = Need::kRequired) {
    const boost::json::value* v = get(key, need);
    if (v == nullptr) return "";
    if (!v->is_string()) return fail(key, "must be a string"), "";
    return std::string(v->as_string());
  }
  template <class T>
  T integer(const char* key, Need need = Need::kRequired, T fallback = 0) {
    const boost::json::value* v = get(key, need);
    if (v == nullptr) return fallback;
    const std::optional<T> n = integer_of<T>(*v);
    if (!n) {
      fail(key, fmt::format("must be an integer in [{}, {}]", std::numeric_limits<T>::min(),
                            std::numeric_limits<T>::max()));
      return fallback;
    }
    return *n;
  }
  // A number in [low, high] (a fraction, a loss).
  double real(const char* key, double low, double high, Need need = Need::kRequired) {
    const boost::json::value* v = get(key, need);
    if (v == nullptr) return low;
    boost::system::error_code ec;
    const double n = v->is_number() ? v->to_number<double>(ec) : 0.0;
    if (!v->is_number() || ec || !(n >= low && n <= high)) {
      return fail(key, fmt::format("must be a number in [{}, {}]", low, high)), low;
    }
    return n;
  }
  bool boolean(const char* key, Need need = Need::kRequired) {
    const boost::json::value* v = get(key, need);
    if (v == nullptr) return false;
    if (!v->is_bool()) return fail(key, "must be a boolean"), false;
    return v->as_bool();
  }
  std::vector<std::string> texts(const char* key, Need need = Need::kRequired) {
    std::vector<std::string> out;
    const boost::json::value* v = get(key, need);
    if (v == nullptr) return out;
    if (!is_string_array(*v)) return fail(key, "must be an array of strings"), out;
    for (const boost::json::value& item : v->as_array()) out.emplace_back(item.as_string());
    return out;
  }
  // The object (nullptr when absent or mistyped).
  const boost::json::object* object(const char* key, Need need = Need::kRequired) {
    const boost::json::value* v = get(key, need);
    if (v == nullptr) return nullptr;
    if (!v->is_object()) return fail(key, "must be an object"), nullptr;
    return &v->as_object();
  }
  // An object whose values are strings ({"gw-c": "<public key>"}).
  const boost::json::object* string_object(const char* key, Need need = Need::kRequired) {
    const boost::json::value* v = get(key, need);
    if (v == nullptr) return nullptr;
    if (!is_string_object(*v)) return fail(key, "must be an object of strings"), nullptr;
    return &v->as_object();
  }

  // A problem found by the caller's own check (a value out of its range).
  void fail(const char* key, std::string why) {
    if (!field_.empty()) return;  // the first problem is the one said
    field_ = prefix_ + key;
    why_ = std::move(why);
  }
  // Takes the first problem of a reader of a nested object.
  void take(const Reader& nested) {
    if (field_.empty() && !nested.ok()) {
      field_ = nested.field_;
      why_ = nested.why_;
    }
  }

  [[nodiscard]] bool ok() const { return field_.empty(); }
  [[nodiscard]] const std::string& field() const { return field_; }
  [[nodiscard]] const std::string& why() const { return why_; }

 private:
  const boost::json::value* get(const char* key, Need need) {
    const boost::json::value* v = o_.if_contains(key);
    if (v == nullptr && need == Need::kRequired) fail(key, "is missing");
    return v;
  }

  const boost::json::object& o_;
  std::string prefix_;
  std::string field_;
  std::string why_;
};

}  // namespace detwan::control::federation::fields

#pragma once
// Reading optional fields of a peer's JSON answer or a journal row (federation/): a missing or
// mistyped field reads as empty / 0. Thread-compatible, no errors (callers check what matters).
#include <cstdint>
#include <string>

#include <boost/json.hpp>

namespace detwan::control::federation::fields {

inline std::string text(const boost::json::object& o, const char* key) {
  const boost::json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : "";
}
inline int64_t number(const boost::json::object& o, const char* key) {
  const boost::json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_number()) return 0;
  boost::system::error_code ec;  // 1.5 or 1e30 from a peer: not an integer, reads as 0
  const int64_t n = v->to_number<int64_t>(ec);
  return ec ? 0 : n;
}
inline boost::json::object object(const boost::json::object& o, const char* key) {
  const boost::json::value* v = o.if_contains(key);
  return v != nullptr && v->is_object() ? v->as_object() : boost::json::object{};
}
inline boost::json::array array(const boost::json::object& o, const char* key) {
  const boost::json::value* v = o.if_contains(key);
  return v != nullptr && v->is_array() ? v->as_array() : boost::json::array{};
}

}  // namespace detwan::control::federation::fields

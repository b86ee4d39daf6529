#pragma once
// A JSON number read as an integer, for every parser of untrusted JSON (the agent's API and
// journal, the gateway's control commands, detwan-perf's specs, the reservation client).
// Boost.JSON keeps an integer as int64 or uint64 depending on its size and sign, and a number
// with a fraction or exponent as a double: these accept the integers that fit the target type
// and nothing else (no double, however whole; no negative for an unsigned). Callers word their
// own errors; the bounds are inclusive.
#include <cstdint>
#include <limits>
#include <optional>

#include <boost/json/value.hpp>

namespace detwan::common {

inline std::optional<int64_t> json_int64(const boost::json::value& v) {
  if (v.is_int64()) return v.get_int64();
  if (v.is_uint64() && v.get_uint64() <= static_cast<uint64_t>(INT64_MAX)) {
    return static_cast<int64_t>(v.get_uint64());
  }
  return std::nullopt;
}

inline std::optional<uint64_t> json_uint64(const boost::json::value& v) {
  if (v.is_uint64()) return v.get_uint64();
  if (v.is_int64() && v.get_int64() >= 0) return static_cast<uint64_t>(v.get_int64());
  return std::nullopt;
}

// An integer in [min, max].
inline std::optional<int64_t> json_int64_in(const boost::json::value& v, int64_t min,
                                            int64_t max) {
  const std::optional<int64_t> n = json_int64(v);
  if (!n || *n < min || *n > max) return std::nullopt;
  return n;
}

inline std::optional<uint64_t> json_uint64_in(const boost::json::value& v, uint64_t min,
                                              uint64_t max) {
  const std::optional<uint64_t> n = json_uint64(v);
  if (!n || *n < min || *n > max) return std::nullopt;
  return n;
}

}  // namespace detwan::common

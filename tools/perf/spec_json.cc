#include "tools/perf/spec_json.h"

#include <type_traits>
#include <utility>

#include "common/json_number.h"

namespace detwan::perf {
namespace json = boost::json;
using common::ErrorCode;
using common::make_error;

common::Result<int64_t> get_int(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return make_error(ErrorCode::kInvalidArgument, std::string(key) + ": missing");
  if (const auto n = common::json_int64(*v)) return *n;
  return make_error(ErrorCode::kInvalidArgument, std::string(key) + ": expected an integer");
}

common::Result<std::string> get_string(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return make_error(ErrorCode::kInvalidArgument, std::string(key) + ": missing");
  if (!v->is_string()) {
    return make_error(ErrorCode::kInvalidArgument, std::string(key) + ": expected a string");
  }
  return std::string(v->get_string());
}

namespace {

common::Result<uint64_t> get_u64(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return make_error(ErrorCode::kInvalidArgument, std::string(key) + ": missing");
  if (const auto n = common::json_uint64(*v)) return *n;
  return make_error(ErrorCode::kInvalidArgument,
                    std::string(key) + ": expected a non-negative integer");
}

template <typename Enum, size_t N>
common::Result<Enum> get_enum(const json::object& o, const char* key,
                              const std::pair<const char*, Enum> (&names)[N]) {
  auto text = get_string(o, key);
  if (!text) return std::unexpected(text.error());
  for (const auto& [name, value] : names) {
    if (*text == name) return value;
  }
  return make_error(ErrorCode::kInvalidArgument,
                    std::string(key) + ": unknown value '" + text->substr(0, 40) + "'");
}

constexpr std::pair<const char*, Mode> kModeNames[] = {
    {"stream", Mode::kStream}, {"throughput", Mode::kThroughput}, {"pingpong", Mode::kPingPong}};
constexpr std::pair<const char*, Direction> kDirectionNames[] = {{"forward", Direction::kForward},
                                                                 {"reverse", Direction::kReverse},
                                                                 {"bidir", Direction::kBidir}};
constexpr std::pair<const char*, ScheduleKind> kScheduleNames[] = {
    {"periodic", ScheduleKind::kPeriodic},
    {"poisson", ScheduleKind::kPoisson},
    {"burst", ScheduleKind::kBurst}};
constexpr std::pair<const char*, ClockMode> kClockNames[] = {
    {"auto", ClockMode::kAuto}, {"sync", ClockMode::kSync}, {"estimate", ClockMode::kEstimate}};

template <typename Enum, size_t N>
const char* name_of(Enum value, const std::pair<const char*, Enum> (&names)[N]) noexcept {
  for (const auto& [name, v] : names) {
    if (v == value) return name;
  }
  return "?";
}

}  // namespace

const char* to_string(Mode mode) noexcept { return name_of(mode, kModeNames); }
const char* to_string(Direction direction) noexcept { return name_of(direction, kDirectionNames); }
const char* to_string(ScheduleKind kind) noexcept { return name_of(kind, kScheduleNames); }
const char* to_string(ClockMode mode) noexcept { return name_of(mode, kClockNames); }


json::object spec_to_json(const TestSpec& s) {
  json::object o;
  o["mode"] = to_string(s.mode);
  o["direction"] = to_string(s.direction);
  o["schedule"] = to_string(s.schedule);
  o["pps"] = s.pps;
  o["bitrate_bps"] = s.bitrate_bps;
  o["burst_packets"] = s.burst_packets;
  o["size_bytes"] = s.size_bytes;
  o["duration_ns"] = s.duration_ns;
  o["bound_ns"] = s.bound_ns;
  o["interval_ns"] = s.interval_ns;
  o["dscp"] = s.dscp;
  o["seed"] = s.seed;
  o["want_packets"] = s.want_packets;
  return o;
}

common::Result<TestSpec> spec_from_json(const json::value& value) {
  if (!value.is_object())
    return make_error(ErrorCode::kInvalidArgument, "spec: expected an object");
  const json::object& o = value.get_object();
  TestSpec s;
  std::string error;
  auto take = [&](auto result, auto& field) {
    if (!error.empty()) return;
    if (!result) {
      error = "spec." + result.error().message;
      return;
    }
    using Field = std::remove_reference_t<decltype(field)>;
    if constexpr (std::is_integral_v<Field> && !std::is_same_v<Field, bool>) {
      if (!std::in_range<Field>(*result)) {
        error = "spec: a field is out of its type's range";
        return;
      }
      field = static_cast<Field>(*result);
    } else {
      field = *result;
    }
  };
  take(get_enum(o, "mode", kModeNames), s.mode);
  take(get_enum(o, "direction", kDirectionNames), s.direction);
  take(get_enum(o, "schedule", kScheduleNames), s.schedule);
  take(get_u64(o, "pps"), s.pps);
  take(get_u64(o, "bitrate_bps"), s.bitrate_bps);
  take(get_u64(o, "burst_packets"), s.burst_packets);
  take(get_u64(o, "size_bytes"), s.size_bytes);
  take(get_int(o, "duration_ns"), s.duration_ns);
  take(get_int(o, "bound_ns"), s.bound_ns);
  take(get_int(o, "interval_ns"), s.interval_ns);
  take(get_int(o, "dscp"), s.dscp);
  take(get_u64(o, "seed"), s.seed);
  if (error.empty()) {
    const json::value* w = o.if_contains("want_packets");
    if (w == nullptr || !w->is_bool()) {
      error = "spec.want_packets: expected true or false";
    } else {
      s.want_packets = w->get_bool();
    }
  }
  if (!error.empty()) return make_error(ErrorCode::kInvalidArgument, error);
  return s;
}

}  // namespace detwan::perf

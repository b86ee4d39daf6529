#include "control/compute/pool.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/json_number.h"
#include "control/compute/placement.h"

namespace detwan::control::compute {
namespace json = boost::json;
namespace {

common::Error field_error(std::string_view field, std::string_view what) {
  return common::Error{common::ErrorCode::kInvalidArgument,
                       fmt::format("field '{}': {}", field, what)};
}

bool name_chars(std::string_view s, size_t max, bool upper) {
  if (s.empty() || s.size() > max) return false;
  return std::all_of(s.begin(), s.end(), [&](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' ||
           (upper && c >= 'A' && c <= 'Z');
  });
}

common::Result<int64_t> integer(const json::object& o, std::string_view field, int64_t min,
                                int64_t max, std::string_view label) {
  const json::value* v = o.if_contains(field);
  if (v == nullptr) return std::unexpected(field_error(label, "missing"));
  const std::optional<int64_t> out = common::json_int64_in(*v, min, max);
  if (!out) {
    return std::unexpected(field_error(label, fmt::format("must be an integer {}..{}", min, max)));
  }
  return *out;
}

}  // namespace

uint32_t Pool::ranks_during(int64_t start_ns, int64_t end_ns) const {
  if (windows.empty()) return ranks;
  for (const Window& w : windows) {
    if (w.start_ns <= start_ns && end_ns <= w.end_ns) return ranks;
  }
  return 0;
}

json::object to_json(const Pool& pool) {
  json::array windows;
  for (const Window& w : pool.windows) {
    windows.push_back(json::object{{"start_unix_ns", w.start_ns}, {"end_unix_ns", w.end_ns}});
  }
  json::object out{{"name", pool.name},   {"site", pool.site},
                   {"kind", pool.kind},   {"ranks", pool.ranks},
                   {"windows", windows},  {"registered_unix_ns", pool.registered_unix_ns}};
  if (pool.reference) {
    const Reference& r = *pool.reference;
    out["reference"] = json::object{{"step_ns", r.step_ns},
                                    {"steps", r.steps},
                                    {"gradient_bytes", r.gradient_bytes},
                                    {"model", r.model},
                                    {"measured_unix_ns", r.measured_unix_ns}};
    if (r.backward_ns > 0) out["reference"].as_object()["backward_ns"] = r.backward_ns;
  } else {
    out["reference"] = nullptr;
  }
  return out;
}

common::Result<Pool> pool_from_json(const json::value& value) {
  const json::object* o = value.if_object();
  if (o == nullptr) return std::unexpected(field_error("", "the body must be a JSON object"));
  static constexpr std::string_view kKnown[] = {"name", "site", "kind", "ranks", "windows",
                                                "reference", "registered_unix_ns"};
  for (const auto& [key, v] : *o) {
    if (std::find(std::begin(kKnown), std::end(kKnown), std::string_view(key)) ==
        std::end(kKnown)) {
      return std::unexpected(field_error(key, "unknown field"));
    }
  }
  Pool p;
  for (const auto& [field, target, max, upper] :
       {std::tuple{"name", &p.name, size_t{64}, true}, std::tuple{"site", &p.site, size_t{64}, true},
        std::tuple{"kind", &p.kind, size_t{32}, false}}) {
    const json::value* v = o->if_contains(field);
    if (v == nullptr || !v->is_string()) return std::unexpected(field_error(field, "must be a string"));
    *target = std::string(v->as_string());
    if (!name_chars(*target, max, upper)) {
      return std::unexpected(field_error(
          field, fmt::format("1 to {} characters of {}", max,
                             upper ? "[A-Za-z0-9._-]" : "[a-z0-9._-] (lower case)")));
    }
  }
  auto ranks = integer(*o, "ranks", 1, kMaxRanks, "ranks");
  if (!ranks) return std::unexpected(ranks.error());
  p.ranks = static_cast<uint32_t>(*ranks);
  if (const json::value* w = o->if_contains("windows"); w != nullptr && !w->is_null()) {
    if (!w->is_array() || w->as_array().size() > 64) {
      return std::unexpected(field_error("windows", "must be an array of at most 64 windows"));
    }
    for (size_t i = 0; i < w->as_array().size(); ++i) {
      const std::string label = fmt::format("windows[{}]", i);
      const json::object* item = w->as_array()[i].if_object();
      if (item == nullptr) return std::unexpected(field_error(label, "must be an object"));
      auto start = integer(*item, "start_unix_ns", 0, INT64_MAX, label + ".start_unix_ns");
      if (!start) return std::unexpected(start.error());
      auto end = integer(*item, "end_unix_ns", 0, INT64_MAX, label + ".end_unix_ns");
      if (!end) return std::unexpected(end.error());
      if (*end <= *start) return std::unexpected(field_error(label, "end must be after start"));
      p.windows.push_back({*start, *end});
    }
  }
  if (const json::value* r = o->if_contains("reference"); r != nullptr && !r->is_null()) {
    const json::object* ro = r->if_object();
    if (ro == nullptr) return std::unexpected(field_error("reference", "must be an object"));
    Reference ref;
    auto step = integer(*ro, "step_ns", 1, int64_t{3600} * 1'000'000'000, "reference.step_ns");
    if (!step) return std::unexpected(step.error());
    ref.step_ns = *step;
    auto steps = integer(*ro, "steps", 1, 1'000'000, "reference.steps");
    if (!steps) return std::unexpected(steps.error());
    ref.steps = static_cast<uint32_t>(*steps);
    auto grad = integer(*ro, "gradient_bytes", 0, int64_t{1} << 50, "reference.gradient_bytes");
    if (!grad) return std::unexpected(grad.error());
    ref.gradient_bytes = static_cast<uint64_t>(*grad);
    if (const json::value* m = ro->if_contains("model"); m != nullptr) {
      if (!m->is_string() || m->as_string().size() > 128) {
        return std::unexpected(field_error("reference.model", "must be a string of <= 128"));
      }
      ref.model = std::string(m->as_string());
    }
    if (ro->contains("backward_ns")) {
      auto bwd = integer(*ro, "backward_ns", 0, ref.step_ns, "reference.backward_ns");
      if (!bwd) return std::unexpected(bwd.error());
      ref.backward_ns = *bwd;
    }
    if (ro->contains("measured_unix_ns")) {
      auto at = integer(*ro, "measured_unix_ns", 0, INT64_MAX, "reference.measured_unix_ns");
      if (!at) return std::unexpected(at.error());
      ref.measured_unix_ns = *at;
    }
    p.reference = ref;
  }
  if (o->contains("registered_unix_ns")) {
    auto at = integer(*o, "registered_unix_ns", 0, INT64_MAX, "registered_unix_ns");
    if (!at) return std::unexpected(at.error());
    p.registered_unix_ns = *at;
  }
  return p;
}

}  // namespace detwan::control::compute

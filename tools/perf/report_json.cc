// The --json document and --json-stream lines (docs/perf-json.md, schema version 1).
#include <cmath>
#include <ctime>
#include <string>

#include <fmt/format.h>

#include "tools/perf/report.h"
#include "tools/perf/spec_json.h"

namespace detwan::perf {

namespace json = boost::json;

namespace {


// RFC 3339 UTC with nanoseconds: "2026-11-30T09:00:00.123456789Z".
std::string iso_time(int64_t realtime_ns) {
  int64_t secs = realtime_ns / 1'000'000'000;
  int64_t frac = realtime_ns % 1'000'000'000;
  if (frac < 0) {  // floor, so times before 1970 still print a valid fraction
    frac += 1'000'000'000;
    --secs;
  }
  std::time_t t = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
}

json::object test_to_json(const TestSpec& s, ClockMode clock) {
  json::object o = spec_to_json(s);
  o["clock"] = to_string(clock);
  return o;
}

json::array intervals_to_json(const std::vector<DirectionResult>& intervals) {
  json::array a;
  a.reserve(intervals.size());
  for (const auto& i : intervals) a.push_back(direction_to_json(i));
  return a;
}

// The keys a path contributes: at the top level for the primary path, under "compare" for
// the second one. Absent directions are absent keys (not null) so `"forward" in doc` works.
void add_path(const PathReport& p, json::object& o) {
  o["target"] = p.target;
  if (p.forward) o["forward"] = direction_to_json(*p.forward);
  if (p.reverse) o["reverse"] = direction_to_json(*p.reverse);
  if (!p.forward_intervals.empty() || !p.reverse_intervals.empty()) {
    json::object intervals;
    if (!p.forward_intervals.empty()) intervals["forward"] = intervals_to_json(p.forward_intervals);
    if (!p.reverse_intervals.empty()) intervals["reverse"] = intervals_to_json(p.reverse_intervals);
    o["intervals"] = std::move(intervals);
  }
  if (!p.error.empty()) o["error"] = p.error;
}

double loss_fraction(const DirectionResult& r) {
  return r.sent == 0 ? 0.0 : static_cast<double>(r.lost) / static_cast<double>(r.sent);
}

json::value ratio(double primary, double compare) {
  if (primary == 0) return nullptr;  // "x times nothing" has no meaning
  return compare / primary;
}

json::object ratios_to_json(const DirectionResult& p, const DirectionResult& c) {
  auto d = [](int64_t v) { return static_cast<double>(v); };
  json::object o;
  o["owd_p50"] = ratio(d(p.owd_ns.p50), d(c.owd_ns.p50));
  o["owd_p99"] = ratio(d(p.owd_ns.p99), d(c.owd_ns.p99));
  o["owd_p99_9"] = ratio(d(p.owd_ns.p99_9), d(c.owd_ns.p99_9));
  o["owd_max"] = ratio(d(p.owd_ns.max), d(c.owd_ns.max));
  o["pdv_p99"] = ratio(d(p.pdv_ns.p99), d(c.pdv_ns.p99));
  o["pdv_p99_9"] = ratio(d(p.pdv_ns.p99_9), d(c.pdv_ns.p99_9));
  o["ipdv_p99"] = ratio(d(p.ipdv_ns.p99), d(c.ipdv_ns.p99));
  o["rfc3550_jitter"] = ratio(p.rfc3550_jitter_ns, c.rfc3550_jitter_ns);
  o["loss_fraction"] = ratio(loss_fraction(p), loss_fraction(c));
  o["beyond_bound"] =
      ratio(static_cast<double>(p.beyond_bound), static_cast<double>(c.beyond_bound));
  return o;
}

// Boost.JSON 1.81 has no pretty printer and prints doubles as "1E0"; this writer indents
// objects and prints doubles in their shortest round-trip form ("1.0", "0.25", "1.5e+20").
void write_json(const json::value& v, std::string& out, int indent, int depth) {
  auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  switch (v.kind()) {
    case json::kind::object: {
      const auto& o = v.get_object();
      if (o.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      bool first = true;
      for (const auto& kv : o) {
        if (!first) out += ',';
        first = false;
        newline(depth + 1);
        out += json::serialize(json::string_view(kv.key()));
        out += indent < 0 ? ":" : ": ";
        write_json(kv.value(), out, indent, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    case json::kind::array: {
      const auto& a = v.get_array();
      if (a.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      bool first = true;
      for (const auto& item : a) {
        if (!first) out += ',';
        first = false;
        newline(depth + 1);
        write_json(item, out, indent, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case json::kind::double_: {
      double d = v.get_double();
      if (!std::isfinite(d)) {  // JSON has no inf/nan
        out += "null";
        return;
      }
      std::string s = fmt::format("{}", d);
      if (s.find_first_of(".e") == std::string::npos) s += ".0";  // stays a float for readers
      out += s;
      return;
    }
    default:
      out += json::serialize(v);
      return;
  }
}

json::object document(const TestReport& report) {
  json::object doc;
  doc["schema"] = "detwan-perf";
  doc["version"] = kJsonSchemaVersion;
  doc["start"] = iso_time(report.start_realtime_ns);
  doc["test"] = test_to_json(report.spec, report.clock);
  if (!report.paths.empty()) add_path(report.paths[0], doc);
  if (report.paths.size() >= 2) {
    const PathReport& primary = report.paths[0];
    const PathReport& compare = report.paths[1];
    json::object c;
    add_path(compare, c);
    doc["compare"] = std::move(c);
    json::object ratios;
    if (primary.forward && compare.forward) {
      ratios["forward"] = ratios_to_json(*primary.forward, *compare.forward);
    }
    if (primary.reverse && compare.reverse) {
      ratios["reverse"] = ratios_to_json(*primary.reverse, *compare.reverse);
    }
    doc["ratios"] = std::move(ratios);
  }
  return doc;
}

}  // namespace

std::string to_json(const TestReport& report) {
  std::string out;
  write_json(document(report), out, 2, 0);  // no trailing newline, like interval_line()
  return out;
}

std::string summary_line(const TestReport& report) {
  json::object o;
  o["type"] = "summary";
  o["result"] = document(report);
  std::string out;
  write_json(o, out, -1, 0);
  return out;
}

std::string interval_line(const std::string& target, const char* direction,
                          const DirectionResult& interval) {
  json::object o;
  o["type"] = "interval";
  o["target"] = target;
  o["direction"] = direction;
  o["interval"] = direction_to_json(interval);
  std::string out;
  write_json(o, out, -1, 0);
  return out;
}

}  // namespace detwan::perf

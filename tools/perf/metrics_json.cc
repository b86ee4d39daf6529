// JSON codec of DirectionResult (docs/perf-json.md, "direction object"). The keys are the C++
// member names so the document, the header and the docs can be read side by side.
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "tools/perf/metrics.h"

namespace detwan::perf {

namespace json = boost::json;
using common::ErrorCode;
using common::make_error;

boost::json::object distribution_to_json(const Distribution& d) {
  json::object o;
  o["count"] = d.count;
  o["min"] = d.min;
  o["mean"] = d.mean;
  o["p50"] = d.p50;
  o["p90"] = d.p90;
  o["p99"] = d.p99;
  o["p99_9"] = d.p99_9;
  o["p99_99"] = d.p99_99;
  o["p99_999"] = d.p99_999;
  o["max"] = d.max;
  return o;
}

boost::json::object direction_to_json(const DirectionResult& r) {
  json::object o;
  o["start_ns"] = r.start_ns;
  o["end_ns"] = r.end_ns;
  o["sent"] = r.sent;
  o["received"] = r.received;
  o["lost"] = r.lost;
  // Derived (ignored by the parser): saves every consumer the division and the sent == 0 case.
  o["loss_fraction"] =
      r.sent == 0 ? 0.0 : static_cast<double>(r.lost) / static_cast<double>(r.sent);
  o["reordered"] = r.reordered;
  o["duplicates"] = r.duplicates;
  o["malformed"] = r.malformed;
  o["beyond_bound"] = r.beyond_bound;
  o["bound_ns"] = r.bound_ns;
  o["received_bytes"] = r.received_bytes;
  o["throughput_bps"] = r.throughput_bps;
  o["rfc3550_jitter_ns"] = r.rfc3550_jitter_ns;
  o["clock_offset_ns"] = r.clock_offset_ns;
  o["clock_error_ns"] = r.clock_error_ns;
  o["clock_corrected"] = r.clock_corrected;
  o["owd_ns"] = distribution_to_json(r.owd_ns);
  o["rtt_ns"] = distribution_to_json(r.rtt_ns);
  o["ipdv_ns"] = distribution_to_json(r.ipdv_ns);
  o["pdv_ns"] = distribution_to_json(r.pdv_ns);
  o["schedule_error_ns"] = distribution_to_json(r.schedule_error_ns);
  json::array bursts;
  bursts.reserve(r.loss_bursts.size());
  for (const auto& [length, count] : r.loss_bursts) {
    bursts.push_back(json::object{{"length", length}, {"count", count}});
  }
  o["loss_bursts"] = std::move(bursts);
  return o;
}

namespace {

// Reads fields of one object; the first problem is kept (with the field's dotted path) and
// later reads become no-ops, so the caller checks once at the end.
class FieldReader {
 public:
  FieldReader(const json::object& object, std::string prefix, std::string* error)
      : object_(object), prefix_(std::move(prefix)), error_(error) {}

  void read(std::string_view key, uint64_t& out) {
    const json::value* v = find(key);
    if (v == nullptr) return;
    if (const auto* u = v->if_uint64()) {
      out = *u;
    } else if (const auto* i = v->if_int64(); i != nullptr && *i >= 0) {
      out = static_cast<uint64_t>(*i);
    } else {
      fail(key, "expected a non-negative integer");
    }
  }
  void read(std::string_view key, int64_t& out) {
    const json::value* v = find(key);
    if (v == nullptr) return;
    if (const auto* i = v->if_int64()) {
      out = *i;
    } else if (const auto* u = v->if_uint64();
               u != nullptr && *u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      out = static_cast<int64_t>(*u);
    } else {
      fail(key, "expected an integer");
    }
  }
  void read(std::string_view key, double& out) {
    const json::value* v = find(key);
    if (v == nullptr) return;
    // Integers are accepted: a writer may print 2.0 as 2.
    if (const auto* d = v->if_double()) {
      out = *d;
    } else if (const auto* i = v->if_int64()) {
      out = static_cast<double>(*i);
    } else if (const auto* u = v->if_uint64()) {
      out = static_cast<double>(*u);
    } else {
      fail(key, "expected a number");
    }
  }
  void read(std::string_view key, bool& out) {
    const json::value* v = find(key);
    if (v == nullptr) return;
    if (const auto* b = v->if_bool()) {
      out = *b;
    } else {
      fail(key, "expected true or false");
    }
  }
  void read(std::string_view key, Distribution& out) {
    const json::value* v = find(key);
    if (v == nullptr) return;
    const auto* o = v->if_object();
    if (o == nullptr) {
      fail(key, "expected an object");
      return;
    }
    FieldReader r(*o, path(key) + ".", error_);
    r.read("count", out.count);
    r.read("min", out.min);
    r.read("mean", out.mean);
    r.read("p50", out.p50);
    r.read("p90", out.p90);
    r.read("p99", out.p99);
    r.read("p99_9", out.p99_9);
    r.read("p99_99", out.p99_99);
    r.read("p99_999", out.p99_999);
    r.read("max", out.max);
  }
  void read(std::string_view key, std::vector<std::pair<uint64_t, uint64_t>>& out) {
    const json::value* v = find(key);
    if (v == nullptr) return;
    const auto* a = v->if_array();
    if (a == nullptr) {
      fail(key, "expected an array");
      return;
    }
    out.clear();
    for (size_t i = 0; i < a->size() && error_->empty(); ++i) {
      std::string item = path(key) + "[" + std::to_string(i) + "]";
      const auto* o = (*a)[i].if_object();
      if (o == nullptr) {
        *error_ = "field '" + item + "': expected an object {\"length\", \"count\"}";
        return;
      }
      std::pair<uint64_t, uint64_t> burst;
      FieldReader r(*o, item + ".", error_);
      r.read("length", burst.first);
      r.read("count", burst.second);
      out.push_back(burst);
    }
  }

 private:
  [[nodiscard]] std::string path(std::string_view key) const { return prefix_ + std::string(key); }
  void fail(std::string_view key, std::string_view what) {
    *error_ = "field '" + path(key) + "': " + std::string(what);
  }
  const json::value* find(std::string_view key) {
    if (!error_->empty()) return nullptr;
    const json::value* v = object_.if_contains(key);
    if (v == nullptr) fail(key, "missing");
    return v;
  }

  const json::object& object_;
  std::string prefix_;
  std::string* error_;
};

}  // namespace

common::Result<DirectionResult> direction_from_json(const boost::json::value& v) {
  const auto* o = v.if_object();
  if (o == nullptr) {
    return make_error(ErrorCode::kInvalidArgument, "direction object: expected a JSON object");
  }
  DirectionResult r;
  std::string error;
  FieldReader f(*o, "", &error);
  f.read("start_ns", r.start_ns);
  f.read("end_ns", r.end_ns);
  f.read("sent", r.sent);
  f.read("received", r.received);
  f.read("lost", r.lost);
  f.read("reordered", r.reordered);
  f.read("duplicates", r.duplicates);
  f.read("malformed", r.malformed);
  f.read("beyond_bound", r.beyond_bound);
  f.read("bound_ns", r.bound_ns);
  f.read("received_bytes", r.received_bytes);
  f.read("throughput_bps", r.throughput_bps);
  f.read("rfc3550_jitter_ns", r.rfc3550_jitter_ns);
  f.read("clock_offset_ns", r.clock_offset_ns);
  f.read("clock_error_ns", r.clock_error_ns);
  f.read("clock_corrected", r.clock_corrected);
  f.read("owd_ns", r.owd_ns);
  f.read("rtt_ns", r.rtt_ns);
  f.read("ipdv_ns", r.ipdv_ns);
  f.read("pdv_ns", r.pdv_ns);
  f.read("schedule_error_ns", r.schedule_error_ns);
  f.read("loss_bursts", r.loss_bursts);
  if (!error.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "direction object: " + error);
  }
  return r;
}

}  // namespace detwan::perf

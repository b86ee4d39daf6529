// The federated reservation's record (journal and API JSON) and the composition of its bound.
#include <algorithm>

#include <fmt/format.h>

#include "common/link_time.h"
#include "control/admission/bounds.h"
#include "control/federation/coordinator.h"
#include "control/federation/json_fields.h"

namespace detwan::control::federation {
namespace json = boost::json;
using agent::ApiError;
using fields::array;
using fields::number;
using fields::object;
using fields::text;

namespace {

json::object segment_to_json(const SegmentRecord& s) {
  return json::object{{"domain", s.domain},
                      {"from", s.from},
                      {"to", s.to},
                      {"client_request_id", s.client_request_id},
                      {"id", s.id},
                      {"state", s.state},
                      {"hold_expires_unix_ns", s.hold_expires_ns},
                      {"bound", s.bound},
                      {"gateways", s.gateways},
                      {"public_keys", s.public_keys},
                      {"prefixes", s.prefixes},
                      {"error", s.error},
                      {"cleanup", s.cleanup}};
}

admission::DirectionBound direction_from(const json::object& d) {
  admission::DirectionBound b;
  b.egress_ns = number(d, "egress_ns");
  b.links_ns = number(d, "links_ns");
  b.transit_ns = number(d, "transit_ns");
  b.processing_ns = number(d, "processing_ns");
  b.max_ns = number(d, "max_ns");
  b.min_ns = number(d, "min_ns");
  b.playout_error_ns = number(d, "playout_error_ns");
  return b;
}

void add(admission::DirectionBound& sum, const admission::DirectionBound& d) {
  sum.egress_ns += d.egress_ns;
  sum.links_ns += d.links_ns;
  sum.transit_ns += d.transit_ns;
  sum.processing_ns += d.processing_ns;
  sum.max_ns += d.max_ns;
  sum.min_ns += d.min_ns;
}

}  // namespace

ApiError not_found(const std::string& id) {
  return ApiError{404, "not_found", fmt::format("no federated reservation {}", id), ""};
}

json::object to_json(const Aggregate& a) {
  json::array segments;
  for (const SegmentRecord& s : a.segments) segments.push_back(segment_to_json(s));
  json::object out{{"id", a.id},
                   {"federated", true},
                   {"client_request_id", a.client_request_id},
                   {"fingerprint", a.fingerprint},
                   {"state", a.state},
                   {"decision", a.decision},
                   {"reason", a.reason},
                   {"tunnel_id", a.tunnel_id},
                   {"burst_bytes", a.burst_bytes},
                   {"hold_expires_unix_ns", a.hold_expires_ns},
                   {"bound", a.bound},
                   {"segments", std::move(segments)},
                   {"key_rotation", json::object{{"step", a.rotation.empty() ? "none" : a.rotation},
                                                 {"step_unix_ns", a.rotation_step_ns},
                                                 {"rotations", a.rotations}}},
                   {"created_unix_ns", a.created_ns},
                   {"updated_unix_ns", a.updated_ns}};
  for (const auto& item : a.request) out[item.key()] = item.value();
  return out;
}

json::object api_json(const Aggregate& a) {
  json::object out = to_json(a);
  out.erase("fingerprint");
  return out;
}

common::Result<Aggregate> aggregate_from_json(const json::object& o) {
  // Our own row, but read back from disk: a field of another type means the row is corrupt,
  // and the caller skips it rather than act on half of it (an exception here would stop the
  // coordinator from opening at all). Fields missing from an older row read as empty.
  using fields::Need;
  fields::Reader in(o);
  Aggregate a;
  a.id = in.text("id");
  if (in.ok() && a.id.empty()) in.fail("id", "must not be empty");
  a.client_request_id = in.text("client_request_id", Need::kOptional);
  a.fingerprint = in.text("fingerprint", Need::kOptional);
  a.state = in.text("state", Need::kOptional);
  a.decision = in.text("decision", Need::kOptional);
  a.reason = in.text("reason", Need::kOptional);
  a.tunnel_id = in.integer<uint32_t>("tunnel_id", Need::kOptional);
  a.burst_bytes = in.integer<uint64_t>("burst_bytes", Need::kOptional);
  a.hold_expires_ns = in.integer<int64_t>("hold_expires_unix_ns", Need::kOptional);
  if (const json::object* b = in.object("bound", Need::kOptional)) a.bound = *b;
  if (const json::object* k = in.object("key_rotation", Need::kOptional)) {
    fields::Reader rotation(*k, "key_rotation.");
    a.rotation = rotation.text("step");
    if (a.rotation == "none") a.rotation.clear();
    a.rotation_step_ns = rotation.integer<int64_t>("step_unix_ns");
    a.rotations = rotation.integer<uint64_t>("rotations");
    in.take(rotation);
  }
  a.created_ns = in.integer<int64_t>("created_unix_ns", Need::kOptional);
  a.updated_ns = in.integer<int64_t>("updated_unix_ns", Need::kOptional);
  // The request, as reserve() wrote it; modify() and compose() read these as numbers.
  for (const char* key : {"min_bandwidth_bps", "max_burst_bytes", "max_latency_ns",
                          "max_latency_variation_ns", "start_unix_ns", "end_unix_ns"}) {
    (void)in.integer<int64_t>(key, Need::kOptional);
  }
  (void)in.real("max_loss", 0.0, 1.0, Need::kOptional);
  (void)in.text("src", Need::kOptional);
  (void)in.text("dst", Need::kOptional);
  (void)in.text("encrypt", Need::kOptional);
  (void)in.texts("src_prefixes", Need::kOptional);
  (void)in.texts("dst_prefixes", Need::kOptional);
  for (const char* key : {"src", "dst", "min_bandwidth_bps", "max_burst_bytes", "max_latency_ns",
                          "max_latency_variation_ns", "max_loss", "start_unix_ns", "end_unix_ns",
                          "encrypt", "src_prefixes", "dst_prefixes", "tenant"}) {
    if (const json::value* v = o.if_contains(key)) a.request[key] = *v;
  }
  const json::value* segments = o.if_contains("segments");
  if (segments != nullptr && !segments->is_array()) in.fail("segments", "must be an array");
  for (size_t i = 0; in.ok() && segments != nullptr && i < segments->as_array().size(); ++i) {
    const json::value& v = segments->as_array()[i];
    const std::string where = fmt::format("segments[{}]", i);
    if (!v.is_object()) {
      in.fail(where.c_str(), "must be an object");
      break;
    }
    fields::Reader s(v.as_object(), where + ".");
    SegmentRecord r;
    r.domain = s.text("domain", Need::kOptional);
    r.from = s.text("from", Need::kOptional);
    r.to = s.text("to", Need::kOptional);
    r.client_request_id = s.text("client_request_id", Need::kOptional);
    r.id = s.text("id", Need::kOptional);
    r.state = s.text("state", Need::kOptional);
    r.hold_expires_ns = s.integer<int64_t>("hold_expires_unix_ns", Need::kOptional);
    if (const json::object* b = s.object("bound", Need::kOptional)) r.bound = *b;
    if (s.ok() && v.as_object().contains("gateways")) {
      (void)s.texts("gateways");
      r.gateways = fields::array(v.as_object(), "gateways");
    }
    if (const json::object* k = s.string_object("public_keys", Need::kOptional)) {
      r.public_keys = *k;
    }
    if (s.ok() && v.as_object().contains("prefixes")) {
      (void)s.texts("prefixes");
      r.prefixes = fields::array(v.as_object(), "prefixes");
    }
    r.error = s.text("error", Need::kOptional);
    r.cleanup = s.boolean("cleanup", Need::kOptional);
    in.take(s);
    a.segments.push_back(std::move(r));
  }
  if (!in.ok()) {
    return common::make_error(common::ErrorCode::kInvalidArgument,
                              fmt::format("field '{}' {}", in.field(), in.why()));
  }
  return a;
}

void Coordinator::compose(Aggregate& a) {
  // RFC 9320 concatenation: the delay terms of the segments add; the receiving end's gateway
  // gives the playout error (admission::combine decides the delivery mode).
  // The burst term b/r is paid once, at the ingress gateway's shaper: a segment entered at a
  // border (forward: every segment but the first; reverse: but the last) has it taken out.
  const uint64_t rate = static_cast<uint64_t>(number(a.request, "min_bandwidth_bps"));
  const int64_t burst_ns = rate == 0 ? 0 : common::ceil_serialisation_ns(a.burst_bytes * 8, rate);
  admission::DirectionBound forward, reverse;
  double keep = 1.0;
  int64_t propagation = 0;
  for (size_t i = 0; i < a.segments.size(); ++i) {
    const json::object& b = a.segments[i].bound;
    admission::DirectionBound f = direction_from(object(b, "forward"));
    admission::DirectionBound r = direction_from(object(b, "reverse"));
    if (i > 0) {
      f.egress_ns -= std::min(f.egress_ns, burst_ns);
      f.max_ns -= std::min(f.max_ns, burst_ns);
    }
    if (i + 1 < a.segments.size()) {
      r.egress_ns -= std::min(r.egress_ns, burst_ns);
      r.max_ns -= std::min(r.max_ns, burst_ns);
    }
    add(forward, f);
    add(reverse, r);
    if (i + 1 == a.segments.size()) forward.playout_error_ns = f.playout_error_ns;
    if (i == 0) reverse.playout_error_ns = r.playout_error_ns;
    propagation += number(b, "propagation_ns");
    keep *= 1.0 - fields::real(b, "max_loss");  // checked in [0, 1] when the domain answered
  }
  const int64_t variation = number(a.request, "max_latency_variation_ns");
  admission::Bound bound =
      admission::combine(agent_.topology(), {}, forward, reverse,
                         a.request.contains("max_latency_variation_ns") ? variation : -1);
  bound.propagation_ns = propagation;
  bound.max_loss = 1.0 - keep;
  json::object out{{"max_latency_ns", bound.max_latency_ns},
                   {"max_latency_variation_ns", bound.max_latency_variation_ns},
                   {"min_latency_ns", bound.min_latency_ns},
                   {"max_loss", bound.max_loss},
                   {"delivery", bound.on_time ? "on_time" : "in_time"},
                   {"playout_bound_ns", bound.playout_bound_ns},
                   {"propagation_ns", bound.propagation_ns},
                   {"forward", json::object{{"max_ns", forward.max_ns},
                                            {"min_ns", forward.min_ns},
                                            {"playout_error_ns", forward.playout_error_ns}}},
                   {"reverse", json::object{{"max_ns", reverse.max_ns},
                                            {"min_ns", reverse.min_ns},
                                            {"playout_error_ns", reverse.playout_error_ns}}}};
  a.bound = std::move(out);
}

}  // namespace detwan::control::federation

#include "control/api/requests.h"

#include <algorithm>
#include <initializer_list>
#include <map>

#include <fmt/format.h>

#include <boost/json.hpp>

#include "common/json_number.h"

namespace detwan::control::api {
namespace json = boost::json;
using agent::ApiError;

namespace {

constexpr size_t kMaxRequestIdBytes = 128;
constexpr int64_t kMaxDurationNs = 10LL * 365 * 86'400 * 1'000'000'000;  // 10 years

struct BadField {
  ApiError error;
};

[[noreturn]] void bad(std::string_view field, std::string_view message) {
  throw BadField{ApiError{400, "invalid_field", fmt::format("field '{}': {}", field, message),
                          std::string(field)}};
}

json::object parse_object(const std::string& body) {
  if (body.empty())
    throw BadField{ApiError{400, "invalid_body", "the request needs a JSON object body", ""}};
  boost::system::error_code ec;
  json::value value = json::parse(body, ec);
  if (ec) {
    throw BadField{
        ApiError{400, "invalid_body", fmt::format("the body is not JSON: {}", ec.message()), ""}};
  }
  if (!value.is_object())
    throw BadField{ApiError{400, "invalid_body", "the body must be a JSON object", ""}};
  return std::move(value.as_object());
}

void check_keys(const json::object& o, std::initializer_list<std::string_view> allowed) {
  for (const auto& item : o) {
    if (std::find(allowed.begin(), allowed.end(), item.key()) == allowed.end()) {
      std::string list;
      for (const std::string_view a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      bad(item.key(), fmt::format("unknown field (allowed: {})", list));
    }
  }
}

std::optional<int64_t> integer(const json::object& o, std::string_view key, int64_t min,
                               int64_t max) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) return std::nullopt;
  const std::optional<int64_t> n = common::json_int64(*v);
  if (!n) bad(key, "must be an integer");
  const int64_t value = *n;
  if (value < min || value > max)
    bad(key, fmt::format("{} is out of range [{}, {}]", value, min, max));
  return value;
}

std::optional<std::string> text(const json::object& o, std::string_view key, size_t max_bytes) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (!v->is_string()) bad(key, "must be a string");
  if (v->as_string().size() > max_bytes) bad(key, fmt::format("longer than {} bytes", max_bytes));
  return std::string(v->as_string());
}

std::optional<bool> flag(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (!v->is_bool()) bad(key, "must be true or false");
  return v->as_bool();
}

std::optional<double> fraction(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) return std::nullopt;
  double value = 0;
  if (v->is_double()) {
    value = v->as_double();
  } else if (v->is_int64()) {
    value = static_cast<double>(v->as_int64());
  } else if (v->is_uint64()) {
    value = static_cast<double>(v->as_uint64());
  } else {
    bad(key, "must be a number in [0, 1]");
  }
  if (!(value >= 0 && value <= 1)) bad(key, "must be a number in [0, 1]");
  return value;
}

std::vector<std::string> string_list(const json::object& o, std::string_view key) {
  std::vector<std::string> out;
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) return out;
  if (!v->is_array()) bad(key, "must be an array of strings");
  if (v->as_array().size() > 64) bad(key, "has more than 64 items");
  for (const json::value& item : v->as_array()) {
    if (!item.is_string() || item.as_string().size() > 64) bad(key, "must be an array of strings");
    out.emplace_back(item.as_string());
  }
  return out;
}

std::string required_site(const json::object& o, std::string_view key) {
  auto value = text(o, key, 64);
  if (!value || value->empty()) bad(key, "is required (a site name)");
  return *value;
}

// Canonical text of a request for idempotency: its fields sorted, client_request_id left out.
std::string fingerprint(const json::object& o) {
  std::map<std::string, std::string> sorted;
  for (const auto& item : o) {
    if (item.key() != "client_request_id")
      sorted[std::string(item.key())] = json::serialize(item.value());
  }
  std::string out;
  for (const auto& [k, v] : sorted) out += k + "=" + v + ";";
  return out;
}

}  // namespace

agent::Outcome<agent::ReserveRequest> parse_reserve(const std::string& body) {
  try {
    const json::object o = parse_object(body);
    check_keys(o, {"client_request_id",
                   "src",
                   "dst",
                   "src_prefixes",
                   "dst_prefixes",
                   "min_bandwidth_bps",
                   "max_burst_bytes",
                   "max_latency_ns",
                   "max_latency_variation_ns",
                   "max_loss",
                   "paths",
                   "protect",
                   "encrypt",
                   "start_unix_ns",
                   "end_unix_ns",
                   "duration_ns",
                   "asap",
                   "hold_timeout_ns",
                   "commit",
                   "provision"});
    agent::ReserveRequest r;
    r.client_request_id = text(o, "client_request_id", kMaxRequestIdBytes).value_or("");
    r.spec.src = required_site(o, "src");
    r.spec.dst = required_site(o, "dst");
    r.spec.src_prefixes = string_list(o, "src_prefixes");
    r.spec.dst_prefixes = string_list(o, "dst_prefixes");
    const auto rate = integer(o, "min_bandwidth_bps", 1000, 10'000'000'000'000);
    if (!rate) bad("min_bandwidth_bps", "is required (bit/s in each direction)");
    r.spec.min_bandwidth_bps = static_cast<uint64_t>(*rate);
    r.spec.max_burst_bytes =
        static_cast<uint64_t>(integer(o, "max_burst_bytes", 64, 1LL << 30).value_or(0));
    r.spec.max_latency_ns = integer(o, "max_latency_ns", 1, 60'000'000'000).value_or(0);
    r.spec.max_latency_variation_ns =
        integer(o, "max_latency_variation_ns", 0, 60'000'000'000).value_or(-1);
    r.spec.max_loss = fraction(o, "max_loss").value_or(1.0);
    r.spec.paths = static_cast<uint32_t>(integer(o, "paths", 1, 4).value_or(1));
    const std::string protect = text(o, "protect", 8).value_or("none");
    if (protect != "none" && protect != "1+1") bad("protect", "must be \"none\" or \"1+1\"");
    r.spec.protect = protect == "1+1";
    if (r.spec.protect && r.spec.paths < 2) {
      if (o.if_contains("paths") != nullptr) {
        bad("paths", "1+1 protection needs 2 disjoint paths (leave paths out, or give 2)");
      }
      r.spec.paths = 2;
    }
    // Secure by default: a tunnel is authenticated and encrypted unless the request says
    // "none" by name (the answer and the agent's log then say so).
    r.spec.encrypt = text(o, "encrypt", 24).value_or(std::string(reservation::kDefaultCipher));
    if (!reservation::is_cipher_name(r.spec.encrypt)) {
      bad("encrypt", "must be \"aes-256-gcm\", \"chacha20-poly1305\" or \"none\"");
    }
    r.spec.asap = flag(o, "asap").value_or(false);
    const auto start = integer(o, "start_unix_ns", 1, INT64_MAX);
    const auto end = integer(o, "end_unix_ns", 1, INT64_MAX);
    const auto duration = integer(o, "duration_ns", 1'000'000, kMaxDurationNs);
    if (end && duration) bad("duration_ns", "give end_unix_ns or duration_ns, not both");
    if (!end && !duration) bad("duration_ns", "is required (or end_unix_ns)");
    if (r.spec.asap && start) bad("start_unix_ns", "an asap reservation starts when it can");
    if (r.spec.asap && !duration) bad("duration_ns", "an asap reservation needs a duration");
    r.spec.start_ns = start.value_or(0);
    r.start_now = !start;
    r.spec.end_ns = end.value_or(0);
    r.spec.duration_ns = duration.value_or(0);
    r.hold_timeout_ns =
        integer(o, "hold_timeout_ns", 1'000'000'000, 86'400'000'000'000).value_or(0);
    r.commit = flag(o, "commit").value_or(false);
    r.provision = flag(o, "provision").value_or(false);
    r.fingerprint = fingerprint(o);
    return r;
  } catch (const BadField& e) {
    return std::unexpected(e.error);
  }
}

agent::Outcome<agent::ModifyRequest> parse_modify(const std::string& body) {
  try {
    const json::object o = parse_object(body);
    check_keys(o, {"client_request_id", "min_bandwidth_bps", "end_unix_ns"});
    agent::ModifyRequest r;
    r.client_request_id = text(o, "client_request_id", kMaxRequestIdBytes).value_or("");
    if (const auto rate = integer(o, "min_bandwidth_bps", 1000, 10'000'000'000'000)) {
      r.min_bandwidth_bps = static_cast<uint64_t>(*rate);
    }
    r.end_ns = integer(o, "end_unix_ns", 1, INT64_MAX);
    r.fingerprint = fingerprint(o);
    return r;
  } catch (const BadField& e) {
    return std::unexpected(e.error);
  }
}

agent::Outcome<agent::PathsRequest> parse_paths(const std::string& body) {
  try {
    const json::object o = parse_object(body);
    check_keys(o, {"src", "dst", "min_bandwidth_bps", "max_burst_bytes", "max_latency_ns",
                   "max_latency_variation_ns", "max_loss", "start_unix_ns", "duration_ns", "k",
                   "require_capacity"});
    agent::PathsRequest r;
    r.src = required_site(o, "src");
    r.dst = required_site(o, "dst");
    r.min_bandwidth_bps =
        static_cast<uint64_t>(integer(o, "min_bandwidth_bps", 0, 10'000'000'000'000).value_or(0));
    r.max_burst_bytes =
        static_cast<uint64_t>(integer(o, "max_burst_bytes", 64, 1LL << 30).value_or(0));
    r.max_latency_ns = integer(o, "max_latency_ns", 1, 60'000'000'000).value_or(0);
    r.max_latency_variation_ns =
        integer(o, "max_latency_variation_ns", 0, 60'000'000'000).value_or(-1);
    r.max_loss = fraction(o, "max_loss").value_or(1.0);
    r.start_ns = integer(o, "start_unix_ns", 1, INT64_MAX).value_or(0);
    r.duration_ns = integer(o, "duration_ns", 1'000'000, kMaxDurationNs).value_or(r.duration_ns);
    r.k = static_cast<uint32_t>(integer(o, "k", 1, 8).value_or(1));
    r.require_capacity = flag(o, "require_capacity").value_or(true);
    return r;
  } catch (const BadField& e) {
    return std::unexpected(e.error);
  }
}

agent::Outcome<compute::Pool> parse_pool(const std::string& body) {
  try {
    const json::object o = parse_object(body);
    check_keys(o, {"name", "site", "kind", "ranks", "windows", "reference"});
    auto pool = compute::pool_from_json(o);
    if (!pool) {
      // "field 'ranks': ..." -> the field's name for the error object.
      const std::string& m = pool.error().message;
      const size_t open = m.find('\'');
      const size_t close = open == std::string::npos ? open : m.find('\'', open + 1);
      return std::unexpected(
          ApiError{400, "invalid_field", m,
                   close == std::string::npos ? "" : m.substr(open + 1, close - open - 1)});
    }
    return std::move(*pool);
  } catch (const BadField& e) {
    return std::unexpected(e.error);
  }
}

agent::Outcome<agent::PlanRequest> parse_plan(const std::string& body) {
  try {
    const json::object o = parse_object(body);
    check_keys(o, {"gradient_bytes", "ranks", "step_compute_ns", "step_compute_ns_by_kind",
                   "target_step_ns", "min_efficiency", "max_sites", "sites", "start_unix_ns",
                   "duration_ns", "reserve", "client_request_id", "placement", "bucket_bytes",
                   "first_bucket_bytes", "backward_fraction", "shares"});
    agent::PlanRequest r;
    const auto gradient = integer(o, "gradient_bytes", 1, int64_t{1} << 50);
    if (!gradient) bad("gradient_bytes", "is required (bytes allreduced per step)");
    r.job.gradient_bytes = static_cast<uint64_t>(*gradient);
    const auto ranks = integer(o, "ranks", 1, compute::kMaxRanks);
    if (!ranks) bad("ranks", "is required (the data-parallel degree)");
    r.job.ranks = static_cast<uint32_t>(*ranks);
    constexpr int64_t kHour = 3'600'000'000'000;
    r.step_compute_ns = integer(o, "step_compute_ns", 1, kHour).value_or(0);
    if (const json::value* by_kind = o.if_contains("step_compute_ns_by_kind");
        by_kind != nullptr && !by_kind->is_null()) {
      if (!by_kind->is_object() || by_kind->as_object().size() > 64) {
        bad("step_compute_ns_by_kind", "must be an object {kind: ns} of at most 64 kinds");
      }
      for (const auto& item : by_kind->as_object()) {
        const auto ns = integer(by_kind->as_object(), item.key(), 1, kHour);
        r.step_compute_ns_by_kind[std::string(item.key())] = *ns;
      }
    }
    r.job.target_step_ns = integer(o, "target_step_ns", 1, kHour).value_or(0);
    r.job.min_efficiency = fraction(o, "min_efficiency").value_or(0);
    if (r.job.min_efficiency >= 1) bad("min_efficiency", "must be below 1");
    r.job.max_sites = static_cast<uint32_t>(
        integer(o, "max_sites", 1, compute::kMaxSites).value_or(compute::kMaxSites));
    r.job.bucket_bytes =
        static_cast<uint64_t>(integer(o, "bucket_bytes", 0, int64_t{1} << 50).value_or(0));
    if (r.job.bucket_bytes != 0 && r.job.bucket_bytes < 1024) {
      bad("bucket_bytes", "must be 0 (no overlap) or at least 1024");
    }
    r.job.first_bucket_bytes =
        static_cast<uint64_t>(integer(o, "first_bucket_bytes", 1024, int64_t{1} << 50).value_or(0));
    r.job.backward_fraction = fraction(o, "backward_fraction").value_or(0);
    const std::string shares = text(o, "shares", 16).value_or("equal");
    if (shares != "equal" && shares != "speed") {
      bad("shares", "must be \"equal\" (every rank the same share of the batch) or \"speed\" "
                    "(shares by speed: detwan.torch.hetero)");
    }
    r.job.speed_shares = shares == "speed";
    r.sites = string_list(o, "sites");
    if (const json::value* fixed = o.if_contains("placement");
        fixed != nullptr && !fixed->is_null()) {
      if (!fixed->is_array() || fixed->as_array().empty() ||
          fixed->as_array().size() > compute::kMaxSites) {
        bad("placement", fmt::format("must be an array of 1 to {} {{\"site\", \"ranks\"}} objects",
                                     compute::kMaxSites));
      }
      for (const json::value& item : fixed->as_array()) {
        if (!item.is_object()) bad("placement", "items must be {\"site\", \"ranks\"} objects");
        const std::string site = required_site(item.as_object(), "site");
        const auto n = integer(item.as_object(), "ranks", 1, compute::kMaxRanks);
        if (!n) bad("placement", "every item needs \"ranks\"");
        r.job.fixed.emplace_back(site, static_cast<uint32_t>(*n));
      }
    }
    r.start_ns = integer(o, "start_unix_ns", 1, INT64_MAX).value_or(0);
    r.duration_ns = integer(o, "duration_ns", 1'000'000, kMaxDurationNs).value_or(r.duration_ns);
    r.reserve = flag(o, "reserve").value_or(false);
    r.client_request_id = text(o, "client_request_id", kMaxRequestIdBytes - 8).value_or("");
    return r;
  } catch (const BadField& e) {
    return std::unexpected(e.error);
  }
}

}  // namespace detwan::control::api

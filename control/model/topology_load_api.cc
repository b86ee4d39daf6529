// The topology file's agent.tls and policy sections (topology_load_api.h).
#include "control/model/topology_load_api.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/units.h"

namespace detwan::control::model {

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

int64_t duration_in(const common::ConfigNode& map, std::string_view key, int64_t fallback, int64_t min_ns,
                    int64_t max_ns) {
  const auto node = map.maybe_child(key);
  if (!node) return fallback;
  const int64_t value = node->as_duration_ns();
  if (value < min_ns || value > max_ns) {
    node->fail(fmt::format("{} is out of range [{}, {}]", node->as_string(),
                           common::format_duration_ns(min_ns), common::format_duration_ns(max_ns)));
  }
  return value;
}

namespace {

using common::ConfigNode;

std::string file_of(const ConfigNode& node) {
  std::string text = node.as_string();
  if (text.empty()) node.fail("must name a file");
  return text;
}

// Keys an entry omits keep the value in `limits` (the default's, for tenants and domains).
void parse_limits(const ConfigNode& node, PolicyLimits* limits) {
  if (!node.is_map())
    node.fail("expected a map of max_rate, max_link_share, max_window, max_reservations");
  node.check_keys({"max_rate", "max_link_share", "max_window", "max_reservations"});
  if (const auto rate = node.maybe_child("max_rate")) {
    limits->max_rate_bps = rate->as_rate_bps();
    if (*limits->max_rate_bps == 0) rate->fail("must be above 0");
  }
  if (const auto share = node.maybe_child("max_link_share")) {
    limits->max_link_share = share->as_fraction();
    if (*limits->max_link_share <= 0 || *limits->max_link_share > 1) {
      share->fail("must be in (0, 100%]");
    }
  }
  if (const auto window = node.maybe_child("max_window")) {
    limits->max_window_ns = window->as_duration_ns();
    if (*limits->max_window_ns <= 0) window->fail("must be above 0");
  }
  if (const auto count = node.maybe_child("max_reservations")) {
    limits->max_reservations = static_cast<uint32_t>(count->as_int(0, 1'000'000));
  }
}

void parse_entries(const ConfigNode& node, const PolicyLimits& defaults,
                   std::map<std::string, PolicyLimits>* out) {
  if (!node.is_map()) node.fail("expected a map NAME: {max_rate: ..., ...}");
  for (const std::string& name : node.keys()) {
    const ConfigNode entry = node.child(name);
    if (!valid_name(name)) entry.fail(fmt::format("'{}' is not a valid name", name));
    PolicyLimits limits = defaults;
    parse_limits(entry, &limits);
    (*out)[name] = limits;
  }
}

}  // namespace

void parse_agent_tls(const ConfigNode& node, TlsSettings* tls) {
  node.check_keys({"cert", "key", "client_ca", "require_client_cert"});
  if (const auto cert = node.maybe_child("cert")) tls->cert = file_of(*cert);
  if (const auto key = node.maybe_child("key")) tls->key = file_of(*key);
  if (const auto ca = node.maybe_child("client_ca")) tls->client_ca = file_of(*ca);
  tls->require_client_cert = node.get_bool("require_client_cert", false);
  if (tls->cert.empty()) node.fail("needs cert (and key): the agent's server certificate");
  if (tls->key.empty()) node.child("cert").fail("needs key beside it (the certificate's key)");
  if (tls->require_client_cert && tls->client_ca.empty()) {
    node.child("require_client_cert").fail("needs client_ca (the CAs whose clients are accepted)");
  }
}

void parse_policy(const ConfigNode& node, Policy* policy) {
  node.check_keys({"default", "tenants", "domains"});
  if (const auto defaults = node.maybe_child("default")) parse_limits(*defaults, &policy->defaults);
  if (const auto tenants = node.maybe_child("tenants")) {
    parse_entries(*tenants, policy->defaults, &policy->tenants);
  }
  if (const auto domains = node.maybe_child("domains")) {
    parse_entries(*domains, policy->defaults, &policy->domains);
  }
}

}  // namespace detwan::control::model

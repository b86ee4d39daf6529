// Addresses in the gateway configuration: prefixes, UDP endpoints, MAC addresses, names.
#include <algorithm>
#include <charconv>
#include <cstring>
#include <string>
#include <string_view>
#include <system_error>

#include <arpa/inet.h>
#include <fmt/format.h>

#include "common/net_address.h"
#include "common/strings.h"
#include "dataplane/gw/config.h"
#include "dataplane/gw/config_internal.h"

namespace detwan::dataplane::gw {
namespace {

using common::ErrorCode;
using common::make_error;

std::string format_address(bool ipv6, const uint8_t* address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (inet_ntop(ipv6 ? AF_INET6 : AF_INET, address, text, sizeof(text)) == nullptr) return "?";
  return text;
}

// Decimal digits only (no sign, no spaces), at most max_value.
bool parse_decimal(std::string_view text, uint32_t max_value, uint32_t* out) {
  if (text.empty() || text.size() > 10) return false;
  for (const char c : text) {
    if (c < '0' || c > '9') return false;
  }
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value > max_value) return false;
  *out = static_cast<uint32_t>(value);
  return true;
}

bool host_bits_clear(const Prefix& prefix) {
  const int bytes = prefix.ipv6 ? 16 : 4;
  for (int i = 0; i < bytes; ++i) {
    const int first_bit = i * 8;
    uint8_t host_mask = 0xFF;
    if (first_bit + 8 <= prefix.length) {
      host_mask = 0;
    } else if (first_bit < prefix.length) {
      host_mask = static_cast<uint8_t>(0xFF >> (prefix.length - first_bit));
    }
    if ((prefix.address[i] & host_mask) != 0) return false;
  }
  return true;
}

Prefix network_of(Prefix prefix) {
  for (int i = 0; i < 16; ++i) {
    const int first_bit = i * 8;
    if (first_bit + 8 <= prefix.length) continue;
    const int keep = first_bit < prefix.length ? prefix.length - first_bit : 0;
    prefix.address[i] &= static_cast<uint8_t>(0xFF00 >> keep);
  }
  return prefix;
}

}  // namespace

common::Result<Prefix> parse_prefix(std::string_view raw) {
  const std::string_view text = common::trim(raw);
  const size_t slash = text.find('/');
  if (slash == std::string_view::npos) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("'{}': missing prefix length (e.g. 10.20.2.0/24, fd00::/64; a "
                                  "single host is /32 or /128)",
                                  text));
  }
  Prefix prefix;
  const auto address = common::parse_ip_address(text.substr(0, slash));
  if (!address) {
    return make_error(
        ErrorCode::kInvalidArgument,
        fmt::format("'{}': '{}' is not an IPv4 or IPv6 address", text, text.substr(0, slash)));
  }
  prefix.ipv6 = address->ipv6;
  std::memcpy(prefix.address, address->bytes, sizeof prefix.address);
  const uint32_t max_length = prefix.ipv6 ? 128 : 32;
  uint32_t length = 0;
  if (!parse_decimal(text.substr(slash + 1), max_length, &length)) {
    return make_error(
        ErrorCode::kInvalidArgument,
        fmt::format("'{}': prefix length must be a number in [0, {}]", text, max_length));
  }
  prefix.length = static_cast<uint8_t>(length);
  if (!host_bits_clear(prefix)) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("'{}': host bits are set (the network is {})", text,
                                  format_prefix(network_of(prefix))));
  }
  return prefix;
}

common::Result<Endpoint> parse_endpoint(std::string_view raw) {
  // The one endpoint grammar (common/net_address.h); IP literals only: the gateway's sockets
  // and source checks are per address, never resolved.
  common::EndpointRules rules;
  rules.allow_names = false;
  rules.allow_zero_port = true;
  auto parsed = common::parse_endpoint(common::trim(raw), rules);
  if (!parsed) return std::unexpected(parsed.error());
  Endpoint endpoint;
  endpoint.ipv6 = parsed->literal->ipv6;
  std::memcpy(endpoint.address, parsed->literal->bytes, sizeof endpoint.address);
  endpoint.port = parsed->port;
  return endpoint;
}

std::string format_prefix(const Prefix& prefix) {
  return fmt::format("{}/{}", format_address(prefix.ipv6, prefix.address), prefix.length);
}

std::string format_endpoint(const Endpoint& endpoint) {
  const std::string address = format_address(endpoint.ipv6, endpoint.address);
  return endpoint.ipv6 ? fmt::format("[{}]:{}", address, endpoint.port)
                       : fmt::format("{}:{}", address, endpoint.port);
}

bool prefix_contains(const Prefix& prefix, bool ipv6, const uint8_t* address) noexcept {
  if (prefix.ipv6 != ipv6 || address == nullptr) return false;
  // A hand-built Prefix may carry any length: never read past the address.
  const int length = std::min<int>(prefix.length, ipv6 ? 128 : 32);
  const int full_bytes = length / 8;
  if (std::memcmp(prefix.address, address, static_cast<size_t>(full_bytes)) != 0) return false;
  const int rest_bits = length % 8;
  if (rest_bits == 0) return true;
  const auto mask = static_cast<uint8_t>(0xFF00 >> rest_bits);
  return (prefix.address[full_bytes] & mask) == (address[full_bytes] & mask);
}

namespace config_detail {

bool valid_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > static_cast<size_t>(kMaxNameBytes)) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

bool parse_mac(std::string_view text, uint8_t* bytes) noexcept {
  if (text.size() != 17) return false;
  for (size_t i = 0; i < 6; ++i) {
    if (i > 0 && text[i * 3 - 1] != ':') return false;
    uint8_t value = 0;
    const char* first = text.data() + i * 3;
    const auto [end, ec] = std::from_chars(first, first + 2, value, 16);
    if (ec != std::errc() || end != first + 2 || first[0] == '+' || first[0] == '-') return false;
    if (bytes != nullptr) bytes[i] = value;
  }
  return true;
}

wire::IpVersion ip_version(const Endpoint& endpoint) noexcept {
  return endpoint.ipv6 ? wire::IpVersion::kV6 : wire::IpVersion::kV4;
}

bool is_unspecified(const Endpoint& endpoint) noexcept {
  const int bytes = endpoint.ipv6 ? 16 : 4;
  for (int i = 0; i < bytes; ++i) {
    if (endpoint.address[i] != 0) return false;
  }
  return true;
}

bool prefixes_overlap(const Prefix& a, const Prefix& b) noexcept {
  if (a.ipv6 != b.ipv6) return false;
  // The shorter prefix contains the longer one's network address iff they overlap.
  return a.length <= b.length ? prefix_contains(a, b.ipv6, b.address)
                              : prefix_contains(b, a.ipv6, a.address);
}

std::string format_port_range(const PortRange& range) {
  return range.first == range.last ? fmt::format("{}", range.first)
                                   : fmt::format("{}-{}", range.first, range.last);
}

}  // namespace config_detail
namespace config_detail {

void parse_metrics_section(const common::ConfigNode& node, MetricsConfig* metrics) {
  node.check_keys({"listen", "allow", "tokens_file", "min_interval"});
  if (const auto listen = node.maybe_child("listen")) {
    metrics->listen = listen->as_string();
    if (!metrics->listen.empty()) {  // "" = no exporter
      if (auto parsed = common::parse_host_port(metrics->listen); !parsed) {
        listen->fail(parsed.error().message);
      }
    }
  }
  if (const auto allow = node.maybe_child("allow")) {
    if (!allow->is_sequence()) allow->fail("a list of address prefixes like [10.0.0.0/8]");
    for (const common::ConfigNode& item : allow->items()) {
      const std::string text = item.as_string();
      if (auto parsed = common::parse_ip_prefix(text); !parsed) item.fail(parsed.error().message);
      metrics->allow.push_back(text);
    }
  }
  if (const auto tokens = node.maybe_child("tokens_file")) {
    metrics->tokens_file = tokens->as_string();
  }
  metrics->min_interval_ns = duration_field(node, "min_interval", 1'000'000'000, 0, 60'000'000'000);
}

}  // namespace config_detail
}  // namespace detwan::dataplane::gw

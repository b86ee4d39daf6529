#include "common/net_address.h"

#include <charconv>
#include <cstring>
#include <system_error>

#include <arpa/inet.h>
#include <fmt/format.h>

namespace detwan::common {
namespace {

bool parse_u32(std::string_view text, uint32_t max_value, uint32_t* out) {
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

void mask_to(IpAddress* address, uint8_t length) noexcept {
  for (int i = 0; i < 16; ++i) {
    const int first_bit = i * 8;
    if (first_bit + 8 <= length) continue;
    const int keep = first_bit < length ? length - first_bit : 0;
    address->bytes[i] &= static_cast<uint8_t>(0xFF00 >> keep);
  }
}

}  // namespace

Result<IpAddress> parse_ip_address(std::string_view text) {
  IpAddress out;
  if (text.empty() || text.size() > 45) {
    return make_error(ErrorCode::kInvalidArgument, fmt::format("'{}' is not an IP address", text));
  }
  const std::string copy(text);
  out.ipv6 = copy.find(':') != std::string::npos;
  if (inet_pton(out.ipv6 ? AF_INET6 : AF_INET, copy.c_str(), out.bytes) != 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("'{}' is not an IPv{} address", text, out.ipv6 ? 6 : 4));
  }
  return out;
}

Result<IpPrefix> parse_ip_prefix(std::string_view text) {
  const size_t slash = text.find('/');
  auto address = parse_ip_address(text.substr(0, slash));
  if (!address) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("'{}' is not a prefix like 10.20.2.0/24 or fd00::/64", text));
  }
  IpPrefix prefix;
  prefix.address = *address;
  const uint32_t max_length = address->ipv6 ? 128 : 32;
  uint32_t length = max_length;
  if (slash != std::string_view::npos && !parse_u32(text.substr(slash + 1), max_length, &length)) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("'{}': prefix length must be 0..{}", text, max_length));
  }
  prefix.length = static_cast<uint8_t>(length);
  IpPrefix network = prefix;
  mask_to(&network.address, network.length);
  if (!(network == prefix)) {
    return make_error(
        ErrorCode::kInvalidArgument,
        fmt::format("'{}' has host bits set (did you mean {}?)", text, format_ip_prefix(network)));
  }
  return prefix;
}

Result<HostPort> parse_host_port(std::string_view text, bool allow_zero_port) {
  auto bad = [&](std::string_view why) {
    return make_error(
        ErrorCode::kInvalidArgument,
        fmt::format("'{}' is not an endpoint like 127.0.0.1:7800 or [::1]:7800 ({})", text, why));
  };
  std::string_view host;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return bad("unbalanced brackets or no port");
    }
    host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("no port");
    host = text.substr(0, colon);
    if (host.find(':') != std::string_view::npos) return bad("write an IPv6 address in brackets");
    port_text = text.substr(colon + 1);
  }
  auto address = parse_ip_address(host);
  if (!address) return bad(address.error().message);
  uint32_t port = 0;
  if (!parse_u32(port_text, 65535, &port) || (port == 0 && !allow_zero_port)) {
    return bad(allow_zero_port ? "port must be 0..65535" : "port must be 1..65535");
  }
  return HostPort{*address, static_cast<uint16_t>(port)};
}

std::string format_ip_address(const IpAddress& address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (inet_ntop(address.ipv6 ? AF_INET6 : AF_INET, address.bytes, text, sizeof text) == nullptr) {
    return "?";
  }
  return text;
}

std::string format_ip_prefix(const IpPrefix& prefix) {
  return fmt::format("{}/{}", format_ip_address(prefix.address), prefix.length);
}

std::string format_host_port(const HostPort& endpoint) {
  if (endpoint.address.ipv6) {
    return fmt::format("[{}]:{}", format_ip_address(endpoint.address), endpoint.port);
  }
  return fmt::format("{}:{}", format_ip_address(endpoint.address), endpoint.port);
}

bool prefix_contains(const IpPrefix& prefix, const IpAddress& address) noexcept {
  if (prefix.address.ipv6 != address.ipv6) return false;
  IpAddress masked = address;
  mask_to(&masked, prefix.length);
  return masked == prefix.address;
}

bool prefixes_overlap(const IpPrefix& a, const IpPrefix& b) noexcept {
  if (a.address.ipv6 != b.address.ipv6) return false;
  return a.length <= b.length ? prefix_contains(a, b.address) : prefix_contains(b, a.address);
}

}  // namespace detwan::common

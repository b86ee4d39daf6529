#include "common/net_address.h"

#include <algorithm>
#include <cctype>
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

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '-' || c == '_';
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

Result<Endpoint> parse_endpoint(std::string_view text, const EndpointRules& rules) {
  auto bad = [&](std::string_view why) -> Result<Endpoint> {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("'{}' is not an endpoint like 10.0.0.1:7800, [fd00::1]:7800{} "
                                  "({})",
                                  text, rules.allow_names ? " or host.example:7800" : "", why));
  };
  std::string_view host;
  std::string_view port_text;
  bool has_port = true;
  bool bracketed = false;
  if (!text.empty() && text.front() == '[') {
    bracketed = true;
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return bad("'[' without ']'");
    host = text.substr(1, close - 1);
    const std::string_view after = text.substr(close + 1);
    if (after.empty()) {
      has_port = false;
    } else if (after.front() != ':') {
      return bad("expected ':PORT' after ']'");
    } else {
      port_text = after.substr(1);
    }
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      host = text;
      has_port = false;
    } else {
      host = text.substr(0, colon);
      port_text = text.substr(colon + 1);
    }
    if (host.find(':') != std::string_view::npos) {
      return bad("write an IPv6 address in brackets: [fd00::1]:7800");
    }
  }
  Endpoint out;
  if (bracketed) {
    const size_t percent = host.find('%');
    const std::string_view address = host.substr(0, percent);
    auto parsed = parse_ip_address(address);
    if (address.find(':') == std::string_view::npos || !parsed) {
      return bad(fmt::format("'{}' in brackets is not an IPv6 address", host));
    }
    if (percent != std::string_view::npos) {
      const std::string_view zone = host.substr(percent + 1);
      if (zone.empty() || zone.size() > 15 || !std::ranges::all_of(zone, is_name_char)) {
        return bad(fmt::format("'{}' is not a zone (an interface name)", zone));
      }
      if (!rules.allow_names)
        return bad("a zone needs the resolver; an IP address is expected here");
    } else {
      out.literal = *parsed;
    }
  } else if (host.empty()) {
    if (!rules.allow_empty_host) return bad("no host");
  } else if (auto parsed = parse_ip_address(host)) {
    out.literal = *parsed;
  } else {
    const bool name_like = host.size() <= 253 && std::ranges::all_of(host, is_name_char);
    const bool dotted_digits = std::ranges::all_of(
        host, [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '.'; });
    if (!name_like || dotted_digits) {
      return bad(fmt::format("'{}' is not an IP address{}", host,
                             rules.allow_names ? " or a host name" : ""));
    }
    if (!rules.allow_names) {
      return bad(fmt::format("'{}' is a name; an IP address is expected here", host));
    }
  }
  out.host = std::string(host);
  if (!has_port) {
    if (rules.default_port == 0) return bad("no port");
    out.port = rules.default_port;
    return out;
  }
  uint32_t port = 0;
  if (!parse_u32(port_text, 65535, &port) || (port == 0 && !rules.allow_zero_port)) {
    return bad(fmt::format("port '{}' is not a number in [{}, 65535]", port_text,
                           rules.allow_zero_port ? 0 : 1));
  }
  out.port = static_cast<uint16_t>(port);
  return out;
}

Result<HostPort> parse_host_port(std::string_view text, bool allow_zero_port) {
  EndpointRules rules;
  rules.allow_names = false;
  rules.allow_zero_port = allow_zero_port;
  auto endpoint = parse_endpoint(text, rules);
  if (!endpoint) return std::unexpected(endpoint.error());
  return HostPort{*endpoint->literal, endpoint->port};
}

Result<Endpoint> parse_socket_endpoint(std::string_view text, bool listening,
                                       std::string_view who) {
  EndpointRules rules;
  rules.allow_empty_host = true;
  rules.allow_zero_port = listening;
  auto endpoint = parse_endpoint(text, rules);
  if (!endpoint) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("{}: {}", who, endpoint.error().message));
  }
  return endpoint;
}

std::string join_host_port(std::string_view host, uint16_t port) {
  if (host.find(':') != std::string_view::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
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

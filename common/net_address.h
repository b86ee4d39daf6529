#pragma once
// IP addresses, prefixes and host:port endpoints as text, for setup code (configuration files,
// command lines, API requests). Every parser returns Result<> whose message names the text and
// what was expected. Not for the datapath (they allocate).
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace detwan::common {

struct IpAddress {
  bool ipv6 = false;
  uint8_t bytes[16] = {};  // network order; IPv4 in the first 4 bytes
  friend bool operator==(const IpAddress&, const IpAddress&) = default;
};

struct IpPrefix {
  IpAddress address;   // host bits clear
  uint8_t length = 0;  // bits
  friend bool operator==(const IpPrefix&, const IpPrefix&) = default;
};

struct HostPort {
  IpAddress address;
  uint16_t port = 0;
  friend bool operator==(const HostPort&, const HostPort&) = default;
};

// "10.0.0.1", "fd00::1" (no brackets, no zone).
Result<IpAddress> parse_ip_address(std::string_view text);
// "10.20.2.0/24", "fd00::/64"; a bare address is a host prefix (/32, /128). Host bits must be
// clear ("10.20.2.1/24" is refused, naming the network it probably meant).
Result<IpPrefix> parse_ip_prefix(std::string_view text);
// "127.0.0.1:7800", "[::1]:7800". allow_zero_port: port 0 ("pick one") is accepted.
Result<HostPort> parse_host_port(std::string_view text, bool allow_zero_port = false);

std::string format_ip_address(const IpAddress& address);
std::string format_ip_prefix(const IpPrefix& prefix);
std::string format_host_port(const HostPort& endpoint);

// True if `address` lies in `prefix` (same family).
bool prefix_contains(const IpPrefix& prefix, const IpAddress& address) noexcept;
// True if one contains the other.
bool prefixes_overlap(const IpPrefix& a, const IpPrefix& b) noexcept;

}  // namespace detwan::common

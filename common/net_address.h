#pragma once
// IP addresses, prefixes and host:port endpoints as text, for setup code (configuration files,
// command lines, API requests). Every parser returns Result<> whose message names the text and
// what was expected. Not for the datapath (they allocate).
#include <cstdint>
#include <optional>
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
// "127.0.0.1:7800", "[::1]:7800" (IP literals only). allow_zero_port: port 0 ("pick one").
Result<HostPort> parse_host_port(std::string_view text, bool allow_zero_port = false);

// The one grammar of a written endpoint, for every program and library (sockets, bootstraps,
// agent URLs, gateway configuration):
//   IPV4:PORT   NAME:PORT   [IPV6]:PORT   [IPV6%ZONE]:PORT   :PORT (only with allow_empty_host)
// An IPv6 address is written in brackets, always ("fd00::1:80" is refused: which colon is the
// port's?); brackets hold an IPv6 address and nothing else; a name is letters, digits, '.', '-'
// and '_' (resolved later by the caller, if names are allowed); the port is decimal 1..65535
// (0 with allow_zero_port). Text is taken as is (no trimming).
struct EndpointRules {
  bool allow_names = true;        // false: IP literals only (no resolver on this path)
  bool allow_empty_host = false;  // ":7800" means every interface (listen) or the local host
  bool allow_zero_port = false;   // port 0: the kernel picks one (listen)
  uint16_t default_port = 0;      // non-zero: ":PORT" may be left out (URLs)
};

struct Endpoint {
  std::string host;  // brackets removed; "" only with allow_empty_host
  uint16_t port = 0;
  std::optional<IpAddress> literal;  // set when host is an IP address without a zone
};

// Errors (kInvalidArgument) quote the text and say which rule it broke.
Result<Endpoint> parse_endpoint(std::string_view text, const EndpointRules& rules = {});
// A stream socket's address as the transports take it (tcp, the verbs bootstrap): ":PORT" is
// every interface (listening) or the local host, port 0 only when listening; names allowed.
// Errors start with `who` ("tcp: '...' is not an endpoint ...").
Result<Endpoint> parse_socket_endpoint(std::string_view text, bool listening, std::string_view who);
// "host:port", with brackets around an IPv6 host: what parse_endpoint reads back.
std::string join_host_port(std::string_view host, uint16_t port);

std::string format_ip_address(const IpAddress& address);
std::string format_ip_prefix(const IpPrefix& prefix);
std::string format_host_port(const HostPort& endpoint);

// True if `address` lies in `prefix` (same family).
bool prefix_contains(const IpPrefix& prefix, const IpAddress& address) noexcept;
// True if one contains the other.
bool prefixes_overlap(const IpPrefix& a, const IpPrefix& b) noexcept;

}  // namespace detwan::common

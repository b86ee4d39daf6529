#pragma once
// UDP addresses and sockets of the udp transport backend (setup tier; socket.cc).
//
// Through detwan-gw: nothing here is gateway-specific. A channel through the local gateway simply
// connects to the peer's tunnel-side address; the gateway classifies, schedules and carries those
// datagrams like any other traffic of the tunnel, so the backend needs no special code for it.
// (PathSpec.frame_overhead_bytes then includes the tunnel encapsulation for the rate limiter.)
#include <cstdint>
#include <string>
#include <string_view>

#include <sys/socket.h>

#include "common/status.h"
#include "common/unique_fd.h"

namespace detwan::transport::udp {

struct UdpAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
  [[nodiscard]] bool ipv6() const { return storage.ss_family == AF_INET6; }
};

// "1.2.3.4:5000", "[::1]:5000", "localhost:5000" (resolved once, IPv4 preferred).
// kInvalidArgument naming the text when it is not host:port or the host does not resolve.
common::Result<UdpAddress> parse_address(std::string_view text);
std::string format_address(const UdpAddress& address);
// Same family, address and port.
bool same_address(const UdpAddress& a, const UdpAddress& b) noexcept;
// The wildcard address (port 0) of `like`'s family.
UdpAddress any_address(const UdpAddress& like);

// A UDP socket bound to `local` (port 0: a free one), with large kernel buffers. Returns the fd
// and the address actually bound. `what` names the socket in errors. `reuse_port`: SO_REUSEPORT
// before the bind, for a lane's share of a listen address (lanes.h).
struct BoundSocket {
  common::UniqueFd fd;
  UdpAddress local;
};
common::Result<BoundSocket> open_socket(const UdpAddress& local, std::string_view what,
                                        bool reuse_port = false);

}  // namespace detwan::transport::udp

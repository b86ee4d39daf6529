#pragma once
// UDP sockets of the io_uring backend: one per WAN port (the tunnel traffic and the control
// exchange with the peers reached through it) and one per tunnel with a service port.
//
// Setup (port.cc) opens and binds them; port 0 binds a free port, and local() reports the
// endpoint actually bound, so tests and tools can start gateways on port 0 and learn where they
// listen. The datapath helpers (port_datapath.cc) fill an io_uring SQE for one recvmsg/sendmsg
// using the buffer's IoSlot; they never allocate, block or fail loudly.
//
// Address families: an IPv4 socket talks to IPv4 endpoints. An IPv6 socket bound to "::" is
// dual-stack (IPv4 peers appear as IPv4 endpoints; they are reached as v4-mapped addresses); an
// IPv6 socket bound to a specific address is IPv6 only.
//
// DSCP: every send carries its own IP_TOS (IPv4) or IPV6_TCLASS (IPv6) control message, because
// the tunnel frames and the best-effort frames of one port leave with different DSCPs.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <sys/socket.h>

#include "common/status.h"
#include "common/unique_fd.h"
#include "dataplane/gw/config.h"
#include "dataplane/uring/buffer_pool.h"

struct io_uring_sqe;

namespace detwan::dataplane::uring {

// SO_RCVBUF/SO_SNDBUF asked for on WAN sockets (the kernel may cap them at net.core.rmem_max
// unless the process has CAP_NET_ADMIN, which SO_RCVBUFFORCE needs).
inline constexpr int kWanSocketBufferBytes = 8 << 20;
inline constexpr int kServiceSocketBufferBytes = 2 << 20;

class UdpSocket {
 public:
  // Binds `local` (port 0: a free port). `what` names the socket in errors ("WAN port 'wan1'").
  // wan: don't-fragment (tunnels never rely on IP fragmentation), kWanSocketBufferBytes;
  // otherwise kServiceSocketBufferBytes.
  // reuse_port: SO_REUSEPORT before the bind, so the shards' sockets of one WAN port form a
  // reuseport group (dataplane/uring/shards.h); the first binds `local` (port 0: a free port),
  // the others the port it got.
  static common::Result<UdpSocket> bind(const gw::Endpoint& local, bool wan, std::string_view what,
                                        bool reuse_port = false);
  // An unbound socket (the kernel picks a source port on the first send), for sending only.
  static common::Result<UdpSocket> unbound(bool ipv6, std::string_view what);

  UdpSocket(UdpSocket&&) noexcept = default;
  UdpSocket& operator=(UdpSocket&&) noexcept = default;

  [[nodiscard]] int fd() const noexcept { return fd_.get(); }
  [[nodiscard]] bool ipv6() const noexcept { return ipv6_; }
  [[nodiscard]] const gw::Endpoint& local() const noexcept { return local_; }  // as bound

 private:
  UdpSocket() = default;

  common::UniqueFd fd_;
  bool ipv6_ = false;
  gw::Endpoint local_;
};

// ---- datapath (port_datapath.cc) ----

// Whether `socket` can send to `destination` (an IPv4 socket cannot reach IPv6 endpoints).
[[nodiscard]] inline bool reaches(const UdpSocket& socket,
                                  const gw::Endpoint& destination) noexcept {
  return socket.ipv6() || !destination.ipv6;
}

// `endpoint` as the destination address of a send on a socket of the given family (v4-mapped
// for an IPv4 endpoint on an IPv6 socket). False if the socket cannot reach it.
[[nodiscard]] bool to_sockaddr(const gw::Endpoint& endpoint, bool socket_ipv6,
                               sockaddr_storage* address, socklen_t* length) noexcept;
// The endpoint a sockaddr stands for (a v4-mapped IPv6 address is an IPv4 endpoint).
[[nodiscard]] gw::Endpoint from_sockaddr(const sockaddr_storage& address) noexcept;

// recvmsg of one datagram into `into`, the source address into slot.address. Call with
// MSG_TRUNC semantics: the CQE's result is the datagram's real length, larger than into.size()
// when it was truncated.
void prep_recv(io_uring_sqe* sqe, const UdpSocket& socket, IoSlot& slot,
               std::span<std::byte> into) noexcept;
// sendmsg of `bytes` to `destination` with DSCP `dscp` (0..63; -1: none). False (nothing
// prepared) when the socket's family cannot reach the destination.
[[nodiscard]] bool prep_send(io_uring_sqe* sqe, const UdpSocket& socket, IoSlot& slot,
                             std::span<const std::byte> bytes, const gw::Endpoint& destination,
                             int dscp) noexcept;

}  // namespace detwan::dataplane::uring

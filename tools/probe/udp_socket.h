#pragma once
// An owned IPv4/IPv6 UDP socket for the probe. Setup code: errors are thrown as
// common::Failure with a message naming the address or option.
#include <cstdint>
#include <string>

#include <netinet/in.h>
#include <sys/socket.h>

namespace detwan::probe {

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
};

// Parses a numeric IPv4 or IPv6 address (no name resolution) and port.
SocketAddress parse_address(const std::string& address, uint16_t port);

class UdpSocket {
 public:
  explicit UdpSocket(int family);
  ~UdpSocket();
  UdpSocket(const UdpSocket&) = delete;
  UdpSocket& operator=(const UdpSocket&) = delete;

  [[nodiscard]] int fd() const noexcept { return fd_; }
  void bind_to(const SocketAddress& address);
  // Receive buffer in bytes; tries SO_RCVBUFFORCE (root) first so bursts are not dropped here.
  void set_receive_buffer(int bytes) noexcept;
  // Kernel receive timestamps (SO_TIMESTAMPNS, CLOCK_REALTIME) on every datagram.
  void enable_timestamps();
  void set_dscp(int dscp, int family);

 private:
  int fd_ = -1;
};

}  // namespace detwan::probe

#pragma once
// detwan-perf control connection (private to the session code): TCP, one JSON object per line
// (docs/perf.md lists the messages), plus the TestSpec codec and its validation.
//
// Threading: a ControlChannel belongs to one thread (the session's control loop); it is not
// synchronised. Lines from the peer are hostile: a line over kMaxControlLineBytes, invalid JSON
// or a non-object is an error, never a crash.
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

#include <boost/json.hpp>

#include "common/status.h"
#include "common/unique_fd.h"
#include "tools/perf/options.h"
#include "tools/perf/perf_wire.h"
#include "tools/perf/spec_json.h"
#include "tools/probe/udp_socket.h"

namespace detwan::perf {

// 2: the accept carries a token the UDP hello must echo (issue 31); a version-1 client is
// refused by name.
inline constexpr int kProtocolVersion = 2;
inline constexpr size_t kMaxControlLineBytes = size_t{1} << 20;
// Memory bound of one direction's receiver (one bit per sequence number): 8 MiB.
inline constexpr uint64_t kMaxPacketsPerDirection = uint64_t{64} << 20;

// Range checks a server applies to a client's request; the message names the field and limit.
common::Result<void> validate_spec(const TestSpec& spec);
// The server's own limits (ServerLimits in options.h) on a spec that passed validate_spec.
common::Result<void> check_server_limits(const TestSpec& spec, const ServerLimits& limits);
// A fresh session token from OpenSSL's CSPRNG (kInternal if it fails), and its text form in the
// accept message: 32 lowercase hex digits. parse_token refuses anything else.
common::Result<HelloToken> new_hello_token();
std::string format_token(const HelloToken& token);
std::optional<HelloToken> parse_token(std::string_view text);
// Constant time (CRYPTO_memcmp): the time a refusal takes says nothing about the token.
bool tokens_equal(const HelloToken& a, const HelloToken& b) noexcept;
// Sequence numbers a receiver must track: pps * duration * 1.1 + 1000, or the cap for an
// unpaced throughput test (which stops sending there).
uint64_t max_packets_for(const TestSpec& spec);

[[nodiscard]] inline bool sends_forward(const TestSpec& s) noexcept {
  return s.mode != Mode::kPingPong && s.direction != Direction::kReverse;
}
[[nodiscard]] inline bool sends_reverse(const TestSpec& s) noexcept {
  return s.mode != Mode::kPingPong && s.direction != Direction::kForward;
}

// Sockets and addresses.
std::string format_address(const probe::SocketAddress& address);  // "1.2.3.4:5" / "[::1]:5"
std::string format_ip(const sockaddr_storage& address);            // "1.2.3.4" / "::1"
// The same host address, ports aside; an IPv4-mapped IPv6 address equals its IPv4 address.
bool same_ip(const sockaddr_storage& a, const sockaddr_storage& b) noexcept;
bool same_address(const sockaddr_storage& a, socklen_t a_len, const sockaddr_storage& b,
                  socklen_t b_len) noexcept;
common::Result<probe::SocketAddress> local_address(int fd);
common::Result<probe::SocketAddress> peer_address(int fd);
// TCP connect to HOST (numeric or a name) within timeout_ns, from local address `bind` when
// not empty (the client's --bind: its UDP hello must come from the control connection's IP).
common::Result<common::UniqueFd> connect_tcp(const std::string& host, uint16_t port,
                                             int64_t timeout_ns, const std::string& bind = "");
// Listening TCP socket; bind "" = all addresses (IPv6 dual stack, else IPv4); port 0 = any.
common::Result<common::UniqueFd> listen_tcp(const std::string& bind, uint16_t port);

class ControlChannel {
 public:
  explicit ControlChannel(common::UniqueFd fd) : fd_(std::move(fd)) {}

  [[nodiscard]] int fd() const noexcept { return fd_.get(); }
  // Writes one line (blocking; bounded by timeout_ns). kIo when the peer is gone.
  common::Result<void> send(const boost::json::object& message, int64_t timeout_ns = 5'000'000'000);
  // Call when poll() reports the fd readable: reads what is pending without blocking and queues
  // complete messages. An error for EOF (kUnavailable, "closed the control connection"),
  // an over-long line or invalid JSON (kInvalidArgument).
  common::Result<void> read_available();
  // The next queued message, if any.
  std::optional<boost::json::object> next();
  // Blocks up to timeout_ns for one message (setup phase).
  common::Result<boost::json::object> receive(int64_t timeout_ns);
  void close() noexcept { fd_.reset(); }

 private:
  common::UniqueFd fd_;
  std::string partial_;
  std::deque<boost::json::object> queue_;
};

}  // namespace detwan::perf

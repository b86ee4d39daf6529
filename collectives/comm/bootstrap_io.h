#pragma once
// Private to the bootstrap (bootstrap*.cc, unique_id.cc): spec parsing, the secret, and
// blocking TCP helpers bounded by a deadline. The messages: bootstrap_codec.h; what the secret
// proves and seals: bootstrap_keys.h.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/comm/bootstrap_codec.h"
#include "collectives/types.h"
#include "common/net_address.h"
#include "common/unique_fd.h"

namespace detwan::collectives::bootstrap {

// A rendezvous secret: 32 to 64 hex digits (128 to 256 bits), so that nobody can guess it or
// search for it offline from a proof they saw.
inline constexpr size_t kMinSecretChars = 32;
inline constexpr size_t kMaxSecretChars = 64;

// A parsed rendezvous spec. "tcp://HOST:PORT[#SECRET]" (HOST may be "[v6addr]") or
// "file:///DIR[#SECRET]".
struct Spec {
  enum class Kind : uint8_t { kTcp, kFile };
  Kind kind = Kind::kTcp;
  std::string host;  // tcp: without brackets
  int port = 0;      // tcp: 1..65535
  std::string dir;   // file: absolute path
  // Lower-case hex, kMinSecretChars..kMaxSecretChars. Absent: a tcp spec is in fixed-address
  // mode (the secret is $DETWAN_BOOTSTRAP_SECRET); a file spec is refused at join.
  std::optional<std::string> secret;
  // "tcp://HOST:PORT" / "file:///DIR": the spec without its secret, for error messages.
  [[nodiscard]] std::string name() const;
  [[nodiscard]] std::string to_string() const;  // name() + "#secret" if any
};
// kInvalidArgument naming the problem, e.g. a secret that is too short.
Result<Spec> parse_spec(std::string_view text);

// "HOST:PORT" with brackets around IPv6 literals (the one in common/, which parse_spec reads).
using common::join_host_port;

// CLOCK_MONOTONIC nanoseconds.
int64_t now_ns();
// "30 s", "0.2 s": how long a rendezvous waited, for error messages.
std::string format_seconds(int64_t ns);
// A fresh random secret (OpenSSL RAND_bytes, 128 bits) as 32 hex digits.
Result<std::string> make_secret();
// "2, 5"
std::string join_ranks(const std::vector<int>& ranks);

// ---- sockets ---------------------------------------------------------------------------
struct Listener {
  common::UniqueFd fd;
  int port = 0;  // the bound port (useful for port 0)
};
// Binds and listens on host:port (port 0 = any). reuse_address sets SO_REUSEADDR, so a fixed
// port from an earlier run in TIME_WAIT can be reused.
Result<Listener> listen_tcp(const std::string& host, int port, bool reuse_address);
// Connects to host:port, retrying refused/unreachable attempts with short backoff until
// deadline_ns (the root may not be up yet). `what` names the target in errors.
Result<common::UniqueFd> connect_tcp(const std::string& host, int port, int64_t deadline_ns,
                                     const std::string& what);
// Numeric address of the socket's local end ("10.0.1.2", "::1").
Result<std::string> local_address(int fd);
// Writes all of `data` (the fd may be non-blocking), giving up at deadline_ns.
Result<void> send_all(int fd, std::string_view data, int64_t deadline_ns);
// Reads exactly n bytes. kUnavailable if the peer closes first, kTimeout at the deadline.
Result<std::string> recv_exact(int fd, size_t n, int64_t deadline_ns);
// Reads one u32-length-prefixed frame's body (without the length) of at most max_bytes: a
// larger length is kInvalidArgument naming it, before anything is allocated. kUnavailable if
// the peer closes first, kTimeout at the deadline.
Result<std::string> recv_frame(int fd, size_t max_bytes, int64_t deadline_ns);

// The secret of a spec without "#SECRET" (a fixed-address tcp://HOST:PORT, or file:///DIR):
// $DETWAN_BOOTSTRAP_SECRET, 32 to 64 hex digits, the same on every rank (lower-cased).
// kInvalidArgument naming the variable when it is missing or malformed.
Result<std::string> environment_secret(const Spec& spec);

}  // namespace detwan::collectives::bootstrap

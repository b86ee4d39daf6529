#pragma once
// Private to the bootstrap (bootstrap*.cc, unique_id.cc): spec parsing, blocking TCP helpers
// bounded by a deadline, and the byte codec of the join/answer frames and store files.
//
// Wire format (all integers big-endian). A TCP frame is u32 payload length + payload.
//   join    "DWBJ" u8 version | u16 nonce length, nonce | i32 rank | i32 nranks |
//           u32 blob length, blob
//   answer  "DWBA" u8 version | u8 0 (ok) | u32 nranks | nranks x (u32 length, blob)
//           "DWBA" u8 version | u8 1 (error) | u8 ErrorCode | u32 length, message
// A file store's DIR/<nonce>.<rank> holds exactly one join payload.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/types.h"
#include "common/unique_fd.h"

namespace detwan::collectives::bootstrap {

inline constexpr uint8_t kWireVersion = 1;
// Bounds what a peer can make us allocate: a blob is a rank's addresses (bytes to kilobytes).
inline constexpr uint32_t kMaxBlobBytes = 64u << 20;
inline constexpr uint32_t kMaxFrameBytes = 1u << 30;
inline constexpr size_t kMaxNonceChars = 64;

// A parsed rendezvous spec. "tcp://HOST:PORT[#NONCE]" (HOST may be "[v6addr]") or
// "file:///DIR[#NONCE]".
struct Spec {
  enum class Kind : uint8_t { kTcp, kFile };
  Kind kind = Kind::kTcp;
  std::string host;   // tcp: without brackets
  int port = 0;       // tcp: 1..65535
  std::string dir;    // file: absolute path
  std::optional<std::string> nonce;  // lower-case hex; absent = fixed-address / plain store
  // "tcp://HOST:PORT" / "file:///DIR": the spec without its nonce, for error messages.
  [[nodiscard]] std::string name() const;
  [[nodiscard]] std::string to_string() const;  // name() + "#nonce" if any
};
Result<Spec> parse_spec(std::string_view text);

// "HOST:PORT" with brackets around IPv6 literals.
std::string join_host_port(const std::string& host, int port);

// CLOCK_MONOTONIC nanoseconds.
int64_t now_ns();
// "30 s", "0.2 s": how long a rendezvous waited, for error messages.
std::string format_seconds(int64_t ns);
// A fresh random nonce (std::random_device, 128 bits) as 32 hex digits.
std::string make_nonce();
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
// Reads one u32-length-prefixed frame of at most max_bytes. kUnavailable if the peer closes
// first, kTimeout at the deadline.
Result<std::string> recv_frame(int fd, uint32_t max_bytes, int64_t deadline_ns);

// ---- codec -----------------------------------------------------------------------------
struct Join {
  std::string nonce;
  int32_t rank = -1;
  int32_t nranks = 0;
  std::string blob;
};
std::string encode_join(const Join& join);
// kInvalidArgument naming what is wrong ("no magic", "truncated", "version 7").
Result<Join> decode_join(std::string_view payload);
// The nonce a join frame carries, from the first bytes of its payload (after the length):
// nullopt until they have arrived, an error if they are not a join. Lets the root check the
// secret before it buffers the rest of the frame (up to kMaxBlobBytes).
Result<std::optional<std::string>> peek_join_nonce(std::string_view payload_prefix);
// Bytes of a join payload up to the end of its nonce, at most (magic, version, length, nonce).
inline constexpr size_t kJoinNoncePrefixBytes = 4 + 1 + 2 + kMaxNonceChars;
// a == b without an early exit on the first difference (no timing oracle for the secret).
[[nodiscard]] bool equal_secret(std::string_view a, std::string_view b) noexcept;
// The secret of a fixed-address tcp://HOST:PORT rendezvous: $DETWAN_BOOTSTRAP_SECRET, 32 to 64
// hex digits, the same on every rank (lower-cased). kInvalidArgument naming the variable when
// it is missing or malformed.
Result<std::string> fixed_address_secret(const Spec& spec);

std::string encode_answer_ok(const std::vector<std::string>& blobs);
std::string encode_answer_error(const Error& error);
// An ok answer's blobs, or the error the root sent.
Result<std::vector<std::string>> decode_answer(std::string_view payload);

// u32 length + payload.
std::string frame(std::string_view payload);

}  // namespace detwan::collectives::bootstrap

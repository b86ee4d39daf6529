#pragma once
// Wire format of detwan-perf test packets (UDP payload, big-endian). docs/perf.md documents it.
//
//   offset size  field
//        0    4  magic 'DWPF' (0x44575046)
//        4    1  version (1)
//        5    1  kind (Kind below)
//        6    2  reserved, zero
//        8    4  session id (chosen by the server, returned on the control connection)
//       12    4  reserved, zero
//       16    8  sequence number
//       24    8  t_a: data: sender's transmit time (CLOCK_REALTIME ns); sync request/reply: t1
//       32    8  t_b: sync reply: t2 (server receive time); fin: data packets sent;
//                   hello: the session token's first 8 bytes; else 0
//       40    8  t_c: sync reply: t3 (server transmit time); hello: the token's last 8 bytes;
//                   else 0
//   data packets are padded with zeros to the test's size (>= kHeaderBytes).
//
// Kinds: kHello (client to server, from the client's UDP socket: lets the server learn the
// client's UDP port through NAT; it carries the 128-bit token of the control connection's
// accept, and only counts from the control connection's own IP address), kHelloAck, kData, kSyncRequest, kSyncReply, kFin (the sender
// is done; sent a few times). A packet of another session, of another tool or a truncated one is
// "malformed": counted and ignored.
//
// decode() treats the bytes as hostile: it checks length, magic, version and kind and never reads
// past `size`. Neither function allocates or throws.
#include <cstddef>
#include <cstdint>

namespace detwan::perf {

inline constexpr uint32_t kMagic = 0x44575046;  // "DWPF"
inline constexpr uint8_t kWireVersion = 1;
inline constexpr size_t kHeaderBytes = 48;
inline constexpr size_t kMaxPacketBytes = 65507;  // largest UDP payload over IPv4

enum class Kind : uint8_t {
  kHello = 1,
  kHelloAck = 2,
  kData = 3,
  kSyncRequest = 4,
  kSyncReply = 5,
  kFin = 6,
};

// The per-session secret a server hands out in its accept (control connection) and a client's
// UDP hello carries back in t_b/t_c: a hello without it moves nothing (docs/perf.md).
struct HelloToken {
  uint64_t high = 0;
  uint64_t low = 0;
  friend bool operator==(const HelloToken&, const HelloToken&) = default;
};

struct Packet {
  Kind kind = Kind::kData;
  uint32_t session = 0;
  uint64_t seq = 0;
  int64_t t_a = 0;
  int64_t t_b = 0;
  int64_t t_c = 0;
};

// Writes `packet` padded to `size` bytes (kHeaderBytes <= size <= buf_size). Returns the bytes
// written, 0 if it does not fit.
size_t encode(const Packet& packet, uint8_t* buf, size_t buf_size, size_t size) noexcept;

// The token a hello carries (t_b, t_c), and a hello carrying `token`.
[[nodiscard]] HelloToken hello_token_of(const Packet& hello) noexcept;
[[nodiscard]] Packet make_hello(uint32_t session, uint64_t seq, int64_t t_a,
                                const HelloToken& token) noexcept;

enum class DecodeResult : uint8_t { kOk, kTooShort, kBadMagic, kBadVersion, kBadKind };
[[nodiscard]] DecodeResult decode(const uint8_t* buf, size_t size, Packet* out) noexcept;
[[nodiscard]] const char* to_string(DecodeResult r) noexcept;

}  // namespace detwan::perf

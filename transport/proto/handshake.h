#pragma once
// The authenticated handshake and key schedule of datagram channels (docs/transport.md,
// "Authenticated channels"). Sans-I/O: the client's Connection and the server's acceptor (the
// datagram driver's listen path) call these.
//
//   HELLO      client -> server  plain HELLO body | mode | nonce_c | MAC_hs("hello", bytes before
//   the MAC) HELLO_ACK  server -> client  plain HELLO body | mode | nonce_s | MAC_hs("hello-ack",
//   bytes before
//                                the MAC, nonce_c)
//   then       client -> server  any sealed datagram (the client sends a KEEPALIVE at once): the
//                                server creates the connection only when one opens
//
//   K_hs      = HKDF-SHA256(ikm = key, salt = "detwan-transport-v3",
//                           info = "handshake" | context)
//   K_c2s/s2c = HKDF-SHA256(ikm = key, salt = nonce_c | nonce_s,
//                           info = "c2s"/"s2c" | connection id (8) | mode (1) | context)
//
// A HELLO does not open anything: it only costs its sender's peer a HELLO_ACK of the same size
// and a half-open entry of fixed size (the driver bounds their number). A replayed HELLO gets a
// fresh nonce_s, so the keys of what it would open are new and unknown to whoever replayed it.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "common/status.h"
#include "transport/crypto/crypto.h"
#include "transport/proto/wire.h"
#include "transport/security.h"

namespace detwan::transport::proto {

using common::ErrorCode;
using common::Result;
using common::Status;

// The two directions' keys of one channel.
struct SessionKeys {
  crypto::Key client_to_server{};
  crypto::Key server_to_client{};
};

// What a server's acceptor agreed with a client: the channel's keys and the client's HELLO.
struct AcceptedHandshake {
  SessionKeys keys;
  wire::HelloBody peer;
};

// An endpoint's keys: the handshake MAC key and what derives the channels' keys. One per
// progress thread (it holds OpenSSL contexts). mode() == kNone: nothing else may be called.
class Keyring {
 public:
  // kConfig when the mode needs a key and `security` has none (the message says how to give
  // one or to ask for SecurityMode::kNone by name); kInternal / kConfig from OpenSSL.
  static Result<std::unique_ptr<Keyring>> create(const Security& security);

  [[nodiscard]] SecurityMode mode() const { return security_.mode; }
  [[nodiscard]] bool sealed() const { return security_.mode != SecurityMode::kNone; }

  // MAC of a HELLO (client_nonce == nullptr) or HELLO_ACK over `signed_bytes` (the datagram up
  // to its MAC field). False only if OpenSSL fails.
  bool hello_mac(std::span<const std::byte> signed_bytes, const crypto::Nonce* client_nonce,
                 crypto::Tag& out) noexcept;
  // The keys of connection `connection_id` between these nonces.
  Result<SessionKeys> derive(uint64_t connection_id, const crypto::Nonce& client_nonce,
                             const crypto::Nonce& server_nonce) const;
  // A cipher context the acceptor re-keys to check a half-open channel's first datagram.
  crypto::PacketCipher& scratch() { return scratch_; }

 private:
  Keyring(Security security, crypto::HmacKey hello_key, crypto::PacketCipher scratch);
  Security security_;
  crypto::HmacKey hello_key_;
  crypto::PacketCipher scratch_;
};

// ---- the acceptor's side (datagram driver, listen path) ----

// A version 3 HELLO checked: its body, with the MAC verified. kMalformed (not a sealed HELLO
// of the right size) or kDropped (the MAC does not verify: not a holder of the key).
Status check_hello(Keyring& keyring, std::span<const std::byte> datagram, wire::Header& h,
                   wire::SealedHelloBody& body);
// Writes the HELLO_ACK answering the HELLO `hello_header` / `client_nonce`: this side's
// parameters, its mode and its nonce, MAC bound to both nonces. Returns its size (the HELLO's).
size_t write_hello_ack(Keyring& keyring, const wire::Header& hello_header,
                       const wire::HelloBody& own, const crypto::Nonce& client_nonce,
                       const crypto::Nonce& server_nonce, int64_t now_ns, std::span<std::byte> out);
// The plain protocol's CLOSE (version 2, CRC) with reason kCloseSecurityMismatch for
// `connection_id`: the answer to a HELLO of the other protocol (28 bytes, below any HELLO).
size_t write_mismatch_close(uint64_t connection_id, uint8_t path_id, int64_t now_ns,
                            std::span<std::byte> out);
// True if `datagram` (a sealed datagram of a half-open channel) opens under the client's key.
bool opens_as_client(Keyring& keyring, const crypto::Key& client_to_server,
                     std::span<const std::byte> datagram);

// Packet numbers on the wire carry their low 32 bits; the receiver expands them against the
// highest it accepted (as QUIC does): the candidate nearest to it.
[[nodiscard]] inline uint64_t expand_packet_number(uint64_t largest, bool any, uint32_t wire) {
  if (!any) return wire;
  const uint64_t expected = largest + 1;
  const uint64_t candidate = (expected & ~uint64_t{0xFFFF'FFFF}) | wire;
  constexpr uint64_t kHalf = uint64_t{1} << 31;
  constexpr uint64_t kSpan = uint64_t{1} << 32;
  if (candidate + kHalf <= expected && candidate < UINT64_MAX - kSpan) return candidate + kSpan;
  if (candidate > expected + kHalf && candidate >= kSpan) return candidate - kSpan;
  return candidate;
}

// The receiver's replay window over one direction's packet numbers: the highest accepted and
// the kBits below it. A number at or below highest - kBits, or one already marked, is refused.
class ReplayWindow {
 public:
  static constexpr uint64_t kBits = 4096;

  [[nodiscard]] uint64_t expand(uint32_t wire) const {
    return expand_packet_number(largest_, any_, wire);
  }
  [[nodiscard]] bool fresh(uint64_t pn) const {
    if (!any_ || pn > largest_) return true;
    if (largest_ - pn >= kBits) return false;
    return !test(pn);
  }
  // Only after the datagram opened.
  void mark(uint64_t pn) {
    if (!any_ || pn > largest_) {
      const uint64_t shift = any_ ? pn - largest_ : kBits;
      if (shift >= kBits) {
        bits_.fill(0);
      } else {
        for (uint64_t n = largest_ + 1; n <= pn; ++n) clear(n);
      }
      largest_ = pn;
      any_ = true;
    }
    set(pn);
  }

 private:
  [[nodiscard]] bool test(uint64_t pn) const {
    return (bits_[(pn / 64) % kWords] >> (pn % 64)) & 1;
  }
  void set(uint64_t pn) { bits_[(pn / 64) % kWords] |= uint64_t{1} << (pn % 64); }
  void clear(uint64_t pn) { bits_[(pn / 64) % kWords] &= ~(uint64_t{1} << (pn % 64)); }
  static constexpr size_t kWords = kBits / 64;
  std::array<uint64_t, kWords> bits_{};
  uint64_t largest_ = 0;
  bool any_ = false;
};

}  // namespace detwan::transport::proto

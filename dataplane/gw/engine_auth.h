#pragma once
// Private: a tunnel's AEAD state in the engine (docs/wire-format.md, "Authenticated tunnels").
// make_auth() is setup tier (builds OpenSSL contexts, may allocate, returns errors); seal_frame
// and open_frame run per packet: no allocation, no exceptions, outcomes counted.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "dataplane/aead/aead.h"
#include "dataplane/gw/config.h"

namespace detwan::dataplane::gw {

// Why an authenticated tunnel (or a packet claiming authentication) was refused.
enum class AuthDrop : uint8_t {
  kMissing = 0,  // the tunnel has keys, the packet has no flag A
  kUnexpected,   // flag A on a tunnel without keys
  kTruncated,    // payload shorter than the tag
  kFailed,       // no key held opens it (forged, corrupted, another key or header)
  kCount
};
inline constexpr int kAuthDropCount = static_cast<int>(AuthDrop::kCount);
std::string_view to_string(AuthDrop reason) noexcept;  // "auth_missing", ...

struct AuthKeySlot {
  uint8_t id = 0;
  aead::Key secret{};
  aead::AeadKey key;
  uint64_t opened_packets = 0;  // packets this key opened
};

struct AuthCounters {
  uint64_t sealed_packets = 0;  // data and control packets sealed
  uint64_t seal_failed = 0;     // could not seal (no room for the tag, OpenSSL): not sent
  uint64_t opened_packets = 0;  // data and control packets opened
  uint64_t new_sessions = 0;    // sender sessions first opened (a peer start or key change)
  std::array<uint64_t, kAuthDropCount> drops{};
};

struct TunnelAuthState {
  aead::Cipher cipher = aead::Cipher::kAes256Gcm;
  std::vector<AuthKeySlot> keys;  // 1 or 2
  uint32_t tx = 0;                // index in keys of the transmit key
  uint32_t tx_session = 0;        // this gateway's session for the tunnel (never 0)
  // The last two sender sessions a key opened, and which key: a genuine packet costs one open.
  struct RxSession {
    uint32_t session = 0;
    uint32_t key = 0;
  };
  std::array<RxSession, 2> rx{};
  uint32_t rx_next = 0;
  AuthCounters counters;
};

// The state for `config`. With `previous` (a modify), what still applies carries over: the
// counters; the transmit session if the transmit key is the same (same id and secret), else a
// new random one; the remembered receive sessions of keys still held.
common::Result<std::unique_ptr<TunnelAuthState>> make_auth(const TunnelAuth& config,
                                                           const TunnelAuthState* previous);

// `frame` = an encoded header (flag A, session) + plaintext_bytes + room for the tag: seals it
// with the transmit key. Returns the packet size, or 0 (counted seal_failed).
std::size_t seal_frame(TunnelAuthState& auth, std::span<std::byte> frame,
                       std::size_t plaintext_bytes) noexcept;
// `datagram` = a decoded packet with flag A and this session: opens it in place. Returns the
// plaintext size, or nullopt with *why (kTruncated or kFailed), counted on the tunnel.
std::optional<std::size_t> open_frame(TunnelAuthState& auth, std::span<std::byte> datagram,
                                      uint32_t session, AuthDrop* why) noexcept;

}  // namespace detwan::dataplane::gw

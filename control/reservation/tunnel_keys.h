#pragma once
// A reservation's tunnel keys (docs/wire-format.md, "Authenticated tunnels"; docs/control.md,
// "Encrypted reservations"). The agent draws a random 32-byte key per encrypted reservation,
// programs it into both gateways of the tunnel and replaces it without losing a packet in three
// steps, each taken once both gateways have the previous one in place:
//   adding:    keys {old, new}, tx old   (both ends can open either)
//   switching: keys {old, new}, tx new   (each end seals with new; the other still opens old)
//   dropping:  keys {new},      tx new
// then none (stable). The old key is dropped only after a grace time in `switching` (longer than
// the path's worst delay), so packets sealed with it just before the switch still open. Secrets live in the agent's journal and the gateways only; the API shows
// fingerprints.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace detwan::control::reservation {

struct TunnelKey {
  uint8_t id = 0;          // 1 .. 255
  std::string secret_hex;  // 64 hex digits
  friend bool operator==(const TunnelKey&, const TunnelKey&) = default;
};

enum class KeyRotation : uint8_t { kNone = 0, kAdding, kSwitching, kDropping };
std::string_view to_string(KeyRotation rotation) noexcept;  // "none", "adding", ...
std::optional<KeyRotation> key_rotation_from_string(std::string_view text) noexcept;

struct TunnelKeys {
  std::vector<TunnelKey> keys;  // empty: not encrypted
  uint8_t tx_key = 0;
  KeyRotation rotation = KeyRotation::kNone;
  uint64_t rotations = 0;     // completed
  int64_t step_unix_ns = 0;   // when the current step began
  friend bool operator==(const TunnelKeys&, const TunnelKeys&) = default;
};

// "aes-256-gcm", "chacha20-poly1305" or "none".
[[nodiscard]] bool is_cipher_name(std::string_view name) noexcept;
// What a reservation is sealed with when its request does not name a cipher (secure by
// default; "none" only when asked for by name).
inline constexpr std::string_view kDefaultCipher = "aes-256-gcm";
inline constexpr std::string_view kNoCipher = "none";

// A new random key (OpenSSL RAND_bytes). kInternal if the generator fails.
common::Result<TunnelKey> new_tunnel_key(uint8_t id);
// First 8 bytes of SHA-256 of the key's bytes, in hex: as detwan-gw shows it ("" if the secret
// is not 64 hex digits).
[[nodiscard]] std::string key_fingerprint(std::string_view secret_hex);

// The first key of an encrypted reservation: keys {1}, tx 1.
common::Result<TunnelKeys> first_keys();
// Starts a rotation (kNone -> kAdding with a new key). False if one is under way.
common::Result<bool> start_rotation(TunnelKeys& keys, int64_t now_ns);
// The next step once the gateways have the current one in place; the last step returns to
// kNone and counts the rotation. No-op when stable.
void advance_rotation(TunnelKeys& keys, int64_t now_ns);

}  // namespace detwan::control::reservation

#pragma once
// A reservation's tunnel keys (docs/wire-format.md, "Authenticated tunnels"; docs/control.md,
// "Encrypted reservations"). The agent draws a random 32-byte key per encrypted reservation,
// programs it into both gateways of the tunnel and replaces it without losing a packet in three
// steps, each taken once both gateways have the previous one in place:
//   adding:    keys {old, new}, tx old   (both ends can open either)
//   switching: keys {old, new}, tx new   (each end seals with new; the other still opens old)
//   dropping:  keys {new},      tx new
// then none (stable). The old key is dropped only after a grace time in `switching` (longer than
// the path's worst delay), so packets sealed with it just before the switch still open. Secrets
// live in the agent's journal and the gateways only; the API shows fingerprints. With key exchange
// (x25519_keys) the same steps run on key contexts and the agent never has a secret: the gateways
// derive it.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace detwan::control::reservation {

struct TunnelKey {
  uint8_t id = 0;          // 1 .. 255
  std::string secret_hex;  // 64 hex digits; "" with key exchange (no secret exists here)
  std::string context;     // key exchange: the key's context, "<TunnelKeys::context>/gen-<n>"
  friend bool operator==(const TunnelKey&, const TunnelKey&) = default;
};

enum class KeyRotation : uint8_t { kNone = 0, kAdding, kSwitching, kDropping };
std::string_view to_string(KeyRotation rotation) noexcept;  // "none", "adding", ...
std::optional<KeyRotation> key_rotation_from_string(std::string_view text) noexcept;

struct TunnelKeys {
  std::vector<TunnelKey> keys;  // empty: not encrypted
  uint8_t tx_key = 0;
  KeyRotation rotation = KeyRotation::kNone;
  uint64_t rotations = 0;    // completed
  int64_t step_unix_ns = 0;  // when the current step began
  // Key exchange (docs/control.md, "Keys no agent holds"): "" = the secrets above, drawn here;
  // "x25519" = each gateway derives its keys from its own private key and the other's public
  // key (dataplane/aead/key_exchange.h), and the agent holds no secret at all, only these:
  std::string key_exchange;
  std::string cipher;   // bound into the derivation (the reservation's encrypt)
  std::string context;  // the reservation's context, e.g. "r-12" or "f-12/aggregator-domain"
  // Base64 X25519 public keys of the tunnel's two gateways: [0] the end this agent programs
  // as end 0 (the local one for a federated tunnel), [1] the other end.
  std::array<std::string, 2> public_keys;
  // Paced by another domain (a federated end segment, docs/federation.md "Rotation across
  // domains"): a step is taken only up to `permitted`, which the aggregator raises once every
  // end has the previous step in place, so neither end seals with a key the other cannot open
  // yet, nor drops one the other may still seal with. Unpaced: permitted is not consulted.
  bool paced = false;
  KeyRotation permitted = KeyRotation::kNone;
  friend bool operator==(const TunnelKeys&, const TunnelKeys&) = default;
};

inline constexpr std::string_view kKeyExchangeX25519 = "x25519";

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
// The first key of a reservation whose tunnel is keyed by X25519 exchange: keys {key_id with
// context "<context>/gen-1"}, tx key_id; no secret. The public keys are base64 of 32 bytes or
// PEM (stored as base64); `context` is 1..200 printable ASCII characters (the reservation's
// global id, e.g. "f-12/aggregator-domain"). kInvalidArgument naming the field at fault. The
// federation calls it with its own gateway's key as local and the far domain's as remote.
common::Result<TunnelKeys> x25519_keys(std::string cipher, std::string local_public_key,
                                       std::string remote_public_key, std::string context,
                                       uint32_t key_id);
// "<context>/gen-<generation>": the context of a reservation's key of that generation (1, 2,
// ... : the first key, then one per rotation).
[[nodiscard]] std::string key_context(std::string_view context, uint64_t generation);
// Starts a rotation (kNone -> kAdding with a new key: a drawn secret, or with key exchange the
// next generation's context). False if one is under way.
common::Result<bool> start_rotation(TunnelKeys& keys, int64_t now_ns);
// The next step once the gateways have the current one in place; the last step returns to
// kNone and counts the rotation. No-op when stable.
void advance_rotation(TunnelKeys& keys, int64_t now_ns);
// May the rotation take its next step (false only for a paced one not yet permitted)?
[[nodiscard]] bool may_advance(const TunnelKeys& keys) noexcept;

}  // namespace detwan::control::reservation

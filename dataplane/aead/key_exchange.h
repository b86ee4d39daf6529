#pragma once
// A tunnel's base secret by X25519 key agreement (docs/wire-format.md, "Key schedule", "Base
// secret by X25519"): instead of a secret the agent drew and sent, each gateway computes
//
//   shared = X25519(own private key, peer public key)          32 bytes, refused if all zero
//   salt   = "detwan x25519 tunnel v1"                          23 ASCII bytes
//   info   = low public key (32) | high public key (32)         the two public keys, the one
//                                                               smaller as bytes first
//            | tunnel id (4, big-endian)
//            | cipher name length (1) | cipher name             "aes-256-gcm", ASCII
//            | context length (2, big-endian) | context         e.g. "r-12/gen-1"
//   secret = HKDF-SHA256(ikm = shared, salt, info), 32 bytes
//
// Both gateways get the same secret (X25519 is symmetric, the info does not depend on which end
// computes it) and no agent ever sees it. The secret then takes today's place in the schedule
// (key_schedule.h): per direction and per epoch keys derive from it unchanged.
//
// Setup tier: called when a tunnel's configuration is loaded or applied, never per packet.
// Returns Result: kInvalidArgument for a small-order peer key or a bad context; no state.
#include <cstdint>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/x25519.h"
#include "dataplane/aead/aead.h"

namespace detwan::dataplane::aead {

inline constexpr char kX25519Salt[] = "detwan x25519 tunnel v1";
inline constexpr std::size_t kMaxKeyContextBytes = 255;

// The HKDF info above, exactly as x25519_tunnel_secret passes it (tests check the layout).
[[nodiscard]] std::vector<std::byte> x25519_tunnel_info(const common::crypto::X25519Key& a,
                                                        const common::crypto::X25519Key& b,
                                                        uint32_t tunnel_id, Cipher cipher,
                                                        std::string_view context);

// A key context: 1..255 printable ASCII characters (0x21..0x7e). False otherwise.
[[nodiscard]] bool valid_key_context(std::string_view context) noexcept;

// The tunnel's base secret (above). kInvalidArgument if the context is not valid or the peer's
// key is a small-order point (the message names the key).
common::Result<Key> x25519_tunnel_secret(const common::crypto::X25519KeyPair& own,
                                         const common::crypto::X25519Key& peer_public,
                                         uint32_t tunnel_id, Cipher cipher,
                                         std::string_view context);

}  // namespace detwan::dataplane::aead

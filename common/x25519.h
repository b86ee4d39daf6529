#pragma once
// X25519 key pairs (RFC 7748) through OpenSSL 3, shared by the gateway (its identity key, the
// ECDH of a tunnel's keys: dataplane/aead/key_exchange.h) and the agent (the gateways' public
// keys in its topology and reservations). Never hand-rolled: EVP_PKEY "X25519" only.
//
// Formats (docs/gateway.md, "Identity key"):
//   private key: PEM, PKCS#8 ("-----BEGIN PRIVATE KEY-----"), exactly what
//                `openssl genpkey -algorithm X25519 -out k.pem` and `detwan-gw keygen` write;
//   public key:  base64 (RFC 4648, with padding) of the 32 raw bytes, 44 characters, e.g.
//                "pVyuVmY9wj0Cj5ZnkQkR0+Ob0m2pTSbXPMXLVeA6AWM=" (what the gateway reports);
//                x25519_parse_public also accepts a PEM "-----BEGIN PUBLIC KEY-----" block
//                (`openssl pkey -in k.pem -pubout`).
//
// Setup tier: every call that can fail returns Result; a malformed key is kInvalidArgument with
// a message saying what was expected, an OpenSSL failure kInternal. No state: any thread.
#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"

namespace detwan::common::crypto {

inline constexpr std::size_t kX25519KeyBytes = 32;
using X25519Key = std::array<std::byte, kX25519KeyBytes>;

struct X25519KeyPair {
  X25519Key private_key{};  // raw scalar (RFC 7748 section 5)
  X25519Key public_key{};   // raw u-coordinate
  friend bool operator==(const X25519KeyPair&, const X25519KeyPair&) = default;
};

// A fresh key pair from OpenSSL's CSPRNG.
Result<X25519KeyPair> x25519_generate();
// The private key as PKCS#8 PEM (as `openssl genpkey -algorithm X25519` writes it).
Result<std::string> x25519_private_pem(const X25519Key& private_key);
// The key pair of a PEM private key; kInvalidArgument if the text is not one or the key is not
// X25519 (naming the type found).
Result<X25519KeyPair> x25519_from_private_pem(std::string_view pem);

// A public key given as base64 of 32 bytes or as PEM (surrounding white space ignored).
Result<X25519Key> x25519_parse_public(std::string_view text);
// The 44-character base64 form of a public key (the canonical one).
[[nodiscard]] std::string x25519_public_base64(const X25519Key& public_key);

// ECDH: X25519(private_key, peer_public). Refuses (kInvalidArgument) a peer key that yields an
// all-zero shared secret (one of the small-order points: RFC 7748 section 6.1).
Result<X25519Key> x25519_shared_secret(const X25519Key& private_key, const X25519Key& peer_public);

}  // namespace detwan::common::crypto

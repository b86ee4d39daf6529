#pragma once
// The transport's cryptography (docs/transport.md, "Authenticated channels"), all of it from
// OpenSSL 3: RAND_bytes, HKDF-SHA256 (EVP_KDF), HMAC-SHA256 (EVP_MAC); the per-packet
// AES-256-GCM from intel-ipsec-mb where present, else OpenSSL's EVP.
//
// Setup tier (may allocate, return Result naming OpenSSL's complaint): the create() functions,
// derive(). Datapath tier (no allocation of ours, no exceptions, no logging; false on failure):
// PacketCipher::seal/open and HmacKey::mac.
//
// Threading: an HmacKey or a PacketCipher belongs to one thread (each holds an OpenSSL context).
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/crypto.h"
#include "common/status.h"

namespace detwan::transport::crypto {

inline constexpr size_t kKeyBytes = 32;
inline constexpr size_t kTagBytes = 16;    // AES-GCM tag, and HELLO MACs truncated to it
inline constexpr size_t kNonceBytes = 16;  // handshake nonces (fresh per HELLO / HELLO_ACK)

using Key = std::array<std::byte, kKeyBytes>;
using Nonce = std::array<std::byte, kNonceBytes>;
using Tag = std::array<std::byte, kTagBytes>;

// The CSPRNG, HKDF-SHA256 and the constant-time comparison are common/crypto.h's.
using common::crypto::equal_ct;
using common::crypto::hkdf_sha256;
using common::crypto::random_bytes;
using common::crypto::random_u64;

// HMAC-SHA256 under one key, keyed once at create(); mac() re-initialises the context with the
// same key (no allocation) and writes the first kTagBytes of the MAC over the concatenation of
// the given parts.
class HmacKey {
 public:
  static common::Result<HmacKey> create(const Key& key);
  HmacKey(HmacKey&&) noexcept;
  HmacKey& operator=(HmacKey&&) noexcept;
  ~HmacKey();

  bool mac(std::span<const std::span<const std::byte>> parts, Tag& out) noexcept;

 private:
  struct Context;
  explicit HmacKey(std::unique_ptr<Context> context) noexcept;
  std::unique_ptr<Context> context_;
};

// AES-256-GCM for one direction of one channel (cipher_ipsec_mb.cc, or cipher_openssl.cc where
// intel-ipsec-mb is absent: meson picks one): the key is set once (create / rekey), each
// packet sets only its nonce: 4 zero bytes | the packet's 64-bit number, big-endian. The caller
// guarantees that a number is never used twice under one key (docs/transport.md: per-direction
// keys, strictly increasing packet numbers).
class PacketCipher {
 public:
  // kConfig naming OpenSSL's complaint when the cipher cannot be set up.
  static common::Result<PacketCipher> create();  // no key yet: rekey() first
  static common::Result<PacketCipher> create(const Key& key);
  PacketCipher(PacketCipher&&) noexcept;
  PacketCipher& operator=(PacketCipher&&) noexcept;
  ~PacketCipher();

  // Which implementation was built: "intel-ipsec-mb" (when the library is present: ~4x
  // faster per datagram here) or "openssl" (EVP).
  static const char* implementation() noexcept;

  // Sets a new key (setup of a channel; the acceptor's check of a first datagram). No
  // allocation: the contexts exist already.
  bool rekey(const Key& key) noexcept;
  [[nodiscard]] bool keyed() const noexcept { return keyed_; }

  // Authenticates `aad` and encrypts `text` in place (empty text: authentication only), then
  // writes the tag. False only if OpenSSL fails.
  bool seal(uint64_t packet_number, std::span<const std::byte> aad, std::span<std::byte> text,
            std::span<std::byte, kTagBytes> tag) noexcept;
  // Checks the tag over `aad` and `text` and decrypts `text` into `plain` (same size; may be
  // `text` itself, or empty when `text` is: authentication only). False if the tag does not
  // match (then `plain` holds garbage).
  bool open(uint64_t packet_number, std::span<const std::byte> aad, std::span<const std::byte> text,
            std::span<std::byte> plain, std::span<const std::byte, kTagBytes> tag) noexcept;

 private:
  struct Contexts;
  explicit PacketCipher(std::unique_ptr<Contexts> contexts) noexcept;
  std::unique_ptr<Contexts> contexts_;
  bool keyed_ = false;
};

}  // namespace detwan::transport::crypto

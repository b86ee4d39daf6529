#pragma once
// Private to collectives/ (the bootstrap, the communicator's keys, the mesh hello): the few
// OpenSSL 3 primitives they use, never hand-rolled (the CSPRNG, HMAC and HKDF are
// common/crypto.h's, here over strings): RAND_bytes, HMAC-SHA256 (EVP_MAC),
// HKDF-SHA256 (EVP_KDF), AES-256-GCM (EVP_CIPHER) and a constant-time compare.
//
// Setup tier: every call returns Result; an OpenSSL failure is kInternal naming the primitive.
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "collectives/types.h"

namespace detwan::collectives::crypto {

inline constexpr size_t kKeyBytes = 32;
inline constexpr size_t kMacBytes = 32;
inline constexpr size_t kTagBytes = 16;  // AES-256-GCM tag

using Key = std::array<std::byte, kKeyBytes>;
using Mac = std::array<std::byte, kMacBytes>;

// Bytes of a key or MAC as a string_view (to feed them to another primitive).
[[nodiscard]] inline std::string_view view(std::span<const std::byte> bytes) noexcept {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// Fills `out` from OpenSSL's CSPRNG.
Result<void> random_bytes(std::span<std::byte> out);
// `n` random bytes as 2n lower-case hex digits.
Result<std::string> random_hex(size_t n);

// HMAC-SHA256(key, parts[0] || parts[1] || ...). Callers make the concatenation unambiguous
// (fixed-size fields, or a length before each variable one: see field()).
Result<Mac> hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts);

// HKDF-SHA256 (RFC 5869) of `ikm` with `salt` and `info` into out.size() bytes.
Result<void> hkdf_sha256(std::string_view ikm, std::string_view salt, std::string_view info,
                         std::span<std::byte> out);
Result<Key> derive_key(std::string_view ikm, std::string_view salt, std::string_view info);

// u32 big-endian length + bytes: an unambiguous field of a MAC input or a KDF info.
std::string field(std::string_view bytes);

// AES-256-GCM with a 96-bit nonce of 4 zero bytes + `counter` (big-endian). A key must never
// seal two messages with one counter: each direction has its own key and counts its frames.
// seal: ciphertext || 16-byte tag. open: the plaintext, or kInvalidArgument if the tag does not
// verify (altered, truncated, another key, another counter or another aad).
Result<std::string> seal(const Key& key, uint64_t counter, std::string_view aad,
                         std::string_view plaintext);
Result<std::string> open(const Key& key, uint64_t counter, std::string_view aad,
                         std::string_view sealed);

// a == b in time independent of where they differ (CRYPTO_memcmp); false if sizes differ.
[[nodiscard]] bool equal(std::string_view a, std::string_view b) noexcept;

}  // namespace detwan::collectives::crypto

#pragma once
// The cryptographic primitives every layer uses, one of each, all from OpenSSL 3 (never
// hand-rolled): the CSPRNG, HKDF-SHA256 (RFC 5869, EVP_KDF), HMAC-SHA256 (EVP_MAC) and a
// constant-time comparison. The per-packet AEADs stay with their layer (dataplane/aead for the
// tunnels, transport/crypto for the channels): they differ in nonce layout and backend.
//
// Setup tier: every call that can fail returns Result; an OpenSSL failure is kInternal naming
// the primitive and OpenSSL's own complaint. No state: any thread.
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "common/status.h"

namespace detwan::common::crypto {

inline constexpr std::size_t kSha256Bytes = 32;
using Sha256 = std::array<std::byte, kSha256Bytes>;

// The oldest error on OpenSSL's queue of this thread, as text ("unknown OpenSSL error" if
// none); takes it off the queue.
[[nodiscard]] std::string openssl_error();

// `out` filled from OpenSSL's CSPRNG (RAND_bytes).
Result<void> random_bytes(std::span<std::byte> out);
// A random 64-bit value from the CSPRNG.
Result<uint64_t> random_u64();

// HKDF-SHA256, extract and expand: out = HKDF(salt, ikm, info), out.size() bytes (<= 8160).
Result<void> hkdf_sha256(std::span<const std::byte> ikm, std::span<const std::byte> salt,
                         std::span<const std::byte> info, std::span<std::byte> out);

// HMAC-SHA256(key, parts[0] || parts[1] || ...). The caller makes the concatenation
// unambiguous (fixed-size fields, or a length before each variable one).
Result<Sha256> hmac_sha256(std::span<const std::byte> key,
                           std::initializer_list<std::span<const std::byte>> parts);

// a == b in time independent of where they differ (CRYPTO_memcmp); false if the sizes differ.
[[nodiscard]] bool equal_ct(std::span<const std::byte> a, std::span<const std::byte> b) noexcept;

}  // namespace detwan::common::crypto

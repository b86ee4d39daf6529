#pragma once
// AES-GCM per packet on an OpenSSL 3 cipher context keyed once (EVP_EncryptInit_ex /
// EVP_DecryptInit_ex with the cipher and the key, no nonce): per call only the 12-byte nonce is
// set and the tag goes through a parameter, the calls with the least per-call overhead
// (docs/benchmarks/dataplane-security.md, "AEAD cost"). The gateway's tunnels
// (dataplane/aead) and the transport's packets (transport/crypto) both seal and open here.
//
// Datapath: no allocation, no exceptions, no logging; false when OpenSSL refuses (a bad tag on
// open). Threading: a context belongs to one thread at a time.
#include <cstddef>
#include <span>

#include <openssl/types.h>

namespace detwan::common {

inline constexpr size_t kGcmNonceBytes = 12;
inline constexpr size_t kGcmTagBytes = 16;

// Encrypts `text` in place and writes its tag.
[[nodiscard]] bool gcm_seal(EVP_CIPHER_CTX* ctx, const std::byte* nonce,
                            std::span<const std::byte> aad, std::span<std::byte> text,
                            std::byte* tag) noexcept;
// Decrypts `text` into `plain` (the same size; it may be `text` itself) and checks `tag`.
// `written` (optional) says whether `plain` was written: false after a refusal before the
// decryption (then an in-place `text` is still the ciphertext), true after a bad tag.
[[nodiscard]] bool gcm_open(EVP_CIPHER_CTX* ctx, const std::byte* nonce,
                            std::span<const std::byte> aad, std::span<const std::byte> text,
                            std::byte* plain, const std::byte* tag,
                            bool* written = nullptr) noexcept;

}  // namespace detwan::common

#pragma once
// Private: what an AeadKey holds (aead.cc sets it up, aead_datapath.cc uses it per packet): the
// OpenSSL contexts, and for AES-256-GCM on intel-ipsec-mb the expanded key (aead_ipsec_mb.cc).
#include <openssl/evp.h>

#include <array>
#include <cstdint>

#include "dataplane/aead/aead.h"

namespace detwan::dataplane::aead {

// intel-ipsec-mb's AES-256-GCM, or stand-ins that fail where the library is not built in
// (aead_ipsec_mb.cc / aead_no_ipsec_mb.cc; meson picks one).
namespace ipsec_mb {
struct ExpandedKey;  // gcm_key_data
bool available() noexcept;
ExpandedKey* create() noexcept;  // nullptr if unavailable
void destroy(ExpandedKey* key) noexcept;
void expand(ExpandedKey* key, const Key& raw) noexcept;
void seal(const ExpandedKey* key, const Nonce& nonce, const std::byte* aad, std::size_t aad_bytes,
          std::byte* text, std::size_t text_bytes, std::byte* tag) noexcept;
// Decrypts in place; writes the tag it computed (the caller compares).
void open(const ExpandedKey* key, const Nonce& nonce, const std::byte* aad,
          std::size_t aad_bytes, std::byte* text, std::size_t text_bytes,
          std::byte* computed_tag) noexcept;
}  // namespace ipsec_mb

struct AeadKey::Contexts {
  EVP_CIPHER_CTX* seal = nullptr;  // OpenSSL backend
  EVP_CIPHER_CTX* open = nullptr;
  ipsec_mb::ExpandedKey* gcm = nullptr;  // intel-ipsec-mb backend
  ~Contexts();
};

}  // namespace detwan::dataplane::aead

// Setup side of tunnel AEAD: cipher names, key parsing, fingerprints, OpenSSL contexts.
#include <openssl/evp.h>

#include <cstdio>
#include <utility>

#include "common/crypto.h"
#include "common/strings.h"
#include "dataplane/aead/aead.h"
#include "dataplane/aead/aead_impl.h"

namespace detwan::dataplane::aead {

using common::ErrorCode;
using common::make_error;

std::string_view to_string(Cipher cipher) noexcept {
  return cipher == Cipher::kAes256Gcm ? "aes-256-gcm" : "chacha20-poly1305";
}

std::optional<Cipher> cipher_from_string(std::string_view name) noexcept {
  if (name == "aes-256-gcm") return Cipher::kAes256Gcm;
  if (name == "chacha20-poly1305") return Cipher::kChacha20Poly1305;
  return std::nullopt;
}

std::optional<Key> key_from_hex(std::string_view hex) noexcept {
  Key key{};
  if (!common::decode_hex(hex, reinterpret_cast<unsigned char*>(key.data()), key.size())) {
    return std::nullopt;
  }
  return key;
}

std::string fingerprint(const Key& key) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(key.data(), key.size(), digest, &length, EVP_sha256(), nullptr) != 1) return "";
  std::string out;
  char two[3];
  for (unsigned int i = 0; i < 8 && i < length; ++i) {
    std::snprintf(two, sizeof two, "%02x", digest[i]);
    out += two;
  }
  return out;
}

using common::crypto::openssl_error;

AeadKey::Contexts::~Contexts() {
  EVP_CIPHER_CTX_free(seal);
  EVP_CIPHER_CTX_free(open);
}

common::Result<AeadKey> AeadKey::create(Cipher cipher, const Key& key) {
  auto contexts = std::make_unique<Contexts>();
  contexts->seal = EVP_CIPHER_CTX_new();
  contexts->open = EVP_CIPHER_CTX_new();
  const EVP_CIPHER* evp =
      cipher == Cipher::kAes256Gcm ? EVP_aes_256_gcm() : EVP_chacha20_poly1305();
  const auto* raw = reinterpret_cast<const unsigned char*>(key.data());
  // Key the contexts once; each packet then sets only its nonce. The nonce length (12) is the
  // default of both ciphers.
  if (contexts->seal == nullptr || contexts->open == nullptr ||
      EVP_EncryptInit_ex(contexts->seal, evp, nullptr, raw, nullptr) != 1 ||
      EVP_DecryptInit_ex(contexts->open, evp, nullptr, raw, nullptr) != 1 ||
      EVP_CIPHER_CTX_get_iv_length(contexts->seal) != static_cast<int>(kNonceBytes)) {
    return make_error(ErrorCode::kConfig,
                      std::string("cannot set up ") + std::string(to_string(cipher)) + ": " +
                          openssl_error());
  }
  return AeadKey(cipher, std::move(contexts));
}

bool AeadKey::rekey(const Key& key) noexcept {
  const auto* raw = reinterpret_cast<const unsigned char*>(key.data());
  return EVP_EncryptInit_ex(contexts_->seal, nullptr, nullptr, raw, nullptr) == 1 &&
         EVP_DecryptInit_ex(contexts_->open, nullptr, nullptr, raw, nullptr) == 1;
}

AeadKey::AeadKey(Cipher cipher, std::unique_ptr<Contexts> contexts) noexcept
    : cipher_(cipher), contexts_(std::move(contexts)) {}
AeadKey::AeadKey(AeadKey&&) noexcept = default;
AeadKey& AeadKey::operator=(AeadKey&&) noexcept = default;
AeadKey::~AeadKey() = default;

}  // namespace detwan::dataplane::aead

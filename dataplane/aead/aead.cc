// Setup side of tunnel AEAD: cipher and backend names, key parsing, fingerprints, the OpenSSL
// contexts or intel-ipsec-mb's expanded key.
#include <openssl/evp.h>

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "common/crypto.h"
#include "common/logging.h"
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

std::string_view to_string(Backend backend) noexcept {
  switch (backend) {
    case Backend::kOpenssl:
      return "openssl";
    case Backend::kIpsecMb:
      return "intel-ipsec-mb";
    case Backend::kAuto:
      break;
  }
  return "auto";
}

std::optional<Backend> backend_from_string(std::string_view name) noexcept {
  if (name == "auto") return Backend::kAuto;
  if (name == "openssl") return Backend::kOpenssl;
  if (name == "intel-ipsec-mb" || name == "ipsec-mb") return Backend::kIpsecMb;
  return std::nullopt;
}

bool ipsec_mb_available() noexcept { return ipsec_mb::available(); }

AeadKey::Contexts::~Contexts() {
  EVP_CIPHER_CTX_free(seal);
  EVP_CIPHER_CTX_free(open);
  ipsec_mb::destroy(gcm);
}

Backend AeadKey::backend() const noexcept {
  return contexts_->gcm != nullptr ? Backend::kIpsecMb : Backend::kOpenssl;
}

namespace {

// kAuto resolved: DETWAN_AEAD_BACKEND (auto | openssl | intel-ipsec-mb), read once per
// process, lets an operator or a benchmark (tools/bench/gw-aead-cost) pick the library of a
// whole gateway; anything else in it is ignored with a warning.
Backend process_default() {
  static const Backend chosen = [] {
    const char* env = std::getenv("DETWAN_AEAD_BACKEND");
    if (env == nullptr || *env == '\0') return Backend::kAuto;
    const auto parsed = backend_from_string(env);
    if (!parsed) {
      common::logger("detwan-gw")
          ->warn("DETWAN_AEAD_BACKEND='{}' is not auto, openssl or intel-ipsec-mb: ignored", env);
      return Backend::kAuto;
    }
    return *parsed;
  }();
  return chosen;
}

}  // namespace

common::Result<AeadKey> AeadKey::create(Cipher cipher, const Key& key, Backend backend) {
  if (backend == Backend::kIpsecMb && cipher != Cipher::kAes256Gcm) {
    return make_error(ErrorCode::kConfig,
                      "intel-ipsec-mb is used for aes-256-gcm only, not " +
                          std::string(to_string(cipher)));
  }
  if (backend == Backend::kAuto) {
    backend = process_default();
    // A gateway-wide choice: ChaCha20 stays OpenSSL's.
    if (cipher != Cipher::kAes256Gcm) backend = Backend::kOpenssl;
  }
  auto contexts = std::make_unique<Contexts>();
  const bool want_ipsec_mb =
      cipher == Cipher::kAes256Gcm &&
      (backend == Backend::kIpsecMb || (backend == Backend::kAuto && ipsec_mb::available()));
  if (want_ipsec_mb) {
    contexts->gcm = ipsec_mb::create();
    if (contexts->gcm == nullptr) {
      return make_error(ErrorCode::kConfig,
                        ipsec_mb::available()
                            ? "cannot set up aes-256-gcm on intel-ipsec-mb: out of memory"
                            : "cannot set up aes-256-gcm on intel-ipsec-mb: not built in (no "
                              "libipsec-mb-dev at build time) or its manager failed on this CPU");
    }
    ipsec_mb::expand(contexts->gcm, key);
    return AeadKey(cipher, std::move(contexts));
  }
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
  if (contexts_->gcm != nullptr) {
    ipsec_mb::expand(contexts_->gcm, key);
    return true;
  }
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

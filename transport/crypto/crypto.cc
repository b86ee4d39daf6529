// Setup side of the transport's cryptography: CSPRNG, HKDF, HMAC keys, cipher contexts.
#include "transport/crypto/crypto.h"

#include <climits>
#include <string>
#include <utility>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include "transport/crypto/crypto_impl.h"

namespace detwan::transport::crypto {

using common::ErrorCode;
using common::make_error;

std::string openssl_error() {
  const unsigned long code = ERR_get_error();
  if (code == 0) return "unknown OpenSSL error";
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return text;
}

common::Result<void> random_bytes(std::span<std::byte> out) {
  if (out.size() > static_cast<size_t>(INT_MAX) ||
      RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(out.size())) != 1) {
    return make_error(ErrorCode::kInternal, "RAND_bytes failed: " + openssl_error());
  }
  return {};
}

common::Result<uint64_t> random_u64() {
  std::array<std::byte, 8> bytes{};
  if (auto ok = random_bytes(bytes); !ok) return std::unexpected(ok.error());
  uint64_t value = 0;
  for (std::byte b : bytes) value = (value << 8) | std::to_integer<uint64_t>(b);
  return value;
}

common::Result<void> hkdf_sha256(std::span<const std::byte> ikm, std::span<const std::byte> salt,
                                 std::span<const std::byte> info, std::span<std::byte> out) {
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  EVP_KDF_CTX* ctx = kdf != nullptr ? EVP_KDF_CTX_new(kdf) : nullptr;
  EVP_KDF_free(kdf);
  if (ctx == nullptr)
    return make_error(ErrorCode::kInternal, "HKDF unavailable: " + openssl_error());
  char digest[] = "SHA256";
  // OpenSSL takes the octet strings through non-const pointers; it only reads them.
  auto u = [](std::span<const std::byte> s) {
    return const_cast<unsigned char*>(reinterpret_cast<const unsigned char*>(s.data()));
  };
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, u(ikm), ikm.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, u(salt), salt.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, u(info), info.size()),
      OSSL_PARAM_construct_end()};
  const int ok =
      EVP_KDF_derive(ctx, reinterpret_cast<unsigned char*>(out.data()), out.size(), params);
  EVP_KDF_CTX_free(ctx);
  if (ok != 1) return make_error(ErrorCode::kInternal, "HKDF-SHA256 failed: " + openssl_error());
  return {};
}

bool equal_ct(std::span<const std::byte> a, std::span<const std::byte> b) noexcept {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// ---- HmacKey ----

HmacKey::Context::~Context() { EVP_MAC_CTX_free(ctx); }

HmacKey::HmacKey(std::unique_ptr<Context> context) noexcept : context_(std::move(context)) {}
HmacKey::HmacKey(HmacKey&&) noexcept = default;
HmacKey& HmacKey::operator=(HmacKey&&) noexcept = default;
HmacKey::~HmacKey() = default;

common::Result<HmacKey> HmacKey::create(const Key& key) {
  auto context = std::make_unique<Context>();
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  context->ctx = mac != nullptr ? EVP_MAC_CTX_new(mac) : nullptr;
  EVP_MAC_free(mac);
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  if (context->ctx == nullptr ||
      EVP_MAC_init(context->ctx, reinterpret_cast<const unsigned char*>(key.data()), key.size(),
                   params) != 1) {
    return make_error(ErrorCode::kConfig, "cannot set up HMAC-SHA256: " + openssl_error());
  }
  return HmacKey(std::move(context));
}

}  // namespace detwan::transport::crypto

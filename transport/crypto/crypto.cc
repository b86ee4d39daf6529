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

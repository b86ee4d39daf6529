#include <climits>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "common/aead_gcm.h"

namespace detwan::common {
namespace {

auto* uc(std::byte* p) noexcept { return reinterpret_cast<unsigned char*>(p); }
auto* uc(const std::byte* p) noexcept { return reinterpret_cast<const unsigned char*>(p); }

bool fits_int(size_t n) noexcept { return n <= static_cast<size_t>(INT_MAX); }

}  // namespace

bool gcm_seal(EVP_CIPHER_CTX* ctx, const std::byte* nonce, std::span<const std::byte> aad,
              std::span<std::byte> text, std::byte* tag) noexcept {
  int n = 0;
  if (!fits_int(aad.size()) || !fits_int(text.size())) return false;
  if (EVP_EncryptInit_ex2(ctx, nullptr, nullptr, uc(nonce), nullptr) != 1) return false;
  if (!aad.empty() &&
      EVP_EncryptUpdate(ctx, nullptr, &n, uc(aad.data()), static_cast<int>(aad.size())) != 1) {
    return false;
  }
  if (!text.empty() && EVP_EncryptUpdate(ctx, uc(text.data()), &n, uc(text.data()),
                                         static_cast<int>(text.size())) != 1) {
    return false;
  }
  if (EVP_EncryptFinal_ex(ctx, uc(text.data() + text.size()), &n) != 1) return false;
  OSSL_PARAM params[2] = {
      OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, uc(tag), kGcmTagBytes),
      OSSL_PARAM_construct_end()};
  return EVP_CIPHER_CTX_get_params(ctx, params) == 1;
}

bool gcm_open(EVP_CIPHER_CTX* ctx, const std::byte* nonce, std::span<const std::byte> aad,
              std::span<const std::byte> text, std::byte* plain, const std::byte* tag,
              bool* written) noexcept {
  int n = 0;
  if (written != nullptr) *written = false;
  if (!fits_int(aad.size()) || !fits_int(text.size())) return false;
  // OpenSSL takes the expected tag through a non-const pointer; it only reads it.
  OSSL_PARAM params[2] = {
      OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG,
                                        const_cast<unsigned char*>(uc(tag)), kGcmTagBytes),
      OSSL_PARAM_construct_end()};
  if (EVP_DecryptInit_ex2(ctx, nullptr, nullptr, uc(nonce), params) != 1) return false;
  if (!aad.empty() &&
      EVP_DecryptUpdate(ctx, nullptr, &n, uc(aad.data()), static_cast<int>(aad.size())) != 1) {
    return false;
  }
  if (!text.empty() &&
      EVP_DecryptUpdate(ctx, uc(plain), &n, uc(text.data()), static_cast<int>(text.size())) != 1) {
    return false;
  }
  if (written != nullptr) *written = !text.empty();
  return EVP_DecryptFinal_ex(ctx, uc(plain + text.size()), &n) == 1;
}

}  // namespace detwan::common

// One of each OpenSSL primitive (crypto.h).
#include "common/crypto.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <climits>
#include <memory>

namespace detwan::common::crypto {
namespace {

struct Free {
  void operator()(EVP_MAC* p) const { EVP_MAC_free(p); }
  void operator()(EVP_MAC_CTX* p) const { EVP_MAC_CTX_free(p); }
  void operator()(EVP_KDF* p) const { EVP_KDF_free(p); }
  void operator()(EVP_KDF_CTX* p) const { EVP_KDF_CTX_free(p); }
};
template <typename T>
using Owned = std::unique_ptr<T, Free>;

std::unexpected<Error> failed(const char* what) {
  return make_error(ErrorCode::kInternal, std::string(what) + " failed: " + openssl_error());
}

// OpenSSL takes octet strings through non-const pointers; it only reads them.
unsigned char* in(std::span<const std::byte> s) {
  return const_cast<unsigned char*>(reinterpret_cast<const unsigned char*>(s.data()));
}

}  // namespace

std::string openssl_error() {
  const unsigned long code = ERR_get_error();
  if (code == 0) return "unknown OpenSSL error";
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return text;
}

Result<void> random_bytes(std::span<std::byte> out) {
  if (out.size() > static_cast<std::size_t>(INT_MAX) ||
      RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(out.size())) != 1) {
    return failed("RAND_bytes");
  }
  return {};
}

Result<uint64_t> random_u64() {
  std::array<std::byte, 8> bytes{};
  if (auto ok = random_bytes(bytes); !ok) return std::unexpected(ok.error());
  uint64_t value = 0;
  for (const std::byte b : bytes) value = (value << 8) | std::to_integer<uint64_t>(b);
  return value;
}

Result<void> hkdf_sha256(std::span<const std::byte> ikm, std::span<const std::byte> salt,
                         std::span<const std::byte> info, std::span<std::byte> out) {
  const Owned<EVP_KDF> kdf(EVP_KDF_fetch(nullptr, "HKDF", nullptr));
  const Owned<EVP_KDF_CTX> ctx(kdf ? EVP_KDF_CTX_new(kdf.get()) : nullptr);
  if (!ctx) return failed("HKDF-SHA256 setup");
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, in(ikm), ikm.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, in(salt), salt.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, in(info), info.size()),
      OSSL_PARAM_construct_end()};
  if (EVP_KDF_derive(ctx.get(), reinterpret_cast<unsigned char*>(out.data()), out.size(),
                     params) != 1) {
    return failed("HKDF-SHA256");
  }
  return {};
}

Result<Sha256> hmac_sha256(std::span<const std::byte> key,
                           std::initializer_list<std::span<const std::byte>> parts) {
  const Owned<EVP_MAC> mac(EVP_MAC_fetch(nullptr, "HMAC", nullptr));
  const Owned<EVP_MAC_CTX> ctx(mac ? EVP_MAC_CTX_new(mac.get()) : nullptr);
  if (!ctx) return failed("HMAC-SHA256 setup");
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_construct_end()};
  if (EVP_MAC_init(ctx.get(), in(key), key.size(), params) != 1) return failed("HMAC-SHA256");
  for (const auto part : parts) {
    if (EVP_MAC_update(ctx.get(), in(part), part.size()) != 1) return failed("HMAC-SHA256");
  }
  Sha256 out{};
  std::size_t length = 0;
  if (EVP_MAC_final(ctx.get(), reinterpret_cast<unsigned char*>(out.data()), &length,
                    out.size()) != 1 ||
      length != out.size()) {
    return failed("HMAC-SHA256");
  }
  return out;
}

bool equal_ct(std::span<const std::byte> a, std::span<const std::byte> b) noexcept {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace detwan::common::crypto

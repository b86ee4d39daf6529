#include "collectives/crypto.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <cstring>
#include <memory>

#include <fmt/format.h>

namespace detwan::collectives::crypto {
namespace {

std::unexpected<Error> openssl_failed(std::string_view what) {
  return make_error(ErrorCode::kInternal, fmt::format("OpenSSL {} failed", what));
}

struct MacDeleter {
  void operator()(EVP_MAC* p) const { EVP_MAC_free(p); }
  void operator()(EVP_MAC_CTX* p) const { EVP_MAC_CTX_free(p); }
  void operator()(EVP_KDF* p) const { EVP_KDF_free(p); }
  void operator()(EVP_KDF_CTX* p) const { EVP_KDF_CTX_free(p); }
  void operator()(EVP_CIPHER_CTX* p) const { EVP_CIPHER_CTX_free(p); }
};
template <typename T>
using Owned = std::unique_ptr<T, MacDeleter>;

const auto* bytes_of(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

std::array<unsigned char, 12> gcm_nonce(uint64_t counter) {
  std::array<unsigned char, 12> nonce{};
  for (int i = 0; i < 8; ++i) nonce[4 + i] = static_cast<unsigned char>(counter >> (56 - 8 * i));
  return nonce;
}

}  // namespace

Result<void> random_bytes(std::span<std::byte> out) {
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(out.size())) != 1) {
    return openssl_failed("RAND_bytes");
  }
  return {};
}

Result<std::string> random_hex(size_t n) {
  std::string raw(n, '\0');
  if (auto ok = random_bytes(std::as_writable_bytes(std::span(raw))); !ok) {
    return std::unexpected(ok.error());
  }
  std::string out;
  out.reserve(2 * n);
  for (char c : raw) out += fmt::format("{:02x}", static_cast<uint8_t>(c));
  return out;
}

Result<Mac> hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts) {
  Owned<EVP_MAC> mac(EVP_MAC_fetch(nullptr, "HMAC", nullptr));
  if (!mac) return openssl_failed("EVP_MAC_fetch(HMAC)");
  Owned<EVP_MAC_CTX> ctx(EVP_MAC_CTX_new(mac.get()));
  if (!ctx) return openssl_failed("EVP_MAC_CTX_new");
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_END};
  if (EVP_MAC_init(ctx.get(), bytes_of(key), key.size(), params) != 1) {
    return openssl_failed("EVP_MAC_init");
  }
  for (std::string_view part : parts) {
    if (EVP_MAC_update(ctx.get(), bytes_of(part), part.size()) != 1) {
      return openssl_failed("EVP_MAC_update");
    }
  }
  Mac out{};
  size_t length = 0;
  if (EVP_MAC_final(ctx.get(), reinterpret_cast<unsigned char*>(out.data()), &length, out.size()) !=
          1 ||
      length != out.size()) {
    return openssl_failed("EVP_MAC_final");
  }
  return out;
}

Result<void> hkdf_sha256(std::string_view ikm, std::string_view salt, std::string_view info,
                         std::span<std::byte> out) {
  Owned<EVP_KDF> kdf(EVP_KDF_fetch(nullptr, "HKDF", nullptr));
  if (!kdf) return openssl_failed("EVP_KDF_fetch(HKDF)");
  Owned<EVP_KDF_CTX> ctx(EVP_KDF_CTX_new(kdf.get()));
  if (!ctx) return openssl_failed("EVP_KDF_CTX_new");
  char digest[] = "SHA256";
  // OSSL_PARAM takes non-const pointers; OpenSSL only reads these buffers.
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_octet_string(
                             OSSL_KDF_PARAM_KEY, const_cast<char*>(ikm.data()), ikm.size()),
                         OSSL_PARAM_construct_octet_string(
                             OSSL_KDF_PARAM_SALT, const_cast<char*>(salt.data()), salt.size()),
                         OSSL_PARAM_construct_octet_string(
                             OSSL_KDF_PARAM_INFO, const_cast<char*>(info.data()), info.size()),
                         OSSL_PARAM_END};
  if (EVP_KDF_derive(ctx.get(), reinterpret_cast<unsigned char*>(out.data()), out.size(), params) !=
      1) {
    return openssl_failed("HKDF");
  }
  return {};
}

Result<Key> derive_key(std::string_view ikm, std::string_view salt, std::string_view info) {
  Key key{};
  if (auto ok = hkdf_sha256(ikm, salt, info, key); !ok) return std::unexpected(ok.error());
  return key;
}

std::string field(std::string_view bytes) {
  const auto n = static_cast<uint32_t>(bytes.size());
  std::string out{static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                  static_cast<char>(n)};
  out.append(bytes);
  return out;
}

Result<std::string> seal(const Key& key, uint64_t counter, std::string_view aad,
                         std::string_view plaintext) {
  Owned<EVP_CIPHER_CTX> ctx(EVP_CIPHER_CTX_new());
  if (!ctx) return openssl_failed("EVP_CIPHER_CTX_new");
  const auto nonce = gcm_nonce(counter);
  if (EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr,
                         reinterpret_cast<const unsigned char*>(key.data()), nonce.data()) != 1) {
    return openssl_failed("AES-256-GCM init");
  }
  int length = 0;
  if (!aad.empty() && EVP_EncryptUpdate(ctx.get(), nullptr, &length, bytes_of(aad),
                                        static_cast<int>(aad.size())) != 1) {
    return openssl_failed("AES-256-GCM aad");
  }
  std::string out(plaintext.size() + kTagBytes, '\0');
  auto* dst = reinterpret_cast<unsigned char*>(out.data());
  if (!plaintext.empty() && EVP_EncryptUpdate(ctx.get(), dst, &length, bytes_of(plaintext),
                                              static_cast<int>(plaintext.size())) != 1) {
    return openssl_failed("AES-256-GCM encrypt");
  }
  if (EVP_EncryptFinal_ex(ctx.get(), dst + plaintext.size(), &length) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTagBytes, dst + plaintext.size()) !=
          1) {
    return openssl_failed("AES-256-GCM final");
  }
  return out;
}

Result<std::string> open(const Key& key, uint64_t counter, std::string_view aad,
                         std::string_view sealed) {
  if (sealed.size() < kTagBytes) {
    return make_error(ErrorCode::kInvalidArgument, "sealed frame shorter than its tag");
  }
  Owned<EVP_CIPHER_CTX> ctx(EVP_CIPHER_CTX_new());
  if (!ctx) return openssl_failed("EVP_CIPHER_CTX_new");
  const auto nonce = gcm_nonce(counter);
  if (EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr,
                         reinterpret_cast<const unsigned char*>(key.data()), nonce.data()) != 1) {
    return openssl_failed("AES-256-GCM init");
  }
  int length = 0;
  if (!aad.empty() && EVP_DecryptUpdate(ctx.get(), nullptr, &length, bytes_of(aad),
                                        static_cast<int>(aad.size())) != 1) {
    return openssl_failed("AES-256-GCM aad");
  }
  const size_t body = sealed.size() - kTagBytes;
  std::string out(body, '\0');
  auto* dst = reinterpret_cast<unsigned char*>(out.data());
  if (body > 0 &&
      EVP_DecryptUpdate(ctx.get(), dst, &length, bytes_of(sealed), static_cast<int>(body)) != 1) {
    return openssl_failed("AES-256-GCM decrypt");
  }
  std::array<unsigned char, kTagBytes> tag{};
  std::memcpy(tag.data(), sealed.data() + body, kTagBytes);
  if (EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTagBytes, tag.data()) != 1) {
    return openssl_failed("AES-256-GCM tag");
  }
  if (EVP_DecryptFinal_ex(ctx.get(), dst + body, &length) != 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      "sealed frame does not authenticate (altered, or another key)");
  }
  return out;
}

bool equal(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace detwan::collectives::crypto

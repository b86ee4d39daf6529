#include "collectives/crypto.h"

#include <openssl/evp.h>

#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "common/crypto.h"

namespace detwan::collectives::crypto {
namespace {

std::unexpected<Error> openssl_failed(std::string_view what) {
  return make_error(ErrorCode::kInternal, fmt::format("OpenSSL {} failed", what));
}

struct CipherFree {
  void operator()(EVP_CIPHER_CTX* p) const { EVP_CIPHER_CTX_free(p); }
};
template <typename T>
using Owned = std::unique_ptr<T, CipherFree>;

const auto* bytes_of(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

std::array<unsigned char, 12> gcm_nonce(uint64_t counter) {
  std::array<unsigned char, 12> nonce{};
  for (int i = 0; i < 8; ++i) nonce[4 + i] = static_cast<unsigned char>(counter >> (56 - 8 * i));
  return nonce;
}

}  // namespace

Result<void> random_bytes(std::span<std::byte> out) { return common::crypto::random_bytes(out); }

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
  // common::crypto::hmac_sha256 takes a fixed list of byte spans: the parts are concatenated
  // first (setup-tier inputs of a few hundred bytes).
  std::string joined;
  for (const std::string_view part : parts) joined.append(part);
  return common::crypto::hmac_sha256(std::as_bytes(std::span(key)),
                                     {std::as_bytes(std::span(joined))});
}

Result<void> hkdf_sha256(std::string_view ikm, std::string_view salt, std::string_view info,
                         std::span<std::byte> out) {
  return common::crypto::hkdf_sha256(std::as_bytes(std::span(ikm)), std::as_bytes(std::span(salt)),
                                     std::as_bytes(std::span(info)), out);
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
  return common::crypto::equal_ct(std::as_bytes(std::span(a)), std::as_bytes(std::span(b)));
}

}  // namespace detwan::collectives::crypto

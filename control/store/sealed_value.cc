#include "control/store/sealed_value.h"

#include <openssl/evp.h>

#include <cstddef>
#include <span>

#include <fmt/format.h>

#include "common/crypto.h"

namespace detwan::control::store {
namespace {

constexpr size_t kNonceBytes = 12;
constexpr size_t kTagBytes = 16;
constexpr size_t kKeyBytes = 32;

struct CipherCtx {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  ~CipherCtx() { EVP_CIPHER_CTX_free(ctx); }
};

const unsigned char* bytes_of(const std::string& s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

}  // namespace

common::Result<std::string> seal_value(const std::string& store_key, const std::string& key_name,
                                       const std::string& plain) {
  if (store_key.size() != kKeyBytes) {
    return common::make_error(common::ErrorCode::kConfig, "the store key is not 32 bytes");
  }
  std::string out(kNonceBytes + plain.size() + kTagBytes, '\0');
  auto* bytes = reinterpret_cast<unsigned char*>(out.data());
  if (auto ok = common::crypto::random_bytes(
          std::as_writable_bytes(std::span(out.data(), kNonceBytes)));
      !ok) {
    return std::unexpected(ok.error());
  }
  CipherCtx c;
  int n = 0;
  if (c.ctx == nullptr ||
      EVP_EncryptInit_ex(c.ctx, EVP_aes_256_gcm(), nullptr, bytes_of(store_key), bytes) != 1 ||
      EVP_EncryptUpdate(c.ctx, nullptr, &n, bytes_of(key_name),
                        static_cast<int>(key_name.size())) != 1 ||
      EVP_EncryptUpdate(c.ctx, bytes + kNonceBytes, &n, bytes_of(plain),
                        static_cast<int>(plain.size())) != 1 ||
      EVP_EncryptFinal_ex(c.ctx, bytes + kNonceBytes + n, &n) != 1 ||
      EVP_CIPHER_CTX_ctrl(c.ctx, EVP_CTRL_GCM_GET_TAG, kTagBytes,
                          bytes + kNonceBytes + plain.size()) != 1) {
    return common::make_error(common::ErrorCode::kInternal,
                              "sealing " + key_name + ": " + common::crypto::openssl_error());
  }
  return out;
}

common::Result<std::string> open_sealed(const std::string& store_key, const std::string& key_name,
                                        const std::string& sealed) {
  if (sealed.size() < kNonceBytes + kTagBytes || store_key.size() != kKeyBytes) {
    return common::make_error(common::ErrorCode::kInternal,
                              fmt::format("{}: too short to be sealed", key_name));
  }
  const size_t length = sealed.size() - kNonceBytes - kTagBytes;
  std::string plain(length, '\0');
  std::string tag = sealed.substr(kNonceBytes + length);
  CipherCtx c;
  int n = 0;
  if (c.ctx == nullptr ||
      EVP_DecryptInit_ex(c.ctx, EVP_aes_256_gcm(), nullptr, bytes_of(store_key),
                         bytes_of(sealed)) != 1 ||
      EVP_DecryptUpdate(c.ctx, nullptr, &n, bytes_of(key_name),
                        static_cast<int>(key_name.size())) != 1 ||
      EVP_DecryptUpdate(c.ctx, reinterpret_cast<unsigned char*>(plain.data()), &n,
                        bytes_of(sealed) + kNonceBytes, static_cast<int>(length)) != 1 ||
      EVP_CIPHER_CTX_ctrl(c.ctx, EVP_CTRL_GCM_SET_TAG, kTagBytes, tag.data()) != 1 ||
      EVP_DecryptFinal_ex(c.ctx, reinterpret_cast<unsigned char*>(plain.data()) + n, &n) != 1) {
    return common::make_error(common::ErrorCode::kInternal,
                              fmt::format("{}: does not open under the store key (altered, moved "
                                          "from another key, or sealed with another key)",
                                          key_name));
  }
  return plain;
}

}  // namespace detwan::control::store

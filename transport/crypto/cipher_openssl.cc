// PacketCipher on OpenSSL 3's EVP AES-256-GCM (built when intel-ipsec-mb is absent): contexts
// keyed once, per packet only the nonce (common/aead_gcm.h, shared with dataplane/aead).
#include <utility>

#include <openssl/evp.h>

#include "common/aead_gcm.h"
#include "transport/crypto/crypto.h"
#include "transport/crypto/crypto_impl.h"

namespace detwan::transport::crypto {

struct PacketCipher::Contexts {
  EVP_CIPHER_CTX* seal = nullptr;
  EVP_CIPHER_CTX* open = nullptr;
  ~Contexts() {
    EVP_CIPHER_CTX_free(seal);
    EVP_CIPHER_CTX_free(open);
  }
};

PacketCipher::PacketCipher(std::unique_ptr<Contexts> contexts) noexcept
    : contexts_(std::move(contexts)) {}
PacketCipher::PacketCipher(PacketCipher&&) noexcept = default;
PacketCipher& PacketCipher::operator=(PacketCipher&&) noexcept = default;
PacketCipher::~PacketCipher() = default;

const char* PacketCipher::implementation() noexcept { return "openssl"; }

common::Result<PacketCipher> PacketCipher::create() {
  auto contexts = std::make_unique<Contexts>();
  contexts->seal = EVP_CIPHER_CTX_new();
  contexts->open = EVP_CIPHER_CTX_new();
  if (contexts->seal == nullptr || contexts->open == nullptr ||
      EVP_EncryptInit_ex(contexts->seal, EVP_aes_256_gcm(), nullptr, nullptr, nullptr) != 1 ||
      EVP_DecryptInit_ex(contexts->open, EVP_aes_256_gcm(), nullptr, nullptr, nullptr) != 1 ||
      EVP_CIPHER_CTX_get_iv_length(contexts->seal) != 12) {
    return common::make_error(common::ErrorCode::kConfig,
                              "cannot set up aes-256-gcm: " + openssl_error());
  }
  return PacketCipher(std::move(contexts));
}

common::Result<PacketCipher> PacketCipher::create(const Key& key) {
  auto cipher = create();
  if (!cipher) return cipher;
  if (!cipher->rekey(key)) {
    return common::make_error(common::ErrorCode::kConfig,
                              "cannot key aes-256-gcm: " + openssl_error());
  }
  return cipher;
}

bool PacketCipher::rekey(const Key& key) noexcept {
  const auto* raw = reinterpret_cast<const unsigned char*>(key.data());
  keyed_ = EVP_EncryptInit_ex(contexts_->seal, nullptr, nullptr, raw, nullptr) == 1 &&
           EVP_DecryptInit_ex(contexts_->open, nullptr, nullptr, raw, nullptr) == 1;
  return keyed_;
}

bool PacketCipher::seal(uint64_t packet_number, std::span<const std::byte> aad,
                        std::span<std::byte> text, std::span<std::byte, kTagBytes> tag) noexcept {
  if (!keyed_) return false;
  const auto nonce = gcm_nonce(packet_number);
  return common::gcm_seal(contexts_->seal, reinterpret_cast<const std::byte*>(nonce.data()), aad,
                          text, tag.data());
}

bool PacketCipher::open(uint64_t packet_number, std::span<const std::byte> aad,
                        std::span<const std::byte> text, std::span<std::byte> plain,
                        std::span<const std::byte, kTagBytes> tag) noexcept {
  if (!keyed_ || plain.size() != text.size()) return false;
  const auto nonce = gcm_nonce(packet_number);
  return common::gcm_open(contexts_->open, reinterpret_cast<const std::byte*>(nonce.data()), aad,
                          text, plain.data(), tag.data());
}

}  // namespace detwan::transport::crypto

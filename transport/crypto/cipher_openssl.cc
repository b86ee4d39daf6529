// PacketCipher on OpenSSL 3's EVP AES-256-GCM (built when intel-ipsec-mb is absent): contexts
// keyed once, per packet only the nonce (the API style of dataplane/aead/aead_datapath.cc).
#include <climits>
#include <utility>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "transport/crypto/crypto.h"
#include "transport/crypto/crypto_impl.h"

namespace detwan::transport::crypto {
namespace {

auto* uc(std::byte* p) noexcept { return reinterpret_cast<unsigned char*>(p); }
auto* uc(const std::byte* p) noexcept { return reinterpret_cast<const unsigned char*>(p); }
bool fits_int(size_t n) noexcept { return n <= static_cast<size_t>(INT_MAX); }

}  // namespace

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
  EVP_CIPHER_CTX* ctx = contexts_->seal;
  int n = 0;
  if (!keyed_ || !fits_int(aad.size()) || !fits_int(text.size())) return false;
  const auto nonce = gcm_nonce(packet_number);
  if (EVP_EncryptInit_ex2(ctx, nullptr, nullptr, nonce.data(), nullptr) != 1) return false;
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
      OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, uc(tag.data()), kTagBytes),
      OSSL_PARAM_construct_end()};
  return EVP_CIPHER_CTX_get_params(ctx, params) == 1;
}

bool PacketCipher::open(uint64_t packet_number, std::span<const std::byte> aad,
                        std::span<const std::byte> text, std::span<std::byte> plain,
                        std::span<const std::byte, kTagBytes> tag) noexcept {
  EVP_CIPHER_CTX* ctx = contexts_->open;
  int n = 0;
  if (!keyed_ || !fits_int(aad.size()) || !fits_int(text.size()) || plain.size() != text.size()) {
    return false;
  }
  const auto nonce = gcm_nonce(packet_number);
  // OpenSSL takes the expected tag through a non-const pointer; it only reads it.
  OSSL_PARAM params[2] = {
      OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG,
                                        const_cast<unsigned char*>(uc(tag.data())), kTagBytes),
      OSSL_PARAM_construct_end()};
  if (EVP_DecryptInit_ex2(ctx, nullptr, nullptr, nonce.data(), params) != 1) return false;
  if (!aad.empty() &&
      EVP_DecryptUpdate(ctx, nullptr, &n, uc(aad.data()), static_cast<int>(aad.size())) != 1) {
    return false;
  }
  if (!text.empty() && EVP_DecryptUpdate(ctx, uc(plain.data()), &n, uc(text.data()),
                                         static_cast<int>(text.size())) != 1) {
    return false;
  }
  return EVP_DecryptFinal_ex(ctx, uc(plain.data() + plain.size()), &n) == 1;
}

}  // namespace detwan::transport::crypto

// Per-packet cryptography: AES-256-GCM seal/open with the nonce from a packet number, and the
// handshake MAC. No allocation, no exceptions, no logging; failures are return values.
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <climits>

#include "transport/crypto/crypto.h"
#include "transport/crypto/crypto_impl.h"

namespace detwan::transport::crypto {
namespace {

auto* uc(std::byte* p) noexcept { return reinterpret_cast<unsigned char*>(p); }
auto* uc(const std::byte* p) noexcept { return reinterpret_cast<const unsigned char*>(p); }

bool fits_int(size_t n) noexcept { return n <= static_cast<size_t>(INT_MAX); }

// 4 zero bytes | packet number (8, big-endian).
std::array<unsigned char, 12> gcm_nonce(uint64_t packet_number) noexcept {
  std::array<unsigned char, 12> nonce{};
  for (int i = 0; i < 8; ++i) nonce[4 + i] = static_cast<unsigned char>(packet_number >> (56 - 8 * i));
  return nonce;
}

}  // namespace

bool HmacKey::mac(std::span<const std::span<const std::byte>> parts, Tag& out) noexcept {
  EVP_MAC_CTX* ctx = context_->ctx;
  // A null key re-initialises with the key set at create().
  if (EVP_MAC_init(ctx, nullptr, 0, nullptr) != 1) return false;
  for (const auto& part : parts) {
    if (!part.empty() && EVP_MAC_update(ctx, uc(part.data()), part.size()) != 1) return false;
  }
  unsigned char full[EVP_MAX_MD_SIZE];
  size_t length = 0;
  if (EVP_MAC_final(ctx, full, &length, sizeof full) != 1 || length < kTagBytes) return false;
  for (size_t i = 0; i < kTagBytes; ++i) out[i] = std::byte{full[i]};
  return true;
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

// Per-handshake cryptography: the HMAC of HELLOs. No allocation, no exceptions, no logging.
// (The per-packet AEAD is in cipher_ipsec_mb.cc or cipher_openssl.cc.)
#include <climits>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "transport/crypto/crypto.h"
#include "transport/crypto/crypto_impl.h"

namespace detwan::transport::crypto {
namespace {

auto* uc(const std::byte* p) noexcept { return reinterpret_cast<const unsigned char*>(p); }

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

}  // namespace detwan::transport::crypto

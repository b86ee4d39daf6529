#pragma once
// Private: the OpenSSL context behind HmacKey (crypto.cc creates it, crypto_datapath.cc uses
// it per HELLO). PacketCipher::Contexts is defined by its implementation (cipher_*.cc).
#include <array>
#include <cstdint>
#include <string>

#include <openssl/evp.h>

#include "transport/crypto/crypto.h"

namespace detwan::transport::crypto {

struct HmacKey::Context {
  EVP_MAC_CTX* ctx = nullptr;
  ~Context();
};

using common::crypto::openssl_error;

// 4 zero bytes | packet number (8, big-endian): the 12-byte AES-GCM nonce of a packet.
inline std::array<unsigned char, 12> gcm_nonce(uint64_t packet_number) noexcept {
  std::array<unsigned char, 12> nonce{};
  for (int i = 0; i < 8; ++i)
    nonce[4 + i] = static_cast<unsigned char>(packet_number >> (56 - 8 * i));
  return nonce;
}

}  // namespace detwan::transport::crypto

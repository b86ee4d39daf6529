#pragma once
// Private: the OpenSSL contexts behind HmacKey and PacketCipher (crypto.cc creates them,
// crypto_datapath.cc uses them per packet).
#include <openssl/evp.h>

#include <string>

#include "transport/crypto/crypto.h"

namespace detwan::transport::crypto {

struct HmacKey::Context {
  EVP_MAC_CTX* ctx = nullptr;
  ~Context();
};

struct PacketCipher::Contexts {
  EVP_CIPHER_CTX* seal = nullptr;
  EVP_CIPHER_CTX* open = nullptr;
  ~Contexts();
};

// The oldest error on OpenSSL's queue, as text.
std::string openssl_error();

}  // namespace detwan::transport::crypto

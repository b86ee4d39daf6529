#pragma once
// Private: the OpenSSL contexts behind an AeadKey (aead.cc creates them, aead_datapath.cc uses
// them per packet).
#include <openssl/evp.h>

#include "dataplane/aead/aead.h"

namespace detwan::dataplane::aead {

struct AeadKey::Contexts {
  EVP_CIPHER_CTX* seal = nullptr;
  EVP_CIPHER_CTX* open = nullptr;
  ~Contexts();
};

}  // namespace detwan::dataplane::aead

#pragma once
// The values the agent writes to etcd, sealed (docs/control.md, "The agent on etcd"):
// AES-256-GCM (OpenSSL EVP) under the 32-byte store key, a random 96-bit nonce per value, the
// value's own etcd key name as associated data. Layout: nonce (12) | ciphertext | tag (16).
// A value altered, sealed under another key, or moved under another key name does not open.
// Setup tier (std::expected); no state: any thread.
#include <string>

#include "common/status.h"

namespace detwan::control::store {

common::Result<std::string> seal_value(const std::string& store_key, const std::string& key_name,
                                       const std::string& plain);
// kInternal naming `key_name` when the value does not open.
common::Result<std::string> open_sealed(const std::string& store_key, const std::string& key_name,
                                        const std::string& sealed);

}  // namespace detwan::control::store

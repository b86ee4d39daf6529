#pragma once
// Private to the bootstrap: what the rendezvous secret proves and protects (docs/collectives.md,
// "The bootstrap protocol"). The secret itself never leaves the process.
//
//   proof key      HKDF(secret, info "detwan bootstrap v2 proof" | binding)
//   root proof     HMAC(proof key, "root"   | nonce_j | nonce_r | salt)
//   joiner proof   HMAC(proof key, "joiner" | nonce_j | nonce_r | salt)
//   session keys   HKDF(secret, salt nonce_j | nonce_r, info "detwan bootstrap v2 session" |
//                  binding) -> 64 bytes: joiner->root key, root->joiner key
//   file key       HKDF(secret, info "detwan bootstrap v2 file" | binding)
//   communicator   HKDF(secret, salt, info "detwan comm v1" | binding)
// `binding` names the rendezvous ("tcp://HOST:PORT" as every rank names it; "file" for a store,
// whose directory may be mounted at different paths), so a proof made for one rendezvous is
// refused by another with the same secret, and the direction label keeps a proof from being
// reflected. Each proof covers both fresh nonces, so none can be replayed.
#include <string>
#include <string_view>

#include "collectives/comm/bootstrap_codec.h"
#include "collectives/crypto.h"

namespace detwan::collectives::bootstrap {

struct SessionKeys {
  crypto::Key to_root{};    // seals the joiner's frames
  crypto::Key to_joiner{};  // seals the root's frames
};

class RendezvousKeys {
 public:
  // secret: the spec's (32..64 lower-case hex digits, already checked by parse_spec).
  static Result<RendezvousKeys> make(std::string_view secret, std::string binding);

  enum class Prover : uint8_t { kRoot, kJoiner };
  Result<crypto::Mac> proof(Prover who, const Nonce& joiner, const Nonce& root,
                            const Salt& salt) const;
  Result<SessionKeys> session(const Nonce& joiner, const Nonce& root) const;
  Result<crypto::Key> communicator_key(std::string_view salt) const;

  // File store: the HMAC that ends a rank's record (over the file's name and the record), and
  // the files' name prefix ("detwan-bootstrap-<16 hex digits>"): derived from the secret, it
  // tells nothing about it, and two jobs with different secrets never share a file name.
  Result<crypto::Mac> file_mac(std::string_view file_name, std::string_view record) const;
  Result<std::string> file_prefix() const;

  [[nodiscard]] const std::string& binding() const { return binding_; }

 private:
  RendezvousKeys(std::string secret, std::string binding, crypto::Key proof_key,
                 crypto::Key file_key)
      : secret_(std::move(secret)),
        binding_(std::move(binding)),
        proof_key_(proof_key),
        file_key_(file_key) {}

  std::string secret_;
  std::string binding_;
  crypto::Key proof_key_;
  crypto::Key file_key_;
};

// Sealed frame: u32 length | AES-256-GCM(key, counter, aad = the 4 length bytes, payload).
// Each direction of a connection has its own key and counts its frames from 0.
Result<std::string> seal_frame(const crypto::Key& key, uint64_t counter, std::string_view payload);
// `body`: the bytes after the length prefix (the length is body.size()). kInvalidArgument if
// it does not authenticate.
Result<std::string> open_frame(const crypto::Key& key, uint64_t counter, std::string_view body);

}  // namespace detwan::collectives::bootstrap

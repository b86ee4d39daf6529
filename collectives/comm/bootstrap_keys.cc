#include "collectives/comm/bootstrap_keys.h"

#include <cstring>
#include <utility>

namespace detwan::collectives::bootstrap {

Result<RendezvousKeys> RendezvousKeys::make(std::string_view secret, std::string binding) {
  auto proof_key =
      crypto::derive_key(secret, "", "detwan bootstrap v2 proof" + crypto::field(binding));
  if (!proof_key) return std::unexpected(proof_key.error());
  auto file_key =
      crypto::derive_key(secret, "", "detwan bootstrap v2 file" + crypto::field(binding));
  if (!file_key) return std::unexpected(file_key.error());
  return RendezvousKeys(std::string(secret), std::move(binding), *proof_key, *file_key);
}

Result<crypto::Mac> RendezvousKeys::proof(Prover who, const Nonce& joiner, const Nonce& root,
                                          const Salt& salt) const {
  const std::string_view label =
      who == Prover::kRoot ? "detwan bootstrap v2 root proof" : "detwan bootstrap v2 joiner proof";
  return crypto::hmac_sha256(crypto::view(proof_key_), {crypto::field(label), crypto::view(joiner),
                                                        crypto::view(root), crypto::view(salt)});
}

Result<SessionKeys> RendezvousKeys::session(const Nonce& joiner, const Nonce& root) const {
  std::string salt(crypto::view(joiner));
  salt.append(crypto::view(root));
  std::array<std::byte, 2 * crypto::kKeyBytes> both{};
  if (auto ok = crypto::hkdf_sha256(secret_, salt,
                                    "detwan bootstrap v2 session" + crypto::field(binding_), both);
      !ok) {
    return std::unexpected(ok.error());
  }
  SessionKeys keys;
  std::memcpy(keys.to_root.data(), both.data(), crypto::kKeyBytes);
  std::memcpy(keys.to_joiner.data(), both.data() + crypto::kKeyBytes, crypto::kKeyBytes);
  return keys;
}

Result<crypto::Key> RendezvousKeys::communicator_key(std::string_view salt) const {
  return crypto::derive_key(secret_, salt, "detwan comm v1" + crypto::field(binding_));
}

Result<crypto::Mac> RendezvousKeys::file_mac(std::string_view file_name,
                                             std::string_view record) const {
  return crypto::hmac_sha256(
      crypto::view(file_key_),
      {crypto::field("detwan bootstrap v2 file record"), crypto::field(file_name), record});
}

Result<std::string> RendezvousKeys::file_prefix() const {
  auto mac = crypto::hmac_sha256(crypto::view(file_key_),
                                 {crypto::field("detwan bootstrap v2 file name")});
  if (!mac) return std::unexpected(mac.error());
  std::string out = "detwan-bootstrap-";
  static constexpr char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < 8; ++i) {
    const auto b = static_cast<uint8_t>((*mac)[i]);
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

Result<std::string> seal_frame(const crypto::Key& key, uint64_t counter, std::string_view payload) {
  const std::string prefix =
      length_prefix(static_cast<uint32_t>(payload.size() + crypto::kTagBytes));
  auto sealed = crypto::seal(key, counter, prefix, payload);
  if (!sealed) return std::unexpected(sealed.error());
  return prefix + *sealed;
}

Result<std::string> open_frame(const crypto::Key& key, uint64_t counter, std::string_view body) {
  return crypto::open(key, counter, length_prefix(static_cast<uint32_t>(body.size())), body);
}

}  // namespace detwan::collectives::bootstrap

#include "control/reservation/tunnel_keys.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "common/crypto.h"
#include "common/strings.h"

namespace detwan::control::reservation {

std::string_view to_string(KeyRotation rotation) noexcept {
  switch (rotation) {
    case KeyRotation::kNone:
      return "none";
    case KeyRotation::kAdding:
      return "adding";
    case KeyRotation::kSwitching:
      return "switching";
    case KeyRotation::kDropping:
      return "dropping";
  }
  return "none";
}

std::optional<KeyRotation> key_rotation_from_string(std::string_view text) noexcept {
  for (const KeyRotation r : {KeyRotation::kNone, KeyRotation::kAdding, KeyRotation::kSwitching,
                              KeyRotation::kDropping}) {
    if (text == to_string(r)) return r;
  }
  return std::nullopt;
}

bool is_cipher_name(std::string_view name) noexcept {
  return name == "aes-256-gcm" || name == "chacha20-poly1305" || name == "none";
}

common::Result<TunnelKey> new_tunnel_key(uint8_t id) {
  std::array<std::byte, 32> bytes{};
  if (auto ok = common::crypto::random_bytes(bytes); !ok) {
    return common::make_error(common::ErrorCode::kInternal,
                              "cannot draw a tunnel key: " + ok.error().message);
  }
  TunnelKey key;
  key.id = id;
  for (const std::byte b : bytes) key.secret_hex += fmt::format("{:02x}", std::to_integer<int>(b));
  bytes.fill(std::byte{0});
  return key;
}

std::string key_fingerprint(std::string_view secret_hex) {
  std::array<unsigned char, 32> bytes{};
  if (!common::decode_hex(secret_hex, bytes.data(), bytes.size())) return "";
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr) != 1) {
    return "";
  }
  std::string out;
  for (unsigned int i = 0; i < 8 && i < length; ++i) out += fmt::format("{:02x}", digest[i]);
  return out;
}

common::Result<TunnelKeys> first_keys() {
  auto key = new_tunnel_key(1);
  if (!key) return std::unexpected(key.error());
  TunnelKeys keys;
  keys.keys.push_back(std::move(*key));
  keys.tx_key = 1;
  return keys;
}

common::Result<bool> start_rotation(TunnelKeys& keys, int64_t now_ns) {
  if (keys.rotation != KeyRotation::kNone || keys.keys.size() != 1) return false;
  const uint8_t id = static_cast<uint8_t>(keys.keys.front().id % 255 + 1);
  auto key = new_tunnel_key(id);
  if (!key) return std::unexpected(key.error());
  keys.keys.push_back(std::move(*key));
  keys.rotation = KeyRotation::kAdding;
  keys.step_unix_ns = now_ns;
  return true;
}

void advance_rotation(TunnelKeys& keys, int64_t now_ns) {
  keys.step_unix_ns = now_ns;
  switch (keys.rotation) {
    case KeyRotation::kNone:
      return;
    case KeyRotation::kAdding:
      keys.tx_key = keys.keys.back().id;
      keys.rotation = KeyRotation::kSwitching;
      return;
    case KeyRotation::kSwitching:
      keys.keys.erase(keys.keys.begin());
      keys.rotation = KeyRotation::kDropping;
      return;
    case KeyRotation::kDropping:
      keys.rotation = KeyRotation::kNone;
      ++keys.rotations;
      return;
  }
}

}  // namespace detwan::control::reservation

#include "control/reservation/tunnel_keys.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>
#include <openssl/evp.h>

#include "common/crypto.h"
#include "common/strings.h"
#include "common/x25519.h"

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

std::string key_context(std::string_view context, uint64_t generation) {
  return fmt::format("{}/gen-{}", context, generation);
}

common::Result<TunnelKeys> x25519_keys(std::string cipher, std::string local_public_key,
                                       std::string remote_public_key, std::string context,
                                       uint32_t key_id) {
  const auto invalid = [](std::string message) {
    return common::make_error(common::ErrorCode::kInvalidArgument, std::move(message));
  };
  if (!is_cipher_name(cipher) || cipher == kNoCipher) {
    return invalid(fmt::format("cipher '{}': expected aes-256-gcm or chacha20-poly1305", cipher));
  }
  if (key_id < 1 || key_id > 255) return invalid(fmt::format("key_id {}: expected 1..255", key_id));
  // The gateway takes 1..255 characters per key context; "/gen-<n>" needs room.
  const bool printable =
      std::all_of(context.begin(), context.end(), [](char c) { return c > 0x20 && c < 0x7f; });
  if (context.empty() || context.size() > 200 || !printable) {
    return invalid(
        fmt::format("context '{}': expected 1..200 printable ASCII characters", context));
  }
  TunnelKeys keys;
  const std::string* given[2] = {&local_public_key, &remote_public_key};
  for (int i = 0; i < 2; ++i) {
    auto parsed = common::crypto::x25519_parse_public(*given[i]);
    if (!parsed) {
      return invalid(
          fmt::format("{} public key: {}", i == 0 ? "local" : "remote", parsed.error().message));
    }
    keys.public_keys[static_cast<size_t>(i)] = common::crypto::x25519_public_base64(*parsed);
  }
  if (keys.public_keys[0] == keys.public_keys[1]) {
    return invalid("local and remote public keys are the same key: a tunnel joins two gateways");
  }
  keys.key_exchange = std::string(kKeyExchangeX25519);
  keys.cipher = std::move(cipher);
  keys.context = std::move(context);
  keys.keys.push_back(TunnelKey{static_cast<uint8_t>(key_id), "", key_context(keys.context, 1)});
  keys.tx_key = static_cast<uint8_t>(key_id);
  return keys;
}

common::Result<bool> start_rotation(TunnelKeys& keys, int64_t now_ns) {
  if (keys.rotation != KeyRotation::kNone || keys.keys.size() != 1) return false;
  const uint8_t id = static_cast<uint8_t>(keys.keys.front().id % 255 + 1);
  if (keys.key_exchange == kKeyExchangeX25519) {
    // The next generation: both gateways derive its secret; nothing to draw or keep here.
    keys.keys.push_back(TunnelKey{id, "", key_context(keys.context, keys.rotations + 2)});
    keys.rotation = KeyRotation::kAdding;
    keys.permitted = KeyRotation::kAdding;
    keys.step_unix_ns = now_ns;
    return true;
  }
  auto key = new_tunnel_key(id);
  if (!key) return std::unexpected(key.error());
  keys.keys.push_back(std::move(*key));
  keys.rotation = KeyRotation::kAdding;
  keys.permitted = KeyRotation::kAdding;
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
      keys.permitted = KeyRotation::kNone;
      ++keys.rotations;
      return;
  }
}

bool may_advance(const TunnelKeys& keys) noexcept {
  if (!keys.paced) return true;
  switch (keys.rotation) {
    case KeyRotation::kNone:
      return false;
    case KeyRotation::kAdding:  // to switching: every end has the new key
      return keys.permitted >= KeyRotation::kSwitching;
    case KeyRotation::kSwitching:  // to dropping: every end seals with the new key
      return keys.permitted >= KeyRotation::kDropping;
    case KeyRotation::kDropping:  // bookkeeping: the old key is gone at this end
      return true;
  }
  return false;
}

}  // namespace detwan::control::reservation

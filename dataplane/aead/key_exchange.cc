// A tunnel's base secret by X25519 + HKDF-SHA256 (key_exchange.h).
#include "dataplane/aead/key_exchange.h"

#include <algorithm>
#include <cstring>

#include <openssl/crypto.h>

#include "common/crypto.h"

namespace detwan::dataplane::aead {
namespace {

void append(std::vector<std::byte>* out, const void* data, std::size_t size) {
  const auto* p = static_cast<const std::byte*>(data);
  out->insert(out->end(), p, p + size);
}

}  // namespace

bool valid_key_context(std::string_view context) noexcept {
  if (context.empty() || context.size() > kMaxKeyContextBytes) return false;
  return std::all_of(context.begin(), context.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

std::vector<std::byte> x25519_tunnel_info(const common::crypto::X25519Key& a,
                                          const common::crypto::X25519Key& b, uint32_t tunnel_id,
                                          Cipher cipher, std::string_view context) {
  const bool a_first = std::memcmp(a.data(), b.data(), a.size()) <= 0;
  const auto& low = a_first ? a : b;
  const auto& high = a_first ? b : a;
  const std::string_view name = to_string(cipher);
  std::vector<std::byte> info;
  info.reserve(64 + 4 + 1 + name.size() + 2 + context.size());
  append(&info, low.data(), low.size());
  append(&info, high.data(), high.size());
  const unsigned char id[4] = {
      static_cast<unsigned char>(tunnel_id >> 24), static_cast<unsigned char>(tunnel_id >> 16),
      static_cast<unsigned char>(tunnel_id >> 8), static_cast<unsigned char>(tunnel_id)};
  append(&info, id, sizeof id);
  const auto name_length = static_cast<unsigned char>(name.size());
  append(&info, &name_length, 1);
  append(&info, name.data(), name.size());
  const unsigned char context_length[2] = {static_cast<unsigned char>(context.size() >> 8),
                                           static_cast<unsigned char>(context.size())};
  append(&info, context_length, sizeof context_length);
  append(&info, context.data(), context.size());
  return info;
}

common::Result<Key> x25519_tunnel_secret(const common::crypto::X25519KeyPair& own,
                                         const common::crypto::X25519Key& peer_public,
                                         uint32_t tunnel_id, Cipher cipher,
                                         std::string_view context) {
  if (!valid_key_context(context)) {
    return common::make_error(common::ErrorCode::kInvalidArgument,
                              "a key context is 1..255 printable ASCII characters, no spaces");
  }
  auto shared = common::crypto::x25519_shared_secret(own.private_key, peer_public);
  if (!shared) return std::unexpected(shared.error());
  const std::vector<std::byte> info =
      x25519_tunnel_info(own.public_key, peer_public, tunnel_id, cipher, context);
  const std::span<const std::byte> salt(reinterpret_cast<const std::byte*>(kX25519Salt),
                                        sizeof kX25519Salt - 1);
  Key secret{};
  auto ok = common::crypto::hkdf_sha256(*shared, salt, info, secret);
  OPENSSL_cleanse(shared->data(), shared->size());
  if (!ok) return std::unexpected(ok.error());
  return secret;
}

}  // namespace detwan::dataplane::aead

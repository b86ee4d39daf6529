// Per-packet AEAD: nonce, seal and open over a tunnel packet in place. No allocation, no
// exceptions, no logging; failures are return values the engine counts.
#include <array>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "common/aead_gcm.h"
#include "dataplane/aead/aead.h"
#include "dataplane/aead/aead_impl.h"
#include "dataplane/wire/byte_order.h"
#include "dataplane/wire/header.h"

namespace detwan::dataplane::aead {

namespace {

auto* uc(std::byte* p) noexcept { return reinterpret_cast<unsigned char*>(p); }
auto* uc(const std::byte* p) noexcept { return reinterpret_cast<const unsigned char*>(p); }

}  // namespace

Nonce packet_nonce(uint32_t session, bool control, uint8_t path_id, uint64_t sequence) noexcept {
  Nonce nonce{};
  wire::store_be32(nonce.data(), session);
  nonce[4] = std::byte{static_cast<uint8_t>((control ? 0x80 : 0) | (path_id & 0x7f))};
  for (int i = 0; i < 7; ++i) {
    nonce[5 + i] = std::byte{static_cast<uint8_t>(sequence >> (8 * (6 - i)))};
  }
  return nonce;
}

bool AeadKey::seal(const Nonce& nonce, std::span<const std::byte> aad, std::span<std::byte> text,
                   std::span<std::byte, kTagBytes> tag) noexcept {
  if (contexts_->gcm != nullptr) {  // intel-ipsec-mb: one call, the key expanded once
    ipsec_mb::seal(contexts_->gcm, nonce, aad.data(), aad.size(), text.data(), text.size(),
                   tag.data());
    return true;
  }
  // The OpenSSL 3 path (common/aead_gcm.h).
  return common::gcm_seal(contexts_->seal, nonce.data(), aad, text, tag.data());
}

bool AeadKey::open(const Nonce& nonce, std::span<const std::byte> aad, std::span<std::byte> text,
                   std::span<const std::byte, kTagBytes> tag, bool restore) noexcept {
  if (contexts_->gcm != nullptr) {
    std::array<std::byte, kTagBytes> computed;
    ipsec_mb::open(contexts_->gcm, nonce, aad.data(), aad.size(), text.data(), text.size(),
                   computed.data());
    if (CRYPTO_memcmp(computed.data(), tag.data(), kTagBytes) == 0) return true;
    if (restore && !text.empty()) {  // the same key stream over it again: the ciphertext
      ipsec_mb::seal(contexts_->gcm, nonce, aad.data(), aad.size(), text.data(), text.size(),
                     computed.data());
    }
    return false;
  }
  bool decrypted = false;  // the text was decrypted in place and the tag did not match
  if (common::gcm_open(contexts_->open, nonce.data(), aad, text, text.data(), tag.data(),
                       &decrypted)) {
    return true;
  }
  int n = 0;
  if (restore && decrypted) {
    EVP_CIPHER_CTX* again = contexts_->seal;
    if (EVP_EncryptInit_ex2(again, nullptr, nullptr, uc(nonce.data()), nullptr) == 1) {
      (void)EVP_EncryptUpdate(again, uc(text.data()), &n, uc(text.data()),
                              static_cast<int>(text.size()));
    }
  }
  return false;
}

namespace {

Nonce nonce_of_header(const std::byte* header) noexcept {
  const auto flags = std::to_integer<uint8_t>(header[wire::kFlagsOffset]);
  return packet_nonce(wire::load_be32(header + wire::kSessionOffset),
                      (flags & wire::kFlagControl) != 0,
                      std::to_integer<uint8_t>(header[wire::kPathIdOffset]),
                      wire::load_be64(header + wire::kSequenceOffset));
}

}  // namespace

std::size_t seal_packet(AeadKey& key, std::span<std::byte> frame,
                        std::size_t plaintext_bytes) noexcept {
  const std::size_t total = wire::kHeaderSize + plaintext_bytes + kTagBytes;
  if (frame.size() < total || plaintext_bytes + kTagBytes > wire::kMaxPayloadBytes) return 0;
  std::byte* header = frame.data();
  const auto flags = std::to_integer<uint8_t>(header[wire::kFlagsOffset]);
  if ((flags & wire::kFlagAuth) == 0 || wire::load_be32(header + wire::kSessionOffset) == 0 ||
      wire::load_be64(header + wire::kSequenceOffset) > kMaxSequence) {
    return 0;
  }
  wire::store_be16(header + wire::kPayloadLengthOffset,
                   static_cast<uint16_t>(plaintext_bytes + kTagBytes));
  const std::span<std::byte> text = frame.subspan(wire::kHeaderSize, plaintext_bytes);
  const std::span<std::byte, kTagBytes> tag =
      frame.subspan(wire::kHeaderSize + plaintext_bytes).first<kTagBytes>();
  if (!key.seal(nonce_of_header(header), frame.first(wire::kHeaderSize), text, tag)) return 0;
  return total;
}

std::optional<std::size_t> open_packet(AeadKey& key, std::span<std::byte> datagram,
                                       bool restore) noexcept {
  if (datagram.size() < wire::kHeaderSize + kTagBytes) return std::nullopt;
  const std::size_t plaintext_bytes = datagram.size() - wire::kHeaderSize - kTagBytes;
  const std::span<std::byte> text = datagram.subspan(wire::kHeaderSize, plaintext_bytes);
  const std::span<const std::byte, kTagBytes> tag =
      datagram.subspan(wire::kHeaderSize + plaintext_bytes).first<kTagBytes>();
  if (!key.open(nonce_of_header(datagram.data()), datagram.first(wire::kHeaderSize), text, tag,
                restore)) {
    return std::nullopt;
  }
  return plaintext_bytes;
}

}  // namespace detwan::dataplane::aead

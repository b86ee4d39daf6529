// PacketCipher (transport/crypto/crypto.h) is standard AES-256-GCM whichever library was built
// (intel-ipsec-mb or OpenSSL): a NIST test vector, and tag-only and encrypting seals checked
// against OpenSSL's EVP for random keys, packet numbers and lengths; a flipped bit never opens.
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>

#include "transport/crypto/crypto.h"

namespace detwan::transport::crypto {
namespace {

using Bytes = std::vector<std::byte>;

// OpenSSL's AES-256-GCM with the nonce 4 zero bytes | pn (big-endian).
Tag reference(const Key& key, uint64_t pn, const Bytes& aad, Bytes& text) {
  unsigned char nonce[12] = {};
  for (int i = 0; i < 8; ++i) nonce[4 + i] = static_cast<unsigned char>(pn >> (56 - 8 * i));
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  int n = 0;
  EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr,
                     reinterpret_cast<const unsigned char*>(key.data()), nonce);
  if (!aad.empty()) {
    EVP_EncryptUpdate(ctx, nullptr, &n, reinterpret_cast<const unsigned char*>(aad.data()),
                      static_cast<int>(aad.size()));
  }
  if (!text.empty()) {
    auto* t = reinterpret_cast<unsigned char*>(text.data());
    EVP_EncryptUpdate(ctx, t, &n, t, static_cast<int>(text.size()));
  }
  unsigned char end[16];
  EVP_EncryptFinal_ex(ctx, end, &n);
  Tag tag{};
  EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, tag.data());
  EVP_CIPHER_CTX_free(ctx);
  return tag;
}

TEST(PacketCipher, NistVector) {
  // AES-256-GCM, key and IV zero, 16 zero bytes of plaintext (GCM spec test case 14).
  auto cipher = PacketCipher::create(Key{});
  ASSERT_TRUE(cipher) << cipher.error().message;
  Bytes text(16);
  Tag tag{};
  ASSERT_TRUE(cipher->seal(0, {}, text, tag));
  const unsigned char ct[16] = {0xce, 0xa7, 0x40, 0x3d, 0x4d, 0x60, 0x6b, 0x6e,
                                0x07, 0x4e, 0xc5, 0xd3, 0xba, 0xf3, 0x9d, 0x18};
  const unsigned char expected_tag[16] = {0xd0, 0xd1, 0xc8, 0xa7, 0x99, 0x99, 0x6b, 0xf0,
                                          0x26, 0x5b, 0x98, 0xb5, 0xd4, 0x8a, 0xb9, 0x19};
  EXPECT_EQ(std::memcmp(text.data(), ct, 16), 0);
  EXPECT_EQ(std::memcmp(tag.data(), expected_tag, 16), 0);
  Bytes plain(16);
  EXPECT_TRUE(cipher->open(0, {}, text, plain, tag));
  EXPECT_EQ(plain, Bytes(16));
}

TEST(PacketCipher, MatchesOpenSslAndRefusesAnyFlippedBit) {
  std::mt19937_64 random(7);
  for (int round = 0; round < 200; ++round) {
    Key key{};
    for (auto& b : key) b = static_cast<std::byte>(random());
    auto cipher = PacketCipher::create(key);
    ASSERT_TRUE(cipher);
    const uint64_t pn = random() >> (random() % 64);
    Bytes aad(random() % 1500), text(round % 2 == 0 ? 0 : random() % 1500);
    for (auto& b : aad) b = static_cast<std::byte>(random());
    for (auto& b : text) b = static_cast<std::byte>(random());
    Bytes expected_text = text;
    const Tag expected = reference(key, pn, aad, expected_text);
    Tag tag{};
    Bytes sealed = text;
    ASSERT_TRUE(cipher->seal(pn, aad, sealed, tag));
    EXPECT_EQ(tag, expected) << PacketCipher::implementation() << " round " << round;
    EXPECT_EQ(sealed, expected_text);
    Bytes plain(sealed.size());
    EXPECT_TRUE(cipher->open(pn, aad, sealed, plain, tag));
    EXPECT_EQ(plain, text);
    EXPECT_FALSE(cipher->open(pn + 1, aad, sealed, plain, tag));
    if (!aad.empty()) {
      Bytes bad = aad;
      bad[random() % bad.size()] ^= std::byte{0x10};
      EXPECT_FALSE(cipher->open(pn, bad, sealed, plain, tag));
    }
    Tag bad_tag = tag;
    bad_tag[random() % 16] ^= std::byte{0x01};
    EXPECT_FALSE(cipher->open(pn, aad, sealed, plain, bad_tag));
  }
}

}  // namespace
}  // namespace detwan::transport::crypto

// Tunnel AEAD (dataplane/aead): the published test vectors through our wrapper of OpenSSL, the
// nonce layout of docs/wire-format.md, and whole packets: sealed, opened, and refused when any
// byte of header, ciphertext or tag changes, under another key, or truncated.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "dataplane/aead/aead.h"
#include "dataplane/wire/header.h"

namespace detwan::dataplane::aead {
namespace {

using Bytes = std::vector<std::byte>;

Bytes hex(std::string_view text) {
  Bytes out;
  for (std::size_t i = 0; i + 1 < text.size(); i += 2) {
    out.push_back(static_cast<std::byte>(std::stoi(std::string(text.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

Key key_of(std::string_view text) {
  const auto key = key_from_hex(text);
  EXPECT_TRUE(key.has_value());
  return key.value_or(Key{});
}

Nonce nonce_of(const Bytes& b) {
  Nonce n{};
  std::copy(b.begin(), b.end(), n.begin());
  return n;
}

struct Vector {
  Cipher cipher;
  const char* key;
  const char* nonce;
  const char* aad;
  std::string plaintext;  // hex
  const char* ciphertext;
  const char* tag;
};

std::string hex_of(std::string_view text) {
  std::string out;
  char two[3];
  for (const char c : text) {
    std::snprintf(two, sizeof two, "%02x", static_cast<unsigned char>(c));
    out += two;
  }
  return out;
}

// RFC 8439 section 2.8.2, and test case 16 of the GCM specification (McGrew & Viega), the
// 256-bit key case of NIST's GCM validation.
std::vector<Vector> vectors() {
  return {
      {Cipher::kChacha20Poly1305,
       "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f",
       "070000004041424344454647", "50515253c0c1c2c3c4c5c6c7",
       hex_of("Ladies and Gentlemen of the class of '99: If I could offer you only one tip for "
              "the future, sunscreen would be it."),
       "d31a8d34648e60db7b86afbc53ef7ec2a4aded51296e08fea9e2b5a736ee62d63dbea45e8ca9671282fafb"
       "69da92728b1a71de0a9e060b2905d6a5b67ecd3b3692ddbd7f2d778b8c9803aee328091b58fab324e4fad6"
       "75945585808b4831d7bc3ff4def08e4b7a9de576d26586cec64b6116",
       "1ae10b594f09e26a7e902ecbd0600691"},
      {Cipher::kAes256Gcm, "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308",
       "cafebabefacedbaddecaf888", "feedfacedeadbeeffeedfacedeadbeefabaddad2",
       "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e24"
       "49a6b525b16aedf5aa0de657ba637b39",
       "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b10"
       "56828838c5f61e6393ba7a0abcc9f662",
       "76fc6ece0f4e1768cddf8853bb2d551b"},
  };
}

// The backends this build can run for `cipher` (intel-ipsec-mb: AES-256-GCM, where built in).
std::vector<Backend> backends_for(Cipher cipher) {
  std::vector<Backend> out{Backend::kOpenssl};
  if (cipher == Cipher::kAes256Gcm && ipsec_mb_available()) out.push_back(Backend::kIpsecMb);
  return out;
}

TEST(Aead, PublishedTestVectors) {
  for (const Vector& v : vectors()) {
   for (const Backend backend : backends_for(v.cipher)) {
    SCOPED_TRACE(std::string(to_string(v.cipher)) + " on " + std::string(to_string(backend)));
    auto key = AeadKey::create(v.cipher, key_of(v.key), backend);
    ASSERT_TRUE(key.has_value()) << key.error().message;
    EXPECT_EQ(key->backend(), backend);
    Bytes text = hex(v.plaintext);
    std::array<std::byte, kTagBytes> tag{};
    ASSERT_TRUE(key->seal(nonce_of(hex(v.nonce)), hex(v.aad), text, tag));
    EXPECT_EQ(text, hex(v.ciphertext));
    EXPECT_EQ(Bytes(tag.begin(), tag.end()), hex(v.tag));
    ASSERT_TRUE(key->open(nonce_of(hex(v.nonce)), hex(v.aad), text, tag));
    EXPECT_EQ(text, hex(v.plaintext));
   }
  }
}

TEST(Aead, BackendsAreNamedAndChosen) {
  EXPECT_EQ(backend_from_string("openssl"), Backend::kOpenssl);
  EXPECT_EQ(backend_from_string("intel-ipsec-mb"), Backend::kIpsecMb);
  EXPECT_EQ(backend_from_string("auto"), Backend::kAuto);
  EXPECT_FALSE(backend_from_string("aesni").has_value());
  const Key k = key_of(std::string(64, '3'));
  // ChaCha20 is OpenSSL's whatever is asked for by default; intel-ipsec-mb by name is refused.
  EXPECT_EQ(AeadKey::create(Cipher::kChacha20Poly1305, k)->backend(), Backend::kOpenssl);
  auto chacha_mb = AeadKey::create(Cipher::kChacha20Poly1305, k, Backend::kIpsecMb);
  ASSERT_FALSE(chacha_mb.has_value());
  EXPECT_NE(chacha_mb.error().message.find("aes-256-gcm only"), std::string::npos);
  // AES-256-GCM by default: intel-ipsec-mb where built in.
  EXPECT_EQ(AeadKey::create(Cipher::kAes256Gcm, k)->backend(),
            ipsec_mb_available() ? Backend::kIpsecMb : Backend::kOpenssl);
  if (!ipsec_mb_available()) {
    auto refused = AeadKey::create(Cipher::kAes256Gcm, k, Backend::kIpsecMb);
    ASSERT_FALSE(refused.has_value());
    EXPECT_NE(refused.error().message.find("not built in"), std::string::npos);
  }
}

TEST(Aead, TheTwoAesBackendsSealAlikeAndOpenEachOthersPackets) {
  if (!ipsec_mb_available()) GTEST_SKIP() << "intel-ipsec-mb not built in (libipsec-mb-dev)";
  const Key k = key_of(std::string(64, '4'));
  auto evp = AeadKey::create(Cipher::kAes256Gcm, k, Backend::kOpenssl);
  auto mb = AeadKey::create(Cipher::kAes256Gcm, k, Backend::kIpsecMb);
  ASSERT_TRUE(evp.has_value() && mb.has_value());
  for (const std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{18},
                                  std::size_t{255}, std::size_t{1380}}) {
    SCOPED_TRACE(bytes);
    Bytes a(wire::kHeaderSize + bytes + kTagBytes);
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::byte>(i * 13 + bytes);
    Bytes b = a;
    const Nonce n = packet_nonce(77, false, 0, bytes);
    const std::span<std::byte> aad_a(a.data(), wire::kHeaderSize);
    const std::span<std::byte> aad_b(b.data(), wire::kHeaderSize);
    std::array<std::byte, kTagBytes> tag_a{}, tag_b{};
    ASSERT_TRUE(evp->seal(n, aad_a, std::span(a).subspan(wire::kHeaderSize, bytes), tag_a));
    ASSERT_TRUE(mb->seal(n, aad_b, std::span(b).subspan(wire::kHeaderSize, bytes), tag_b));
    EXPECT_EQ(a, b);
    EXPECT_EQ(tag_a, tag_b);
    ASSERT_TRUE(mb->open(n, aad_a, std::span(a).subspan(wire::kHeaderSize, bytes), tag_a));
    ASSERT_TRUE(evp->open(n, aad_b, std::span(b).subspan(wire::kHeaderSize, bytes), tag_b));
    EXPECT_EQ(a, b);
  }
}

TEST(Aead, NonceLayout) {
  const Nonce n = packet_nonce(0x01020304, true, 1, 0xAABBCCDDEEFF1122ull);
  EXPECT_EQ(Bytes(n.begin(), n.end()), hex("0102030481bbccddeeff1122"));
  const Nonce d = packet_nonce(0x01020304, false, 0, 5);
  EXPECT_EQ(Bytes(d.begin(), d.end()), hex("010203040000000000000005"));
}

TEST(Aead, KeysAndNames) {
  EXPECT_FALSE(key_from_hex("00").has_value());
  EXPECT_FALSE(key_from_hex(std::string(63, 'a') + "g").has_value());
  EXPECT_TRUE(key_from_hex(std::string(64, 'A')).has_value());
  const Key k = key_of(std::string(64, '1'));
  EXPECT_EQ(fingerprint(k).size(), 16u);
  EXPECT_EQ(fingerprint(k), fingerprint(k));
  EXPECT_NE(fingerprint(k), fingerprint(key_of(std::string(64, '2'))));
  EXPECT_EQ(cipher_from_string("aes-256-gcm"), Cipher::kAes256Gcm);
  EXPECT_EQ(cipher_from_string("chacha20-poly1305"), Cipher::kChacha20Poly1305);
  EXPECT_FALSE(cipher_from_string("aes-128-gcm").has_value());
}

// A data packet with flag A: header + payload + room for the tag.
Bytes plain_packet(std::size_t payload_bytes, uint32_t session = 0x5EED, uint8_t path = 0) {
  wire::TunnelHeader h;
  h.flags = wire::kFlagData | wire::kFlagAuth;
  h.tunnel_id = 7;
  h.path_id = path;
  h.sequence = 42;
  h.tx_time_ns = 1'000;
  h.session = session;
  h.payload_length = static_cast<uint16_t>(payload_bytes);
  Bytes b(wire::kHeaderSize + payload_bytes + kTagBytes);
  EXPECT_EQ(wire::encode(h, b).status, wire::EncodeStatus::kOk);
  for (std::size_t i = 0; i < payload_bytes; ++i) {
    b[wire::kHeaderSize + i] = static_cast<std::byte>(i * 7 + 1);
  }
  return b;
}

struct Setting {
  Cipher cipher;
  Backend backend;
};

class AeadPacket : public ::testing::TestWithParam<Setting> {
 protected:
  void SetUp() override {
    if (GetParam().backend == Backend::kIpsecMb && !ipsec_mb_available()) {
      GTEST_SKIP() << "intel-ipsec-mb not built in (libipsec-mb-dev)";
    }
  }
  static common::Result<AeadKey> create_key(const Key& key) {
    return AeadKey::create(GetParam().cipher, key, GetParam().backend);
  }
};

TEST_P(AeadPacket, SealOpenAndEveryChangedByteIsRefused) {
  auto key = create_key(key_of(std::string(64, 'c')));
  ASSERT_TRUE(key.has_value());
  const Bytes plain = plain_packet(100);
  Bytes sealed = plain;
  ASSERT_EQ(seal_packet(*key, sealed, 100), plain.size());
  // The header is authenticated, not encrypted; payload_length now counts the tag.
  const auto decoded = wire::decode(sealed);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->header.payload_length, 100 + kTagBytes);
  EXPECT_NE(Bytes(sealed.begin() + wire::kHeaderSize, sealed.begin() + wire::kHeaderSize + 100),
            Bytes(plain.begin() + wire::kHeaderSize, plain.begin() + wire::kHeaderSize + 100));
  {
    Bytes copy = sealed;
    ASSERT_EQ(open_packet(*key, copy), std::optional<std::size_t>(100));
    EXPECT_TRUE(std::equal(copy.begin() + wire::kHeaderSize,
                           copy.begin() + wire::kHeaderSize + 100,
                           plain.begin() + wire::kHeaderSize));
  }
  // Any bit of any byte, header (associated data), ciphertext or tag: refused.
  for (std::size_t i = 0; i < sealed.size(); ++i) {
    Bytes copy = sealed;
    copy[i] ^= std::byte{0x01};
    EXPECT_FALSE(open_packet(*key, copy).has_value()) << "byte " << i;
  }
  // Another key, truncation.
  auto other = create_key(key_of(std::string(64, 'd')));
  ASSERT_TRUE(other.has_value());
  Bytes copy = sealed;
  EXPECT_FALSE(open_packet(*other, copy).has_value());
  copy = sealed;
  copy.resize(wire::kHeaderSize + kTagBytes - 1);
  EXPECT_FALSE(open_packet(*key, copy).has_value());
}

TEST_P(AeadPacket, AFailedOpenWithRestoreLeavesTheBytesForTheNextKey) {
  auto right = create_key(key_of(std::string(64, 'e')));
  auto wrong = create_key(key_of(std::string(64, 'f')));
  ASSERT_TRUE(right.has_value() && wrong.has_value());
  Bytes sealed = plain_packet(300);
  ASSERT_NE(seal_packet(*right, sealed, 300), 0u);
  Bytes copy = sealed;
  EXPECT_FALSE(open_packet(*wrong, copy, true).has_value());
  EXPECT_EQ(copy, sealed);
  EXPECT_TRUE(open_packet(*right, copy).has_value());
}

TEST_P(AeadPacket, TheTwoCopiesOfAProtectedPacketUseDifferentNonces) {
  auto key = create_key(key_of(std::string(64, 'a')));
  ASSERT_TRUE(key.has_value());
  Bytes primary = plain_packet(64, 9, 0);
  Bytes copy = plain_packet(64, 9, 1);
  ASSERT_NE(seal_packet(*key, primary, 64), 0u);
  ASSERT_NE(seal_packet(*key, copy, 64), 0u);
  // Same plaintext and sequence: a repeated nonce would give the same key stream.
  EXPECT_NE(Bytes(primary.begin() + wire::kHeaderSize, primary.end()),
            Bytes(copy.begin() + wire::kHeaderSize, copy.end()));
}

TEST_P(AeadPacket, SealRefusesWhatWouldBreakTheNonceRules) {
  auto key = create_key(key_of(std::string(64, 'b')));
  ASSERT_TRUE(key.has_value());
  Bytes no_room = plain_packet(10);
  no_room.resize(wire::kHeaderSize + 10 + kTagBytes - 1);
  EXPECT_EQ(seal_packet(*key, no_room, 10), 0u);
  Bytes no_flag = plain_packet(10);
  no_flag[wire::kFlagsOffset] = std::byte{wire::kFlagData};
  EXPECT_EQ(seal_packet(*key, no_flag, 10), 0u);
  Bytes high = plain_packet(10);
  for (int i = 0; i < 8; ++i) high[wire::kSequenceOffset + i] = std::byte{0xFF};
  EXPECT_EQ(seal_packet(*key, high, 10), 0u);  // beyond 2^56: a new session is needed
}

INSTANTIATE_TEST_SUITE_P(Ciphers, AeadPacket,
                         ::testing::Values(Setting{Cipher::kAes256Gcm, Backend::kOpenssl},
                                           Setting{Cipher::kAes256Gcm, Backend::kIpsecMb},
                                           Setting{Cipher::kChacha20Poly1305, Backend::kOpenssl}),
                         [](const auto& info) {
                           const bool aes = info.param.cipher == Cipher::kAes256Gcm;
                           return std::string(aes ? "aes256gcm_" : "chacha20_") +
                                  (info.param.backend == Backend::kIpsecMb ? "ipsec_mb"
                                                                           : "openssl");
                         });

}  // namespace
}  // namespace detwan::dataplane::aead

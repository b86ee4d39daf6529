// X25519 identity keys and a tunnel's base secret by key exchange (common/x25519.h,
// dataplane/aead/key_exchange.h): RFC 7748's test vectors, the stock `openssl genpkey` PEM, both
// ends deriving the same secret from each other's public keys, a wrong peer key giving another,
// small-order peer keys refused, and the HKDF layout of docs/wire-format.md checked against an
// independent computation (Python's hmac, for the RFC 7748 key pairs).
#include "dataplane/aead/key_exchange.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/x25519.h"
#include "dataplane/aead/aead.h"

namespace detwan::dataplane::aead {
namespace {

using common::crypto::X25519Key;
using common::crypto::X25519KeyPair;
using ::testing::HasSubstr;

X25519Key key_hex(std::string_view hex) {
  const auto key = key_from_hex(hex);
  EXPECT_TRUE(key.has_value()) << hex;
  return key.value_or(Key{});
}

// RFC 7748 section 6.1.
const X25519KeyPair kAlice{
    key_hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a"),
    key_hex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a")};
const X25519KeyPair kBob{
    key_hex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb"),
    key_hex("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f")};

// Written by `openssl genpkey -algorithm X25519` (OpenSSL 3.0); its public key from
// `openssl pkey -pubout` and `-text`.
constexpr char kStockPem[] =
    "-----BEGIN PRIVATE KEY-----\n"
    "MC4CAQAwBQYDK2VuBCIEICDMmFdBRJjffoUjOFxFSsuOYQYE0Qw80Yt79rXc43pq\n"
    "-----END PRIVATE KEY-----\n";
constexpr char kStockPublicPem[] =
    "-----BEGIN PUBLIC KEY-----\n"
    "MCowBQYDK2VuAyEAWopQhwaoCHPG8obqZnK16V7Z6/H51T0Qj1/y8hWAXjA=\n"
    "-----END PUBLIC KEY-----\n";
constexpr char kStockPublicBase64[] = "WopQhwaoCHPG8obqZnK16V7Z6/H51T0Qj1/y8hWAXjA=";

TEST(X25519, Rfc7748SharedSecretBothWays) {
  const auto ab = common::crypto::x25519_shared_secret(kAlice.private_key, kBob.public_key);
  const auto ba = common::crypto::x25519_shared_secret(kBob.private_key, kAlice.public_key);
  ASSERT_TRUE(ab.has_value()) << ab.error().message;
  ASSERT_TRUE(ba.has_value()) << ba.error().message;
  EXPECT_EQ(*ab, key_hex("4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742"));
  EXPECT_EQ(*ab, *ba);
}

TEST(X25519, StockOpensslPemLoadsAndPublicKeyFormatsAgree) {
  const auto pair = common::crypto::x25519_from_private_pem(kStockPem);
  ASSERT_TRUE(pair.has_value()) << pair.error().message;
  EXPECT_EQ(common::crypto::x25519_public_base64(pair->public_key), kStockPublicBase64);
  const auto from_pem = common::crypto::x25519_parse_public(kStockPublicPem);
  const auto from_b64 =
      common::crypto::x25519_parse_public(std::string(" ") + kStockPublicBase64 + "\n");
  ASSERT_TRUE(from_pem.has_value()) << from_pem.error().message;
  ASSERT_TRUE(from_b64.has_value()) << from_b64.error().message;
  EXPECT_EQ(*from_pem, pair->public_key);
  EXPECT_EQ(*from_b64, pair->public_key);
}

TEST(X25519, GeneratedKeysRoundTripThroughPem) {
  const auto pair = common::crypto::x25519_generate();
  ASSERT_TRUE(pair.has_value());
  const auto pem = common::crypto::x25519_private_pem(pair->private_key);
  ASSERT_TRUE(pem.has_value());
  EXPECT_THAT(*pem, HasSubstr("-----BEGIN PRIVATE KEY-----"));
  const auto back = common::crypto::x25519_from_private_pem(*pem);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, *pair);
  const auto other = common::crypto::x25519_generate();
  ASSERT_TRUE(other.has_value());
  EXPECT_NE(other->public_key, pair->public_key);
}

TEST(X25519, MalformedKeysAreRefusedSayingWhatIsExpected) {
  for (const std::string text :
       {"", "abc", "WopQhwaoCHPG8obqZnK16V7Z6/H51T0Qj1/y8hWAXjA",  // 43: no padding
        "WopQhwaoCHPG8obqZnK16V7Z6/H51T0Qj1/y8hWAXjB=",            // padding bits set
        "WopQhwaoCHPG8obqZnK16V7Z6/H51T0Qj1/y8hWAX*A=", "-----BEGIN PUBLIC KEY-----\nxx\n"}) {
    const auto key = common::crypto::x25519_parse_public(text);
    ASSERT_FALSE(key.has_value()) << text;
    EXPECT_EQ(key.error().code, common::ErrorCode::kInvalidArgument);
  }
  EXPECT_THAT(common::crypto::x25519_parse_public("abc").error().message,
              HasSubstr("base64 of 32 bytes"));
  // An Ed25519 key is not an X25519 key.
  const auto ed = common::crypto::x25519_from_private_pem(
      "-----BEGIN PRIVATE KEY-----\n"
      "MC4CAQAwBQYDK2VwBCIEIAdG+DdMCzwJXHB/EbJKgv61xy1M9QKL2ahPX+zd3WbQ\n"
      "-----END PRIVATE KEY-----\n");
  ASSERT_FALSE(ed.has_value());
  EXPECT_THAT(ed.error().message, HasSubstr("expected an X25519 key"));
  EXPECT_FALSE(common::crypto::x25519_from_private_pem("not a key").has_value());
}

TEST(KeyExchange, BothEndsDeriveTheSameSecretAndOnlyThey) {
  const auto at_a =
      x25519_tunnel_secret(kAlice, kBob.public_key, 7, Cipher::kAes256Gcm, "r-1/gen-1");
  const auto at_b =
      x25519_tunnel_secret(kBob, kAlice.public_key, 7, Cipher::kAes256Gcm, "r-1/gen-1");
  ASSERT_TRUE(at_a.has_value()) << at_a.error().message;
  ASSERT_TRUE(at_b.has_value()) << at_b.error().message;
  EXPECT_EQ(*at_a, *at_b);
  // docs/wire-format.md "Base secret by X25519", computed independently (Python hmac/hashlib).
  EXPECT_EQ(*at_a, key_hex("2a403b9ba2374da7767d915f6fba378e5dd5071bd1646924316f57127f0bcbca"));
  // Every input is bound: tunnel, cipher, context, and the peer's key.
  const auto other = [&](uint32_t tunnel, Cipher cipher, std::string_view context,
                         const X25519Key& peer) {
    const auto s = x25519_tunnel_secret(kAlice, peer, tunnel, cipher, context);
    EXPECT_TRUE(s.has_value());
    return s.value_or(Key{});
  };
  EXPECT_NE(other(8, Cipher::kAes256Gcm, "r-1/gen-1", kBob.public_key), *at_a);
  EXPECT_NE(other(7, Cipher::kChacha20Poly1305, "r-1/gen-1", kBob.public_key), *at_a);
  EXPECT_NE(other(7, Cipher::kAes256Gcm, "r-1/gen-2", kBob.public_key), *at_a);
  const auto mallory = common::crypto::x25519_generate();
  ASSERT_TRUE(mallory.has_value());
  EXPECT_NE(other(7, Cipher::kAes256Gcm, "r-1/gen-1", mallory->public_key), *at_a);
  // Mallory, holding both public keys and her own private key, gets neither end's secret.
  const auto by_mallory =
      x25519_tunnel_secret(*mallory, kBob.public_key, 7, Cipher::kAes256Gcm, "r-1/gen-1");
  ASSERT_TRUE(by_mallory.has_value());
  EXPECT_NE(*by_mallory, *at_a);
}

TEST(KeyExchange, InfoLayoutIsCanonicalWhicheverEndComputesIt) {
  const auto ab = x25519_tunnel_info(kAlice.public_key, kBob.public_key, 0x01020304,
                                     Cipher::kChacha20Poly1305, "ctx");
  const auto ba = x25519_tunnel_info(kBob.public_key, kAlice.public_key, 0x01020304,
                                     Cipher::kChacha20Poly1305, "ctx");
  EXPECT_EQ(ab, ba);
  ASSERT_EQ(ab.size(), 32u + 32u + 4u + 1u + 17u + 2u + 3u);
  EXPECT_EQ(ab[0], kAlice.public_key[0]);  // 0x85 < 0xde: Alice's key first
  EXPECT_EQ(ab[32], kBob.public_key[0]);
  EXPECT_EQ(ab[64], std::byte{1});
  EXPECT_EQ(ab[67], std::byte{4});
  EXPECT_EQ(ab[68], std::byte{17});  // "chacha20-poly1305"
  EXPECT_EQ(ab[69], std::byte{'c'});
  EXPECT_EQ(ab[86], std::byte{0});
  EXPECT_EQ(ab[87], std::byte{3});
  EXPECT_EQ(ab[88], std::byte{'c'});
}

TEST(KeyExchange, SmallOrderPeerKeysAreRefused) {
  // The all-zero point and u = 1 have small order: the shared secret would be all zero.
  X25519Key zero{};
  X25519Key one{};
  one[0] = std::byte{1};
  // u = 325606250916557431795983626356110631294008115727848805560023387167927233504 (order 8).
  const X25519Key order8 =
      key_hex("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800");
  for (const X25519Key& peer : {zero, one, order8}) {
    const auto secret = x25519_tunnel_secret(kAlice, peer, 7, Cipher::kAes256Gcm, "r-1/gen-1");
    ASSERT_FALSE(secret.has_value());
    EXPECT_EQ(secret.error().code, common::ErrorCode::kInvalidArgument);
    EXPECT_THAT(secret.error().message, HasSubstr("small-order point"));
    EXPECT_THAT(secret.error().message, HasSubstr(common::crypto::x25519_public_base64(peer)));
  }
}

TEST(KeyExchange, ContextsAreBoundedPrintableAscii) {
  EXPECT_TRUE(valid_key_context("f-12/aggregator-domain/gen-3"));
  EXPECT_FALSE(valid_key_context(""));
  EXPECT_FALSE(valid_key_context("has space"));
  EXPECT_FALSE(valid_key_context(std::string(256, 'x')));
  EXPECT_TRUE(valid_key_context(std::string(255, 'x')));
  EXPECT_FALSE(x25519_tunnel_secret(kAlice, kBob.public_key, 7, Cipher::kAes256Gcm, "a\nb"));
}

}  // namespace
}  // namespace detwan::dataplane::aead

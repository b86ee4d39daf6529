// common/crypto.h against published test vectors: HKDF-SHA256 (RFC 5869, A.1), HMAC-SHA256
// (RFC 4231, test case 2, fed in two parts), the constant-time compare and the CSPRNG.
#include "common/crypto.h"

#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace detwan::common::crypto {
namespace {

std::vector<std::byte> hex(const std::string& text) {
  std::vector<std::byte> out;
  for (std::size_t i = 0; i + 1 < text.size(); i += 2) {
    out.push_back(static_cast<std::byte>(std::stoi(text.substr(i, 2), nullptr, 16)));
  }
  return out;
}

std::span<const std::byte> bytes(const std::string& text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

TEST(CommonCrypto, HkdfSha256MatchesRfc5869CaseOne) {
  const auto ikm = hex("0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b");
  const auto salt = hex("000102030405060708090a0b0c");
  const auto info = hex("f0f1f2f3f4f5f6f7f8f9");
  std::vector<std::byte> okm(42);
  ASSERT_TRUE(hkdf_sha256(ikm, salt, info, okm).has_value());
  EXPECT_EQ(okm, hex("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5"
                     "b887185865"));
}

TEST(CommonCrypto, HmacSha256MatchesRfc4231CaseTwoWhateverTheParts) {
  const auto expected =
      hex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  const std::string key = "Jefe";
  auto whole = hmac_sha256(bytes(key), {bytes("what do ya want for nothing?")});
  auto split = hmac_sha256(bytes(key), {bytes("what do ya "), bytes("want for nothing?")});
  ASSERT_TRUE(whole.has_value() && split.has_value());
  EXPECT_EQ(std::vector<std::byte>(whole->begin(), whole->end()), expected);
  EXPECT_EQ(*whole, *split);
}

TEST(CommonCrypto, EqualCtComparesContentAndSize) {
  EXPECT_TRUE(equal_ct(bytes("secret"), bytes("secret")));
  EXPECT_FALSE(equal_ct(bytes("secret"), bytes("secreT")));
  EXPECT_FALSE(equal_ct(bytes("secret"), bytes("secrets")));
  EXPECT_TRUE(equal_ct({}, {}));
}

TEST(CommonCrypto, RandomValuesDiffer) {
  std::set<uint64_t> seen;
  for (int i = 0; i < 64; ++i) {
    auto v = random_u64();
    ASSERT_TRUE(v.has_value());
    seen.insert(*v);
  }
  EXPECT_EQ(seen.size(), 64u);  // 64 draws of 64 bits: a repeat would mean a broken generator
  std::vector<std::byte> a(32), b(32);
  ASSERT_TRUE(random_bytes(a).has_value() && random_bytes(b).has_value());
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace detwan::common::crypto

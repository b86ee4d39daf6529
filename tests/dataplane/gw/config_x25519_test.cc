// The gateway's identity key and tunnels keyed by X25519 exchange in the configuration file
// (docs/gateway.md, "Identity key"): the PEM key file is read under the secret-file rules; an
// x25519 `auth:` (one key by `context`, or `keys: [{id, context}]` during a rotation) gets its
// secrets derived at load; every mistake names the line and the field; describe() prints what
// loads again (contexts and the peer key, never a secret) and the gateway's public key.
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/x25519.h"
#include "dataplane/aead/key_exchange.h"
#include "tests/dataplane/gw/config_test_util.h"

namespace detwan::dataplane::gw {
namespace {

using ::testing::HasSubstr;
using testing::load_error;
using testing::load_ok;
using ::testing::Not;

std::string hex_of(const aead::Key& key) {
  std::string out;
  for (const std::byte b : key) out += fmt::format("{:02x}", std::to_integer<int>(b));
  return out;
}

class X25519Config : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/detwan-gw-identity-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    key_file_ = dir_ + "/identity.pem";
    auto own = common::crypto::x25519_generate();
    auto peer = common::crypto::x25519_generate();
    ASSERT_TRUE(own && peer);
    own_ = *own;
    peer_ = *peer;
    std::ofstream(key_file_) << *common::crypto::x25519_private_pem(own_.private_key);
    ASSERT_EQ(::chmod(key_file_.c_str(), 0600), 0);
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  [[nodiscard]] std::string peer_b64() const {
    return common::crypto::x25519_public_base64(peer_.public_key);
  }
  // kBase with an identity section (after line 2) and tunnels 7 and 9 keyed by `auth` (kBase's
  // lines 31 and 38). Lines from 3 on move down by one: tunnel 7's auth is line 32.
  [[nodiscard]] std::string yaml(const std::string& auth, bool identity = true) const {
    std::string text =
        testing::replace_line(testing::replace_line(testing::kBase, 38, auth), 31, auth);
    if (identity) {
      text = testing::replace_line(
          text, 2, "  name: site-a\nidentity: {private_key_file: " + key_file_ + "}");
    }
    return text;
  }
  [[nodiscard]] std::string one_key(const std::string& context = "r-3/gen-1") const {
    return fmt::format(
        "    auth: {{cipher: aes-256-gcm, key_exchange: x25519, peer_public_key: \"{}\", "
        "context: {}, key_id: 4}}",
        peer_b64(), context);
  }
  std::string dir_, key_file_;
  common::crypto::X25519KeyPair own_, peer_;
};

TEST_F(X25519Config, SecretsAreDerivedAtLoadPerTunnel) {
  const GatewayConfig config = load_ok(yaml(one_key()));
  ASSERT_TRUE(config.identity.has_value());
  EXPECT_EQ(config.identity->keys, own_);
  ASSERT_TRUE(config.tunnels[0].auth.has_value());
  const TunnelAuth& auth = *config.tunnels[0].auth;
  ASSERT_EQ(auth.keys.size(), 1u);
  EXPECT_EQ(auth.keys[0].id, 4);
  EXPECT_EQ(auth.tx_key, 4);
  EXPECT_EQ(auth.keys[0].context, "r-3/gen-1");
  EXPECT_EQ(auth.peer_public_key, peer_.public_key);
  // What the far gateway derives with its own private key and this gateway's public key.
  const auto far =
      aead::x25519_tunnel_secret(peer_, own_.public_key, 7, aead::Cipher::kAes256Gcm, "r-3/gen-1");
  ASSERT_TRUE(far.has_value());
  EXPECT_EQ(auth.keys[0].secret, *far);
  // Tunnel 9 shares the context but not the secret (the tunnel id is bound).
  EXPECT_NE(config.tunnels[1].auth->keys[0].secret, *far);
}

TEST_F(X25519Config, TwoKeysDuringARotationAndDescribeLoadsAgain) {
  const std::string auth = fmt::format(
      "    auth: {{key_exchange: x25519, peer_public_key: \"{}\", keys: [{{id: 1, context: "
      "r-3/gen-1}}, {{id: 2, context: r-3/gen-2}}], tx_key: 2}}",
      peer_b64());
  const GatewayConfig config = load_ok(yaml(auth));
  ASSERT_EQ(config.tunnels[0].auth->keys.size(), 2u);
  EXPECT_NE(config.tunnels[0].auth->keys[0].secret, config.tunnels[0].auth->keys[1].secret);
  const std::string text = describe(config);
  EXPECT_THAT(text, HasSubstr("key_exchange: x25519"));
  EXPECT_THAT(text, HasSubstr(peer_b64()));
  EXPECT_THAT(text, HasSubstr(common::crypto::x25519_public_base64(own_.public_key)));
  EXPECT_THAT(text, HasSubstr("context: \"r-3/gen-2\""));
  for (const TunnelKey& key : config.tunnels[0].auth->keys) {
    EXPECT_THAT(text, Not(HasSubstr(hex_of(key.secret))));
  }
  GatewayConfig again = load_ok(text);
  again.source = config.source;
  EXPECT_EQ(again, config);
}

TEST_F(X25519Config, MistakesNameTheLineAndTheField) {
  // No identity: the tunnel's auth line, naming the field and the fix.
  std::string error = load_error(yaml(one_key(), false));
  EXPECT_THAT(error, HasSubstr("gw.yaml:31:"));
  EXPECT_THAT(error, HasSubstr("field 'tunnels[0].auth.key_exchange'"));
  EXPECT_THAT(error, HasSubstr("tunnel 7"));
  EXPECT_THAT(error, HasSubstr("identity"));
  // A small-order peer key.
  const std::string zero = common::crypto::x25519_public_base64(common::crypto::X25519Key{});
  error = load_error(yaml(fmt::format(
      "    auth: {{key_exchange: x25519, peer_public_key: \"{}\", context: c}}", zero)));
  EXPECT_THAT(error, HasSubstr("gw.yaml:32:"));
  EXPECT_THAT(error, HasSubstr("field 'tunnels[0].auth.peer_public_key'"));
  EXPECT_THAT(error, HasSubstr("tunnel 7"));
  EXPECT_THAT(error, HasSubstr("small-order"));
  // Not a key.
  error = load_error(yaml("    auth: {key_exchange: x25519, peer_public_key: abc, context: c}"));
  EXPECT_THAT(error, HasSubstr("gw.yaml:32:"));
  EXPECT_THAT(error, HasSubstr("peer_public_key"));
  EXPECT_THAT(error, HasSubstr("base64 of 32 bytes"));
  // A bad context, an unknown exchange, a secret beside an exchange, exchange fields alone.
  EXPECT_THAT(load_error(yaml(one_key("\"has space\""))), HasSubstr("context"));
  EXPECT_THAT(load_error(yaml("    auth: {key_exchange: dh, context: c}")),
              HasSubstr("'dh' is not a key exchange (x25519)"));
  error = load_error(yaml(fmt::format(
      "    auth: {{key_exchange: x25519, peer_public_key: \"{}\", keys: [{{id: 1, secret: "
      "{}}}]}}",
      peer_b64(), std::string(64, 'a'))));
  EXPECT_THAT(error, HasSubstr("gw.yaml:32:"));
  EXPECT_THAT(error, HasSubstr("secret"));
  EXPECT_THAT(load_error(yaml(
                  "    auth: {context: c, keys: [{id: 1, secret: " + std::string(64, 'a') + "}]}")),
              HasSubstr("only with 'key_exchange: x25519'"));
  EXPECT_THAT(load_error(yaml(fmt::format(
                  "    auth: {{key_exchange: x25519, peer_public_key: \"{}\", keys: [{{id: 1, "
                  "context: a}}, {{id: 2, context: a}}], tx_key: 2}}",
                  peer_b64()))),
              HasSubstr("context 'a' twice"));
}

TEST_F(X25519Config, TheIdentityFileFollowsTheSecretFileRules) {
  ASSERT_EQ(::chmod(key_file_.c_str(), 0644), 0);
  std::string error = load_error(yaml(one_key()));
  EXPECT_THAT(error, HasSubstr("gw.yaml:3:"));
  EXPECT_THAT(error, HasSubstr("identity key file"));
  EXPECT_THAT(error, HasSubstr("mode 0644"));
  ASSERT_EQ(::chmod(key_file_.c_str(), 0600), 0);
  std::ofstream(key_file_) << "-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n";
  error = load_error(yaml(one_key()));
  EXPECT_THAT(error, HasSubstr("gw.yaml:3:"));
  EXPECT_THAT(error, HasSubstr("field 'identity.private_key_file'"));
  EXPECT_THAT(error, HasSubstr("genpkey"));
}

TEST_F(X25519Config, ARunTimeApplyDerivesWithTheGatewaysIdentity) {
  const GatewayConfig current = load_ok(yaml(one_key()));
  const std::string item = fmt::format(
      R"({{"id": 7, "peer": "site-b", "rate": "100mbit", "slots": "0-11", "bound": "5ms",
          "match": {{"dst": ["10.20.2.0/24"]}},
          "auth": {{"cipher": "aes-256-gcm", "key_exchange": "x25519", "peer_public_key": "{}",
                    "keys": [{{"id": 4, "context": "r-3/gen-1"}}, {{"id": 5, "context": "r-3/gen-2"}}],
                    "tx_key": 4}}}})",
      peer_b64());
  auto tunnel = parse_tunnel_item(item, "modify[0]");
  ASSERT_TRUE(tunnel.has_value()) << tunnel.error().message;
  EXPECT_EQ(tunnel->auth->keys[1].secret, aead::Key{});  // not derived by the parser
  TunnelChanges changes;
  changes.modify.push_back(*tunnel);
  auto next = apply_tunnel_changes(current, changes);
  ASSERT_TRUE(next.has_value()) << next.error().message;
  const auto far =
      aead::x25519_tunnel_secret(peer_, own_.public_key, 7, aead::Cipher::kAes256Gcm, "r-3/gen-2");
  ASSERT_TRUE(far.has_value());
  EXPECT_EQ(next->tunnels[0].auth->keys[1].secret, *far);
  EXPECT_EQ(next->tunnels[0].auth->keys[0].secret, current.tunnels[0].auth->keys[0].secret);
}

}  // namespace
}  // namespace detwan::dataplane::gw

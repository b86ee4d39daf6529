// Tunnels keyed by X25519 key exchange in virtual time (docs/gateway.md, "Identity key";
// docs/wire-format.md, "Key schedule"): two gateways, each with its own key pair and the other's
// public key, carry sealed traffic both ways; a wrong peer public key opens nothing; a new key
// context goes through the two-step switch of a rotation, applied at run time (the gateway
// derives the new generation's secret itself), without a lost packet; an x25519 tunnel applied
// to a gateway without an identity, or with a small-order peer key, is refused naming the tunnel.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "common/x25519.h"
#include "dataplane/aead/key_exchange.h"
#include "tests/dataplane/gw/engine_sim_util.h"

namespace detwan::dataplane::gw {
namespace {

using common::crypto::X25519Key;
using common::crypto::X25519KeyPair;
using loopback::Delivery;
using ::testing::HasSubstr;
using namespace testing;  // NOLINT(google-build-using-namespace): test helpers

X25519KeyPair new_pair() {
  auto pair = common::crypto::x25519_generate();
  EXPECT_TRUE(pair.has_value());
  return pair.value_or(X25519KeyPair{});
}

// An x25519 auth block as the agent sends it: contexts, no secrets.
TunnelAuth exchanged(const X25519Key& peer, std::vector<std::pair<uint8_t, std::string>> keys,
                     uint8_t tx) {
  TunnelAuth auth;
  auth.cipher = aead::Cipher::kAes256Gcm;
  auth.peer_public_key = peer;
  for (auto& [id, context] : keys) auth.keys.push_back(TunnelKey{id, {}, context});
  auth.tx_key = tx;
  return auth;
}

// Site `site` with its identity, every tunnel keyed by `auth` toward `peer`, secrets derived
// as the configuration loader derives them.
GatewayConfig site_with(int site, const X25519KeyPair& own, const TunnelAuth& auth) {
  SiteOptions o;
  o.peer_clock_offset_ns = 0;
  GatewayConfig config = site_config(site, o);
  config.identity = GatewayIdentity{"/unused", own};
  for (TunnelConfig& t : config.tunnels) {
    t.auth = auth;
    for (TunnelKey& key : t.auth->keys) {
      const auto secret =
          aead::x25519_tunnel_secret(own, *auth.peer_public_key, t.id, auth.cipher, key.context);
      EXPECT_TRUE(secret.has_value());
      key.secret = secret.value_or(aead::Key{});
    }
  }
  return config;
}

std::unique_ptr<loopback::Gateway> pair_of(GatewayConfig a, GatewayConfig b) {
  std::vector<loopback::EngineSpec> specs = {{std::move(a), 0}, {std::move(b), 0}};
  loopback::Options options;
  options.seed = 1;
  options.start_ns = kStartNs;
  auto g = loopback::Gateway::create(std::move(specs), options);
  EXPECT_TRUE(g.has_value()) << g.error().describe();
  if (!g) return nullptr;
  for (uint32_t from = 0; from < 2; ++from) (*g)->set_faults(from, 1 - from, {.delay_ns = 1 * kMs});
  return std::move(*g);
}

boost::json::value tunnel7(loopback::Gateway& g, uint32_t engine) {
  const auto st = boost::json::parse(g.engine(engine).stats_json(g.engine_now_ns(engine)));
  for (const auto& t : st.at("tunnels").as_array()) {
    if (t.at("id").to_number<uint32_t>() == 7) return t;
  }
  ADD_FAILURE() << "no tunnel 7";
  return nullptr;
}

uint64_t auth_drop(loopback::Gateway& g, uint32_t engine, const char* reason) {
  return tunnel7(g, engine).at("auth").at("drops").at(reason).to_number<uint64_t>();
}

struct Sites {
  X25519KeyPair a = new_pair();
  X25519KeyPair b = new_pair();
};

TEST(EngineX25519, BothEndsDeriveTheSameKeysAndTrafficFlowsBothWays) {
  const Sites k;
  auto g = pair_of(site_with(0, k.a, exchanged(k.b.public_key, {{1, "r-1/gen-1"}}, 1)),
                   site_with(1, k.b, exchanged(k.a.public_key, {{1, "r-1/gen-1"}}, 1)));
  ASSERT_NE(g, nullptr);
  // Same base secret at both ends, derived from each other's public keys only.
  EXPECT_EQ(g->engine(0).config().tunnels[0].auth->keys[0].secret,
            g->engine(1).config().tunnels[0].auth->keys[0].secret);
  DeliveryLog at_b, at_a;
  g->set_delivery_observer([&](const Delivery& d) { (d.engine == 1 ? at_b : at_a).add(d); });
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 50e6));
  flows.push_back(flow(1, 1, 80, 2, 20e6));
  drive(*g, flows, kStartNs + 200 * kMs);
  g->run_until(kStartNs + 210 * kMs);
  ASSERT_GT(flows[0].accepted, 500u);
  EXPECT_EQ(at_b.count(1), flows[0].accepted);
  EXPECT_EQ(at_a.count(2), flows[1].accepted);
  EXPECT_EQ(auth_drop(*g, 1, "auth_failed"), 0u);
  EXPECT_TRUE(g->engine(0).peer_status(0).up);
  // The gateway shows its public key and the tunnel's exchange, never the secret.
  const std::string stats = g->engine(1).stats_json(g->engine_now_ns(1));
  EXPECT_THAT(stats, HasSubstr(common::crypto::x25519_public_base64(k.b.public_key)));
  const auto auth = tunnel7(*g, 1).at("auth");
  EXPECT_EQ(auth.at("keys").as_array()[0].at("fingerprint").as_string(),
            aead::fingerprint(g->engine(1).config().tunnels[0].auth->keys[0].secret));
  const auto tunnels = boost::json::parse(g->engine(1).tunnels_json());
  const std::string tunnels_text = boost::json::serialize(tunnels);
  EXPECT_THAT(tunnels_text, HasSubstr("\"key_exchange\":\"x25519\""));
  EXPECT_THAT(tunnels_text, HasSubstr(common::crypto::x25519_public_base64(k.a.public_key)));
  EXPECT_THAT(tunnels_text, HasSubstr("\"context\":\"r-1/gen-1\""));
  EXPECT_EQ(g->bad_frees(), 0u);
}

TEST(EngineX25519, AWrongPeerPublicKeyOpensNothing) {
  const Sites k;
  const X25519KeyPair mallory = new_pair();
  // a believes b's key is mallory's: its keys are not b's, so nothing either sends opens.
  auto g = pair_of(site_with(0, k.a, exchanged(mallory.public_key, {{1, "r-1/gen-1"}}, 1)),
                   site_with(1, k.b, exchanged(k.a.public_key, {{1, "r-1/gen-1"}}, 1)));
  ASSERT_NE(g, nullptr);
  EXPECT_NE(g->engine(0).config().tunnels[0].auth->keys[0].secret,
            g->engine(1).config().tunnels[0].auth->keys[0].secret);
  DeliveryLog delivered;
  g->set_delivery_observer([&](const Delivery& d) { delivered.add(d); });
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 50e6));
  flows.push_back(flow(1, 1, 80, 2, 20e6));
  drive(*g, flows, kStartNs + 200 * kMs);
  g->run_until(kStartNs + 210 * kMs);
  EXPECT_EQ(delivered.count(1) + delivered.count(2), 0u);
  // Their keepalives reach each other and fail to open: no peer epoch, no data key, peer down.
  EXPECT_GT(auth_drop(*g, 1, "auth_failed"), 0u);
  EXPECT_GT(auth_drop(*g, 0, "auth_failed"), 0u);
  EXPECT_FALSE(g->engine(1).peer_status(0).up);
  EXPECT_EQ(g->bad_frees(), 0u);
}

TEST(EngineX25519, ANewGenerationRotatesWithoutLosingAPacket) {
  const Sites k;
  auto g = pair_of(site_with(0, k.a, exchanged(k.b.public_key, {{1, "r-1/gen-1"}}, 1)),
                   site_with(1, k.b, exchanged(k.a.public_key, {{1, "r-1/gen-1"}}, 1)));
  ASSERT_NE(g, nullptr);
  DeliveryLog at_b, at_a;
  g->set_delivery_observer([&](const Delivery& d) { (d.engine == 1 ? at_b : at_a).add(d); });
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 50e6));
  flows.push_back(flow(1, 1, 80, 2, 20e6));
  const X25519Key* peer_of[2] = {&k.b.public_key, &k.a.public_key};
  // The agent's steps (tunnel_keys.h), as the gateways receive them: contexts, no secrets.
  const auto set_keys = [&](uint32_t engine, std::vector<std::pair<uint8_t, std::string>> keys,
                            uint8_t tx) {
    TunnelChanges changes;
    for (const TunnelConfig& t : g->engine(engine).config().tunnels) {
      TunnelConfig next = t;
      next.auth = exchanged(*peer_of[engine], keys, tx);
      changes.modify.push_back(next);
    }
    const auto applied = g->engine(engine).apply_st(changes, g->engine_now_ns(engine));
    ASSERT_TRUE(applied.has_value()) << applied.error().message;
  };
  const aead::Key gen1 = g->engine(0).config().tunnels[0].auth->keys[0].secret;
  drive(*g, flows, kStartNs + 50 * kMs);
  set_keys(0, {{1, "r-1/gen-1"}, {2, "r-1/gen-2"}}, 1);  // adding
  set_keys(1, {{1, "r-1/gen-1"}, {2, "r-1/gen-2"}}, 1);
  drive(*g, flows, kStartNs + 100 * kMs);
  set_keys(1, {{1, "r-1/gen-1"}, {2, "r-1/gen-2"}}, 2);  // switching, one end first
  drive(*g, flows, kStartNs + 130 * kMs);
  set_keys(0, {{1, "r-1/gen-1"}, {2, "r-1/gen-2"}}, 2);
  drive(*g, flows, kStartNs + 200 * kMs);
  set_keys(0, {{2, "r-1/gen-2"}}, 2);  // dropping
  set_keys(1, {{2, "r-1/gen-2"}}, 2);
  drive(*g, flows, kStartNs + 300 * kMs);
  g->run_until(kStartNs + 310 * kMs);
  EXPECT_EQ(at_b.count(1), flows[0].accepted);
  EXPECT_EQ(at_a.count(2), flows[1].accepted);
  EXPECT_EQ(at_b.repeated() + at_a.repeated(), 0u);
  EXPECT_EQ(auth_drop(*g, 1, "auth_failed"), 0u);
  EXPECT_EQ(auth_drop(*g, 0, "auth_failed"), 0u);
  // Each gateway derived generation 2 itself; both got the same secret, not generation 1's.
  const aead::Key a2 = g->engine(0).config().tunnels[0].auth->keys[0].secret;
  EXPECT_EQ(a2, g->engine(1).config().tunnels[0].auth->keys[0].secret);
  EXPECT_NE(a2, gen1);
  EXPECT_NE(a2, aead::Key{});
  const auto keys = tunnel7(*g, 1).at("auth").at("keys").as_array();
  ASSERT_EQ(keys.size(), 1u);
  EXPECT_GT(keys[0].at("opened_packets").to_number<uint64_t>(), 100u);
  EXPECT_EQ(g->bad_frees(), 0u);
}

TEST(EngineX25519, AnApplyWithoutIdentityOrWithASmallOrderKeyIsRefusedNamingTheTunnel) {
  const Sites k;
  auto g = pair_of(site_with(0, k.a, exchanged(k.b.public_key, {{1, "r-1/gen-1"}}, 1)),
                   site_with(1, k.b, exchanged(k.a.public_key, {{1, "r-1/gen-1"}}, 1)));
  ASSERT_NE(g, nullptr);
  TunnelChanges changes;
  TunnelConfig next = g->engine(0).config().tunnels[0];
  next.auth = exchanged(X25519Key{}, {{1, "r-1/gen-1"}}, 1);  // the all-zero point
  changes.modify.push_back(next);
  const auto refused = g->engine(0).apply_st(changes, g->engine_now_ns(0));
  ASSERT_FALSE(refused.has_value());
  EXPECT_THAT(refused.error().message,
              HasSubstr("modify[0] (tunnel 7): field 'auth.peer_public_key'"));
  EXPECT_THAT(refused.error().message, HasSubstr("small-order"));
  // The same change against a configuration without an identity.
  GatewayConfig bare = g->engine(0).config();
  bare.identity.reset();
  next.auth = exchanged(k.b.public_key, {{1, "r-1/gen-2"}}, 1);
  changes.modify = {next};
  const auto no_identity = apply_tunnel_changes(bare, changes);
  ASSERT_FALSE(no_identity.has_value());
  EXPECT_THAT(no_identity.error().message,
              HasSubstr("modify[0] (tunnel 7): field 'auth.key_exchange'"));
  EXPECT_THAT(no_identity.error().message, HasSubstr("identity"));
}

}  // namespace
}  // namespace detwan::dataplane::gw

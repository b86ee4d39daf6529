// Keys no agent holds (issue 32, item 5): gateways registered with an X25519 public key
// (topology gateways[].public_key) get tunnels whose auth is a key exchange: each gateway is
// sent the other's public key and a key context, never a secret; the reservation's JSON and
// journal hold only (cipher, key id, context, the two public keys) — the base secret both
// gateways derive is in no byte of the journal's files; a rotation moves to the next
// generation's context in the same steps as a drawn key; a gateway without a public key keeps
// today's drawn secret.
#include <fstream>
#include <iterator>
#include <string>

#include "common/x25519.h"
#include "control/gateway/tunnel_spec.h"
#include "control/reservation/tunnel_keys.h"
#include "dataplane/aead/key_exchange.h"
#include "tests/control/agent/agent_test_util.h"

namespace detwan::control::testing {
namespace {

using json = boost::json::object;
using common::crypto::X25519KeyPair;

X25519KeyPair new_pair() {
  auto pair = common::crypto::x25519_generate();
  EXPECT_TRUE(pair.has_value());
  return pair.value_or(X25519KeyPair{});
}
std::string b64(const X25519KeyPair& pair) {
  return common::crypto::x25519_public_base64(pair.public_key);
}
std::string hex_of(const dataplane::aead::Key& key) {
  std::string out;
  for (const std::byte b : key) out += fmt::format("{:02x}", std::to_integer<int>(b));
  return out;
}
std::string journal_bytes(const std::string& path) {
  std::string bytes;
  for (const std::string& file : {path, path + "-wal", path + "-shm"}) {
    std::ifstream in(file, std::ios::binary);
    bytes.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return bytes;
}

// lab_topology with gw-a and gw-b registered by public key (gw-a's given as PEM); gw-c not.
std::string keyed_topology(const std::string& journal, const X25519KeyPair& a,
                           const X25519KeyPair& b) {
  std::string text = lab_topology(journal);
  const auto add = [&](const std::string& after, const std::string& line) {
    const auto at = text.find(after);
    EXPECT_NE(at, std::string::npos);
    text.insert(at + after.size(), line);
  };
  // The PEM form `openssl pkey -pubout` prints, as a YAML block scalar: the DER is a 12-byte
  // prefix (a multiple of 3: it encodes alone, "MCowBQYDK2VuAyEA") and the 32-byte key.
  const std::string pem = "-----BEGIN PUBLIC KEY-----\n      MCowBQYDK2VuAyEA" + b64(a) +
                          "\n      -----END PUBLIC KEY-----\n";
  add("admin_socket: /fake/gw-a\n", "    public_key: |\n      " + pem);
  add("admin_socket: /fake/gw-b\n", "    public_key: \"" + b64(b) + "\"\n");
  return text;
}

struct X25519AgentFixture : AgentFixture {
  X25519KeyPair gw_a = new_pair(), gw_b = new_pair();
  void SetUp() override {
    // The gateways report the keys they hold (the agent checks them against the topology).
    gateways.with("/fake/gw-a", [&](FakeGateways::Gateway& g) { g.public_key = b64(gw_a); });
    gateways.with("/fake/gw-b", [&](FakeGateways::Gateway& g) { g.public_key = b64(gw_b); });
    open_keyed();
  }
  void open_keyed() {
    agent.reset();
    auto topology = model::load_topology_string(keyed_topology(journal, gw_a, gw_b));
    ASSERT_TRUE(topology.has_value()) << topology.error().message;
    agent::AgentOptions options;
    options.realtime = &realtime;
    options.monotonic = &monotonic;
    options.gateway_client = &gateways;
    options.start_threads = false;
    auto opened = agent::Agent::open(std::move(*topology), options);
    ASSERT_TRUE(opened.has_value()) << opened.error().message;
    agent = std::move(*opened);
  }
  // The base secret gw-a derives for the tunnel (the same as gw-b's: aead key_exchange tests).
  dataplane::aead::Key base_secret(uint32_t tunnel_id, const std::string& context) const {
    const auto secret = dataplane::aead::x25519_tunnel_secret(
        gw_a, gw_b.public_key, tunnel_id, dataplane::aead::Cipher::kAes256Gcm, context);
    EXPECT_TRUE(secret.has_value());
    return secret.value_or(dataplane::aead::Key{});
  }
};

TEST_F(X25519AgentFixture, TopologyKeysAreStoredInTheirBase64Form) {
  // (The PEM in the topology is read back as the same key.)
  auto topology = model::load_topology_string(keyed_topology(journal, gw_a, gw_b));
  ASSERT_TRUE(topology.has_value()) << topology.error().message;
  EXPECT_EQ(topology->gateways[topology->find_gateway("gw-a")].public_key, b64(gw_a));
  EXPECT_EQ(topology->gateways[topology->find_gateway("gw-b")].public_key, b64(gw_b));
  EXPECT_EQ(topology->gateways[topology->find_gateway("gw-c")].public_key, "");
}

TEST_F(X25519AgentFixture, AReservationBetweenKeyedGatewaysSendsPublicKeysNotSecrets) {
  auto r = request("a", "b", 20'000'000);
  r.spec.encrypt = "aes-256-gcm";
  r.provision = true;
  const json reserved = reserve_ok(r);
  agent->reconcile_now();
  const std::string id = id_of(reserved);
  ASSERT_TRUE(active(id));  // both gateways report the auth the agent asked for
  const auto tunnel_id = static_cast<uint32_t>(reserved.at("tunnel_id").to_number<uint64_t>());
  const json& keys = reserved.at("tunnel_keys").as_object();
  EXPECT_EQ(keys.at("key_exchange").as_string(), "x25519");
  EXPECT_EQ(keys.at("public_keys").as_array()[0].as_string(), b64(gw_a));
  EXPECT_EQ(keys.at("public_keys").as_array()[1].as_string(), b64(gw_b));
  const std::string context = id + "/gen-1";
  EXPECT_EQ(keys.at("keys").as_array()[0].at("context").as_string(), context);
  // Each gateway gets the other's public key and the same context.
  const json on_a = tunnel_on("/fake/gw-a", tunnel_id).at("auth").as_object();
  const json on_b = tunnel_on("/fake/gw-b", tunnel_id).at("auth").as_object();
  EXPECT_EQ(on_a.at("peer_public_key").as_string(), b64(gw_b));
  EXPECT_EQ(on_b.at("peer_public_key").as_string(), b64(gw_a));
  EXPECT_EQ(on_a.at("keys"), on_b.at("keys"));
  EXPECT_EQ(on_a.at("key_exchange").as_string(), "x25519");
  // No secret in what the agent shows or journals.
  const dataplane::aead::Key secret = base_secret(tunnel_id, context);
  const std::string view = boost::json::serialize(*agent->get(id));
  EXPECT_EQ(view.find("secret"), std::string::npos);
  EXPECT_EQ(view.find(hex_of(secret)), std::string::npos);
  const std::string bytes = journal_bytes(journal);
  EXPECT_EQ(bytes.find(hex_of(secret)), std::string::npos) << "the base secret (hex) is journaled";
  EXPECT_EQ(bytes.find(std::string(reinterpret_cast<const char*>(secret.data()), secret.size())),
            std::string::npos)
      << "the base secret (bytes) is journaled";
  EXPECT_NE(bytes.find(b64(gw_b)), std::string::npos);  // the scan does see what is there
  // A restarted agent reads the journal back (no secret is not an error here) and keeps it.
  agent.reset();
  open_keyed();
  agent->reconcile_now();
  EXPECT_TRUE(active(id));
  EXPECT_EQ(agent->get(id)->at("tunnel_keys").at("keys").as_array()[0].at("context").as_string(),
            context);
}

TEST_F(X25519AgentFixture, RotationMovesBothGatewaysToTheNextGeneration) {
  auto r = request("a", "b", 20'000'000);
  r.spec.encrypt = "aes-256-gcm";
  r.provision = true;
  const std::string id = id_of(reserve_ok(r));
  agent->reconcile_now();
  const auto tunnel_id =
      static_cast<uint32_t>(agent->get(id)->at("tunnel_id").to_number<uint64_t>());
  const auto contexts_on = [&](const std::string& socket) {
    const json tunnel = tunnel_on(socket, tunnel_id);  // (held: the loop reads into it)
    std::string out;
    for (const auto& key : tunnel.at("auth").at("keys").as_array()) {
      out += std::string(key.at("context").as_string()) + ";";
    }
    return out;
  };
  for (int rotation = 0; rotation < 2; ++rotation) {
    ASSERT_TRUE(agent->rotate_key(id).has_value());
    agent->reconcile_now();  // adding: both hold the old and the new generation
    EXPECT_EQ(contexts_on("/fake/gw-a"),
              fmt::format("{0}/gen-{1};{0}/gen-{2};", id, rotation + 1, rotation + 2));
    EXPECT_EQ(contexts_on("/fake/gw-b"), contexts_on("/fake/gw-a"));
    for (int step = 0; step < 8 && agent->get(id)->at("tunnel_keys").at("rotation") != "none";
         ++step) {
      realtime.advance_ns(2 * kSecond);
      agent->reconcile_now();
    }
    ASSERT_EQ(agent->get(id)->at("tunnel_keys").at("rotation"), "none");
    EXPECT_EQ(contexts_on("/fake/gw-a"), fmt::format("{}/gen-{};", id, rotation + 2));
    EXPECT_EQ(contexts_on("/fake/gw-b"), contexts_on("/fake/gw-a"));
  }
  EXPECT_TRUE(active(id));
  const std::string bytes = journal_bytes(journal);
  for (int generation = 1; generation <= 3; ++generation) {
    const auto secret = base_secret(tunnel_id, fmt::format("{}/gen-{}", id, generation));
    EXPECT_EQ(bytes.find(hex_of(secret)), std::string::npos) << generation;
    EXPECT_EQ(bytes.find(std::string(reinterpret_cast<const char*>(secret.data()), secret.size())),
              std::string::npos)
        << generation;
  }
}

TEST_F(X25519AgentFixture, AGatewayWithoutAPublicKeyKeepsADrawnSecret) {
  auto r = request("a", "c", 1'000'000);
  r.spec.encrypt = "aes-256-gcm";
  r.provision = true;
  const json reserved = reserve_ok(r);
  agent->reconcile_now();
  EXPECT_FALSE(reserved.at("tunnel_keys").as_object().contains("key_exchange"));
  const auto tunnel_id = static_cast<uint32_t>(reserved.at("tunnel_id").to_number<uint64_t>());
  const json on_c = tunnel_on("/fake/gw-c", tunnel_id).at("auth").as_object();
  EXPECT_FALSE(on_c.contains("peer_public_key"));
  EXPECT_EQ(on_c.at("keys").as_array()[0].at("fingerprint").as_string().size(), 16u);
  EXPECT_TRUE(active(id_of(reserved)));
}

TEST_F(X25519AgentFixture, AGatewayReportingAnotherKeyIsAnErrorNamingBothAndIsNotProgrammed) {
  const X25519KeyPair other = new_pair();
  gateways.with("/fake/gw-b", [&](FakeGateways::Gateway& g) { g.public_key = b64(other); });
  auto r = request("a", "b", 20'000'000);
  r.spec.encrypt = "aes-256-gcm";
  r.provision = true;
  const std::string id = id_of(reserve_ok(r));
  agent->reconcile_now();
  EXPECT_FALSE(active(id));
  EXPECT_EQ(tunnels_on("/fake/gw-b"), 0u);
  std::string error;
  const boost::json::object topology = agent->topology_json();  // (held: the loop reads it)
  for (const auto& g : topology.at("gateways").as_array()) {
    if (g.at("name") == "gw-b") error = std::string(g.at("error").as_string());
  }

  EXPECT_NE(error.find(b64(other)), std::string::npos) << error;
  EXPECT_NE(error.find(b64(gw_b)), std::string::npos) << error;
  EXPECT_NE(error.find("gw-b"), std::string::npos) << error;
  // The operator fixes it: programmed on the next pass.
  gateways.with("/fake/gw-b", [&](FakeGateways::Gateway& g) { g.public_key = b64(gw_b); });
  agent->reconcile_now();
  EXPECT_TRUE(active(id));
}

TEST(X25519Topology, ABadPublicKeyNamesTheLineAndField) {
  std::string text = lab_topology("/tmp/unused.db");
  const std::string after = "admin_socket: /fake/gw-b\n";
  text.insert(text.find(after) + after.size(), "    public_key: not-a-key\n");
  const auto topology = model::load_topology_string(text, "topo.yaml");
  ASSERT_FALSE(topology.has_value());
  EXPECT_NE(topology.error().message.find("topo.yaml:"), std::string::npos)
      << topology.error().message;
  EXPECT_NE(topology.error().message.find("public_key"), std::string::npos)
      << topology.error().message;
  EXPECT_NE(topology.error().message.find("base64 of 32 bytes"), std::string::npos);
}

TEST(X25519Keys, TheFederationEntryPointValidatesAndBuildsTheAuth) {
  const X25519KeyPair local = new_pair(), remote = new_pair();
  auto keys = reservation::x25519_keys("chacha20-poly1305", b64(local), b64(remote),
                                       "f-12/aggregator-domain", 3);
  ASSERT_TRUE(keys.has_value()) << keys.error().message;
  EXPECT_EQ(keys->keys.size(), 1u);
  EXPECT_EQ(keys->keys[0].id, 3);
  EXPECT_EQ(keys->keys[0].context, "f-12/aggregator-domain/gen-1");
  EXPECT_EQ(keys->keys[0].secret_hex, "");
  EXPECT_EQ(keys->tx_key, 3);
  // The local gateway (end 0) is sent the remote's key; the request carries no secret.
  gateway::TunnelSpec spec;
  gateway::set_auth(spec, "chacha20-poly1305", *keys, 0);
  const json request = spec.to_request();
  const json& auth = request.at("auth").as_object();
  EXPECT_EQ(auth.at("peer_public_key").as_string(), b64(remote));
  EXPECT_EQ(auth.at("key_exchange").as_string(), "x25519");
  EXPECT_EQ(auth.at("keys").as_array()[0].at("context").as_string(),
            "f-12/aggregator-domain/gen-1");
  EXPECT_FALSE(auth.at("keys").as_array()[0].as_object().contains("secret"));
  // The gateway's own description matches; another context or peer key does not.
  spec.id = 9;
  json shown{{"cipher", "chacha20-poly1305"},
             {"key_exchange", "x25519"},
             {"peer_public_key", b64(remote)},
             {"keys", boost::json::array{json{{"id", 3},
                                              {"fingerprint", "0011223344556677"},
                                              {"context", "f-12/aggregator-domain/gen-1"}}}},
             {"tx_key", 3}};
  json tunnel{{"id", 9},
              {"peer", ""},
              {"owner", ""},
              {"rate_bps", 0},
              {"slots", boost::json::array{}},
              {"burst_bytes", 0},
              {"bound_ns", 0},
              {"max_hold_ns", spec.max_hold_ns},
              {"dscp", spec.dscp},
              {"match", json{{"dst", boost::json::array{}}}},
              {"auth", shown}};
  std::string difference;
  EXPECT_TRUE(spec.matches(tunnel, &difference)) << difference;
  tunnel["auth"].as_object()["keys"].as_array()[0].as_object()["context"] = "f-12/x/gen-1";
  EXPECT_FALSE(spec.matches(tunnel, &difference));
  EXPECT_EQ(difference, "auth");
  tunnel["auth"] = shown;
  tunnel["auth"].as_object()["peer_public_key"] = b64(local);
  EXPECT_FALSE(spec.matches(tunnel, &difference));
  // Refusals name what is wrong.
  const auto refused = [](auto result, const char* what) {
    ASSERT_FALSE(result.has_value()) << what;
    EXPECT_EQ(result.error().code, common::ErrorCode::kInvalidArgument);
    EXPECT_NE(result.error().message.find(what), std::string::npos) << result.error().message;
  };
  refused(reservation::x25519_keys("aes-256-gcm", "nope", b64(remote), "c", 1), "local public key");
  refused(reservation::x25519_keys("aes-256-gcm", b64(local), "nope", "c", 1), "remote public key");
  refused(reservation::x25519_keys("aes-256-gcm", b64(local), b64(local), "c", 1), "the same key");
  refused(reservation::x25519_keys("aes-256-gcm", b64(local), b64(remote), "c", 0), "key_id 0");
  refused(reservation::x25519_keys("none", b64(local), b64(remote), "c", 1), "cipher 'none'");
  refused(reservation::x25519_keys("aes-256-gcm", b64(local), b64(remote), "a b", 1), "context");
  // Rotation: the next generation's context, no secret drawn.
  ASSERT_TRUE(reservation::start_rotation(*keys, 5).value_or(false));
  EXPECT_EQ(keys->keys[1].context, "f-12/aggregator-domain/gen-2");
  EXPECT_EQ(keys->keys[1].secret_hex, "");
  EXPECT_EQ(keys->keys[1].id, 4);
}

}  // namespace
}  // namespace detwan::control::testing

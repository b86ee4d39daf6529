// Keys no single owner draws (issue 32, item 5), across domains: x's gateway and z's gateway
// each registered an X25519 identity key with their own agent; a federated reservation's end
// segments exchange those public keys through the aggregator's commit, and each domain programs
// its own gateway with the far gateway's public key and the aggregate's key context. Neither
// agent (nor the carrier w) ever holds a secret of the tunnel: the two gateways derive the same
// base secret, and it is in no byte of any domain's journal.
#include <fstream>
#include <algorithm>
#include <iterator>
#include <set>
#include <string>

#include "common/x25519.h"
#include "control/federation/segments.h"
#include "dataplane/aead/key_exchange.h"
#include "tests/control/federation/federation_harness.h"

namespace detwan::control::testing {
namespace {

namespace json = boost::json;
using common::crypto::X25519KeyPair;

X25519KeyPair new_pair() {
  auto pair = common::crypto::x25519_generate();
  EXPECT_TRUE(pair.has_value());
  return pair.value_or(X25519KeyPair{});
}
std::string b64(const X25519KeyPair& pair) {
  return common::crypto::x25519_public_base64(pair.public_key);
}
std::string journal_bytes(const std::string& path) {
  std::string bytes;
  for (const std::string& file : {path, path + "-wal", path + "-shm"}) {
    std::ifstream in(file, std::ios::binary);
    bytes.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return bytes;
}
std::string str(const json::object& o, const char* key) {
  return o.contains(key) && o.at(key).is_string() ? std::string(o.at(key).as_string()) : "";
}

struct FederationKeysFixture : FederationFixture {
  X25519KeyPair gw_a = new_pair();  // x's gateway gw-secret-a
  X25519KeyPair gw_c = new_pair();  // z's gateway gw-c

  void SetUp() override {
    public_keys = {{"x", b64(gw_a)}, {"z", b64(gw_c)}};
    gateways.with("/fake/x/gw-secret-a",
                  [&](FakeGateways::Gateway& g) { g.public_key = b64(gw_a); });
    gateways.with("/fake/z/gw-c", [&](FakeGateways::Gateway& g) { g.public_key = b64(gw_c); });
    FederationFixture::SetUp();
  }

  json::object tunnel_on(const std::string& socket, uint32_t tunnel) {
    return gateways.with(socket, [&](FakeGateways::Gateway& g) {
      return g.tunnels.count(tunnel) != 0 ? g.tunnels.at(tunnel) : json::object{};
    });
  }
};

TEST_F(FederationKeysFixture, EndsAreKeyedByExchangeAndNoDomainHoldsTheSecret) {
  agent::ReserveRequest r = request("enc", true);
  r.spec.encrypt = "aes-256-gcm";
  r.fingerprint = "a-c-50m-600s-aes";
  r.provision = true;
  auto out = coordinator().reserve(r);
  ASSERT_TRUE(out.has_value()) << out.error().message;
  EXPECT_EQ(str(*out, "state"), "provisioned") << json::serialize(*out);
  const std::string aggregate = str(*out, "id");
  const auto tunnel = static_cast<uint32_t>(out->at("tunnel_id").to_number<uint64_t>());
  agent_of("x").reconcile_now();
  agent_of("z").reconcile_now();
  const json::object at_a = tunnel_on("/fake/x/gw-secret-a", tunnel);
  const json::object at_c = tunnel_on("/fake/z/gw-c", tunnel);
  ASSERT_FALSE(at_a.empty());
  ASSERT_FALSE(at_c.empty());
  const json::object& auth_a = at_a.at("auth").as_object();
  const json::object& auth_c = at_c.at("auth").as_object();
  // Each gateway is given the other domain's gateway's public key, never a secret.
  EXPECT_EQ(str(auth_a, "key_exchange"), "x25519");
  EXPECT_EQ(str(auth_c, "key_exchange"), "x25519");
  EXPECT_EQ(str(auth_a, "peer_public_key"), b64(gw_c));
  EXPECT_EQ(str(auth_c, "peer_public_key"), b64(gw_a));
  EXPECT_EQ(json::serialize(at_a).find("secret"), std::string::npos) << json::serialize(at_a);
  // Both under the aggregate's context, so both derive the same base secret.
  const std::string context = "f-" + aggregate + "/x/gen-1";
  const std::string context_a(auth_a.at("keys").as_array()[0].at("context").as_string());
  const std::string context_c(auth_c.at("keys").as_array()[0].at("context").as_string());
  EXPECT_EQ(context_a, context);
  EXPECT_EQ(context_c, context);
  const auto secret_a = dataplane::aead::x25519_tunnel_secret(
      gw_a, gw_c.public_key, tunnel, dataplane::aead::Cipher::kAes256Gcm, context_a);
  const auto secret_c = dataplane::aead::x25519_tunnel_secret(
      gw_c, gw_a.public_key, tunnel, dataplane::aead::Cipher::kAes256Gcm, context_c);
  ASSERT_TRUE(secret_a.has_value() && secret_c.has_value());
  EXPECT_EQ(*secret_a, *secret_c);
  // The reservation is active end to end (each gateway reports the auth it was asked for).
  auto [status, shown] = http("x", "GET", "/v1/reservations/" + aggregate);
  ASSERT_EQ(status, 200);
  for (const json::value& s : shown.at("segments").as_array()) {
    EXPECT_TRUE(s.at("dataplane_active").as_bool()) << json::serialize(s);
  }
  // No domain journaled the secret (hex or bytes); the scan sees the public keys that are there.
  std::string hex;
  for (const std::byte b : *secret_a) hex += fmt::format("{:02x}", std::to_integer<int>(b));
  const std::string raw(reinterpret_cast<const char*>(secret_a->data()), secret_a->size());
  for (const char* d : kDomains) {
    const std::string bytes = journal_bytes(domains[d].journal);
    EXPECT_EQ(bytes.find(hex), std::string::npos) << d;
    EXPECT_EQ(bytes.find(raw), std::string::npos) << d;
  }
  EXPECT_NE(journal_bytes(domains["x"].journal).find(b64(gw_c)), std::string::npos);
  // A restarted end domain reads its segment's keys back and programs the same auth.
  open("z");
  agent_of("z").reconcile_now();
  const json::object again = tunnel_on("/fake/z/gw-c", tunnel);
  EXPECT_EQ(json::serialize(again.at("auth")), json::serialize(at_c.at("auth")));
}

// The key ids a gateway's tunnel opens, and the one it seals with.
struct GatewayKeys {
  std::vector<uint64_t> ids;
  uint64_t tx = 0;
  std::vector<std::string> contexts;
};

GatewayKeys keys_of(const json::object& tunnel) {
  GatewayKeys out;
  if (!tunnel.contains("auth")) return out;
  const json::object& auth = tunnel.at("auth").as_object();
  for (const json::value& k : auth.at("keys").as_array()) {
    out.ids.push_back(k.at("id").to_number<uint64_t>());
    out.contexts.emplace_back(k.at("context").as_string());
  }
  out.tx = auth.at("tx_key").to_number<uint64_t>();
  return out;
}

bool opens(const GatewayKeys& g, uint64_t id) {
  return std::find(g.ids.begin(), g.ids.end(), id) != g.ids.end();
}

// Rotation across domains (docs/federation.md): x and z step their own gateways, paced by the
// aggregator, so at every instant each end seals with a key the other end opens -- a packet in
// either direction opens at every moment of the rotation. Without z's agent the rotation waits
// at "adding": x never switches alone.
TEST_F(FederationKeysFixture, RotationIsSteppedInLockStepAcrossDomains) {
  agent::ReserveRequest r = request("rot", true);
  r.spec.encrypt = "aes-256-gcm";
  r.fingerprint = "a-c-50m-600s-aes-rot";
  r.provision = true;
  auto out = coordinator().reserve(r);
  ASSERT_TRUE(out.has_value()) << out.error().message;
  const std::string aggregate = str(*out, "id");
  const auto tunnel = static_cast<uint32_t>(out->at("tunnel_id").to_number<uint64_t>());
  const auto settle = [&] {
    agent_of("x").reconcile_now();
    agent_of("z").reconcile_now();
  };
  settle();
  const GatewayKeys before = keys_of(tunnel_on("/fake/x/gw-secret-a", tunnel));
  ASSERT_EQ(before.ids.size(), 1U);

  auto started = coordinator().rotate_key(aggregate);
  ASSERT_TRUE(started.has_value()) << started.error().message;
  // A second rotation while this one runs is refused.
  auto again = coordinator().rotate_key(aggregate);
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code, "rotation_in_progress");

  // z's agent goes away: x holds both keys but keeps sealing with the old one.
  {
    std::lock_guard lock(domains["z"].slot->mutex);
    domains["z"].slot->handler = nullptr;
  }
  for (int i = 0; i < 30; ++i) {
    agent_of("x").reconcile_now();
    coordinator().tick();
    realtime.advance_ns(200'000'000);
    monotonic.advance_ns(200'000'000);
  }
  const GatewayKeys waiting = keys_of(tunnel_on("/fake/x/gw-secret-a", tunnel));
  EXPECT_EQ(waiting.ids.size(), 2U);
  EXPECT_EQ(waiting.tx, before.tx) << "x switched without z";
  std::set<std::string> steps_seen;
  {
    auto [status, shown] = http("x", "GET", "/v1/reservations/" + aggregate);
    ASSERT_EQ(status, 200);
    steps_seen.insert(std::string(shown.at("key_rotation").at("step").as_string()));
    EXPECT_EQ(steps_seen.count("adding"), 1U) << json::serialize(shown);
  }
  open("z");  // back, from its journal

  bool finished = false;
  for (int i = 0; i < 200 && !finished; ++i) {
    settle();
    const GatewayKeys a = keys_of(tunnel_on("/fake/x/gw-secret-a", tunnel));
    const GatewayKeys c = keys_of(tunnel_on("/fake/z/gw-c", tunnel));
    ASSERT_TRUE(opens(c, a.tx)) << "step " << i << ": z cannot open what x seals with";
    ASSERT_TRUE(opens(a, c.tx)) << "step " << i << ": x cannot open what z seals with";
    coordinator().tick();
    auto [status, shown] = http("x", "GET", "/v1/reservations/" + aggregate);
    ASSERT_EQ(status, 200);
    const json::object& rotation = shown.at("key_rotation").as_object();
    steps_seen.insert(std::string(rotation.at("step").as_string()));
    finished = rotation.at("step").as_string() == "none" &&
               rotation.at("rotations").to_number<uint64_t>() == 1;
    realtime.advance_ns(100'000'000);
    monotonic.advance_ns(100'000'000);
  }
  ASSERT_TRUE(finished) << "the rotation did not finish";
  for (const char* step : {"adding", "switching", "switched", "dropping"}) {
    EXPECT_EQ(steps_seen.count(step), 1U) << step;
  }
  settle();
  const GatewayKeys a = keys_of(tunnel_on("/fake/x/gw-secret-a", tunnel));
  const GatewayKeys c = keys_of(tunnel_on("/fake/z/gw-c", tunnel));
  ASSERT_EQ(a.ids.size(), 1U);
  ASSERT_EQ(c.ids.size(), 1U);
  EXPECT_NE(a.tx, before.tx);
  EXPECT_EQ(a.tx, c.tx);
  EXPECT_EQ(a.contexts.front(), "f-" + aggregate + "/x/gen-2");
  EXPECT_EQ(c.contexts.front(), a.contexts.front());
  // A permit naming no step of a rotation is refused naming the field.
  const std::string z_id = agent_of("z").reservation_of_request(aggregate + "@x/z");
  ASSERT_FALSE(z_id.empty());
  const federation::Answer bad = federation::handle_segment_call(
      agent_of("z"), "x", "POST", "/" + z_id + "/rotate-key", "", R"({"step":"adding"})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(json::serialize(bad.body).find("step"), std::string::npos) << json::serialize(bad.body);
}

TEST_F(FederationKeysFixture, ACommitWithoutTheFarGatewaysKeyIsRefusedAndNothingStaysHeld) {
  // z's segment held with keys; then x's commit to z names no far key (a peer that lost it).
  agent::ReserveRequest r = request("enc-2");
  r.spec.encrypt = "aes-256-gcm";
  r.fingerprint = "a-c-50m-600s-aes-2";
  auto held = coordinator().reserve(r);
  ASSERT_TRUE(held.has_value()) << held.error().message;
  const std::string z_id = agent_of("z").reservation_of_request(str(*held, "id") + "@x/z");
  if (z_id.empty()) GTEST_SKIP() << "segment id scheme differs: " << json::serialize(*held);
  json::object commit{{"aggregate", json::object{{"id", str(*held, "id")}, {"domain", "x"}}},
                      {"far_gateway", "gw-secret-a"},
                      {"far_public_key", ""},
                      {"far_prefixes", json::array{"10.20.1.0/24"}}};
  auto refused = agent_of("z").commit_segment(z_id, commit);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, "cross_domain_keys_unavailable");
  EXPECT_NE(refused.error().message.find("gw-secret-a"), std::string::npos)
      << refused.error().message;
  EXPECT_EQ(str(*agent_of("z").segment(z_id), "state"), "held");  // still abortable
}

}  // namespace
}  // namespace detwan::control::testing

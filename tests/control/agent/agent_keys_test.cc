// Encrypted reservations: the agent draws a key per reservation, programs it into both gateways
// (which show only its fingerprint), never shows the secret in its API, keeps it in its
// journal across a restart, and rotates it in three steps, each taken only once both gateways
// have the previous one in place.
#include <sqlite3.h>
#include <sys/stat.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "control/reservation/tunnel_keys.h"
#include "tests/control/agent/agent_test_util.h"

namespace detwan::control::testing {
namespace {

using json = boost::json::object;

std::string auth_of(const json& tunnel) {
  return tunnel.contains("auth") ? boost::json::serialize(tunnel.at("auth")) : "";
}

TEST_F(AgentFixture, AnEncryptedReservationProgramsOneKeyOnBothGatewaysAndNeverShowsIt) {
  auto r = request("a", "b", 20'000'000);
  r.spec.encrypt = "chacha20-poly1305";
  r.provision = true;
  const json reserved = reserve_ok(r);
  agent->reconcile_now();
  const std::string id = id_of(reserved);
  ASSERT_TRUE(active(id));
  const auto tunnel_id = static_cast<uint32_t>(reserved.at("tunnel_id").to_number<uint64_t>());
  const json on_a = tunnel_on("/fake/gw-a", tunnel_id);
  const json on_b = tunnel_on("/fake/gw-b", tunnel_id);
  ASSERT_FALSE(auth_of(on_a).empty());
  EXPECT_EQ(auth_of(on_a), auth_of(on_b));  // one key (same fingerprint) at both ends
  EXPECT_EQ(on_a.at("auth").at("cipher").as_string(), "chacha20-poly1305");
  // The API: the fingerprint the gateways have, no secret anywhere.
  const json view = *agent->get(id);
  const auto& keys = view.at("tunnel_keys").at("keys").as_array();
  ASSERT_EQ(keys.size(), 1u);
  EXPECT_EQ(keys[0].at("fingerprint"), on_a.at("auth").at("keys").as_array()[0].at("fingerprint"));
  EXPECT_FALSE(keys[0].as_object().contains("secret"));
  EXPECT_EQ(boost::json::serialize(view).find("secret"), std::string::npos);
  // The sender's MTU leaves room for the tag.
  EXPECT_EQ(view.at("tunnel").at("mtu_bytes").to_number<uint64_t>(), 1500u - 68 - 16);
  // An unencrypted reservation (asked for by name) carries no auth.
  auto plain = request("a", "c", 1'000'000, 600 * kSecond, 7);
  plain.spec.encrypt = "none";
  plain.provision = true;
  const json p = reserve_ok(plain);
  agent->reconcile_now();
  const auto plain_id = static_cast<uint32_t>(p.at("tunnel_id").to_number<uint64_t>());
  EXPECT_EQ(auth_of(tunnel_on("/fake/gw-a", plain_id)), "");
  // The journal holds the key, readable by the agent's user only.
  struct stat st {};
  ASSERT_EQ(::stat(journal.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(AgentFixture, AReservationThatNamesNoCipherIsEncryptedWithAes256Gcm) {
  // A request as the API parses it when "encrypt" is absent (requests_test checks the parse).
  auto r = request("a", "b", 20'000'000);
  r.provision = true;
  const json reserved = reserve_ok(r);
  agent->reconcile_now();
  EXPECT_EQ(reserved.at("encrypt").as_string(), "aes-256-gcm");
  EXPECT_EQ(reserved.at("spec").at("encrypt").as_string(), "aes-256-gcm");
  EXPECT_TRUE(reserved.at("warnings").as_array().empty());
  EXPECT_EQ(reserved.at("tunnel_keys").at("keys").as_array().size(), 1u);
  const auto tunnel_id = static_cast<uint32_t>(reserved.at("tunnel_id").to_number<uint64_t>());
  for (const char* gw : {"/fake/gw-a", "/fake/gw-b"}) {
    const json on = tunnel_on(gw, tunnel_id);
    ASSERT_TRUE(on.contains("auth")) << gw;
    EXPECT_EQ(on.at("auth").at("cipher").as_string(), "aes-256-gcm") << gw;
  }
}

TEST_F(AgentFixture, AnUnencryptedReservationSaysSoInEveryAnswer) {
  auto r = request("a", "b", 20'000'000);
  r.spec.encrypt = "none";
  r.provision = true;
  const json reserved = reserve_ok(r);
  agent->reconcile_now();
  const std::string id = id_of(reserved);
  for (const json& view : {reserved, *agent->get(id)}) {
    EXPECT_EQ(view.at("encrypt").as_string(), "none");
    const auto& warnings = view.at("warnings").as_array();
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_EQ(warnings[0].at("code").as_string(), "unencrypted");
    const std::string message(warnings[0].at("message").as_string());
    EXPECT_NE(message.find(id), std::string::npos) << message;
    EXPECT_NE(message.find("\"encrypt\": \"none\""), std::string::npos) << message;
  }
  EXPECT_TRUE(reserved.at("tunnel_keys").at("keys").as_array().empty());
  const auto tunnel_id = static_cast<uint32_t>(reserved.at("tunnel_id").to_number<uint64_t>());
  EXPECT_EQ(auth_of(tunnel_on("/fake/gw-a", tunnel_id)), "");
  // Without the tag, the sender's MTU is the link's less the encapsulation only.
  EXPECT_EQ(reserved.at("tunnel").at("mtu_bytes").to_number<uint64_t>(), 1500u - 68);
}

TEST_F(AgentFixture, ARestartedAgentKeepsTheKey) {
  auto r = request("a", "b", 20'000'000);
  r.spec.encrypt = "aes-256-gcm";
  r.provision = true;
  const json reserved = reserve_ok(r);
  agent->reconcile_now();
  const auto tunnel_id = static_cast<uint32_t>(reserved.at("tunnel_id").to_number<uint64_t>());
  const std::string before = auth_of(tunnel_on("/fake/gw-b", tunnel_id));
  agent.reset();
  open();
  gateways.restart("/fake/gw-b");  // lost its tunnels meanwhile: re-programmed with the same key
  agent->reconcile_now();
  EXPECT_TRUE(active(id_of(reserved)));
  EXPECT_EQ(auth_of(tunnel_on("/fake/gw-b", tunnel_id)), before);
  EXPECT_EQ(auth_of(tunnel_on("/fake/gw-a", tunnel_id)), before);
}

TEST_F(AgentFixture, RotationStepsOnlyWhenBothGatewaysHaveThePreviousStep) {
  auto r = request("a", "b", 20'000'000);
  r.spec.encrypt = "aes-256-gcm";
  r.provision = true;
  const std::string id = id_of(reserve_ok(r));
  agent->reconcile_now();
  const auto tunnel_id =
      static_cast<uint32_t>(agent->get(id)->at("tunnel_id").to_number<uint64_t>());
  const auto keys_on = [&](const std::string& socket) {
    return tunnel_on(socket, tunnel_id).at("auth").at("keys").as_array().size();
  };
  const auto tx_on = [&](const std::string& socket) {
    return tunnel_on(socket, tunnel_id).at("auth").at("tx_key").to_number<int>();
  };
  const auto rotation = [&] {
    return std::string(agent->get(id)->at("tunnel_keys").at("rotation").as_string());
  };
  const std::string first_fingerprint(agent->get(id)->at("tunnel_keys").at("keys").as_array()[0]
                                          .at("fingerprint")
                                          .as_string());
  ASSERT_TRUE(agent->rotate_key(id).has_value());
  EXPECT_EQ(rotation(), "adding");
  // A second request while one runs is refused.
  const auto again = agent->rotate_key(id);
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code, "rotation_in_progress");
  // gw-b unreachable: the first step reaches gw-a only, and the rotation waits.
  gateways.with("/fake/gw-b", [](FakeGateways::Gateway& g) { g.reachable = false; });
  agent->reconcile_now();
  EXPECT_EQ(keys_on("/fake/gw-a"), 2u);
  EXPECT_EQ(tx_on("/fake/gw-a"), 1);
  EXPECT_EQ(keys_on("/fake/gw-b"), 1u);
  EXPECT_EQ(rotation(), "adding");
  gateways.with("/fake/gw-b", [](FakeGateways::Gateway& g) { g.reachable = true; });
  agent->reconcile_now();  // both hold both keys -> switching
  EXPECT_EQ(keys_on("/fake/gw-b"), 2u);
  EXPECT_EQ(rotation(), "switching");
  agent->reconcile_now();  // both seal with the new key
  EXPECT_EQ(tx_on("/fake/gw-a"), 2);
  EXPECT_EQ(tx_on("/fake/gw-b"), 2);
  // The old key stays until packets sealed with it just before the switch have arrived.
  agent->reconcile_now();
  EXPECT_EQ(rotation(), "switching");
  EXPECT_EQ(keys_on("/fake/gw-a"), 2u);
  realtime.advance_ns(2 * kSecond);
  agent->reconcile_now();  // -> dropping
  EXPECT_EQ(rotation(), "dropping");
  agent->reconcile_now();  // the old key is gone from both -> done
  EXPECT_EQ(keys_on("/fake/gw-a"), 1u);
  EXPECT_EQ(keys_on("/fake/gw-b"), 1u);
  EXPECT_EQ(rotation(), "none");
  const json view = *agent->get(id);
  EXPECT_EQ(view.at("tunnel_keys").at("rotations").to_number<int>(), 1);
  EXPECT_NE(view.at("tunnel_keys").at("keys").as_array()[0].at("fingerprint").as_string(),
            first_fingerprint);
  EXPECT_TRUE(active(id));
  // Not encrypted: nothing to rotate.
  auto plain = request("a", "c", 1'000'000, 600 * kSecond, 7);
  plain.spec.encrypt = "none";
  const auto refused = agent->rotate_key(id_of(reserve_ok(plain)));
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, "not_encrypted");
}

// Every byte of the journal's files.
std::string journal_bytes(const std::string& path) {
  std::string bytes;
  for (const std::string& file : {path, path + "-wal", path + "-shm"}) {
    std::ifstream in(file, std::ios::binary);
    bytes.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return bytes;
}

// The secrets of a reservation as its journal row holds them (read on a second connection).
std::vector<std::string> journaled_secrets(const std::string& path, const std::string& id) {
  sqlite3* db = nullptr;
  std::vector<std::string> secrets;
  EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, "SELECT body FROM reservations WHERE id = ?", -1, &s, nullptr),
            SQLITE_OK);
  sqlite3_bind_text(s, 1, id.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(s) == SQLITE_ROW) {
    const auto body =
        boost::json::parse(reinterpret_cast<const char*>(sqlite3_column_text(s, 0))).as_object();
    for (const auto& key : body.at("tunnel_keys").at("keys").as_array()) {
      secrets.emplace_back(key.at("secret").as_string());
    }
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  return secrets;
}

// Two rotations through the agent: afterwards no byte of the first key, nor of the second, is
// in any of the journal's files (events keep fingerprints; the replaced row's bytes are zeroed
// and the WAL emptied when a rotation completes); the current key is.
TEST_F(AgentFixture, TheJournalKeepsNoKeyOfACompletedRotation) {
  auto r = request("a", "b", 20'000'000);
  r.spec.encrypt = "aes-256-gcm";
  r.provision = true;
  const std::string id = id_of(reserve_ok(r));
  agent->reconcile_now();
  std::vector<std::string> history = journaled_secrets(journal, id);
  ASSERT_EQ(history.size(), 1u);
  ASSERT_EQ(history[0].size(), 64u);
  for (int rotation = 0; rotation < 2; ++rotation) {
    ASSERT_TRUE(agent->rotate_key(id).has_value());
    for (int step = 0; step < 8 && agent->get(id)->at("tunnel_keys").at("rotation") != "none";
         ++step) {
      realtime.advance_ns(2 * kSecond);  // past the grace before the old key is dropped
      agent->reconcile_now();
    }
    ASSERT_EQ(agent->get(id)->at("tunnel_keys").at("rotation"), "none");
    const std::vector<std::string> now = journaled_secrets(journal, id);
    ASSERT_EQ(now.size(), 1u);
    history.push_back(now[0]);
  }
  ASSERT_EQ(history.size(), 3u);
  EXPECT_NE(history[0], history[1]);
  const std::string bytes = journal_bytes(journal);
  EXPECT_EQ(bytes.find(history[0]), std::string::npos) << "the first key is still in the journal";
  EXPECT_EQ(bytes.find(history[1]), std::string::npos) << "the second key is still in the journal";
  EXPECT_NE(bytes.find(history[2]), std::string::npos);  // the scan does see the current one
  // A restarted agent still has the current key and programs it.
  agent.reset();
  open();
  agent->reconcile_now();
  EXPECT_TRUE(active(id));
}

}  // namespace
}  // namespace detwan::control::testing

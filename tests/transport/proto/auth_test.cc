// Authenticated channels at the protocol level (transport/proto/handshake.h, docs/transport.md
// "Authenticated channels"): the handshake run by hand between a client Connection and the
// acceptor's functions, then datagrams tampered with, replayed, reflected or forged on their
// way, and the genuine traffic compared byte for byte.
#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/byte_order.h"
#include "tests/transport/security_util.h"
#include "transport/proto/connection.h"
#include "transport/proto/connection_impl.h"
#include "transport/proto/handshake.h"
#include "transport/proto/wire.h"

namespace detwan::transport::proto {
namespace {

using Bytes = std::vector<std::byte>;
using transport::testing::test_key;

constexpr uint64_t kConnectionId = 0x5EC0'1234'ABCD'0042ull;

Bytes random_message(size_t size, uint64_t seed) {
  std::mt19937_64 random(seed);
  Bytes out(size);
  for (auto& b : out) b = static_cast<std::byte>(random());
  return out;
}

ChannelOptions options() {
  ChannelOptions o;
  o.paths.resize(1);
  o.paths[0].rate_bps = 200'000'000;
  o.initial_rtt_ns = 2'000'000;
  return o;
}

std::unique_ptr<Keyring> keyring(SecurityMode mode, uint8_t key_first = 0) {
  auto k = Keyring::create(mode == SecurityMode::kNone
                               ? Security::none()
                               : Security::keyed(test_key(key_first), mode, "auth-test"));
  EXPECT_TRUE(k) << k.error().message;
  return std::move(*k);
}

// Everything a Connection wants to send now.
std::vector<Bytes> drain(Connection& c, int64_t now_ns) {
  std::vector<Bytes> out;
  Bytes buffer(c.max_datagram_bytes());
  for (int i = 0; i < 256; ++i) {
    const Transmit t = c.poll_transmit(now_ns, buffer);
    if (t.size_bytes == 0) break;
    out.emplace_back(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(t.size_bytes));
  }
  return out;
}

std::vector<Event> events(Connection& c) {
  std::vector<Event> out;
  while (auto e = c.poll_event()) out.push_back(std::move(*e));
  return out;
}

// A client and a server of one authenticated channel, the server made by the acceptor's
// functions exactly as the datagram driver does.
struct Pair {
  std::unique_ptr<Keyring> client_keys;
  std::unique_ptr<Keyring> server_keys;
  std::optional<Connection> client;
  std::optional<Connection> server;
  AcceptedHandshake accepted;
  int64_t now_ns = 1'000'000'000;
  std::vector<Event> client_events;
  std::vector<Event> server_events;
};

// Runs the handshake; false (with a failure recorded) if a step does not do what it should.
bool handshake(Pair& p, SecurityMode mode) {
  p.client_keys = keyring(mode);
  p.server_keys = keyring(mode);
  ConnectionConfig config;
  config.role = Role::kClient;
  config.connection_id = kConnectionId;
  config.options = options();
  config.keyring = p.client_keys.get();
  p.client.emplace(config, p.now_ns);
  auto hello = drain(*p.client, p.now_ns);
  if (hello.size() != 1) return ADD_FAILURE() << "no HELLO", false;
  wire::Header h;
  wire::SealedHelloBody body;
  if (check_hello(*p.server_keys, hello[0], h, body) != Status::kOk) {
    return ADD_FAILURE() << "HELLO does not verify", false;
  }
  crypto::Nonce server_nonce{};
  if (!crypto::random_bytes(server_nonce)) return false;
  auto keys = p.server_keys->derive(kConnectionId, body.nonce, server_nonce);
  if (!keys) return false;
  p.accepted.keys = *keys;
  p.accepted.peer = body.hello;
  wire::HelloBody own;
  own.recv_window_bytes = static_cast<uint64_t>(receive_window_bytes(options()));
  own.segment_bytes = static_cast<uint16_t>(segment_payload_bytes(options(), mode));
  Bytes ack(200);
  ack.resize(write_hello_ack(*p.server_keys, h, own, body.nonce, server_nonce, p.now_ns, ack));
  EXPECT_EQ(ack.size(), hello[0].size()) << "a HELLO_ACK as big as the HELLO: no amplification";
  if (p.client->on_datagram(0, ack, p.now_ns) != Status::kOk) return ADD_FAILURE(), false;
  auto confirm = drain(*p.client, p.now_ns);
  if (confirm.empty() || !opens_as_client(*p.server_keys, keys->client_to_server, confirm[0])) {
    return ADD_FAILURE() << "the client's first sealed datagram does not open", false;
  }
  ConnectionConfig server;
  server.role = Role::kServer;
  server.connection_id = kConnectionId;
  server.options = options();
  server.keyring = p.server_keys.get();
  server.accepted = &p.accepted;
  p.server.emplace(server, p.now_ns);
  for (const Bytes& d : confirm) (void)p.server->on_datagram(0, d, p.now_ns);
  return p.client->established() && p.server->established();
}

// What an attacker on the path does to a datagram from the client (`from_client`) or the
// server, besides letting it through.
using Tap = std::function<void(bool from_client, const Bytes& d, Pair& p)>;

// Moves datagrams both ways (1 ms per round) until `done` or 20 s of virtual time.
bool run(Pair& p, const std::function<bool()>& done, const Tap& tap = nullptr) {
  for (int round = 0; round < 20'000 && !done(); ++round) {
    p.now_ns += 1'000'000;
    for (const Bytes& d : drain(*p.client, p.now_ns)) {
      if (tap) tap(true, d, p);
      (void)p.server->on_datagram(0, d, p.now_ns);
    }
    for (const Bytes& d : drain(*p.server, p.now_ns)) {
      if (tap) tap(false, d, p);
      (void)p.client->on_datagram(0, d, p.now_ns);
    }
    for (Event& e : events(*p.client)) p.client_events.push_back(std::move(e));
    for (Event& e : events(*p.server)) p.server_events.push_back(std::move(e));
  }
  return done();
}

std::vector<Bytes> received(const std::vector<Event>& evs) {
  std::vector<Bytes> out;
  for (const Event& e : evs) {
    if (e.kind == Event::Kind::kMessage) out.push_back(e.message);
  }
  return out;
}

class Auth : public ::testing::TestWithParam<SecurityMode> {};

// Every datagram of the client also arrives tampered with (last byte of its tag flipped) before
// it and replayed after it; every datagram of either side is also reflected back to its
// sender. The messages arrive byte-exact, and each forgery is counted once under its reason.
TEST_P(Auth, TamperedReplayedAndReflectedDatagramsAreDroppedAndCounted) {
  Pair p;
  ASSERT_TRUE(handshake(p, GetParam()));
  const std::vector<Bytes> messages = {random_message(0, 1), random_message(1, 2),
                                       random_message(200'000, 3), random_message(4321, 4)};
  for (size_t i = 0; i < messages.size(); ++i) {
    ASSERT_EQ(p.client->queue_message(messages[i], i + 1), Status::kOk);
  }
  uint64_t tampered = 0, replayed = 0, reflected_to_client = 0, reflected_to_server = 0;
  std::vector<Bytes> replayed_pending;
  const Tap tap = [&](bool from_client, const Bytes& d, Pair& pair) {
    if (from_client) {
      Bytes bad = d;
      bad.back() ^= std::byte{0x01};
      (void)pair.server->on_datagram(0, bad, pair.now_ns);
      ++tampered;
      replayed_pending.push_back(d);
      (void)pair.client->on_datagram(0, d, pair.now_ns);
      ++reflected_to_client;
    } else {
      (void)pair.server->on_datagram(0, d, pair.now_ns);
      ++reflected_to_server;
    }
  };
  ASSERT_TRUE(run(
      p,
      [&] {
        // Replays of what the server already took.
        for (const Bytes& d : replayed_pending) {
          (void)p.server->on_datagram(0, d, p.now_ns);
          ++replayed;
        }
        replayed_pending.clear();
        return received(p.server_events).size() == messages.size();
      },
      tap));
  EXPECT_EQ(received(p.server_events), messages);
  const ChannelStats server = p.server->stats();
  const ChannelStats client = p.client->stats();
  EXPECT_GT(tampered, 0u);
  // A reflected datagram whose packet number the server saw already is refused as a replay
  // (the check before opening); every other one does not open.
  EXPECT_EQ(server.dropped_auth + server.dropped_replay, tampered + reflected_to_server + replayed);
  EXPECT_GE(server.dropped_auth, tampered);
  EXPECT_GE(server.dropped_replay, replayed);
  EXPECT_EQ(client.dropped_auth + client.dropped_replay, reflected_to_client);
  EXPECT_GT(client.dropped_auth, 0u);
  EXPECT_FALSE(p.client->failed());
  EXPECT_FALSE(p.server->failed());
}

// A datagram replayed after more than the replay window's worth of newer ones is still refused.
TEST_P(Auth, ReplayBelowTheWindowIsRefused) {
  Pair p;
  ASSERT_TRUE(handshake(p, GetParam()));
  std::optional<Bytes> first;
  const Bytes message = random_message(8'000'000, 9);  // > 4096 datagrams
  ASSERT_EQ(p.client->queue_message(message, 1), Status::kOk);
  ASSERT_TRUE(run(
      p, [&] { return received(p.server_events).size() == 1; },
      [&](bool from_client, const Bytes& d, Pair&) {
        if (from_client && !first && wire::is_data(d)) first = d;
      }));
  ASSERT_TRUE(first);
  const uint64_t before = p.server->stats().dropped_replay;
  EXPECT_EQ(p.server->on_datagram(0, *first, p.now_ns), Status::kDropped);
  EXPECT_EQ(p.server->stats().dropped_replay, before + 1);
  EXPECT_EQ(received(p.server_events)[0], message);
}

// A HELLO_ACK from a peer without the key (an impostor) does not establish the client; a HELLO
// made with another key does not verify at the acceptor.
TEST_P(Auth, NeitherSideTalksToAPeerWithAnotherKey) {
  auto client_keys = keyring(GetParam());
  auto impostor = keyring(GetParam(), 0x40);
  ConnectionConfig config;
  config.role = Role::kClient;
  config.connection_id = kConnectionId;
  config.options = options();
  config.keyring = client_keys.get();
  int64_t now_ns = 1'000'000'000;
  Connection client(config, now_ns);
  auto hello = drain(client, now_ns);
  ASSERT_EQ(hello.size(), 1u);
  wire::Header h;
  wire::SealedHelloBody body;
  EXPECT_EQ(check_hello(*impostor, hello[0], h, body), Status::kDropped);
  // The impostor answers anyway, with the client's nonce (it saw the HELLO).
  ASSERT_EQ(wire::decode_header(hello[0], h), Status::kOk);
  ASSERT_EQ(wire::decode_sealed_hello(std::span(hello[0]).subspan(wire::kHeaderBytes), body),
            Status::kOk);
  crypto::Nonce server_nonce{};
  ASSERT_TRUE(crypto::random_bytes(server_nonce));
  Bytes ack(200);
  ack.resize(write_hello_ack(*impostor, h, body.hello, body.nonce, server_nonce, now_ns, ack));
  EXPECT_EQ(client.on_datagram(0, ack, now_ns), Status::kDropped);
  EXPECT_EQ(client.stats().dropped_auth, 1u);
  EXPECT_FALSE(client.established());
  EXPECT_TRUE(drain(client, now_ns + 1).empty() || !client.established());
}

// A captured HELLO replayed to the acceptor verifies, but its answer carries a fresh server
// nonce: the keys differ, and the old channel's sealed datagrams do not open under them.
TEST_P(Auth, ReplayedHelloOpensNothing) {
  Pair p;
  ASSERT_TRUE(handshake(p, GetParam()));
  auto client_keys = keyring(GetParam());
  ConnectionConfig config;
  config.role = Role::kClient;
  config.connection_id = kConnectionId;
  config.options = options();
  config.keyring = client_keys.get();
  Connection original(config, p.now_ns);
  const Bytes hello = drain(original, p.now_ns).at(0);
  wire::Header h;
  wire::SealedHelloBody body;
  ASSERT_EQ(check_hello(*p.server_keys, hello, h, body), Status::kOk);  // a replay verifies
  crypto::Nonce fresh_a{}, fresh_b{};
  ASSERT_TRUE(crypto::random_bytes(fresh_a));
  ASSERT_TRUE(crypto::random_bytes(fresh_b));
  auto a = p.server_keys->derive(kConnectionId, body.nonce, fresh_a);
  auto b = p.server_keys->derive(kConnectionId, body.nonce, fresh_b);
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->client_to_server, b->client_to_server);
  EXPECT_NE(a->client_to_server, a->server_to_client);
  // What the genuine client of p sends opens under its own keys only.
  const Bytes message = random_message(3000, 5);
  ASSERT_EQ(p.client->queue_message(message, 1), Status::kOk);
  const auto sent = drain(*p.client, p.now_ns + 1'000'000);
  ASSERT_FALSE(sent.empty());
  EXPECT_TRUE(opens_as_client(*p.server_keys, p.accepted.keys.client_to_server, sent[0]));
  EXPECT_FALSE(opens_as_client(*p.server_keys, a->client_to_server, sent[0]));
}

// Both ends must run the same mode: a HELLO_ACK of another mode (from a holder of the key) fails
// the client's connect with a clear error.
TEST(AuthModes, AuthenticateAgainstEncryptFailsWithAClearError) {
  auto client_keys = keyring(SecurityMode::kAuthenticate);
  auto server_keys = keyring(SecurityMode::kEncrypt);
  ConnectionConfig config;
  config.role = Role::kClient;
  config.connection_id = kConnectionId;
  config.options = options();
  config.keyring = client_keys.get();
  const int64_t now_ns = 1'000'000'000;
  Connection client(config, now_ns);
  const Bytes hello = drain(client, now_ns).at(0);
  wire::Header h;
  wire::SealedHelloBody body;
  // The MAC key does not depend on the mode: the acceptor sees a keyed peer of another mode.
  ASSERT_EQ(check_hello(*server_keys, hello, h, body), Status::kOk);
  EXPECT_EQ(body.mode, static_cast<uint8_t>(SecurityMode::kAuthenticate));
  crypto::Nonce nonce{};
  ASSERT_TRUE(crypto::random_bytes(nonce));
  Bytes ack(200);
  ack.resize(write_hello_ack(*server_keys, h, body.hello, body.nonce, nonce, now_ns, ack));
  EXPECT_EQ(client.on_datagram(0, ack, now_ns), Status::kClosed);
  auto evs = events(client);
  ASSERT_FALSE(evs.empty());
  EXPECT_EQ(evs.back().kind, Event::Kind::kFailed);
  EXPECT_EQ(evs.back().error.code, ErrorCode::kConfig);
  EXPECT_NE(evs.back().error.message.find("security mode mismatch"), std::string::npos)
      << evs.back().error.message;
}

// A plain client answered "security mismatch" by a sealed acceptor fails at once, clearly.
TEST(AuthModes, PlainClientToSealedPeerFailsWithAClearError) {
  ConnectionConfig config;
  config.role = Role::kClient;
  config.connection_id = kConnectionId;
  config.options = options();
  const int64_t now_ns = 1'000'000'000;
  Connection client(config, now_ns);
  const Bytes hello = drain(client, now_ns).at(0);
  uint8_t version = 0;
  ASSERT_TRUE(is_hello(hello, &version));
  EXPECT_EQ(version, wire::kVersion);
  Bytes close(64);
  close.resize(write_mismatch_close(kConnectionId, 0, now_ns, close));
  EXPECT_LE(close.size(), hello.size());
  (void)client.on_datagram(0, close, now_ns);
  auto evs = events(client);
  ASSERT_FALSE(evs.empty());
  EXPECT_EQ(evs.back().kind, Event::Kind::kFailed);
  EXPECT_EQ(evs.back().error.code, ErrorCode::kConfig);
  EXPECT_NE(evs.back().error.message.find("security mode mismatch"), std::string::npos);
}

// kEncrypt carries no payload byte in the clear; kAuthenticate carries it in the clear (tag
// only). The marker is a run of 64 'Z' bytes in the message.
TEST_P(Auth, EncryptHidesThePayload) {
  Pair p;
  ASSERT_TRUE(handshake(p, GetParam()));
  Bytes message = random_message(50'000, 6);
  const Bytes marker(64, std::byte{'Z'});
  std::copy(marker.begin(), marker.end(), message.begin() + 100);  // within segment 0
  ASSERT_EQ(p.client->queue_message(message, 1), Status::kOk);
  bool seen = false;
  ASSERT_TRUE(run(
      p, [&] { return received(p.server_events).size() == 1; },
      [&](bool from_client, const Bytes& d, Pair&) {
        if (from_client &&
            std::search(d.begin(), d.end(), marker.begin(), marker.end()) != d.end()) {
          seen = true;
        }
      }));
  EXPECT_EQ(received(p.server_events)[0], message);
  EXPECT_EQ(seen, GetParam() == SecurityMode::kAuthenticate);
}

// A DATA of an authenticated peer naming an 8 GiB message makes the receiver hold at most
// kReassemblyReserveBytes for it, and a segment further into the message only a bounded
// multiple of what really arrived: memory as data arrives, never as announced.
TEST_P(Auth, HugeAnnouncementReservesLittle) {
  Pair p;
  ASSERT_TRUE(handshake(p, GetParam()));
  auto cipher = crypto::PacketCipher::create(p.accepted.keys.client_to_server);
  ASSERT_TRUE(cipher);
  const size_t unit = p.accepted.peer.segment_bytes;
  const Bytes payload(unit, std::byte{0x42});
  uint64_t pn = 1000;
  auto forge = [&](uint32_t seq, uint32_t index) {
    wire::Header h;
    h.version = wire::kVersionSealed;
    h.connection_id = kConnectionId;
    h.packet_number = static_cast<uint32_t>(pn);
    wire::DataBody b;
    b.seq = seq;
    b.index = index;
    b.last_index = static_cast<uint32_t>((uint64_t{8} << 30) / unit);
    b.payload = payload;
    Bytes d(2048);
    const size_t n = wire::encode_data(h, b, d);
    EXPECT_GT(n, 0u);
    const auto tag = std::span(d).subspan(n).first<wire::kTagBytes>();
    const bool ok =
        GetParam() == SecurityMode::kEncrypt
            ? cipher->seal(
                  pn, std::span(d).first(wire::kShortHeaderBytes),
                  std::span(d).subspan(wire::kShortHeaderBytes, n - wire::kShortHeaderBytes), tag)
            : cipher->seal(pn, std::span(d).first(n), {}, tag);
    EXPECT_TRUE(ok);
    ++pn;
    d.resize(n + wire::kTagBytes);
    return d;
  };
  EXPECT_EQ(p.server->on_datagram(0, forge(0, 0), p.now_ns), Status::kOk);
  EXPECT_GT(p.server->reassembly_bytes(), 0u);
  EXPECT_LE(p.server->reassembly_bytes(), kReassemblyReserveBytes);
  EXPECT_EQ(p.server->stats().reassembly_bytes, p.server->reassembly_bytes());
  // 3,000 segments further (inside the receive window): at most kReassemblyGrowth times more.
  EXPECT_EQ(p.server->on_datagram(0, forge(3000, 3000), p.now_ns), Status::kOk);
  EXPECT_LE(p.server->reassembly_bytes(), kReassemblyGrowth * kReassemblyReserveBytes);
  EXPECT_EQ(p.server->stats().dropped_auth, 0u);
}

INSTANTIATE_TEST_SUITE_P(Modes, Auth,
                         ::testing::Values(SecurityMode::kAuthenticate, SecurityMode::kEncrypt),
                         [](const ::testing::TestParamInfo<SecurityMode>& info) {
                           return std::string(to_string(info.param));
                         });

}  // namespace
}  // namespace detwan::transport::proto

namespace detwan::transport::proto {
namespace {

// The endpoint's budget bounds what all its channels hold: a message's first segment that would
// take more than it is dropped (dropped_memory) and nothing stays charged; a message that fits
// is received; closing the channel gives everything back.
TEST(ReassemblyBudget, EndpointBudgetRefusesGrowthBeyondIt) {
  MemoryBudget budget(uint64_t{1} << 20);
  ConnectionConfig config;
  config.role = Role::kServer;
  config.connection_id = kConnectionId;
  config.options = options();
  config.endpoint_budget = &budget;
  int64_t now_ns = 1'000'000'000;
  std::optional<Connection> server(std::in_place, config, now_ns);
  // The client's HELLO tells the segment size.
  wire::Header h;
  h.type = wire::Type::kHello;
  h.connection_id = kConnectionId;
  Bytes d(256);
  wire::HelloBody hello;
  hello.recv_window_bytes = 1 << 22;
  hello.segment_bytes = 1000;
  d.resize(wire::encode_hello(h, hello, d));
  ASSERT_EQ(server->on_datagram(0, d, now_ns), Status::kOk);
  auto data = [&](uint32_t seq, uint32_t index, uint32_t last, size_t len) {
    wire::Header dh;
    dh.connection_id = kConnectionId;
    const Bytes payload(len, std::byte{1});
    wire::DataBody b;
    b.seq = seq;
    b.index = index;
    b.last_index = last;
    b.payload = payload;
    Bytes out(2048);
    out.resize(wire::encode_data(dh, b, out));
    return out;
  };
  // 100 MB announced: the first step (min(100 MB, 64 MiB)) is beyond the 1 MiB budget.
  EXPECT_EQ(server->on_datagram(0, data(0, 0, 99'999, 1000), now_ns), Status::kDropped);
  EXPECT_EQ(server->stats().dropped_memory, 1u);
  EXPECT_EQ(server->reassembly_bytes(), 0u);
  EXPECT_EQ(budget.used_bytes(), 0u);
  // A 2,500-byte message fits: received, then read.
  EXPECT_EQ(server->on_datagram(0, data(0, 0, 2, 1000), now_ns), Status::kOk);
  EXPECT_EQ(server->on_datagram(0, data(1, 1, 2, 1000), now_ns), Status::kOk);
  EXPECT_EQ(server->on_datagram(0, data(2, 2, 2, 500), now_ns), Status::kOk);
  size_t messages = 0;
  while (auto e = server->poll_event()) {
    if (e->kind == Event::Kind::kMessage) {
      EXPECT_EQ(e->message.size(), 2500u);
      ++messages;
    }
  }
  EXPECT_EQ(messages, 1u);
  EXPECT_EQ(budget.used_bytes(), 2500u);  // unread
  server->consumed(2500);
  EXPECT_EQ(budget.used_bytes(), 0u);
  EXPECT_EQ(server->on_datagram(0, data(3, 0, 99, 1000), now_ns), Status::kOk);
  EXPECT_GT(budget.used_bytes(), 0u);
  server.reset();
  EXPECT_EQ(budget.used_bytes(), 0u);
}

}  // namespace
}  // namespace detwan::transport::proto

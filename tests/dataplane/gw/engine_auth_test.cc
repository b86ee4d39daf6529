// Authenticated tunnels in virtual time (docs/wire-format.md, "Authenticated tunnels"): traffic
// and control sealed with AES-256-GCM or ChaCha20-Poly1305 arrive intact; forged, corrupted,
// truncated, replayed and unauthenticated packets are dropped and counted per reason before
// they touch the replay window, the playout or the clock; keys rotate without a lost packet; a
// restarted gateway is accepted again; the configuration rules of `auth`.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "dataplane/aead/aead.h"
#include "dataplane/wire/header.h"
#include "tests/dataplane/gw/engine_sim_util.h"

namespace detwan::dataplane::gw {
namespace {

using loopback::Delivery;
using namespace testing;  // NOLINT(google-build-using-namespace): test helpers

aead::Key key_of(char digit) { return *aead::key_from_hex(std::string(64, digit)); }

TunnelAuth auth_with(aead::Cipher cipher, std::vector<uint8_t> ids, uint8_t tx) {
  TunnelAuth auth;
  auth.cipher = cipher;
  for (const uint8_t id : ids) {
    auth.keys.push_back(TunnelKey{id, key_of(static_cast<char>('0' + id))});
  }
  auth.tx_key = tx;
  return auth;
}

SiteOptions site(std::optional<TunnelAuth> auth) {
  SiteOptions o;
  o.peer_clock_offset_ns = 0;
  o.auth = std::move(auth);
  return o;
}

boost::json::value stats(loopback::Gateway& g, uint32_t engine) {
  return boost::json::parse(g.engine(engine).stats_json(g.engine_now_ns(engine)));
}

boost::json::value tunnel7(const boost::json::value& st) {
  for (const auto& t : st.at("tunnels").as_array()) {
    if (t.at("id").to_number<uint32_t>() == 7) return t;
  }
  ADD_FAILURE() << "no tunnel 7";
  return nullptr;
}

uint64_t auth_count(const boost::json::value& st, const char* key) {
  return tunnel7(st).at("auth").at(key).to_number<uint64_t>();
}
uint64_t auth_drop(const boost::json::value& st, const char* reason) {
  return tunnel7(st).at("auth").at("drops").at(reason).to_number<uint64_t>();
}

// Delivered packets of flows to 10.<site>.0.9:80, checked byte for byte against what was sent.
struct Intact {
  DeliveryLog log;
  uint64_t damaged = 0;
  uint8_t site = 2;  // the receiving site's prefix 10.<site>/16
  void add(const Delivery& d) {
    log.add(d);
    const uint8_t dst[4] = {10, site, 0, 9};
    if (d.payload != ipv4_packet(dst, 80, d.payload.size(), mark_of(d.payload))) ++damaged;
  }
};

class EngineAuth : public ::testing::TestWithParam<aead::Cipher> {};

TEST_P(EngineAuth, TrafficAndControlAreSealedAndArriveIntact) {
  const TunnelAuth auth = auth_with(GetParam(), {1}, 1);
  auto g = two_sites(site(auth), site(auth));
  ASSERT_NE(g, nullptr);
  g->set_faults(0, 1, {.delay_ns = 1 * kMs});
  g->set_faults(1, 0, {.delay_ns = 1 * kMs});
  Intact rx;
  g->set_delivery_observer([&](const Delivery& d) {
    if (d.engine == 1) rx.add(d);
  });
  // On the wire: every packet has flag A, and no payload shows the plaintext marker.
  uint64_t wire_packets = 0, unsealed = 0;
  g->set_wire_observer([&](const loopback::Gateway::WireRecord& w) {
    ++wire_packets;
    const auto h = wire::decode(w.bytes);
    if (!h.ok() || !h->header.is_auth()) ++unsealed;
  });
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 100e6));
  drive(*g, flows, kStartNs + 200 * kMs);
  g->run_until(kStartNs + 210 * kMs);
  ASSERT_GT(flows[0].accepted, 1000u);
  EXPECT_EQ(rx.log.count(1), flows[0].accepted);
  EXPECT_EQ(rx.damaged, 0u);
  EXPECT_EQ(rx.log.repeated(), 0u);
  EXPECT_GT(wire_packets, flows[0].accepted);
  EXPECT_EQ(unsealed, 0u);
  const auto a = stats(*g, 0);
  const auto b = stats(*g, 1);
  EXPECT_EQ(tunnel7(a).at("auth").at("cipher").as_string(), aead::to_string(GetParam()));
  EXPECT_GE(auth_count(a, "sealed_packets"), flows[0].accepted);
  EXPECT_GE(auth_count(b, "opened_packets"), flows[0].accepted);
  EXPECT_EQ(auth_count(b, "new_sessions"), 1u);  // one sender session
  EXPECT_EQ(auth_drop(b, "auth_failed"), 0u);
  // The control exchange runs sealed too: the peer is up and the clock has samples.
  EXPECT_TRUE(g->engine(1).peer_status(0).up);
  EXPECT_GT(g->engine(1).peer_status(0).clock_samples, 0u);
  // The secret is never shown, its fingerprint is.
  const std::string text = g->engine(1).stats_json(g->engine_now_ns(1));
  EXPECT_EQ(text.find(std::string(64, '1')), std::string::npos);
  EXPECT_NE(text.find(aead::fingerprint(key_of('1'))), std::string::npos);
  EXPECT_EQ(g->bad_frees(), 0u);
}

TEST_P(EngineAuth, CorruptedAndTruncatedPacketsAreNeverDelivered) {
  // The baseline without keys in the same conditions delivers damaged packets; with keys none.
  uint64_t damaged[2] = {0, 0};
  uint64_t refused_by_auth = 0, delivered = 0;
  for (int keyed = 0; keyed < 2; ++keyed) {
    std::optional<TunnelAuth> auth;
    if (keyed == 1) auth = auth_with(GetParam(), {1}, 1);
    auto g = two_sites(site(auth), site(auth));
    ASSERT_NE(g, nullptr);
    g->set_faults(0, 1, {.delay_ns = 1 * kMs, .corrupt = 0.05, .truncate = 0.02});
    g->set_faults(1, 0, {.delay_ns = 1 * kMs});
    Intact rx;
    g->set_delivery_observer([&](const Delivery& d) {
      if (d.engine == 1) rx.add(d);
    });
    std::vector<Flow> flows;
    flows.push_back(flow(0, 2, 80, 1, 100e6));
    drive(*g, flows, kStartNs + 200 * kMs);
    g->run_until(kStartNs + 210 * kMs);
    damaged[keyed] = rx.damaged;
    if (keyed == 1) {
      const auto b = stats(*g, 1);
      refused_by_auth = auth_drop(b, "auth_failed") + auth_drop(b, "auth_truncated");
      delivered = rx.log.count(1);
      EXPECT_GT(g->wan_counters().corrupted, 50u);
      EXPECT_GT(delivered, flows[0].accepted * 8 / 10);
    }
  }
  // The baseline really delivers damage (few packets: a corrupted sequence number soon slides
  // its window, and everything after is too_old, as the unauthenticated tunnel's documented
  // weakness says).
  EXPECT_GT(damaged[0], 0u);
  EXPECT_EQ(damaged[1], 0u);
  EXPECT_GT(refused_by_auth, 50u);
}

// A WAN datagram a -> b carrying tunnel 7 data, as captured on the wire.
struct Captured {
  std::vector<std::byte> bytes;
  gw::Endpoint source;
};

TEST_P(EngineAuth, ForgedAndReplayedPacketsTouchNoState) {
  const TunnelAuth auth = auth_with(GetParam(), {1}, 1);
  auto g = two_sites(site(auth), site(auth));
  ASSERT_NE(g, nullptr);
  g->set_faults(0, 1, {.delay_ns = 1 * kMs});
  g->set_faults(1, 0, {.delay_ns = 1 * kMs});
  Intact rx;
  g->set_delivery_observer([&](const Delivery& d) {
    if (d.engine == 1) rx.add(d);
  });
  std::vector<Captured> captured;
  g->set_wire_observer([&](const loopback::Gateway::WireRecord& w) {
    const auto h = wire::decode(w.bytes);
    if (w.from == 0 && h.ok() && h->header.is_data() && h->header.tunnel_id == 7 &&
        captured.size() < 4) {
      captured.push_back({{w.bytes.begin(), w.bytes.end()}, w.source});
    }
  });
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 50e6));
  drive(*g, flows, kStartNs + 50 * kMs);
  ASSERT_EQ(captured.size(), 4u);
  const auto before = tunnel7(stats(*g, 1)).at("rx").at("replay_top").to_number<uint64_t>();

  // 1. A forged packet: a captured one with its sequence number pushed far ahead (the header
  //    is authenticated, so the tag no longer matches) -- it must not slide the window.
  std::vector<std::byte> forged = captured[0].bytes;
  forged[wire::kSequenceOffset] = std::byte{0x00};
  forged[wire::kSequenceOffset + 1] = std::byte{0x10};
  g->inject_wan(1, 0, captured[0].source, forged);
  // 2. Sealed under another key (an attacker's own), with a far sequence number.
  auto wrong = aead::AeadKey::create(GetParam(), key_of('9'));
  ASSERT_TRUE(wrong.has_value());
  std::vector<std::byte> other = captured[1].bytes;
  other[wire::kSequenceOffset + 1] = std::byte{0x20};
  ASSERT_NE(aead::seal_packet(*wrong, other, other.size() - wire::kHeaderSize - aead::kTagBytes),
            0u);
  g->inject_wan(1, 0, captured[1].source, other);
  // 3. Without flag A (an unauthenticated packet into an authenticated tunnel).
  std::vector<std::byte> bare = captured[2].bytes;
  bare[wire::kFlagsOffset] = std::byte{wire::kFlagData};
  for (int i = 0; i < 4; ++i) bare[wire::kSessionOffset + i] = std::byte{0};
  g->inject_wan(1, 0, captured[2].source, bare);
  // 4. Truncated below a tag.
  std::vector<std::byte> cut(captured[3].bytes.begin(),
                             captured[3].bytes.begin() + wire::kHeaderSize + 8);
  cut[wire::kPayloadLengthOffset] = std::byte{0};
  cut[wire::kPayloadLengthOffset + 1] = std::byte{8};
  g->inject_wan(1, 0, captured[3].source, cut);
  // 5. A verbatim replay of a genuine packet.
  g->inject_wan(1, 0, captured[0].source, captured[0].bytes);
  g->run_until(kStartNs + 52 * kMs);

  const auto mid = stats(*g, 1);
  EXPECT_EQ(auth_drop(mid, "auth_failed"), 2u);
  EXPECT_EQ(auth_drop(mid, "auth_missing"), 1u);
  EXPECT_EQ(auth_drop(mid, "auth_truncated"), 1u);
  EXPECT_EQ(g->engine(1).drops(EngineDrop::kAuthFailed), 2u);
  EXPECT_EQ(tunnel7(mid).at("rx").at("replay_drops").at("duplicate").to_number<uint64_t>(), 1u);
  const auto top = tunnel7(mid).at("rx").at("replay_top").to_number<uint64_t>();
  EXPECT_GE(top, before);
  EXPECT_LT(top, uint64_t{1} << 40);  // no forged sequence number moved the window
  // Genuine traffic goes on, delivered in full and once.
  drive(*g, flows, kStartNs + 150 * kMs);
  g->run_until(kStartNs + 160 * kMs);
  EXPECT_EQ(rx.log.count(1), flows[0].accepted);
  EXPECT_EQ(rx.log.repeated(), 0u);
  EXPECT_EQ(rx.damaged, 0u);
  EXPECT_EQ(g->bad_frees(), 0u);
}

TEST_P(EngineAuth, KeysRotateWithoutLosingAPacket) {
  auto g = two_sites(site(auth_with(GetParam(), {1}, 1)), site(auth_with(GetParam(), {1}, 1)));
  ASSERT_NE(g, nullptr);
  for (uint32_t from = 0; from < 2; ++from) g->set_faults(from, 1 - from, {.delay_ns = 1 * kMs});
  Intact rx_b, rx_a;
  rx_a.site = 1;
  g->set_delivery_observer([&](const Delivery& d) { (d.engine == 1 ? rx_b : rx_a).add(d); });
  std::vector<Flow> flows;
  flows.push_back(flow(0, 2, 80, 1, 50e6));
  Flow back = flow(1, 1, 80, 2, 20e6);
  const auto set_keys = [&](uint32_t engine, const TunnelAuth& auth) {
    TunnelChanges changes;
    for (const TunnelConfig& t : g->engine(engine).config().tunnels) {
      TunnelConfig next = t;
      next.auth = auth;
      changes.modify.push_back(next);
    }
    const auto applied = g->engine(engine).apply_st(changes, g->engine_now_ns(engine));
    ASSERT_TRUE(applied.has_value()) << applied.error().message;
  };
  flows.push_back(back);
  // (1) both ends hold keys 1 and 2, sealing with 1; (2) b, then a, seal with 2; (3) key 1 goes.
  drive(*g, flows, kStartNs + 50 * kMs);
  set_keys(0, auth_with(GetParam(), {1, 2}, 1));
  set_keys(1, auth_with(GetParam(), {1, 2}, 1));
  drive(*g, flows, kStartNs + 100 * kMs);
  set_keys(1, auth_with(GetParam(), {1, 2}, 2));
  drive(*g, flows, kStartNs + 130 * kMs);
  set_keys(0, auth_with(GetParam(), {1, 2}, 2));
  drive(*g, flows, kStartNs + 200 * kMs);  // in flight under key 1 have arrived by now
  set_keys(0, auth_with(GetParam(), {2}, 2));
  set_keys(1, auth_with(GetParam(), {2}, 2));
  drive(*g, flows, kStartNs + 300 * kMs);
  g->run_until(kStartNs + 310 * kMs);
  EXPECT_EQ(rx_b.log.count(1), flows[0].accepted);
  EXPECT_EQ(rx_a.log.count(2), flows[1].accepted);
  EXPECT_EQ(rx_b.damaged + rx_a.damaged, 0u);
  const auto b = stats(*g, 1);
  EXPECT_EQ(auth_drop(b, "auth_failed"), 0u);
  const auto t7 = tunnel7(b);
  EXPECT_EQ(t7.at("auth").at("tx_key").to_number<int>(), 2);
  EXPECT_GE(auth_count(b, "new_sessions"), 2u);  // a's session under key 1, then under key 2
  const auto& keys = t7.at("auth").at("keys").as_array();
  ASSERT_EQ(keys.size(), 1u);
  EXPECT_GT(keys[0].at("opened_packets").to_number<uint64_t>(), 100u);
  EXPECT_TRUE(g->engine(0).peer_status(0).up);
  EXPECT_EQ(g->bad_frees(), 0u);
}

TEST_P(EngineAuth, ARestartedGatewayIsAcceptedAgain) {
  const TunnelAuth auth = auth_with(GetParam(), {1}, 1);
  auto g = two_sites(site(auth), site(auth));
  ASSERT_NE(g, nullptr);
  for (uint32_t from = 0; from < 2; ++from) g->set_faults(from, 1 - from, {.delay_ns = 1 * kMs});
  Intact rx;
  g->set_delivery_observer([&](const Delivery& d) {
    if (d.engine == 1) rx.add(d);
  });
  std::vector<Captured> old_packets;
  g->set_wire_observer([&](const loopback::Gateway::WireRecord& w) {
    const auto h = wire::decode(w.bytes);
    if (w.from == 0 && h.ok() && h->header.is_data() && h->header.tunnel_id == 7) {
      old_packets.assign(1, {{w.bytes.begin(), w.bytes.end()}, w.source});  // the latest
    }
  });
  std::vector<Flow> before;
  before.push_back(flow(0, 2, 80, 1, 50e6));
  drive(*g, before, kStartNs + 100 * kMs);
  g->run_until(kStartNs + 110 * kMs);
  const auto last_before = old_packets;
  ASSERT_TRUE(g->restart(0).has_value());
  const int64_t resume = kStartNs + 116 * kMs;
  std::vector<Flow> after;
  after.push_back(flow(0, 2, 80, 2, 50e6, 200, 1400, resume));
  drive(*g, after, resume + 20 * kMs);  // fewer packets than before: lower sequence numbers
  g->run_until(resume + 40 * kMs);
  EXPECT_EQ(rx.log.count(1), before[0].accepted);
  EXPECT_EQ(rx.log.count(2), after[0].accepted);  // a new session, accepted at once
  const auto b = stats(*g, 1);
  EXPECT_EQ(auth_count(b, "new_sessions"), 2u);
  EXPECT_EQ(tunnel7(b).at("rx").at("peer_restarts").to_number<uint64_t>(), 1u);
  // The last packet before the restart, replayed after it: its tag is genuine, but under the
  // keys of a's earlier epoch (docs/wire-format.md, "Key schedule"), so it does not even open.
  ASSERT_EQ(last_before.size(), 1u);
  const uint64_t failed = auth_drop(b, "auth_failed");
  g->run_until(kStartNs + 300 * kMs);
  g->inject_wan(1, 0, last_before[0].source, last_before[0].bytes);
  g->run_until(kStartNs + 310 * kMs);
  const auto late = stats(*g, 1);
  EXPECT_EQ(auth_drop(late, "auth_failed"), failed + 1);
  EXPECT_EQ(rx.log.repeated(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Ciphers, EngineAuth,
                         ::testing::Values(aead::Cipher::kAes256Gcm,
                                           aead::Cipher::kChacha20Poly1305),
                         [](const auto& info) {
                           return info.param == aead::Cipher::kAes256Gcm ? std::string("aes256gcm")
                                                                         : std::string("chacha20");
                         });

TEST(EngineAuthUnkeyed, FlagAOnATunnelWithoutKeysIsRefused) {
  auto g = two_sites(site(std::nullopt), site(std::nullopt));
  ASSERT_NE(g, nullptr);
  wire::TunnelHeader h;
  h.flags = wire::kFlagData | wire::kFlagAuth;
  h.session = 5;
  h.tunnel_id = 7;
  h.tx_time_ns = kStartNs;
  h.type = static_cast<uint8_t>(wire::DataType::kIpv4);
  h.payload_length = 40;
  std::vector<std::byte> bytes(wire::kHeaderSize + 40);
  ASSERT_EQ(wire::encode(h, bytes).status, wire::EncodeStatus::kOk);
  g->inject_wan(1, 0, g->engine(0).config().wan_ports[0].local, bytes);
  g->run_until(kStartNs + 1 * kMs);
  EXPECT_EQ(g->engine(1).drops(EngineDrop::kAuthUnexpected), 1u);
  EXPECT_EQ(tunnel7(stats(*g, 1)).at("auth").at("drops").at("auth_unexpected").to_number<int>(),
            1);
}

}  // namespace
}  // namespace detwan::dataplane::gw

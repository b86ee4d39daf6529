// The engine through its own API, without a backend: setup errors, submit statuses, the header
// of every emitted frame, control packets, and every return value of on_wan_datagram_st.
#include "dataplane/gw/engine.h"

#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dataplane/wire/control.h"
#include "tests/dataplane/gw/engine_test_util.h"

namespace detwan::dataplane::gw {
namespace {


using common::Status;
using testing::Bytes;
using testing::ipv4_packet;
using testing::kMs;
using testing::kUs;
using testing::site_config;
using testing::SiteOptions;

// on_wan_datagram_st decrypts in place, so it takes mutable bytes: a copy of the test's.
Status receive(Engine& e, uint32_t port, const Endpoint& from, uint64_t handle, Bytes bytes,
               int64_t now_ns, RxInfo* info) {
  return e.on_wan_datagram_st(port, from, handle, bytes, now_ns, info);
}

constexpr int64_t kStart = 1'000'000'000'000;       // a cycle boundary (cycles are 1 ms from 0)
constexpr uint8_t kToTunnel7[4] = {10, 2, 0, 5};    // site a -> b, tunnel 7 (any port)
constexpr uint8_t kToTunnel9[4] = {10, 102, 0, 5};  // site a -> b, tunnel 9 (ports 5000-5999)

std::unique_ptr<Engine> make(int site, const SiteOptions& o = {}) {
  auto e = Engine::create(site_config(site, o), kStart);
  EXPECT_TRUE(e.has_value()) << e.error().describe();
  return e ? std::move(*e) : nullptr;
}

struct Emitted {
  TxEmit emit;
  int64_t now_ns = 0;
  Bytes datagram;  // header + payload as a backend would send it
};

// A minimal backend: payloads by handle, and a poll loop that runs the engine's tx side at
// every instant it names up to `until_ns` (without `control`: only the scheduler's instants, the
// control timers are not run).
class Harness {
 public:
  explicit Harness(Engine& e) : e_(e) {}
  Status submit(const Bytes& ip, int64_t now_ns) {
    const uint64_t h = next_handle_++;
    payloads_[h] = ip;
    const Status s = e_.submit_tun_st(h, ip, now_ns);
    if (s != Status::kOk) payloads_.erase(h);
    return s;
  }
  std::vector<Emitted> run_tx(int64_t until_ns, bool control = false) {
    std::vector<Emitted> out;
    const auto next = [&] {
      return control ? e_.next_event_ns() : e_.scheduler(0).next_event_ns();
    };
    for (int64_t t = next(); t <= until_ns; t = next()) {
      if (control) e_.poll_control_st(t);
      const uint32_t n = e_.poll_tx_st(t, [&](const TxEmit& emit) {
        Emitted x{emit, t, {}};
        if (emit.control) {
          x.datagram.assign(emit.bytes.begin(), emit.bytes.end());
        } else if (emit.send) {
          const Bytes& payload = payloads_.at(emit.handle);
          wire::TunnelHeader h = emit.header;
          h.type = static_cast<uint8_t>(wire::DataType::kIpv4);
          x.datagram.resize(wire::kHeaderSize);
          EXPECT_EQ(wire::encode(h, x.datagram).status, wire::EncodeStatus::kOk);
          x.datagram.insert(x.datagram.end(), payload.begin(), payload.end());
        }
        x.emit.bytes = {};
        out.push_back(std::move(x));
      });
      if (n == 0 && !control) break;
    }
    return out;
  }

 private:
  Engine& e_;
  std::map<uint64_t, Bytes> payloads_;
  uint64_t next_handle_ = 1;
};

TEST(EngineCreate, ErrorsNameWhatIsWrong) {
  struct Case {
    const char* what;
    void (*mutate)(GatewayConfig&);
    const char* expected;
  };
  const Case cases[] = {
      {"no port", [](GatewayConfig& c) { c.wan_ports.clear(); }, "no WAN port"},
      {"duplicate port", [](GatewayConfig& c) { c.wan_ports.push_back(c.wan_ports[0]); },
       "port 'wan1': name used twice"},
      {"unknown peer", [](GatewayConfig& c) { c.tunnels[1].peer = "nobody"; },
       "tunnel 9: peer 'nobody'"},
      {"peer port", [](GatewayConfig& c) { c.peers[0].wan_port = "wan7"; },
       "peer 'site-b': wan_port 'wan7'"},
      {"duplicate id", [](GatewayConfig& c) { c.tunnels[1].id = 7; }, "tunnel 7: id used twice"},
      {"id 0", [](GatewayConfig& c) { c.tunnels[0].id = 0; }, "tunnel id 0"},
      {"slot range", [](GatewayConfig& c) { c.tunnels[1].slots.push_back(20); },
       "port 'wan1': gate control list: tunnel 9: slot 20 out of range [0, 20)"},
      {"replay bits", [](GatewayConfig& c) { c.tunnels[0].replay_window_bits = 1000; },
       "tunnel 7: replay window of 1000 bits"},
      {"max hold", [](GatewayConfig& c) { c.tunnels[0].max_hold_ns = 1 * kMs; },
       "tunnel 7: playout: max_hold_ns"},
      {"keepalive", [](GatewayConfig& c) { c.peers[0].keepalive_interval_ns = 10; },
       "peer 'site-b': keepalive_interval_ns 10 out of range"},
      {"dead after", [](GatewayConfig& c) { c.peers[0].dead_after_ns = 0; },
       "peer 'site-b': dead_after_ns"},
      {"mtu", [](GatewayConfig& c) { c.wan_ports[0].mtu_bytes = 60; },
       "port 'wan1': mtu 60 cannot hold"},
      {"ip version", [](GatewayConfig& c) { c.peers[0].endpoint = testing::v6_endpoint(2, 4789); },
       "peer 'site-b': endpoint is IPv6 but port 'wan1' is IPv4"},
      {"port range",
       [](GatewayConfig& c) {
         c.tunnels[1].udp_ports = {{9, 1}};
       },
       "tunnel 9: udp port range 9-1 is empty"},
      {"rate", [](GatewayConfig& c) { c.tunnels[0].rate_bps = 380'000'000; }, "tunnel 7"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    GatewayConfig config = site_config(0);
    c.mutate(config);
    auto e = Engine::create(config, kStart);
    ASSERT_FALSE(e.has_value());
    EXPECT_EQ(e.error().code, common::ErrorCode::kConfig);
    EXPECT_NE(e.error().message.find(c.expected), std::string::npos) << e.error().message;
  }
  auto ok = Engine::create(site_config(0), kStart);
  ASSERT_TRUE(ok.has_value()) << ok.error().describe();
  Engine& e = **ok;
  EXPECT_EQ(e.port_count(), 1u);
  EXPECT_EQ(e.tunnel_count(), 2u);
  EXPECT_EQ(e.peer_count(), 1u);
  EXPECT_EQ(e.tunnel_index(9), 1u);
  EXPECT_EQ(e.tunnel_index(8), Engine::kNoTunnel);
  EXPECT_EQ(e.max_payload_bytes(0), 1500u - 68u);
  EXPECT_EQ(e.max_payload_bytes(5), 0u);
}

TEST(EngineSubmit, StatusesAndDropReasons) {
  auto e = make(0);
  Harness h(*e);
  EXPECT_EQ(h.submit(Bytes(10), kStart), Status::kMalformed);
  EXPECT_EQ(e->drops(EngineDrop::kNotIp), 1u);
  const uint8_t nowhere[4] = {172, 16, 0, 1};
  EXPECT_EQ(h.submit(ipv4_packet(nowhere, 80, 100, {}), kStart), Status::kDropped);
  EXPECT_EQ(e->drops(EngineDrop::kNoRoute), 1u);
  EXPECT_EQ(h.submit(ipv4_packet(kToTunnel7, 80, 1433, {}), kStart), Status::kDropped);
  EXPECT_EQ(e->drops(EngineDrop::kTooBig), 1u);
  EXPECT_EQ(h.submit(ipv4_packet(kToTunnel7, 80, 1432, {}), kStart), Status::kOk);
  const Bytes ip = ipv4_packet(kToTunnel7, 80, 100, {});
  EXPECT_EQ(e->submit_tun_st(Engine::kControlHandleTag | 5, ip, kStart), Status::kInvalidArgument);
  EXPECT_EQ(e->submit_service_st(2, 9, 100, kStart), Status::kInvalidArgument);
  EXPECT_EQ(e->submit_service_st(1, 9, 1433, kStart), Status::kDropped);
  EXPECT_EQ(e->drops(EngineDrop::kTooBig), 2u);
  EXPECT_EQ(e->submit_service_st(1, 9, 1432, kStart), Status::kOk);
  EXPECT_EQ(std::string(to_string(EngineDrop::kControlBacklog)), "control_backlog");
  EXPECT_EQ(std::string(to_string(EngineDrop::kCount)), "unknown");
}

TEST(EngineTx, HeadersOfTunnelFramesAndSequenceInDepartureOrder) {
  auto e = make(0);
  Harness h(*e);
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_EQ(h.submit(ipv4_packet(kToTunnel7, 80, 1000 + 100 * i, {1, i}), kStart), Status::kOk);
  }
  const std::vector<Emitted> out = h.run_tx(kStart + 1 * kMs);
  ASSERT_EQ(out.size(), 3u);
  int64_t previous_end = 0;
  for (uint64_t i = 0; i < 3; ++i) {
    const TxEmit& x = out[i].emit;
    SCOPED_TRACE(i);
    EXPECT_FALSE(x.control);
    EXPECT_TRUE(x.send);
    EXPECT_FALSE(x.best_effort);
    EXPECT_EQ(x.port_index, 0u);
    EXPECT_EQ(x.tunnel_index, 0u);
    ASSERT_NE(x.destination, nullptr);
    EXPECT_EQ(*x.destination, e->config().peers[0].endpoint);
    EXPECT_EQ(x.dscp, 46);
    EXPECT_EQ(x.header.flags, wire::kFlagData);
    EXPECT_EQ(x.header.tunnel_id, 7u);
    EXPECT_EQ(x.header.path_id, 0);
    EXPECT_EQ(x.header.sequence, i);
    EXPECT_EQ(x.header.payload_length, 1000 + 100 * i);
    EXPECT_EQ(x.header.cycle_id, static_cast<uint64_t>(kStart / kMs));
    // The timestamp is when the packet entered the tunnel (all three at kStart), not when it
    // left: the far end's on-time release then absorbs the wait for the slot too.
    EXPECT_EQ(x.header.tx_time_ns, kStart);
    EXPECT_EQ(x.departure_ns, out[i].now_ns);
    EXPECT_EQ(x.wire_bytes, 1000 + 100 * i + 68 + 18);
    // Back to back at 1 Gbit/s: 8 ns per byte.
    EXPECT_EQ(x.tx_end_ns - x.departure_ns, 8 * static_cast<int64_t>(x.wire_bytes));
    EXPECT_GE(x.departure_ns, previous_end);
    previous_end = x.tx_end_ns;
  }
  EXPECT_EQ(out[0].now_ns, kStart);
}

TEST(EngineTx, UnmatchedPortTravelsBestEffortInFreeSlots) {
  auto e = make(0);
  Harness h(*e);
  ASSERT_EQ(h.submit(ipv4_packet(kToTunnel9, 80, 500, {}), kStart), Status::kOk);    // port miss
  ASSERT_EQ(h.submit(ipv4_packet(kToTunnel9, 5001, 500, {}), kStart), Status::kOk);  // tunnel 9
  const std::vector<Emitted> out = h.run_tx(kStart + 1 * kMs);
  ASSERT_EQ(out.size(), 2u);
  // Best effort's first window is slot 8 (400 us); tunnel 9's is slot 10 (500 us).
  EXPECT_TRUE(out[0].emit.best_effort);
  EXPECT_EQ(out[0].now_ns, kStart + 400 * kUs);
  EXPECT_EQ(out[0].emit.header.flags, wire::kFlagData | wire::kFlagBestEffort);
  EXPECT_EQ(out[0].emit.header.tunnel_id, 9u);
  EXPECT_EQ(out[0].emit.dscp, 10);
  EXPECT_EQ(out[0].emit.header.sequence, 0u);
  EXPECT_FALSE(out[1].emit.best_effort);
  EXPECT_EQ(out[1].now_ns, kStart + 500 * kUs);
  EXPECT_EQ(out[1].emit.header.flags, wire::kFlagData);
  EXPECT_EQ(out[1].emit.dscp, 34);
  EXPECT_EQ(out[1].emit.header.sequence, 1u);  // one sequence space per tunnel
  const auto* be = e->scheduler(0).tunnel_counters(9);
  ASSERT_NE(be, nullptr);
  EXPECT_EQ(be->sent_packets, 1u);
  EXPECT_EQ(e->scheduler(0).best_effort_counters().sent_packets, 1u);
}

// The engine was polled too late for a frame to end inside its window: the scheduler moves it
// to the tunnel's next window (MissedSlot::kNextWindow, the default).
TEST(EngineTx, AFrameThatMissedItsWindowLeavesInTheNextOne) {
  auto e = make(0);
  Harness h(*e);
  ASSERT_EQ(h.submit(ipv4_packet(kToTunnel7, 80, 1400, {}), kStart), Status::kOk);
  std::vector<TxEmit> out;
  (void)e->poll_tx_st(kStart + 500 * kUs, [&](const TxEmit& x) { out.push_back(x); });
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(e->scheduler(0).next_event_ns(), kStart + 1 * kMs);
  const auto next = h.run_tx(kStart + 2 * kMs);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_TRUE(next[0].emit.send);
  EXPECT_EQ(next[0].now_ns, kStart + 1 * kMs);
  EXPECT_EQ(next[0].emit.header.sequence, 0u);
  EXPECT_EQ(next[0].emit.header.cycle_id, static_cast<uint64_t>(kStart / kMs) + 1);
  EXPECT_EQ(e->scheduler(0).tunnel_counters(7)->rescheduled, 1u);
}

// ... unless it may not wait that long (max_wait) or the tunnel's policy drops missed frames:
// then it is handed back unsent, counted.
TEST(EngineTx, MissedSlotFramesThatMayNotWaitAreHandedBackNotSent) {
  for (const bool by_policy : {false, true}) {
    SCOPED_TRACE(by_policy ? "missed_slot: drop" : "max_wait 300us");
    GatewayConfig c = site_config(0);
    if (by_policy) {
      c.tunnels[0].missed_slot = sched::MissedSlot::kDrop;
    } else {
      c.tunnels[0].max_wait_ns = 300 * kUs;
    }
    auto created = Engine::create(c, kStart);
    ASSERT_TRUE(created.has_value()) << created.error().describe();
    Engine& e = **created;
    Harness h(e);
    ASSERT_EQ(h.submit(ipv4_packet(kToTunnel7, 80, 1400, {}), kStart), Status::kOk);
    std::vector<TxEmit> out;
    (void)e.poll_tx_st(kStart + 500 * kUs, [&](const TxEmit& x) { out.push_back(x); });
    ASSERT_EQ(out.size(), 1u);
    EXPECT_FALSE(out[0].send);
    EXPECT_EQ(out[0].handle, 1u);
    const sched::TxCounters& c7 = *e.scheduler(0).tunnel_counters(7);
    EXPECT_EQ(c7.dropped[static_cast<int>(sched::TxDrop::kMissedSlot)], 1u);
    EXPECT_EQ(c7.rescheduled, 0u);
    // The next frame still gets sequence 0: missed frames take no number.
    ASSERT_EQ(h.submit(ipv4_packet(kToTunnel7, 80, 100, {}), kStart + 1 * kMs), Status::kOk);
    const auto next = h.run_tx(kStart + 2 * kMs);
    ASSERT_EQ(next.size(), 1u);
    EXPECT_EQ(next[0].emit.header.sequence, 0u);
    EXPECT_NE(e.stats_json(kStart + 2 * kMs).find("\"missed_slot_packets\":1"), std::string::npos);
  }
}

TEST(EngineControl, TimeRequestAndKeepaliveLeaveAtOnceInTheControlTunnel) {
  auto e = make(0);
  EXPECT_EQ(e->next_event_ns(), kStart);  // first exchange immediately
  Harness h(*e);
  const auto out = h.run_tx(kStart + 10 * kUs, /*control=*/true);
  ASSERT_EQ(out.size(), 2u);
  for (const Emitted& x : out) {
    EXPECT_TRUE(x.emit.control);
    EXPECT_EQ(x.emit.header.tunnel_id, 7u);
    EXPECT_EQ(x.emit.tunnel_index, 0u);
    EXPECT_FALSE(x.emit.best_effort);
    const auto packet = wire::decode(x.datagram);
    ASSERT_TRUE(packet.ok()) << to_string(packet.error());
    EXPECT_TRUE(packet->header.is_control());
    EXPECT_EQ(packet->header.tx_time_ns, x.now_ns);
    const auto body = wire::decode_control(*packet);
    ASSERT_TRUE(body.ok());
    if (const auto* request = std::get_if<wire::TimeRequest>(&*body)) {
      EXPECT_EQ(request->t1_ns, x.now_ns);
      EXPECT_EQ(request->exchange_id, 1u);
    } else {
      const auto* keepalive = std::get_if<wire::Keepalive>(&*body);
      ASSERT_NE(keepalive, nullptr);
      EXPECT_EQ(keepalive->counter, 1u);
      EXPECT_EQ(keepalive->interval_ns, 5 * kMs);
      EXPECT_EQ(keepalive->last_rx_counter, 0u);
    }
  }
  // The next ones are due one interval later.
  EXPECT_EQ(e->next_event_ns(), kStart + 5 * kMs);
  // Control sequence numbers count per peer.
  EXPECT_EQ(wire::decode(out[0].datagram)->header.sequence, 0u);
  EXPECT_EQ(wire::decode(out[1].datagram)->header.sequence, 1u);
}

TEST(EngineControl, APeerWithoutTunnelExchangesNothingAndSaysSo) {
  GatewayConfig c = site_config(0);
  PeerConfig lonely = c.peers[0];
  lonely.name = "site-c";
  lonely.endpoint.address[3] = 3;
  c.peers.push_back(lonely);
  auto created = Engine::create(c, kStart);
  ASSERT_TRUE(created.has_value()) << created.error().describe();
  Engine& e = **created;
  EXPECT_TRUE(e.peer_status(0).has_control_tunnel);
  EXPECT_FALSE(e.peer_status(1).has_control_tunnel);
  Harness h(e);
  const auto out = h.run_tx(kStart + 10 * kUs, /*control=*/true);
  EXPECT_EQ(out.size(), 2u);  // site-b's request and keepalive only
  for (const Emitted& x : out) EXPECT_EQ(*x.emit.destination, c.peers[0].endpoint);
  const std::string stats = e.stats_json(kStart + 10 * kUs);
  EXPECT_NE(stats.find("\"name\":\"site-c\",\"port\":\"wan1\",\"state\":\"down\","
                       "\"control_tunnel\":null"),
            std::string::npos)
      << stats;
}

// A datagram from site b to site a.
Bytes datagram(wire::TunnelHeader h, std::size_t payload_bytes) {
  h.payload_length = static_cast<uint16_t>(payload_bytes);
  Bytes b(wire::kHeaderSize + payload_bytes, std::byte{0x11});
  EXPECT_EQ(wire::encode(h, b).status, wire::EncodeStatus::kOk);
  return b;
}

wire::TunnelHeader data_header(uint32_t tunnel, uint64_t sequence, int64_t tx_ns) {
  wire::TunnelHeader h;
  h.flags = wire::kFlagData;
  h.type = static_cast<uint8_t>(wire::DataType::kIpv4);
  h.tunnel_id = tunnel;
  h.sequence = sequence;
  h.tx_time_ns = tx_ns;
  return h;
}

Bytes control(const wire::ControlBody& body, uint32_t tunnel = 7) {
  wire::TunnelHeader h;
  h.tunnel_id = tunnel;
  h.tx_time_ns = kStart;
  Bytes b(wire::kHeaderSize + 32);
  const auto r = wire::encode_control(h, body, b);
  EXPECT_EQ(r.status, wire::EncodeStatus::kOk);
  b.resize(r.size);
  return b;
}

TEST(EngineRx, EveryReturnValueOfOnWanDatagram) {
  SiteOptions o;
  o.second_port = true;
  o.peer_clock_offset_ns = 0;
  auto e = make(0, o);
  const Endpoint peer = e->config().peers[0].endpoint;
  const int64_t now = kStart + 1 * kMs;
  RxInfo info;
  const auto rx = [&](Bytes d, uint32_t port = 0, const Endpoint* from = nullptr) {
    return e->on_wan_datagram_st(port, from ? *from : peer, 77, d, now, &info);
  };

  EXPECT_EQ(rx(datagram(data_header(7, 5, kStart), 100)), Status::kOk);
  EXPECT_EQ(info.tunnel_index, 0u);
  EXPECT_EQ(info.type, wire::DataType::kIpv4);
  EXPECT_EQ(info.payload_offset, wire::kHeaderSize);
  EXPECT_EQ(info.payload_bytes, 100u);
  EXPECT_TRUE(e->peer_status(0).up);

  EXPECT_EQ(rx(datagram(data_header(7, 5, kStart), 100)), Status::kDropped);
  EXPECT_EQ(e->rx_drops(0)[wire::DropReason::kDuplicate], 1u);
  EXPECT_EQ(rx(datagram(data_header(7, 100000, kStart), 10)), Status::kOk);
  EXPECT_EQ(rx(datagram(data_header(7, 5, kStart), 10)), Status::kDropped);
  EXPECT_EQ(e->rx_drops(0)[wire::DropReason::kTooOld], 1u);

  EXPECT_EQ(rx(Bytes(39)), Status::kMalformed);
  EXPECT_EQ(e->rx_drops(0)[wire::DropReason::kTooShort], 1u);
  EXPECT_EQ(rx(datagram(data_header(7, 6, kStart), 1433)), Status::kMalformed);
  EXPECT_EQ(e->rx_drops(0)[wire::DropReason::kOversize], 1u);

  EXPECT_EQ(rx(datagram(data_header(8, 1, kStart), 10)), Status::kDropped);
  EXPECT_EQ(e->drops(EngineDrop::kUnknownTunnel), 1u);
  Endpoint stranger = peer;
  stranger.port = 1;
  EXPECT_EQ(rx(datagram(data_header(7, 7, kStart), 10), 0, &stranger), Status::kDropped);
  EXPECT_EQ(e->drops(EngineDrop::kWrongPeer), 1u);
  EXPECT_EQ(rx(datagram(data_header(7, 8, kStart), 10), 1), Status::kDropped);
  EXPECT_EQ(e->drops(EngineDrop::kWrongPort), 1u);
  wire::TunnelHeader other_path = data_header(7, 9, kStart);
  other_path.path_id = 1;
  EXPECT_EQ(rx(datagram(other_path, 10)), Status::kDropped);
  EXPECT_EQ(e->drops(EngineDrop::kUnknownPath), 1u);
  EXPECT_EQ(receive(*e, 2, peer, 1, datagram(data_header(7, 10, kStart), 1), now, &info),
            Status::kInvalidArgument);

  // A timestamp so far ahead that the target is beyond max_hold: the playout refuses it.
  EXPECT_EQ(rx(datagram(data_header(7, 100001, kStart + 10'000 * kMs), 10)), Status::kDropped);
  EXPECT_EQ(e->playout(0).counters().dropped[static_cast<int>(sched::PlayoutDrop::kTooEarly)], 1u);

  // Control: consumed (kBusy), or malformed bodies counted.
  EXPECT_EQ(rx(control(wire::Keepalive{3, 5 * kMs, 0})), Status::kBusy);
  EXPECT_EQ(rx(control(wire::Keepalive{4, 5 * kMs, 0}, 9)),
            Status::kBusy);  // any tunnel of the peer
  Bytes bad = control(wire::Keepalive{3, 5 * kMs, 0});
  bad[wire::kHeaderSize + 7] = std::byte{0};  // counter 0
  EXPECT_EQ(rx(bad), Status::kMalformed);
  EXPECT_EQ(e->rx_drops(0)[wire::DropReason::kBadControl], 1u);
  const std::string stats = e->stats_json(now);
  EXPECT_NE(stats.find("\"received\":2"), std::string::npos) << stats;
  EXPECT_NE(stats.find("\"last_rx_counter\":4"), std::string::npos) << stats;
}

TEST(EngineRx, TimeRequestsAreAnsweredWithTheirReceiveAndTransmitTimes) {
  auto e = make(0);
  const Endpoint peer = e->config().peers[0].endpoint;
  RxInfo info;
  const int64_t t2 = kStart + 100 * kUs;  // inside tunnel 7's window
  EXPECT_EQ(receive(*e, 0, peer, 1, control(wire::TimeRequest{42, 123}), t2, &info),
            Status::kBusy);
  std::vector<Bytes> sent;
  int64_t sent_at = 0;
  const int64_t t = e->scheduler(0).next_event_ns();
  (void)e->poll_tx_st(t, [&](const TxEmit& x) {
    ASSERT_TRUE(x.control);
    sent.emplace_back(x.bytes.begin(), x.bytes.end());
    sent_at = t;
  });
  ASSERT_EQ(sent.size(), 1u);
  const auto packet = wire::decode(sent[0]);
  ASSERT_TRUE(packet.ok());
  const auto body = wire::decode_control(*packet);
  ASSERT_TRUE(body.ok());
  const auto* response = std::get_if<wire::TimeResponse>(&*body);
  ASSERT_NE(response, nullptr);
  EXPECT_EQ(response->exchange_id, 42u);
  EXPECT_EQ(response->t1_ns, 123);
  EXPECT_EQ(response->t2_ns, t2);
  EXPECT_EQ(response->t3_ns, sent_at);
  // A response to no outstanding request is ignored by the estimator.
  EXPECT_EQ(
      receive(*e, 0, peer, 1, control(wire::TimeResponse{999, kStart, kStart, kStart}),
                            kStart + 200 * kUs, &info),
      Status::kBusy);
  EXPECT_EQ(e->peer_status(0).clock_samples, 0u);
  EXPECT_NE(e->stats_json(kStart + 200 * kUs).find("\"responses_ignored\":1"), std::string::npos);
}

// Releases take one playout at a time (O(1) per packet); a poll that spends its budget hands
// the next one to the next playout, so a backlog on one tunnel holds no other back.
TEST(EngineRx, ABudgetedPollMovesOnSoNoTunnelWaitsBehindAnotherBacklog) {
  SiteOptions o;
  o.peer_clock_offset_ns = 0;
  auto e = make(0, o);
  const Endpoint peer = e->config().peers[0].endpoint;
  RxInfo info;
  const int64_t arrival = kStart + 1 * kMs;
  // Tunnel 7 (bound 5 ms): 12 packets due at +5 ms; tunnel 9 (bound 0): 2 packets at once.
  for (uint64_t i = 0; i < 12; ++i) {
    ASSERT_EQ(
        receive(*e, 0, peer, 100 + i, datagram(data_header(7, i, kStart), 20), arrival, &info),
        Status::kOk);
  }
  const int64_t due = kStart + 5 * kMs;
  for (uint64_t i = 0; i < 2; ++i) {
    ASSERT_EQ(receive(*e, 0, peer, 200 + i, datagram(data_header(9, i, kStart), 20), due, &info),
              Status::kOk);
  }
  std::vector<std::vector<uint64_t>> polls;
  while (true) {
    std::vector<uint64_t> got;
    (void)e->poll_rx_st(
        due, [&](const RxEmit& x) { got.push_back(x.handle); }, 3);
    if (got.empty()) break;
    polls.push_back(got);
    ASSERT_LE(polls.size(), 10u);
  }
  std::vector<uint64_t> all;
  for (const auto& poll : polls) all.insert(all.end(), poll.begin(), poll.end());
  std::vector<uint64_t> tunnel7;
  std::vector<uint64_t> tunnel9;
  for (const uint64_t h : all) (h >= 200 ? tunnel9 : tunnel7).push_back(h);
  EXPECT_EQ(all.size(), 14u);  // each packet exactly once
  EXPECT_EQ(tunnel7,
            (std::vector<uint64_t>{100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111}));
  EXPECT_EQ(tunnel9, (std::vector<uint64_t>{200, 201}));
  // Tunnel 9's packets left within the first two polls of 3, not after tunnel 7's 12.
  const auto first9 = std::find(all.begin(), all.end(), 200u) - all.begin();
  EXPECT_LT(first9, 6);
  EXPECT_EQ(e->playout(0).held_frames() + e->playout(1).held_frames(), 0u);
}

TEST(EngineRx, BestEffortFramesSkipThePlayout) {
  SiteOptions o;
  o.peer_clock_offset_ns = 0;
  auto e = make(0, o);
  const Endpoint peer = e->config().peers[0].endpoint;
  RxInfo info;
  wire::TunnelHeader h = data_header(7, 1, kStart);
  h.flags |= wire::kFlagBestEffort;
  const int64_t arrival = kStart + 1 * kMs;  // bound 5 ms would hold an on-time packet to +5 ms
  ASSERT_EQ(receive(*e, 0, peer, 5, datagram(h, 20), arrival, &info), Status::kOk);
  ASSERT_EQ(
      receive(*e, 0, peer, 6, datagram(data_header(7, 2, kStart), 20), arrival, &info),
      Status::kOk);
  std::vector<RxEmit> out;
  EXPECT_EQ(e->poll_rx_st(arrival, [&](const RxEmit& x) { out.push_back(x); }), 1u);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].handle, 5u);
  EXPECT_TRUE(out[0].best_effort);
  EXPECT_FALSE(out[0].late);
  EXPECT_EQ(out[0].service_deliver, nullptr);
  EXPECT_EQ(e->playout(0).next_event_ns(), kStart + 5 * kMs);
  EXPECT_EQ(e->poll_rx_st(kStart + 5 * kMs - 1, [&](const RxEmit& x) { out.push_back(x); }), 0u);
  EXPECT_EQ(e->poll_rx_st(kStart + 5 * kMs, [&](const RxEmit& x) { out.push_back(x); }), 1u);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].handle, 6u);
  EXPECT_FALSE(out[1].best_effort);
  EXPECT_EQ(out[1].target_ns, kStart + 5 * kMs);
  EXPECT_EQ(out[1].tx_timestamp_ns, kStart);
  EXPECT_EQ(e->playout(0, true).counters().released_packets, 1u);
  EXPECT_EQ(e->playout(0).counters().playout_error_ns.max(), 0);
}

}  // namespace
}  // namespace detwan::dataplane::gw

// The engine through its own API, without a backend: setup errors, submit statuses, the header
// of every emitted frame and control packets (engine_rx_test.cc: the WAN -> local side).
#include "dataplane/gw/engine.h"

#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
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

TEST(EngineControl, AKeepaliveLeavesAtOnceAndTheTimeExchangeOnceThePeersEpochIsKnown) {
  auto e = make(0);
  EXPECT_EQ(e->next_event_ns(), kStart);  // first keepalive immediately
  Harness h(*e);
  const auto first = h.run_tx(kStart + 10 * kUs, /*control=*/true);
  ASSERT_EQ(first.size(), 1u);  // no time request before the peer's epoch is known
  const auto check_header = [&](const Emitted& x) {
    EXPECT_TRUE(x.emit.control);
    EXPECT_EQ(x.emit.header.tunnel_id, 7u);
    EXPECT_EQ(x.emit.tunnel_index, 0u);
    EXPECT_FALSE(x.emit.best_effort);
    const auto packet = wire::decode(x.datagram);
    EXPECT_TRUE(packet.ok() && packet->header.is_control());
    EXPECT_EQ(packet->header.tx_time_ns, x.now_ns);
    // A control packet's cycle_id is its sender's epoch (the boot id).
    EXPECT_EQ(fmt::format("{:016x}", packet->header.cycle_id), e->boot_id());
    return packet.ok() ? wire::decode_control(*packet) : wire::Decoded<wire::ControlBody>(
                                                              wire::DropReason::kTooShort);
  };
  const auto body = check_header(first[0]);
  ASSERT_TRUE(body.ok());
  const auto* keepalive = std::get_if<wire::Keepalive>(&*body);
  ASSERT_NE(keepalive, nullptr);
  EXPECT_EQ(keepalive->counter, 1u);
  EXPECT_EQ(keepalive->interval_ns, 5 * kMs);
  EXPECT_EQ(keepalive->last_rx_counter, 0u);
  EXPECT_EQ(keepalive->echo_epoch, 0u);  // nothing heard yet
  EXPECT_EQ(e->next_event_ns(), kStart + 5 * kMs);  // the next keepalive one interval later

  // The peer's keepalive (epoch 0xB0, answering ours): its epoch becomes the peer's, our next
  // keepalive echoes it, and the first time request leaves with an unpredictable exchange id.
  wire::TunnelHeader ph;
  ph.tunnel_id = 7;
  ph.cycle_id = 0xB0;
  ph.tx_time_ns = kStart;
  Bytes peer_keepalive(wire::kHeaderSize + wire::kKeepaliveBodySize);
  ASSERT_EQ(wire::encode_control(ph, wire::Keepalive{1, 5 * kMs, 1, 0xB0, 0}, peer_keepalive)
                .status,
            wire::EncodeStatus::kOk);
  RxInfo info;
  ASSERT_EQ(e->on_wan_datagram_st(0, e->config().peers[0].endpoint, 1, peer_keepalive,
                                  kStart + 1 * kMs, &info),
            Status::kBusy);
  const auto next = h.run_tx(kStart + 1 * kMs + 10 * kUs, /*control=*/true);
  ASSERT_EQ(next.size(), 2u);  // an early keepalive (it did not know us), the time request
  bool saw_request = false, saw_keepalive = false;
  for (const Emitted& x : next) {
    const auto b = check_header(x);
    ASSERT_TRUE(b.ok());
    if (const auto* request = std::get_if<wire::TimeRequest>(&*b)) {
      saw_request = true;
      EXPECT_EQ(request->t1_ns, x.now_ns);
      EXPECT_NE(request->exchange_id, 0u);
      EXPECT_NE(request->exchange_id, 1u);  // drawn, not counted
    } else if (const auto* k = std::get_if<wire::Keepalive>(&*b)) {
      saw_keepalive = true;
      EXPECT_EQ(k->counter, 2u);
      EXPECT_EQ(k->echo_epoch, 0xB0u);
      EXPECT_EQ(k->last_rx_counter, 1u);
    }
  }
  EXPECT_TRUE(saw_request && saw_keepalive);
  // Control sequence numbers count per peer.
  EXPECT_EQ(wire::decode(first[0].datagram)->header.sequence, 0u);
  EXPECT_EQ(wire::decode(next[0].datagram)->header.sequence, 1u);
  EXPECT_EQ(wire::decode(next[1].datagram)->header.sequence, 2u);
}

// next_tx_burst_st hands over what poll_tx_st does, in the same order, with every control frame
// last in its burst (its bytes live until the next dequeue): data of two tunnels, best effort and
// the control exchange, polled every 250 us for 12 ms (so that many frames are due at once),
// against a twin engine polled frame by frame.
TEST(EngineTx, BurstsHandOverWhatPollsDoAndAControlFrameEndsItsBurst) {
  struct Out {
    bool control;
    uint64_t handle;
    bool send;
    int64_t departure_ns;
    uint32_t tunnel_id;
    uint64_t sequence;
    int64_t now_ns;
    bool operator==(const Out&) const = default;
  };
  const auto run = [](uint32_t burst_size, uint32_t* control_not_last, uint32_t* largest) {
    auto e = make(0);
    Harness h(*e);
    for (uint8_t i = 0; i < 20; ++i) {
      EXPECT_EQ(h.submit(ipv4_packet(kToTunnel7, 80, 200 + 10 * i, {2, i}), kStart), Status::kOk);
      EXPECT_EQ(h.submit(ipv4_packet(kToTunnel9, 5001, 300, {3, i}), kStart), Status::kOk);
      EXPECT_EQ(h.submit(ipv4_packet(kToTunnel9, 80, 100, {4, i}), kStart), Status::kOk);
    }
    std::vector<Out> out;
    const auto record = [&](const TxEmit& x, int64_t t) {
      out.push_back(
          {x.control, x.handle, x.send, x.departure_ns, x.header.tunnel_id, x.header.sequence, t});
    };
    std::vector<TxEmit> burst(std::max(burst_size, 1u));
    for (int64_t t = kStart; t <= kStart + 12 * kMs; t += 250 * kUs) {
      e->poll_control_st(t);
      if (burst_size == 0) {
        (void)e->poll_tx_st(t, [&](const TxEmit& x) { record(x, t); });
        continue;
      }
      for (;;) {
        const uint32_t n = e->next_tx_burst_st(t, burst);
        *largest = std::max(*largest, n);
        for (uint32_t i = 0; i < n; ++i) {
          if (burst[i].control && i + 1 != n) ++*control_not_last;
          record(burst[i], t);
        }
        if (n < burst_size && (n == 0 || !burst[n - 1].control)) break;
      }
    }
    return out;
  };
  uint32_t unused = 0;
  uint32_t unused_largest = 0;
  const std::vector<Out> polled = run(0, &unused, &unused_largest);
  uint32_t controls = 0;
  for (const Out& x : polled) controls += x.control ? 1 : 0;
  // The keepalives ran (at 0, 5 and 10 ms; no time request: this engine has no peer that
  // answers, so the peer's epoch stays unknown).
  EXPECT_GE(controls, 3u);
  EXPECT_GE(polled.size(), 50u);
  for (const uint32_t size : {1u, 3u, 32u}) {
    uint32_t control_not_last = 0;
    uint32_t largest = 0;
    const std::vector<Out> bursts = run(size, &control_not_last, &largest);
    EXPECT_EQ(control_not_last, 0u) << size;
    EXPECT_GE(largest, std::min(size, 3u)) << "bursts of several frames were due";
    ASSERT_EQ(bursts.size(), polled.size()) << size;
    for (size_t i = 0; i < polled.size(); ++i) EXPECT_TRUE(bursts[i] == polled[i]) << i;
  }
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
  EXPECT_EQ(out.size(), 1u);  // site-b's keepalive only (no time request before its epoch)
  for (const Emitted& x : out) EXPECT_EQ(*x.emit.destination, c.peers[0].endpoint);
  const std::string stats = e.stats_json(kStart + 10 * kUs);
  EXPECT_NE(stats.find("\"name\":\"site-c\",\"port\":\"wan1\",\"state\":\"down\","
                       "\"control_tunnel\":null"),
            std::string::npos)
      << stats;
}

}  // namespace
}  // namespace detwan::dataplane::gw

// The engine's WAN -> local side: what on_wan_datagram_st answers, the control exchange's
// answers, and the release of accepted packets (engine_test.cc has the rest).
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dataplane/gw/engine.h"
#include "dataplane/wire/control.h"
#include "tests/dataplane/gw/engine_test_util.h"

namespace detwan::dataplane::gw {
namespace {

using common::Status;
using testing::Bytes;
using testing::kMs;
using testing::kUs;
using testing::site_config;
using testing::SiteOptions;

// on_wan_datagram_st decrypts in place, so it takes mutable bytes: a copy of the test's.
Status receive(Engine& e, uint32_t port, const Endpoint& from, uint64_t handle, Bytes bytes,
               int64_t now_ns, RxInfo* info) {
  return e.on_wan_datagram_st(port, from, handle, bytes, now_ns, info);
}

constexpr int64_t kStart = 1'000'000'000'000;  // a cycle boundary (cycles are 1 ms from 0)

std::unique_ptr<Engine> make(int site, const SiteOptions& o = {}) {
  auto e = Engine::create(site_config(site, o), kStart);
  EXPECT_TRUE(e.has_value()) << e.error().describe();
  return e ? std::move(*e) : nullptr;
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

// A control packet of the peer's boot with epoch 1 (a keepalive's default): its header names
// that epoch (cycle_id) and numbers control packets in order (the control replay window).
Bytes control(const wire::ControlBody& body, uint32_t tunnel = 7) {
  static uint64_t sequence = 0;
  wire::TunnelHeader h;
  h.tunnel_id = tunnel;
  h.tx_time_ns = kStart;
  h.cycle_id = 1;
  h.sequence = sequence++;
  Bytes b(wire::kHeaderSize + wire::kMaxControlBodySize);
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
  // Time requests are answered within the peer's current epoch only: a time request of an
  // epoch not (yet) the peer's is refused; its keepalive makes the epoch the peer's.
  EXPECT_EQ(receive(*e, 0, peer, 1, control(wire::TimeRequest{41, 122}), t2, &info),
            Status::kDropped);
  EXPECT_EQ(e->drops(EngineDrop::kControlStale), 1u);
  EXPECT_EQ(receive(*e, 0, peer, 1, control(wire::Keepalive{1, 5 * kMs, 0}), t2, &info),
            Status::kBusy);
  EXPECT_EQ(receive(*e, 0, peer, 1, control(wire::TimeRequest{42, 123}), t2, &info), Status::kBusy);
  std::vector<Bytes> sent;
  int64_t sent_at = 0;
  const int64_t t = e->scheduler(0).next_event_ns();
  (void)e->poll_tx_st(t, [&](const TxEmit& x) {
    ASSERT_TRUE(x.control);
    const auto p = wire::decode(x.bytes);
    ASSERT_TRUE(p.ok());
    if (p->header.control_type() != wire::ControlType::kTimeResponse) return;  // keepalives
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
  EXPECT_EQ(receive(*e, 0, peer, 1, control(wire::TimeResponse{999, kStart, kStart, kStart}),
                    kStart + 200 * kUs, &info),
            Status::kDropped);
  EXPECT_EQ(e->peer_status(0).clock_samples, 0u);
  EXPECT_NE(e->stats_json(kStart + 200 * kUs).find("\"responses_ignored\":1"), std::string::npos);
}

// Releases take one playout at a time (O(1) per packet); a poll that spends its budget hands
// the next one to the next playout, so a backlog on one tunnel holds no other back. The same
// through next_rx_burst_st: a full burst is a spent budget.
class EngineRxBudget : public ::testing::TestWithParam<bool> {};

TEST_P(EngineRxBudget, ABudgetedPollMovesOnSoNoTunnelWaitsBehindAnotherBacklog) {
  const bool bursts = GetParam();
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
    if (bursts) {
      std::vector<RxEmit> burst(3);
      burst.resize(e->next_rx_burst_st(due, burst));
      for (const RxEmit& x : burst) got.push_back(x.handle);
    } else {
      (void)e->poll_rx_st(
          due, [&](const RxEmit& x) { got.push_back(x.handle); }, 3);
    }
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

INSTANTIATE_TEST_SUITE_P(PollOrBurst, EngineRxBudget, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "burst" : "poll"; });

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
  ASSERT_EQ(receive(*e, 0, peer, 6, datagram(data_header(7, 2, kStart), 20), arrival, &info),
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

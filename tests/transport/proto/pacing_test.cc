// Pacing at the reserved rate, multipath striping and CUBIC on best-effort paths. All times are
// virtual (the test harness's clock), so asserting durations within a few percent is sound.
#include <gtest/gtest.h>

#include "common/byte_order.h"
#include "tests/transport/proto/test_util.h"
#include "transport/proto/cc_cubic.h"
#include "transport/proto/pacer.h"
#include "transport/proto/wire.h"

namespace detwan::transport::proto::testing {
namespace {

constexpr int64_t kRate = 100'000'000;

// Time the sender's wire bytes need at `rate` (datagram + frame overhead).
double wire_time_ns(const VirtualNet& net, size_t path, int64_t rate_bps, int32_t overhead) {
  const double bits =
      8.0 * static_cast<double>(net.wire_bytes(0, path) + overhead * net.datagrams(0, path));
  return bits * 1e9 / static_cast<double>(rate_bps);
}

TEST(Pacer, HonoursRateAndBurst) {
  Pacer p(kRate, 42, 4, 1472);
  int64_t now = 1'000'000;
  int sent = 0;
  while (p.can_send(now)) {
    p.on_send(now, 1472);
    ++sent;
  }
  EXPECT_EQ(sent, 4);  // burst after idle
  // 1000 more datagrams, each sent at its release time: exactly 1000 * 1514 * 8 / rate.
  const int64_t start = p.release_ns(now);
  now = start;
  for (int i = 0; i < 1000; ++i) {
    now = p.release_ns(now);
    p.on_send(now, 1472);
  }
  const int64_t expected = int64_t{1000} * 1514 * 8 * 1'000'000'000 / kRate;
  EXPECT_NEAR(static_cast<double>(p.release_ns(now) - start), static_cast<double>(expected),
              1000.0);
}

// A send quantum: once drained, one wake-up sends the quantum's datagrams back to back, then
// the pacer holds until all of them have drained; over many rounds the rate is still exact.
TEST(Pacer, QuantumSendsARunThenWaitsUntilItDrained) {
  constexpr int64_t kFast = 10'000'000'000;  // 10 Gbit/s: 1,514 wire bytes take 1,211 ns
  Pacer p(kFast, 42, 4, 1472);
  p.set_quantum_datagrams(64);
  EXPECT_EQ(p.quantum_ns(), int64_t{1514} * 8 * 1'000'000'000 * 63 / kFast);
  int64_t now = 1'000'000;
  while (p.can_send(now)) p.on_send(now, 1472);  // the burst after idle
  const int64_t start = p.release_ns(now);
  int64_t sent = 0;
  int rounds = 0;
  for (now = start; sent < 6400; ++rounds) {
    int run = 0;
    while (p.can_send(now)) {
      p.on_send(now, 1472);
      ++run;
      ++sent;
    }
    // A whole quantum each wake-up: 63 or 64 datagrams (the quantum is 63 datagrams' time;
    // the remainder carried from one cost to the next decides whether a 64th starts inside).
    ASSERT_GE(run, 63) << "round " << rounds;
    ASSERT_LE(run, 64) << "round " << rounds;
    const int64_t next = p.release_ns(now);
    ASSERT_GT(next, now + p.quantum_ns());  // sleeps until the run has drained
    now = next;
  }
  // The runs drained at the rate: exactly sent * 1514 * 8 / rate after the start.
  EXPECT_NEAR(static_cast<double>(now - start),
              static_cast<double>(sent * 1514 * 8 * 1'000'000'000 / kFast), 1000.0);
  // At a low rate 64 datagrams would take 4.8 ms: the quantum stops at 1 ms.
  p.set_rate_bps(200'000'000);
  EXPECT_EQ(p.quantum_ns(), Pacer::kMaxQuantumNs);
  p.set_quantum_datagrams(0);
  EXPECT_EQ(p.quantum_ns(), 0);
}

TEST(Pacing, TenMegabytesAtReservedRate) {
  VirtualNet net(reserved_options(kRate), reserved_options(kRate));
  ASSERT_TRUE(net.run_until([&] { return net.client().established(); }, 1'000'000'000));
  const int64_t start = net.now_ns();
  const auto msgs = random_messages({10'000'000}, 1);
  ASSERT_TRUE(transfer(net, msgs));
  const double elapsed = static_cast<double>(net.now_ns() - start);
  const double ideal_payload = 10'000'000.0 * 8 * 1e9 / kRate;
  const double ideal_wire = wire_time_ns(net, 0, kRate, 42);
  const double rtt = 2e6;
  // Wire time at the rate, plus one RTT for the last ACK, within 3%.
  EXPECT_NEAR(elapsed, ideal_wire + rtt, 0.03 * ideal_wire) << "payload ideal " << ideal_payload;
  // Payload goodput: headers cost ~4.5% (24 + 42 bytes per 1448).
  EXPECT_GT(ideal_payload / elapsed, 0.90);
  EXPECT_LE(ideal_payload / elapsed, 1.0);
}

TEST(Pacing, AReservedRateSetLaterPacesAtTheNewRate) {
  // Created at 100 Mbit/s, re-paced to a quarter (a communicator learning its share after
  // accepting): 2 MB then take the wire time at 25 Mbit/s.
  VirtualNet net(reserved_options(kRate), reserved_options(kRate));
  ASSERT_TRUE(net.run_until([&] { return net.client().established(); }, 1'000'000'000));
  ASSERT_EQ(net.client().set_reserved_rate(0, kRate / 4, 0), Status::kOk);
  const int64_t start = net.now_ns();
  ASSERT_TRUE(transfer(net, random_messages({2'000'000}, 4)));
  const double elapsed = static_cast<double>(net.now_ns() - start);
  const double ideal_wire = wire_time_ns(net, 0, kRate / 4, 42);
  EXPECT_NEAR(elapsed, ideal_wire + 2e6, 0.03 * ideal_wire);
  // Refused, and nothing changed: a path that does not exist, a rate of 0.
  EXPECT_EQ(net.client().set_reserved_rate(1, kRate, 0), Status::kInvalidArgument);
  EXPECT_EQ(net.client().set_reserved_rate(0, 0, 0), Status::kInvalidArgument);
}

TEST(Pacing, ABestEffortPathCannotBeGivenAReservedRate) {
  VirtualNet net(ChannelOptions{}, ChannelOptions{});
  EXPECT_EQ(net.client().set_reserved_rate(0, kRate, 0), Status::kInvalidArgument);
}

TEST(Pacing, ReservedRateNotCutByLoss) {
  VirtualNet clean(reserved_options(kRate), reserved_options(kRate), 1);
  VirtualNet lossy(reserved_options(kRate), reserved_options(kRate), 1);
  LinkFaults f;
  f.loss = 0.01;
  lossy.set_faults(0, f);
  lossy.set_faults(1, f);
  const auto msgs = random_messages({10'000'000}, 2);
  const int64_t c0 = clean.now_ns();
  ASSERT_TRUE(transfer(clean, msgs));
  const int64_t l0 = lossy.now_ns();
  ASSERT_TRUE(transfer(lossy, msgs));
  const double clean_ns = static_cast<double>(clean.now_ns() - c0);
  const double lossy_ns = static_cast<double>(lossy.now_ns() - l0);
  const ChannelStats s = lossy.client().stats();
  EXPECT_GT(s.segments_retransmitted, 50u);
  EXPECT_EQ(s.cwnd_bytes, 0);
  // Goodput of new data at the wire level (what the reservation carries) >= 95% of the rate.
  const double unique = static_cast<double>(s.segments_sent - s.segments_retransmitted);
  const double goodput_bps = unique * (1472 + 42) * 8 * 1e9 / lossy_ns;
  EXPECT_GE(goodput_bps, 0.95 * kRate);
  EXPECT_LT(lossy_ns, clean_ns * 1.05);
}

TEST(Multipath, StripesInProportionToRates) {
  ChannelOptions o = reserved_options();
  PathSpec fast;
  fast.rate_bps = 200'000'000;
  PathSpec slow;
  slow.rate_bps = 100'000'000;
  o.paths = {fast, slow};
  VirtualNet net(o, o, 3);
  LinkFaults slow_link;
  slow_link.delay_ns = 5'000'000;  // skewed paths must not cause spurious retransmissions
  net.set_faults(0, slow_link, 1);
  net.set_faults(1, slow_link, 1);
  ASSERT_TRUE(transfer(net, random_messages({8'000'000, 123, 2'000'000}, 4)));
  const std::vector<uint64_t> per_path = net.client().path_segments_sent();
  ASSERT_EQ(per_path.size(), 2u);
  const double ratio = static_cast<double>(per_path[0]) / static_cast<double>(per_path[1]);
  EXPECT_NEAR(ratio, 2.0, 0.1);
  EXPECT_EQ(net.client().stats().segments_retransmitted, 0u);
  EXPECT_GT(net.datagrams(1, 1), 0u);  // ACKs come back on the path the data came on
}

TEST(Multipath, LossyPathStillDeliversExactly) {
  ChannelOptions o = reserved_options();
  PathSpec a;
  a.rate_bps = 100'000'000;
  o.paths = {a, a};
  VirtualNet net(o, o, 8);
  LinkFaults bad;
  bad.loss = 0.05;
  net.set_faults(0, bad, 1);
  ASSERT_TRUE(transfer(net, random_messages({4'000'000, 0, 999}, 5)));
  EXPECT_GT(net.client().stats().segments_retransmitted, 0u);
}

TEST(Multipath, RetransmissionTakesAnotherPath) {
  ChannelOptions o = reserved_options();
  PathSpec a;
  a.rate_bps = 100'000'000;
  o.paths = {a, a};
  VirtualNet net(o, o, 8);
  constexpr uint64_t kLostSeq = 20;
  std::vector<uint32_t> paths_of_seq;
  auto seq_of = [](const std::vector<std::byte>& d) -> std::optional<uint64_t> {
    if (!wire::is_data(d)) return std::nullopt;
    return common::load_be32(d.data() + wire::kShortHeaderBytes);  // seq (low 32 bits)
  };
  net.observe = [&](int side, uint32_t path, const std::vector<std::byte>& d) {
    if (side == 0 && seq_of(d) == kLostSeq) paths_of_seq.push_back(path);
  };
  bool dropped = false;
  net.tamper = [&](int side, std::vector<std::byte>& d) {
    if (side == 0 && !dropped && seq_of(d) == kLostSeq) {
      dropped = true;
      return false;
    }
    return true;
  };
  ASSERT_TRUE(transfer(net, random_messages({200'000}, 6)));
  ASSERT_EQ(paths_of_seq.size(), 2u);
  EXPECT_NE(paths_of_seq[0], paths_of_seq[1]);
  EXPECT_EQ(net.client().stats().segments_retransmitted, 1u);
  EXPECT_EQ(net.client().stats().timeouts, 0u);  // repaired by fast retransmit
}

// A best-effort path whose window never met a loss paces at 1.25 cwnd / srtt: with a 1 GiB
// window and a 60 us srtt that is 1.8e14 bit/s, where a datagram's pacing cost rounds to 0 ns.
// The quantum (63 datagrams' time) must not round to 0 as well: then nothing but the 1 ns the
// carried remainder adds every ~15 datagrams stopped a wake-up, so a wake-up sent ~15
// datagrams, each becoming one small GSO send, and a veth transfer ran at 2/3 of its speed for
// 1.5 x the CPU per byte.
TEST(Pacer, QuantumSurvivesRatesWhereADatagramCostsNoTime) {
  constexpr int64_t kHuge = 180'000'000'000'000;  // 1.25 * 1 GiB * 8 / 60 us
  Pacer p(kHuge, 42, 4, 1472);
  p.set_quantum_datagrams(64);
  EXPECT_GT(p.quantum_ns(), 0);
  EXPECT_EQ(p.quantum_ns(), int64_t{1514} * 8 * 1'000'000'000 * 63 / kHuge);
  int64_t now = 1'000'000;
  for (int round = 0; round < 20; ++round) {
    int run = 0;
    while (p.can_send(now) && run < 1000) {
      p.on_send(now, 1472);
      ++run;
    }
    // One wake-up sends a whole quantum, then waits for the next instant: 4 ns here, i.e. 59
    // datagrams' cost, plus the part of a nanosecond the horizon needs to pass it (up to 76;
    // the link cuts GSO sends at 64 anyway).
    ASSERT_GE(run, 48) << "round " << round;
    ASSERT_LE(run, 80) << "round " << round;
    now = p.release_ns(now);
  }
}

TEST(Cubic, ReductionOncePerEpisodeAndGrowth) {
  Cubic c(1472);
  const int64_t initial = c.cwnd_bytes();
  EXPECT_EQ(initial, 14720);
  // Slow start: the window grows by the acked bytes.
  int64_t now = 1'000'000'000;
  for (int i = 0; i < 10; ++i) c.on_ack(1472, now - 1000, now, 10'000'000);
  EXPECT_EQ(c.cwnd_bytes(), 2 * initial);
  const int64_t before = c.cwnd_bytes();
  c.on_loss(now - 5000, now);
  EXPECT_NEAR(static_cast<double>(c.cwnd_bytes()), 0.7 * static_cast<double>(before), 2.0);
  const int64_t after = c.cwnd_bytes();
  c.on_loss(now - 4000, now + 10);  // sent before the episode: no second cut
  EXPECT_EQ(c.cwnd_bytes(), after);
  EXPECT_FALSE(c.in_slow_start());
  // Congestion avoidance: grows back towards and beyond W_max over time.
  for (int i = 0; i < 20000; ++i) {
    now += 100'000;
    c.on_ack(1472, now - 10'000'000, now, 10'000'000);
  }
  EXPECT_GT(c.cwnd_bytes(), before);
  EXPECT_NEAR(static_cast<double>(c.pacing_rate_bps(10'000'000)),
              1.25 * static_cast<double>(c.cwnd_bytes()) * 8.0 / 0.01, 1e-3 * 8e8);
}

// Window validation (RFC 7661): an ACK grows the window only while it is in use, and the
// cubic curve's clock stands still while it is not.
TEST(Cubic, AWindowNotInUseNeitherGrowsNorAgesTheCurve) {
  int64_t now = 1'000'000'000;
  Cubic slow_start(1472);
  for (int i = 0; i < 100; ++i) slow_start.on_ack(1472, now - 1000, now, 10'000'000, false);
  EXPECT_EQ(slow_start.cwnd_bytes(), 14720);
  // Two windows after the same loss; one spends 10 s acknowledged but unused first.
  Cubic used(1472), idle(1472);
  for (Cubic* c : {&used, &idle}) {
    for (int i = 0; i < 90; ++i) c->on_ack(1472, now - 1000, now, 10'000'000);
    c->on_loss(now - 500, now);
  }
  ASSERT_EQ(used.cwnd_bytes(), idle.cwnd_bytes());
  const int64_t after_loss = used.cwnd_bytes();
  int64_t t_used = now, t_idle = now;
  for (int i = 0; i < 1000; ++i) {
    t_idle += 10'000'000;
    idle.on_ack(1472, t_idle - 10'000'000, t_idle, 10'000'000, false);
  }
  EXPECT_EQ(idle.cwnd_bytes(), after_loss);
  for (int i = 0; i < 200; ++i) {
    t_used += 1'000'000;
    t_idle += 1'000'000;
    used.on_ack(1472, t_used - 10'000'000, t_used, 10'000'000, true);
    idle.on_ack(1472, t_idle - 10'000'000, t_idle, 10'000'000, true);
  }
  EXPECT_GT(used.cwnd_bytes(), after_loss);
  // Without the curve standing still, 10 s of cubic growth would have jumped the idle window
  // by C * 10^3 segments (clamped to 1.5x per ACK).
  EXPECT_NEAR(static_cast<double>(idle.cwnd_bytes()), static_cast<double>(used.cwnd_bytes()),
              0.01 * static_cast<double>(used.cwnd_bytes()));
}

// An application-limited best-effort sender (a 20 KB message every 2 ms on a path that could
// carry far more) keeps a window near what it uses: it had grown to the 1 GiB cap on a veth
// pair, so the pacing rate derived from it paced nothing.
TEST(Cubic, AnApplicationLimitedSenderKeepsItsWindowNearWhatItUses) {
  ChannelOptions o = reserved_options();
  o.paths[0].rate_bps = 0;  // best effort
  VirtualNet net(o, o, 23);
  ASSERT_TRUE(net.run_until([&] { return net.client().established(); }, 1'000'000'000));
  for (int i = 0; i < 500; ++i) {
    ASSERT_TRUE(transfer(net, random_messages({20'000}, 100 + i)));
    const int64_t until = net.now_ns() + 2'000'000;
    net.run_until([&] { return net.now_ns() >= until; }, 3'000'000);
  }
  // 500 x 20 KB acknowledged: unvalidated slow start would have added all 10 MB to the window.
  const int64_t cwnd = net.client().stats().cwnd_bytes;
  EXPECT_LE(cwnd, 2 * 20'000 + 4 * 1500) << "cwnd grew beyond twice what was in flight";
  EXPECT_GE(cwnd, 20'000);  // and it did grow to what the messages need
}

TEST(Cubic, BestEffortPathShrinksOnLossAndGrowsWithout) {
  ChannelOptions o = reserved_options();
  o.paths[0].rate_bps = 0;  // best effort
  VirtualNet net(o, o, 21);
  ASSERT_TRUE(net.run_until([&] { return net.client().established(); }, 1'000'000'000));
  const int64_t initial = net.client().stats().cwnd_bytes;
  EXPECT_GT(initial, 0);
  ASSERT_TRUE(transfer(net, random_messages({3'000'000}, 1)));
  const int64_t grown = net.client().stats().cwnd_bytes;
  EXPECT_GT(grown, 4 * initial);

  LinkFaults f;
  f.loss = 0.03;
  net.set_faults(0, f);
  int64_t last = net.client().stats().cwnd_bytes;
  int cuts = 0;
  bool ratio_ok = false;
  const auto msgs = random_messages({3'000'000}, 2);
  ASSERT_EQ(net.client().queue_message(msgs[0], 1), Status::kOk);
  net.run_until(
      [&] {
        const int64_t cw = net.client().stats().cwnd_bytes;
        if (cw < last) {
          ++cuts;
          const double r = static_cast<double>(cw) / static_cast<double>(last);
          if (r > 0.65 && r < 0.75) ratio_ok = true;  // beta = 0.7
        }
        last = cw;
        return count_events(net.events(1), Event::Kind::kMessage) == 2;
      },
      60'000'000'000);
  EXPECT_EQ(count_events(net.events(1), Event::Kind::kMessage), 2u);
  EXPECT_GT(cuts, 0);
  EXPECT_TRUE(ratio_ok);
  EXPECT_TRUE(net.events(1).back().message == msgs[0]);
}

// Path 1 of two equal reserved paths goes dead (both directions) 20 ms into an 8 MB message:
// the sender declares it dead within a few RTTs (another path's data is acknowledged meanwhile),
// resends its segments on path 0 and carries on at path 0's rate; when path 1 works again a
// probe gets through and striping resumes.
TEST(Multipath, ADeadPathIsDetectedResentAroundAndUsedAgainWhenItRecovers) {
  ChannelOptions o = reserved_options();
  PathSpec a;
  a.rate_bps = 100'000'000;
  o.paths = {a, a};
  VirtualNet net(o, o, 11);
  ASSERT_TRUE(transfer(net, random_messages({1'000'000}, 1)));  // both paths in use, RTT known
  const auto messages = random_messages({8'000'000}, 2);
  ASSERT_EQ(net.client().queue_message(messages[0], 7), Status::kOk);
  net.run_until([] { return false; }, 20'000'000);
  LinkFaults dead;
  dead.loss = 1.0;
  net.set_faults(0, dead, 1);
  net.set_faults(1, dead, 1);
  const int64_t failed_at = net.now_ns();
  const size_t before = count_events(net.events(1), Event::Kind::kMessage);
  const size_t completed = count_events(net.events(0), Event::Kind::kSendComplete);
  ASSERT_TRUE(net.run_until(
      [&] {
        return count_events(net.events(1), Event::Kind::kMessage) == before + 1 &&
               count_events(net.events(0), Event::Kind::kSendComplete) == completed + 1;
      },
      10'000'000'000));
  const int64_t elapsed = net.now_ns() - failed_at;
  const auto received =
      std::find_if(net.events(1).rbegin(), net.events(1).rend(),
                   [](const Event& e) { return e.kind == Event::Kind::kMessage; });
  EXPECT_TRUE(received->message == messages[0]);
  EXPECT_EQ(net.client().stats().paths_failed, 1u);
  // The rest (at most 8 MB) at one path's 100 Mbit/s takes 640 ms; detection costs a few RTTs.
  EXPECT_LT(elapsed, int64_t{640'000'000} * 11 / 10 + 50'000'000) << elapsed;

  LinkFaults healthy;
  net.set_faults(0, healthy, 1);
  net.set_faults(1, healthy, 1);
  const std::vector<uint64_t> sent_before = net.client().path_segments_sent();
  ASSERT_TRUE(transfer(net, random_messages({4'000'000}, 3)));
  const std::vector<uint64_t> sent_after = net.client().path_segments_sent();
  EXPECT_EQ(net.client().stats().paths_recovered, 1u);
  const uint64_t on_path1 = sent_after[1] - sent_before[1];
  const uint64_t on_path0 = sent_after[0] - sent_before[0];
  EXPECT_GT(on_path1, on_path0 / 3) << on_path0 << " " << on_path1;  // striping again
}

}  // namespace
}  // namespace detwan::transport::proto::testing

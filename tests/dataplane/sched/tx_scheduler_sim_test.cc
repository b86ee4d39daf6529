// The transmit scheduler over thousands of cycles in virtual time (issue 3, item 8): several
// tunnels and best-effort traffic offered by seeded random processes. Every frame is checked
// against a slot-by-slot oracle built from the configuration alone.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "dataplane/sched/tx_scheduler.h"
#include "tests/dataplane/sched/sched_test_util.h"

namespace detwan::dataplane::sched {
namespace {

using common::Status;
using testing::Random;
using testing::slot_range;
using testing::SlotOracle;

struct Source {
  uint32_t tunnel_id = kNoTunnel;  // kNoTunnel: best effort
  double offered_bps = 0;
  uint32_t min_bytes = 64;
  uint32_t max_bytes = 1518;
};

struct Scenario {
  std::string name;
  GclConfig gcl;
  TxSchedulerConfig policies;
  std::vector<Source> sources;
  int64_t cycles = 0;
  uint64_t seed = 0;
  bool expect_reserved_rates = true;  // false for the overload/capacity scenario
  uint64_t min_frames = 50'000;       // the run must be long enough to mean something
};

void PrintTo(const Scenario& scenario, std::ostream* os) { *os << scenario.name; }

struct Outcome {
  std::map<uint32_t, uint64_t> sent_bytes_by_tunnel;  // in the tunnel's own slots
  uint64_t best_effort_sent_bytes = 0;
  uint64_t frames = 0;
  int64_t end_ns = 0;
};

// Runs the scenario; every frame the scheduler emits goes through the oracle checks.
Outcome run(const Scenario& sc, TxScheduler& s) {
  const SlotOracle oracle(sc.gcl);
  const GateControlList& gcl = s.gcl();
  common::VirtualClock clock(0);
  Outcome out;
  out.end_ns = sc.cycles * sc.gcl.cycle_ns;

  struct SourceState {
    Random rng;
    int64_t next_ns;
    double mean_gap_ns;
    uint64_t sequence = 0;
  };
  std::vector<SourceState> states;
  for (size_t i = 0; i < sc.sources.size(); ++i) {
    const Source& src = sc.sources[i];
    const double mean_bytes = (src.min_bytes + src.max_bytes) / 2.0;
    SourceState st{Random(sc.seed * 1000 + i), 0, mean_bytes * 8e9 / src.offered_bps};
    st.next_ns = st.rng.exponential_ns(st.mean_gap_ns);
    states.push_back(st);
  }
  // FIFO per source and per path (a downgraded frame takes the best-effort path).
  std::map<std::pair<size_t, bool>, uint64_t> last_sequence;
  int64_t previous_end_ns = INT64_MIN;

  const auto check = [&](const TxFrame& f) {
    const int64_t now = clock.now_ns();
    ++out.frames;
    ASSERT_TRUE(f.send) << "missed slot at " << now;
    ASSERT_EQ(f.departure_ns, now) << "emitted at its departure time, not later";
    const uint32_t owner_id = f.best_effort ? testing::kUnreserved : f.tunnel_id;
    ASSERT_EQ(oracle.check(owner_id, f.departure_ns, f.tx_end_ns), "")
        << (f.best_effort ? "best effort" : "tunnel " + std::to_string(f.tunnel_id));
    // Serialisation of f.bytes at line rate, to within the rounding of the exact instants.
    const long double ser = f.bytes * 8.0L * 1e9L / static_cast<long double>(sc.gcl.line_rate_bps);
    ASSERT_GE(f.tx_end_ns - f.departure_ns, static_cast<int64_t>(std::floor(ser)));
    ASSERT_LE(f.tx_end_ns - f.departure_ns, static_cast<int64_t>(std::ceil(ser)));
    // The line carries one frame at a time.
    ASSERT_GE(f.departure_ns, previous_end_ns);
    previous_end_ns = f.tx_end_ns;
    ASSERT_EQ(f.cycle_id, gcl.cycle_at(f.departure_ns));
    ASSERT_EQ(f.slot,
              static_cast<uint32_t>(
                  ((oracle.slot_number(f.departure_ns) % sc.gcl.slot_count) + sc.gcl.slot_count) %
                  sc.gcl.slot_count));
    const size_t source = static_cast<size_t>(f.handle >> 40);
    const uint64_t sequence = f.handle & ((uint64_t{1} << 40) - 1);
    uint64_t& last = last_sequence[{source, f.best_effort}];
    ASSERT_TRUE(last == 0 || sequence > last) << "reordered within source " << source;
    last = sequence;
    if (f.best_effort) {
      out.best_effort_sent_bytes += f.bytes;
    } else {
      out.sent_bytes_by_tunnel[f.tunnel_id] += f.bytes;
    }
    s.record_departure(f, now);  // virtual time: the frame leaves exactly on schedule
  };

  for (;;) {
    int64_t t = s.next_event_ns();
    for (const SourceState& st : states) t = std::min(t, st.next_ns);
    if (t >= out.end_ns) break;
    clock.set_ns(t);
    for (size_t i = 0; i < states.size(); ++i) {
      SourceState& st = states[i];
      while (st.next_ns == t) {
        const Source& src = sc.sources[i];
        const auto bytes = static_cast<uint32_t>(st.rng.between(src.min_bytes, src.max_bytes));
        const uint64_t handle = (uint64_t{i} << 40) | ++st.sequence;
        const Status status = src.tunnel_id == kNoTunnel
                                  ? s.enqueue_best_effort(handle, bytes, t)
                                  : s.enqueue(src.tunnel_id, handle, bytes, t);
        EXPECT_TRUE(status == Status::kOk || status == Status::kDropped);
        st.next_ns = t + st.rng.exponential_ns(st.mean_gap_ns);
      }
    }
    (void)s.dequeue_due(t, check);
    if (::testing::Test::HasFatalFailure()) break;
  }
  return out;
}

// What each owner's counters must satisfy whatever happened.
void expect_conservation(const TxScheduler& s) {
  const auto dropped_before_queue = [](const TxCounters& c) {
    uint64_t n = 0;
    for (int i = 0; i < kTxDropCount; ++i) {
      if (i != static_cast<int>(TxDrop::kMissedSlot)) n += c.dropped[i];
    }
    return n;
  };
  const GateControlList& gcl = s.gcl();
  for (OwnerIndex owner = 0; owner <= gcl.tunnel_count(); ++owner) {
    const TxCounters& c = owner == gcl.best_effort_owner()
                              ? s.best_effort_counters()
                              : *s.tunnel_counters(gcl.tunnel_id_of(owner));
    EXPECT_EQ(c.offered_packets, c.queued_packets + dropped_before_queue(c) + c.downgraded_packets)
        << "owner " << owner;
    EXPECT_EQ(c.queued_packets, c.sent_packets + c.dropped[static_cast<int>(TxDrop::kMissedSlot)] +
                                    s.held_frames(owner))
        << "owner " << owner;
  }
  const TxCounters& port = s.port_counters();
  EXPECT_EQ(port.offered_packets, port.queued_packets + dropped_before_queue(port));
}

class TxSchedulerSimTest : public ::testing::TestWithParam<Scenario> {};

TEST_P(TxSchedulerSimTest, EveryFrameStaysInItsSlotsAndReservationsAreMet) {
  const Scenario& sc = GetParam();
  auto gcl = GateControlList::create(sc.gcl);
  ASSERT_TRUE(gcl.has_value()) << gcl.error().describe();
  auto created = TxScheduler::create(std::move(gcl).value(), sc.policies, 0);
  ASSERT_TRUE(created.has_value()) << created.error().describe();
  TxScheduler& s = *created;
  const Outcome out = run(sc, s);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_GT(out.frames, sc.min_frames);
  expect_conservation(s);
  const TxCounters& port = s.port_counters();
  EXPECT_EQ(port.dropped[static_cast<int>(TxDrop::kMissedSlot)], 0u);
  EXPECT_EQ(port.departure_error_ns.count(), port.sent_packets);
  EXPECT_EQ(port.departure_error_ns.max(), 0);
  EXPECT_GT(out.best_effort_sent_bytes, 0u);
  if (!sc.expect_reserved_rates) {
    EXPECT_GT(port.dropped[static_cast<int>(TxDrop::kNoCapacity)], 0u);
    EXPECT_GT(port.dropped[static_cast<int>(TxDrop::kQueueFull)], 0u);
    return;
  }
  const long double seconds = static_cast<long double>(out.end_ns) / 1e9L;
  for (const Source& src : sc.sources) {
    if (src.tunnel_id == kNoTunnel) continue;
    const GateControlList& list = s.gcl();
    const OwnerIndex owner = list.find_owner(src.tunnel_id);
    const uint64_t reserved = list.reserved_rate_bps(owner);
    ASSERT_GT(src.offered_bps, 1.1 * static_cast<double>(reserved)) << "scenario offers more";
    const TxCounters& c = *s.tunnel_counters(src.tunnel_id);
    // Delivered in the tunnel's own slots: the reservation within 0.1 %.
    const long double delivered_bps = out.sent_bytes_by_tunnel.at(src.tunnel_id) * 8.0L / seconds;
    EXPECT_NEAR(static_cast<double>(delivered_bps / reserved), 1.0, 0.001)
        << "tunnel " << src.tunnel_id << " delivered " << static_cast<double>(delivered_bps)
        << " queued_bytes " << c.queued_bytes << " sent " << c.sent_bytes << " held "
        << s.held_frames(owner);
    // The excess was cut back by the policer and went where the policy says.
    EXPECT_GT(c.dropped[static_cast<int>(TxDrop::kPoliced)] + c.downgraded_packets, 0u);
    // Policing: admitted bytes never exceed burst + rate * time (the policer's default burst
    // is one cycle at the reserved rate, at least 8 max-size frames).
    const Uint128 burst_bytes = std::max<Uint128>(
        8 * sc.gcl.max_frame_bytes,
        static_cast<Uint128>(reserved) * static_cast<uint64_t>(sc.gcl.cycle_ns) / 8'000'000'000u);
    EXPECT_LE(static_cast<Uint128>(c.queued_bytes) * 8'000'000'000u,
              burst_bytes * 8'000'000'000u +
                  static_cast<Uint128>(reserved) * static_cast<uint64_t>(out.end_ns));
    // Nothing admitted was lost on the tunnel's own path.
    for (const TxDrop reason : {TxDrop::kQueueFull, TxDrop::kMaxWait, TxDrop::kNoSlot,
                                TxDrop::kNoCapacity, TxDrop::kBeyondHorizon}) {
      EXPECT_EQ(c.dropped[static_cast<int>(reason)], 0u)
          << "tunnel " << src.tunnel_id << " " << to_string(reason);
    }
  }
}

// 1 Gbit/s, 1 ms cycle of 20 slots (50 us), guard 2 us, 3000 cycles.
Scenario gigabit() {
  Scenario sc;
  sc.name = "Gigabit20Slots";
  sc.gcl.cycle_ns = 1'000'000;
  sc.gcl.slot_count = 20;
  sc.gcl.guard_ns = 2'000;
  sc.gcl.line_rate_bps = 1'000'000'000;
  sc.gcl.max_frame_bytes = 1518;
  sc.gcl.tunnels = {
      GclTunnel{1, 200'000'000, {19, 0, 1, 2, 3}},  // one window across the cycle boundary
      GclTunnel{2, 150'000'000, {6, 7, 10, 11}},    // two windows
      GclTunnel{3, 30'000'000, {14}},               // one slot, shaped
  };
  TunnelTxPolicy t2;
  t2.tunnel_id = 2;
  t2.over_rate = OverRateAction::kBestEffort;
  TunnelTxPolicy t3;
  t3.tunnel_id = 3;
  t3.shaper_rate_bps = 30'000'000;
  sc.policies.tunnels = {t2, t3};
  sc.sources = {Source{1, 300e6}, Source{2, 195e6}, Source{3, 60e6}, Source{kNoTunnel, 300e6}};
  sc.cycles = 3'000;
  sc.seed = 11;
  return sc;
}

// 2.5 Gbit/s (fractional serialisation times), 500 us cycle of 25 slots, guard 500 ns, base
// time not aligned to anything, 1000 cycles.
Scenario fractional() {
  Scenario sc;
  sc.name = "Fractional25Slots";
  sc.gcl.cycle_ns = 500'000;
  sc.gcl.slot_count = 25;
  sc.gcl.guard_ns = 500;
  sc.gcl.base_time_ns = 123'457;
  sc.gcl.line_rate_bps = 2'500'000'000;
  sc.gcl.max_frame_bytes = 1518;
  sc.gcl.tunnels = {
      GclTunnel{10, 400'000'000, slot_range(1, 5)},
      GclTunnel{11, 200'000'000, {10, 12, 14}},
      GclTunnel{12, 150'000'000, {24, 0}},
  };
  TunnelTxPolicy t11;
  t11.tunnel_id = 11;
  t11.over_rate = OverRateAction::kBestEffort;
  TunnelTxPolicy t12;
  t12.tunnel_id = 12;
  t12.shaper_rate_bps = 150'000'000;
  t12.shaper_burst_bytes = 4'000;
  sc.policies.tunnels = {t11, t12};
  sc.sources = {Source{10, 600e6}, Source{11, 260e6}, Source{12, 250e6},
                Source{kNoTunnel, 500e6, 40, 1518}};
  sc.cycles = 1'000;
  sc.seed = 12;
  return sc;
}

// Overload with tiny queues and a tiny port capacity: drops are counted, slots still hold.
Scenario exhausted() {
  Scenario sc = gigabit();
  sc.name = "CapacityExhausted";
  for (TunnelTxPolicy& p : sc.policies.tunnels) p.queue_frames = 4;
  TunnelTxPolicy t1;
  t1.tunnel_id = 1;
  t1.queue_frames = 4;
  sc.policies.tunnels.push_back(t1);
  sc.policies.best_effort.queue_frames = 3;
  sc.policies.capacity_frames = 8;
  sc.sources = {Source{1, 600e6}, Source{2, 600e6}, Source{3, 600e6}, Source{kNoTunnel, 900e6}};
  sc.cycles = 500;
  sc.seed = 13;
  sc.expect_reserved_rates = false;
  sc.min_frames = 10'000;
  return sc;
}

INSTANTIATE_TEST_SUITE_P(All, TxSchedulerSimTest,
                         ::testing::Values(gigabit(), fractional(), exhausted()),
                         [](const ::testing::TestParamInfo<Scenario>& info) {
                           return info.param.name;
                         });

// Same seed, same configuration: the same schedule, frame for frame.
TEST(TxSchedulerSimDeterminismTest, SameSeedSameCounters) {
  Scenario sc = gigabit();
  sc.cycles = 200;
  std::string json[2];
  for (std::string& j : json) {
    auto created = TxScheduler::create(GateControlList::create(sc.gcl).value(), sc.policies, 0);
    ASSERT_TRUE(created.has_value());
    (void)run(sc, *created);
    j = created->counters_json();
  }
  EXPECT_EQ(json[0], json[1]);
  EXPECT_NE(json[0].find("\"sent_packets\":"), std::string::npos);
}

}  // namespace
}  // namespace detwan::dataplane::sched

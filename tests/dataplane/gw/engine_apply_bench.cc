// Cost of a run-time tunnel change (Engine::apply_st), the time the datapath thread is held:
// one engine, one WAN port of 1000 slots (10 Gbit/s, 1 ms cycle, 1 us slots), default capacities
// (65536-frame wheel, 4096-frame playouts), 20 tunnels of 30 slots each with 16 frames queued
// per tunnel when the change is applied (320 in all). Cases: add 1 or 40 tunnels, remove them
// (the two alternate, so every add takes the drained indices again), add 1 or 10 tunnels that
// take new indices, modify one tunnel's rate, modify one tunnel's slots (its queued frames are
// re-placed). Each iteration is
// timed alone with a steady clock (manual time); the counters give p50/p99/max over the iterations
// in microseconds.
//
//   build/tests/dataplane/gw/dataplane_gw_apply_bench --benchmark_counters_tabular=true
//
// The file uses the engine's public API only, so it also builds against older trees:
// tools/bench/gw-apply-cost runs it on this tree and on a baseline revision side by side.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include <benchmark/benchmark.h>

#include "dataplane/gw/config.h"
#include "dataplane/gw/engine.h"

namespace {

using namespace detwan::dataplane::gw;  // NOLINT(google-build-using-namespace): bench only
using detwan::dataplane::sched::TxFrame;

constexpr int64_t kStartNs = 1'000'000'000'000;
constexpr int64_t kCycleNs = 1'000'000;
constexpr uint32_t kSlots = 1000;
constexpr uint32_t kTunnels = 20;
constexpr uint32_t kSlotsPerTunnel = 30;
constexpr uint32_t kStride = 40;           // tunnel i owns [i*40, i*40+30): 10 free after each
constexpr uint32_t kFramesPerTunnel = 16;  // queued before each change (~20 kB: the burst)
constexpr uint32_t kPacketBytes = 1200;
constexpr uint32_t kNewTunnelId = 500;  // tunnels the changes add: 500, 501, ...
constexpr int kIterations = 400;
constexpr benchmark::TimeUnit kUnit = benchmark::kMicrosecond;

Endpoint v4(uint8_t last, uint16_t port) {
  Endpoint e;
  e.address[0] = 192;
  e.address[1] = 0;
  e.address[2] = 2;
  e.address[3] = last;
  e.port = port;
  return e;
}

Prefix prefix_10(uint8_t second) {
  Prefix p;
  p.address[0] = 10;
  p.address[1] = second;
  p.length = 16;
  return p;
}

std::vector<uint32_t> slot_run(uint32_t first, uint32_t count) {
  std::vector<uint32_t> out;
  for (uint32_t s = first; s < first + count; ++s) out.push_back(s);
  return out;
}

TunnelConfig tunnel(uint32_t id, uint8_t prefix, std::vector<uint32_t> slots) {
  TunnelConfig t;
  t.id = id;
  t.peer = "site-b";
  t.rate_bps = 200'000'000;
  t.slots = std::move(slots);
  t.bound_ns = 5'000'000;
  t.dst_prefixes = {prefix_10(prefix)};
  return t;
}

GatewayConfig config() {
  GatewayConfig c;
  c.name = "site-a";
  WanPortConfig port;
  port.name = "wan1";
  port.local = v4(1, 4789);
  port.line_rate_bps = 10'000'000'000;
  port.mtu_bytes = 1500;
  port.cycle_ns = kCycleNs;
  port.slot_count = kSlots;
  port.guard_ns = 100;
  c.wan_ports.push_back(port);
  PeerConfig peer;
  peer.name = "site-b";
  peer.wan_port = "wan1";
  peer.endpoint = v4(2, 4789);
  peer.clock_offset_ns = 0;
  c.peers.push_back(peer);
  for (uint32_t i = 0; i < kTunnels; ++i) {
    c.tunnels.push_back(
        tunnel(100 + i, static_cast<uint8_t>(1 + i), slot_run(i * kStride, kSlotsPerTunnel)));
  }
  return c;
}

std::vector<std::byte> ipv4_packet(uint8_t second) {
  std::vector<std::byte> p(kPacketBytes);
  p[0] = std::byte{0x45};
  p[2] = std::byte{kPacketBytes >> 8};
  p[3] = std::byte{kPacketBytes & 0xff};
  p[8] = std::byte{64};
  p[9] = std::byte{17};
  p[12] = std::byte{10};
  p[13] = std::byte{99};
  p[16] = std::byte{10};
  p[17] = std::byte{second};
  p[22] = std::byte{0};
  p[23] = std::byte{80};
  return p;
}

// The engine and its traffic: every iteration moves one cycle on, sends what is due and queues
// kFramesPerTunnel new frames on every existing tunnel.
class Bench {
 public:
  Bench() {
    auto created = Engine::create(config(), kStartNs);
    if (!created) {
      std::fprintf(stderr, "engine: %s\n", created.error().message.c_str());
      std::abort();
    }
    engine_ = std::move(*created);
    for (uint32_t i = 0; i < kTunnels; ++i)
      packets_.push_back(ipv4_packet(static_cast<uint8_t>(1 + i)));
  }

  // Sends every frame at its departure time (a poll loop that is never late) up to the next
  // cycle, queues new frames there; returns the time to apply at.
  int64_t step() {
    now_ns_ += kCycleNs;
    const auto sink = [](const TxEmit& emit) { benchmark::DoNotOptimize(emit.handle); };
    for (int64_t t = next_departure_ns(); t <= now_ns_; t = next_departure_ns()) {
      (void)engine_->poll_tx_st(t, sink);
    }
    (void)engine_->poll_tx_st(now_ns_, sink);
    for (uint32_t f = 0; f < kFramesPerTunnel; ++f) {
      for (const auto& packet : packets_) {
        (void)engine_->submit_tun_st(++handle_, packet, now_ns_);
      }
    }
    return now_ns_;
  }

  // apply_st timed alone; aborts on a refused change (the bench would measure nothing).
  double apply_us(const TunnelChanges& changes, int64_t now_ns) {
    const auto t0 = std::chrono::steady_clock::now();
    auto result = engine_->apply_st(changes, now_ns);
    const auto t1 = std::chrono::steady_clock::now();
    if (!result) {
      std::fprintf(stderr, "apply: %s\n", result.error().message.c_str());
      std::abort();
    }
    return std::chrono::duration<double, std::micro>(t1 - t0).count();
  }

  [[nodiscard]] int64_t next_departure_ns() const { return engine_->scheduler(0).next_event_ns(); }
  [[nodiscard]] uint64_t held() const { return engine_->scheduler(0).held_frames(); }
  // The port's counters: a run with drops other than tunnel_removed/reconfigured measured
  // something else than intended.
  [[nodiscard]] bool clean() const {
    const auto& c = engine_->scheduler(0).port_counters();
    using detwan::dataplane::sched::TxDrop;
    for (int r = 0; r < detwan::dataplane::sched::kTxDropCount; ++r) {
      if (r != static_cast<int>(TxDrop::kTunnelRemoved) &&
          r != static_cast<int>(TxDrop::kReconfigured) && c.dropped[r] != 0)
        return false;
    }
    return c.rescheduled == 0;
  }

 private:
  std::unique_ptr<Engine> engine_;
  std::vector<std::vector<std::byte>> packets_;
  int64_t now_ns_ = kStartNs;
  uint64_t handle_ = 0;
};

void report(benchmark::State& state, const Bench& bench, std::vector<double> samples,
            uint64_t held_sum) {
  if (!bench.clean()) state.SkipWithError("the port dropped or rescheduled frames");
  std::sort(samples.begin(), samples.end());
  // Nearest rank: the smallest sample with at least q of them at or below it (p99 of 100
  // samples is the 99th, not the largest).
  const auto at = [&](double q) {
    const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(samples.size())));
    return samples[std::clamp<size_t>(rank, 1, samples.size()) - 1];
  };
  state.counters["p50_us"] = at(0.5);
  state.counters["p99_us"] = at(0.99);
  state.counters["max_us"] = samples.back();
  state.counters["queued"] = static_cast<double>(held_sum) / static_cast<double>(samples.size());
}

// Runs `change(i)` (returns the changes of iteration i) once per iteration after step().
template <typename Change>
void run(benchmark::State& state, Change change) {
  Bench bench;
  for (int i = 0; i < 10; ++i) (void)bench.apply_us(change(i), bench.step());  // warm-up
  std::vector<double> samples;
  samples.reserve(kIterations);
  uint64_t held_sum = 0;
  int i = 0;
  for (auto _ : state) {
    const int64_t now = bench.step();
    held_sum += bench.held();
    const double us = bench.apply_us(change(i++), now);
    samples.push_back(us);
    state.SetIterationTime(us / 1e6);
  }
  report(state, bench, std::move(samples), held_sum);
}

// Tunnel `id`, the k-th (k < 40) of those a change adds: 5 slots from slot 800 on, 20 Mbit/s.
TunnelConfig added_tunnel(uint32_t id, uint32_t k) {
  TunnelConfig t = tunnel(id, static_cast<uint8_t>(100 + k), slot_run(800 + 5 * k, 5));
  t.rate_bps = 20'000'000;
  return t;
}

// Adding and removing the same range(0) tunnels alternate (a removed tunnel's index is drained
// at once: it received nothing, so the next add takes it again): each change is timed on its
// own and only the kind asked for is reported.
void add_or_remove(benchmark::State& state, bool measure_add) {
  const auto count = static_cast<uint32_t>(state.range(0));
  Bench bench;
  TunnelChanges add, remove;
  for (uint32_t k = 0; k < count; ++k) {
    add.add.push_back(added_tunnel(kNewTunnelId + k, k));
    remove.remove.push_back(kNewTunnelId + k);
  }
  for (int i = 0; i < 10; ++i) {
    (void)bench.apply_us(add, bench.step());
    (void)bench.apply_us(remove, bench.step());
  }
  std::vector<double> samples;
  uint64_t held_sum = 0;
  for (auto _ : state) {
    int64_t now = bench.step();
    if (measure_add) held_sum += bench.held();
    const double add_us = bench.apply_us(add, now);
    now = bench.step();
    if (!measure_add) held_sum += bench.held();
    const double remove_us = bench.apply_us(remove, now);
    const double us = measure_add ? add_us : remove_us;
    samples.push_back(us);
    state.SetIterationTime(us / 1e6);
  }
  report(state, bench, std::move(samples), held_sum);
}

void BM_ApplyAdd(benchmark::State& state) { add_or_remove(state, true); }
void BM_ApplyRemove(benchmark::State& state) { add_or_remove(state, false); }

// Each iteration adds range(0) tunnels with new ids that take new engine indices (their
// playouts, replay windows and scheduler counters are built): the gateway's tunnel count grows.
// When the 40 places from slot 800 on are used up, the engine starts again (not timed).
void BM_ApplyAddNewIndex(benchmark::State& state) {
  const auto count = static_cast<uint32_t>(state.range(0));
  auto bench = std::make_unique<Bench>();
  std::vector<double> samples;
  uint64_t held_sum = 0;
  bool clean = true;
  uint32_t used = 0;
  for (auto _ : state) {
    if (used + count > 40) {
      clean = clean && bench->clean();
      bench = std::make_unique<Bench>();
      used = 0;
    }
    const int64_t now = bench->step();
    held_sum += bench->held();
    TunnelChanges add;
    for (uint32_t k = used; k < used + count; ++k) {
      add.add.push_back(added_tunnel(kNewTunnelId + 100 + k, k));
    }
    used += count;
    const double us = bench->apply_us(add, now);
    samples.push_back(us);
    state.SetIterationTime(us / 1e6);
  }
  if (!clean) state.SkipWithError("the port dropped or rescheduled frames");
  report(state, *bench, std::move(samples), held_sum);
}

// Tunnel 102's rate alternates 250 / 200 Mbit/s: a fresh policer, no frame moves.
void BM_ApplyModifyRate(benchmark::State& state) {
  run(state, [](int i) {
    TunnelChanges c;
    TunnelConfig t = tunnel(102, 3, slot_run(2 * kStride, kSlotsPerTunnel));
    t.rate_bps = i % 2 == 0 ? 250'000'000 : 200'000'000;
    c.modify = {t};
    return c;
  });
}

// Tunnel 101's slots alternate [40, 70) / [50, 80): its queued frames are re-placed.
void BM_ApplyModifySlots(benchmark::State& state) {
  run(state, [](int i) {
    TunnelChanges c;
    c.modify = {tunnel(101, 2, slot_run(kStride + (i % 2 == 0 ? 10 : 0), kSlotsPerTunnel))};
    return c;
  });
}

// Iterations per case: 400, fewer where one iteration changes 10 or 40 tunnels (before the
// spare-wheel change those took tens of ms each).
BENCHMARK(BM_ApplyAdd)->Arg(1)->Iterations(kIterations)->UseManualTime()->Unit(kUnit);
BENCHMARK(BM_ApplyAdd)->Arg(40)->Iterations(100)->UseManualTime()->Unit(kUnit);
BENCHMARK(BM_ApplyAddNewIndex)->Arg(1)->Iterations(kIterations)->UseManualTime()->Unit(kUnit);
BENCHMARK(BM_ApplyAddNewIndex)->Arg(10)->Iterations(100)->UseManualTime()->Unit(kUnit);
BENCHMARK(BM_ApplyRemove)->Arg(1)->Iterations(kIterations)->UseManualTime()->Unit(kUnit);
BENCHMARK(BM_ApplyRemove)->Arg(40)->Iterations(100)->UseManualTime()->Unit(kUnit);
BENCHMARK(BM_ApplyModifyRate)->Iterations(kIterations)->UseManualTime()->Unit(kUnit);
BENCHMARK(BM_ApplyModifySlots)->Iterations(kIterations)->UseManualTime()->Unit(kUnit);

}  // namespace

BENCHMARK_MAIN();

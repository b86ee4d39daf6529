// Micro-benchmarks: per-packet cost of the transmit scheduler (enqueue + dequeue_due) and of
// on-time playout (push + release_due), driven in virtual time on one core (no busy-polling).
#include <cstdint>
#include <utility>

#include <benchmark/benchmark.h>

#include "dataplane/sched/playout.h"
#include "dataplane/sched/tx_scheduler.h"

namespace {

using namespace detwan::dataplane::sched;  // NOLINT(google-build-using-namespace): bench only

// The worked example: 1 ms cycle, 100 slots at 10 Gbit/s, tunnel 7 owns slots 0-39.
TxScheduler make_scheduler() {
  GclConfig list;
  list.cycle_ns = 1'000'000;
  list.slot_count = 100;
  list.guard_ns = 1'200;
  list.line_rate_bps = 10'000'000'000;
  list.tunnels = {GclTunnel{7, 3'900'000'000, {}}};
  for (uint32_t s = 0; s < 40; ++s) list.tunnels[0].slots.push_back(s);
  TxSchedulerConfig config;
  TunnelTxPolicy policy;
  policy.tunnel_id = 7;
  policy.burst_bytes = 1'000'000;
  config.tunnels = {policy};
  return std::move(TxScheduler::create(GateControlList::create(list).value(), config, 0).value());
}

// One 1250-byte frame every 3 us (3.33 Gbit/s, under the reservation): steady state.
void BM_TunnelEnqueueDequeue(benchmark::State& state) {
  TxScheduler s = make_scheduler();
  int64_t now = 0;
  uint64_t handle = 0;
  uint64_t sent = 0;
  for (auto _ : state) {
    now += 3'000;
    benchmark::DoNotOptimize(s.enqueue(7, ++handle, 1250, now));
    sent += s.dequeue_due(now, [](const TxFrame& f) { benchmark::DoNotOptimize(f.handle); });
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.counters["sent_per_iter"] =
      static_cast<double>(sent) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_TunnelEnqueueDequeue);

// Best effort at 5 Gbit/s into the 60 % unreserved slots.
void BM_BestEffortEnqueueDequeue(benchmark::State& state) {
  TxScheduler s = make_scheduler();
  int64_t now = 0;
  uint64_t handle = 0;
  for (auto _ : state) {
    now += 2'000;
    benchmark::DoNotOptimize(s.enqueue_best_effort(++handle, 1250, now));
    s.dequeue_due(now, [](const TxFrame& f) { benchmark::DoNotOptimize(f.handle); });
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_BestEffortEnqueueDequeue);

// Playout with a 2 ms bound and a WAN delay that varies over 0.5-1.5 ms.
void BM_PlayoutPushRelease(benchmark::State& state) {
  PlayoutConfig config;
  config.bound_ns = 2'000'000;
  config.capacity_frames = 65536;
  Playout p = std::move(Playout::create(config).value());
  int64_t now = 0;
  uint64_t handle = 0;
  uint64_t x = 88172645463325252ULL;
  for (auto _ : state) {
    now += 1'000;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const int64_t delay = 500'000 + static_cast<int64_t>(x % 1'000'000);
    benchmark::DoNotOptimize(p.push(++handle, 1250, now - delay, now));
    p.release_due(now, [](const PlayoutFrame& f) { benchmark::DoNotOptimize(f.handle); });
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_PlayoutPushRelease);

}  // namespace

BENCHMARK_MAIN();

// Offer + release throughput of the impairment engine (virtual time, one frame per 1 us).
#include <cstdint>

#include <benchmark/benchmark.h>

#include "tools/wanem/engine/emulator.h"
#include "tools/wanem/engine/spec.h"

namespace detwan::wanem {
namespace {

void run(benchmark::State& state, const char* text) {
  auto spec = parse_spec(text);
  if (!spec) {
    state.SkipWithError(spec.error().message.c_str());
    return;
  }
  Emulator emulator(*spec, 0);
  int64_t now_ns = 0;
  uint64_t handle = 0;
  uint64_t released = 0;
  for (auto _ : state) {
    now_ns += 1'000;
    const OfferResult r = emulator.offer({handle++, 1000, TrafficClass::kBestEffort}, now_ns);
    if (r.duplicate) (void)emulator.offer_duplicate({handle++, 1000}, now_ns);
    released += emulator.release(now_ns, [](uint64_t, uint32_t, bool) {});
  }
  benchmark::DoNotOptimize(released);
  state.SetItemsProcessed(state.iterations());
}

void BM_DelayOnly(benchmark::State& state) { run(state, "delay=10ms"); }
void BM_DelayJitterLoss(benchmark::State& state) {
  run(state, "delay=10ms,jitter=1ms,jitter-dist=normal,loss=0.1%,dup=0.1%,reorder=0.1%");
}
void BM_RateQueueCross(benchmark::State& state) {
  run(state, "delay=10ms,jitter=100us,rate=10gbit,cross=50%,cross-burst=1ms");
}

BENCHMARK(BM_DelayOnly);
BENCHMARK(BM_DelayJitterLoss);
BENCHMARK(BM_RateQueueCross);

}  // namespace
}  // namespace detwan::wanem

BENCHMARK_MAIN();

// Micro-benchmark: cost of LogLinearHistogram::record (datapath) and percentile (reader).
#include <cstdint>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "common/histogram.h"

namespace {

std::vector<int64_t> samples() {
  std::mt19937_64 rng(1);
  std::lognormal_distribution<double> dist(13.0, 1.0);  // ~0.5 ms delays in ns
  std::vector<int64_t> out(4096);
  for (auto& v : out) v = static_cast<int64_t>(dist(rng));
  return out;
}

void BM_Record(benchmark::State& state) {
  detwan::common::LogLinearHistogram h(static_cast<int>(state.range(0)));
  const auto values = samples();
  size_t i = 0;
  for (auto _ : state) {
    h.record(values[i++ & 4095]);
  }
  benchmark::DoNotOptimize(h.count());
}
BENCHMARK(BM_Record)->Arg(7)->Arg(12);

void BM_Percentile(benchmark::State& state) {
  detwan::common::LogLinearHistogram h(7);
  for (int64_t v : samples()) h.record(v);
  for (auto _ : state) benchmark::DoNotOptimize(h.percentile(0.999));
}
BENCHMARK(BM_Percentile);

}  // namespace

BENCHMARK_MAIN();

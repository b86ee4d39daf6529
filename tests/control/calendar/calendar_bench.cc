// Micro-benchmark: the calendars' cost against the number of bookings (issue 36: sub-linear).
// A link direction's capacity calendar and a gateway port's slot calendar hold n bookings of
// 1-6 h spread over 120 days (as detwan-agent-bench scale books them); each iteration asks what
// admission asks -- the peak over a 3 h window, the free slots of one -- or books and unbooks
// one window. Run: build/tests/control/calendar/control_calendar_bench
#include <cstdint>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "control/calendar/capacity_calendar.h"
#include "control/calendar/slot_calendar.h"

namespace {

using detwan::control::calendar::CapacityCalendar;
using detwan::control::calendar::SlotCalendar;
using detwan::control::calendar::SlotGeometry;

constexpr int64_t kHourNs = 3'600'000'000'000;
constexpr int64_t kSpanNs = 120 * 24 * kHourNs;

struct Window {
  int64_t start, end;
};

Window random_window(std::mt19937_64& rng) {
  const int64_t start = static_cast<int64_t>(rng() % static_cast<uint64_t>(kSpanNs));
  return {start, start + kHourNs * static_cast<int64_t>(1 + rng() % 6)};
}

CapacityCalendar capacity_with(int64_t n) {
  CapacityCalendar c;
  std::mt19937_64 rng(1);
  for (int64_t i = 0; i < n; ++i) {
    const Window w = random_window(rng);
    c.book(w.start, w.end, 1'000'000 + rng() % 1'000'000);
  }
  return c;
}

void BM_CapacityPeak(benchmark::State& state) {
  const CapacityCalendar c = capacity_with(state.range(0));
  std::mt19937_64 rng(2);
  for (auto _ : state) {
    const Window w = random_window(rng);
    benchmark::DoNotOptimize(c.peak_bps(w.start, w.start + 3 * kHourNs));
  }
  state.counters["breakpoints"] = static_cast<double>(c.breakpoints());
}
BENCHMARK(BM_CapacityPeak)->Arg(1'000)->Arg(10'000)->Arg(100'000);

void BM_CapacityBookUnbook(benchmark::State& state) {
  CapacityCalendar c = capacity_with(state.range(0));
  std::mt19937_64 rng(3);
  for (auto _ : state) {
    const Window w = random_window(rng);
    c.book(w.start, w.end, 5'000'000);
    c.unbook(w.start, w.end, 5'000'000);
  }
}
BENCHMARK(BM_CapacityBookUnbook)->Arg(1'000)->Arg(10'000)->Arg(100'000);

void BM_SlotsFree(benchmark::State& state) {
  SlotGeometry g;
  g.line_rate_bps = 100'000'000'000;
  g.slot_count = 100;
  SlotCalendar c(g);
  std::mt19937_64 rng(4);
  for (int64_t key = 1; key <= state.range(0); ++key) {
    const Window w = random_window(rng);
    // Two slots each, wherever they are free (a full port just takes no more).
    if (auto slots = c.plan(1'000'000'000, w.start, w.end)) {
      c.book(static_cast<uint64_t>(key), w.start, w.end, *slots);
    }
  }
  for (auto _ : state) {
    const Window w = random_window(rng);
    benchmark::DoNotOptimize(c.free_slots(w.start, w.end));
  }
  state.counters["bookings"] = static_cast<double>(c.bookings());
}
BENCHMARK(BM_SlotsFree)->Arg(1'000)->Arg(10'000)->Arg(100'000);

}  // namespace

BENCHMARK_MAIN();

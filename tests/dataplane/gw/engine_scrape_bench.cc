// What a scrape costs the datapath thread: Engine::prometheus_text (GET /metrics, the control
// socket's "prometheus") and Engine::stats_json ("stats") of one engine with 1, 100 and 1000
// tunnels, each with traffic sent through its slots first (its transmit histograms hold
// samples; the receive side is idle, its histograms empty but written out all the same). The
// counter `bytes` is the size of one answer.
//
//   build/tests/dataplane/gw/dataplane_gw_scrape_bench --benchmark_counters_tabular=true
//
// docs/benchmarks/observability.md, "Scrape cost", records it against an earlier tree: the file
// uses the
// engine's public API only (its configuration is its own, like engine_apply_bench.cc's), so it
// can be copied into an older tree and built there.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "dataplane/gw/config.h"
#include "dataplane/gw/engine.h"

namespace {

using namespace detwan::dataplane::gw;  // NOLINT(google-build-using-namespace): bench only

constexpr int64_t kStartNs = 1'000'000'000'000;
constexpr int64_t kCycleNs = 10'000'000;
constexpr uint32_t kSlots = 1000;
constexpr uint32_t kPacketBytes = 1200;

Endpoint v4(uint8_t last, uint16_t port) {
  Endpoint e;
  e.address[0] = 192;
  e.address[1] = 0;
  e.address[2] = 2;
  e.address[3] = last;
  e.port = port;
  return e;
}

// Tunnel i: 10.(i / 256).(i % 256).0/24, one 10 us slot of a 10 ms cycle (5 Mbit/s reserved).
Prefix prefix_of(uint32_t i) {
  Prefix p;
  p.address[0] = 10;
  p.address[1] = static_cast<uint8_t>(i / 256);
  p.address[2] = static_cast<uint8_t>(i % 256);
  p.length = 24;
  return p;
}

GatewayConfig config(uint32_t tunnels) {
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
  for (uint32_t i = 0; i < tunnels; ++i) {
    TunnelConfig t;
    t.id = 1000 + i;
    t.peer = "site-b";
    t.rate_bps = 5'000'000;
    t.slots = {i % kSlots};
    t.bound_ns = 20'000'000;
    t.dst_prefixes = {prefix_of(i)};
    c.tunnels.push_back(t);
  }
  return c;
}

std::vector<std::byte> packet_to(uint32_t i) {
  std::vector<std::byte> p(kPacketBytes);
  p[0] = std::byte{0x45};
  p[2] = std::byte{kPacketBytes >> 8};
  p[3] = std::byte{kPacketBytes & 0xff};
  p[8] = std::byte{64};
  p[9] = std::byte{17};
  p[12] = std::byte{10};
  p[13] = std::byte{250};
  p[16] = std::byte{10};
  p[17] = std::byte{static_cast<uint8_t>(i / 256)};
  p[18] = std::byte{static_cast<uint8_t>(i % 256)};
  p[19] = std::byte{1};
  p[23] = std::byte{80};
  return p;
}

// An engine with `tunnels` tunnels after 20 cycles of traffic (4 frames per tunnel per cycle).
struct Loaded {
  std::unique_ptr<Engine> engine;
  int64_t now_ns = kStartNs;
};

Loaded loaded(uint32_t tunnels) {
  auto created = Engine::create(config(tunnels), kStartNs);
  if (!created) {
    std::fprintf(stderr, "engine: %s\n", created.error().message.c_str());
    std::abort();
  }
  Loaded l{std::move(*created)};
  std::vector<std::vector<std::byte>> packets;
  for (uint32_t i = 0; i < tunnels; ++i) packets.push_back(packet_to(i));
  uint64_t handle = 0;
  const auto sink = [](const TxEmit& emit) { benchmark::DoNotOptimize(emit.handle); };
  for (int cycle = 0; cycle < 20; ++cycle) {
    for (const auto& p : packets) {
      for (int f = 0; f < 4; ++f) (void)l.engine->submit_tun_st(++handle, p, l.now_ns);
    }
    for (int64_t t = l.now_ns; t < l.now_ns + kCycleNs; t += 10'000)
      (void)l.engine->poll_tx_st(t, sink);
    l.now_ns += kCycleNs;
  }
  return l;
}

// One answer built per iteration; `bytes` is its size.
template <typename Build>
void answer_bench(benchmark::State& state, Build build) {
  Loaded l = loaded(static_cast<uint32_t>(state.range(0)));
  size_t bytes = 0;
  for (auto _ : state) {
    std::string text = build(*l.engine, l.now_ns);
    bytes = text.size();
    benchmark::DoNotOptimize(text);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}

void BM_PrometheusText(benchmark::State& state) {
  answer_bench(state, [](const Engine& e, int64_t now) { return e.prometheus_text(now); });
}
BENCHMARK(BM_PrometheusText)->Arg(1)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond);

// One part of the HTTP exporter's build (what one control poll holds the datapath for): the
// head and the first 50 tunnels of a gateway with range(0) tunnels.
void BM_PrometheusFirstPart(benchmark::State& state) {
  answer_bench(state, [](const Engine& e, int64_t now) {
    return Engine::prometheus_text({const_cast<Engine*>(&e)}, now,
                                   Engine::PrometheusPart{true, -1, 50}, nullptr);
  });
}
BENCHMARK(BM_PrometheusFirstPart)->Arg(1000)->Unit(benchmark::kMillisecond);

// A later part: 50 tunnels, no head.
void BM_PrometheusTunnelPart(benchmark::State& state) {
  answer_bench(state, [](const Engine& e, int64_t now) {
    return Engine::prometheus_text({const_cast<Engine*>(&e)}, now,
                                   Engine::PrometheusPart{false, 1499, 50}, nullptr);
  });
}
BENCHMARK(BM_PrometheusTunnelPart)->Arg(1000)->Unit(benchmark::kMillisecond);

void BM_StatsJson(benchmark::State& state) {
  answer_bench(state, [](const Engine& e, int64_t now) { return e.stats_json(now); });
}
BENCHMARK(BM_StatsJson)->Arg(1)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();

// The sharded mode of dataplane_dpdk_fwd_bench (--shards N, tools/bench/gw-vs-testpmd CORES):
// gateways A and B each spread over N engine shards (Gateway::open_shards), shard k of both on
// lcore k, `tunnels` tunnels on --wan-ports 400 Gbit/s ports (a 10 us slot each). Joined by
// net_ring devices with one queue pair per shard, steered the way a NIC with flow rules would:
// A's TX queue k feeds B's RX queue k, B's local TX queue k feeds A's local RX queue k, and a
// tunnel's packets are injected on its owner's queue, so no packet is dispatched in software
// (--dispatch yes puts every packet on queue 0 instead: shard 0 passes the others' on). Prints
// one JSON object: traversals/s summed over the shards and per shard, and the schedule's
// departure error (actual - scheduled departure) over all shards and ports.
#include "tests/dataplane/dpdk/fwd_bench_shards.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <rte_cycles.h>
#include <rte_launch.h>
#include <rte_lcore.h>

#include "common/clock.h"
#include "common/histogram.h"
#include "dataplane/dpdk/gateway.h"
#include "dataplane/gw/engine.h"
#include "tests/dataplane/dpdk/dpdk_test_util.h"

namespace detwan::dataplane::dpdk::testing {
namespace {

constexpr uint64_t kLineRateBps = 400'000'000'000;

// Phases of a run, set by shard 0's thread from its TSC (vCPUs' TSCs need not agree): every
// shard takes its counters when it sees the measurement start and stop, so each shard measures
// the same interval.
enum Phase : int { kWarmup = 0, kMeasure = 1, kStop = 2 };

struct ShardRun {
  Gateway* a = nullptr;
  Gateway* b = nullptr;
  gw::Engine* engine_b = nullptr;
  const common::TscClock* clock = nullptr;  // one calibration for every shard: one time scale
  int64_t tai_offset_ns = 0;
  std::atomic<int>* phase = nullptr;
  uint64_t warmup_end_tsc = 0, end_tsc = 0;  // shard 0 only: when to move the phase on
  uint64_t delivered = 0;                    // in the measured interval
  double seconds = 0;
};

int run_shard(void* arg) {
  auto* shard = static_cast<ShardRun*>(arg);
  const common::TscClock& tsc = *shard->clock;
  const bool leader = shard->end_tsc != 0;
  uint64_t delivered0 = 0, t0 = 0;
  int seen = kWarmup;
  for (;;) {
    const int64_t now = tsc.now_ns() + shard->tai_offset_ns;
    (void)shard->a->poll_once_st(now);
    (void)shard->b->poll_once_st(now);
    if (leader) {
      const uint64_t t = rte_rdtsc();
      if (seen == kWarmup && t >= shard->warmup_end_tsc) shard->phase->store(kMeasure);
      if (seen == kMeasure && t >= shard->end_tsc) shard->phase->store(kStop);
    }
    const int phase = shard->phase->load(std::memory_order_relaxed);
    if (phase == seen) continue;
    if (seen == kWarmup) {
      delivered0 = shard->engine_b->local_io().tun_tx_packets;
      t0 = rte_rdtsc();
      seen = kMeasure;
    }
    if (phase == kStop) break;
  }
  shard->delivered = shard->engine_b->local_io().tun_tx_packets - delivered0;
  shard->seconds = static_cast<double>(rte_rdtsc() - t0) / static_cast<double>(rte_get_tsc_hz());
  return 0;
}

// many_tunnels_config over `options.ports` WAN ports: tunnel i leaves on port (i-1) % ports,
// towards the other gateway's port of the same index (one peer per port), in slot
// (i-1) / ports of that port. A slot is 10 us (at least 32 per port): a frame due at its slot's
// start leaves within it even when a poll loop is preempted for a few us (this VM's vCPUs are),
// and 8192 circulating packets (each waits for its tunnel's slot) keep the cycle from limiting
// the rate below what the shards forward.
gw::GatewayConfig bench_config(bool is_a, const ShardBenchOptions& options) {
  const uint32_t ports = options.ports;
  const uint32_t per_port = (options.tunnels + ports - 1) / ports;
  const uint32_t slots = std::max<uint32_t>(per_port, 32);
  gw::GatewayConfig config =
      many_tunnels_config(is_a, is_a ? "net_ring_shWanA0" : "net_ring_shWanB0", options.tunnels,
                          kLineRateBps, 10'000 * static_cast<int64_t>(slots), 100);
  for (uint32_t p = 1; p < ports; ++p) {
    gw::WanPortConfig port = config.wan_ports[0];
    port.name = fmt::format("wan{}", p);
    port.local.port = static_cast<uint16_t>(4789 + p);
    port.dpdk->device = fmt::format("net_ring_shWan{}{}", is_a ? "A" : "B", p);
    config.wan_ports.push_back(port);
    gw::PeerConfig peer = config.peers[0];
    peer.name = fmt::format("{}{}", peer.name, p);
    peer.wan_port = port.name;
    peer.endpoint.port = static_cast<uint16_t>(4789 + p);
    config.peers.push_back(peer);
  }
  for (gw::WanPortConfig& port : config.wan_ports) {
    port.slot_count = slots;
    port.capacity_frames = 16384;
  }
  for (uint32_t i = 0; i < config.tunnels.size(); ++i) {
    gw::TunnelConfig& tunnel = config.tunnels[i];
    tunnel.peer = config.peers[i % ports].name;
    tunnel.slots = {i / ports};
    tunnel.rate_bps = kLineRateBps / slots * 8 / 10;
    tunnel.queue_frames = 1024;
  }
  config.dpdk.mbuf_count = 16383;
  return config;
}

}  // namespace

int run_sharded_bench(const ShardBenchOptions& options) {
  const uint32_t n = options.shards;
  const uint32_t ports = options.ports;
  if (rte_lcore_count() < n) {
    std::fprintf(stderr, "--shards %u needs %u lcores (EAL -l), have %u\n", n, n,
                 rte_lcore_count());
    return 1;
  }
  std::vector<RingPtr> rings;
  // One thread at each end of every ring (SP/SC: no atomic counters in net_ring, whose queues'
  // counters share cache lines), except x[0] with --dispatch, which every shard of B feeds.
  auto ring = [&](const std::string& name, bool multi_producer = false) {
    rings.push_back(make_ring(name, 16384, RING_F_SC_DEQ | (multi_producer ? 0 : RING_F_SP_ENQ)));
    return rings.back().get();
  };
  std::vector<rte_ring*> x(n), unused(n);
  for (uint32_t k = 0; k < n; ++k) {
    x[k] = ring(fmt::format("sx{}", k), options.dispatch && k == 0);
    unused[k] = ring(fmt::format("su{}", k));
  }
  // --dispatch: everything B releases comes back to A on queue 0 (a host side that steers
  // nothing); shard 0 of A passes the other shards' packets on, every time round.
  const std::vector<rte_ring*> back = options.dispatch ? std::vector<rte_ring*>(n, x[0]) : x;
  bool made =
      ring_port_queues("shHostA", x, unused) >= 0 && ring_port_queues("shHostB", unused, back) >= 0;
  for (uint32_t p = 0; p < ports && made; ++p) {
    std::vector<rte_ring*> ab(n), ba(n);
    for (uint32_t k = 0; k < n; ++k) {
      ab[k] = ring(fmt::format("sab{}_{}", p, k));
      ba[k] = ring(fmt::format("sba{}_{}", p, k));
    }
    made = ring_port_queues(fmt::format("shWanA{}", p), ba, ab) >= 0 &&
           ring_port_queues(fmt::format("shWanB{}", p), ab, ba) >= 0;
  }
  if (!made) {
    std::fprintf(stderr, "rte_eth_from_rings failed\n");
    return 1;
  }
  const gw::GatewayConfig config_a = bench_config(true, options);
  const gw::GatewayConfig config_b = bench_config(false, options);
  const common::TscClock tsc;
  const int64_t tai_offset_ns = common::TaiClock().now_ns() - tsc.now_ns();
  const int64_t start_ns = tsc.now_ns() + tai_offset_ns;
  std::vector<std::unique_ptr<gw::Engine>> engines_a, engines_b;
  std::vector<gw::Engine*> raw_a, raw_b;
  for (uint32_t k = 0; k < n; ++k) {
    auto a = gw::Engine::create(config_a, start_ns, gw::ShardSpec{k, n, 0xa});
    auto b = gw::Engine::create(config_b, start_ns, gw::ShardSpec{k, n, 0xb});
    if (!a || !b) {
      std::fprintf(stderr, "engine: %s\n", (!a ? a.error() : b.error()).describe().c_str());
      return 1;
    }
    raw_a.push_back(a->get());
    raw_b.push_back(b->get());
    engines_a.push_back(std::move(*a));
    engines_b.push_back(std::move(*b));
  }
  GatewayOptions options_a, options_b;
  options_a.local_port = LocalPortOptions{"net_ring_shHostA", kHostMacA, 1024, 1024};
  options_b.local_port = LocalPortOptions{"net_ring_shHostB", kHostMacB, 1024, 1024};
  auto shards_a = Gateway::open_shards(raw_a, config_a, options_a);
  auto shards_b = Gateway::open_shards(raw_b, config_b, options_b);
  if (!shards_a || !shards_b) {
    std::fprintf(stderr, "gateway: %s\n",
                 (!shards_a ? shards_a.error() : shards_b.error()).describe().c_str());
    return 1;
  }
  for (uint32_t i = 0; i < options.packets; ++i) {
    const uint32_t tunnel = 1 + i % options.tunnels;
    const std::string to = fmt::format("10.20.2.{}:6000", tunnel);
    rte_mbuf* m =
        mbuf_from((*shards_a)[0]->pool(),
                  host_frame("10.20.1.5:5000", to.c_str(), kHostMacA, options.payload_bytes, i));
    rte_ring* into = x[options.dispatch ? 0 : gw::shard_of_tunnel(tunnel, n)];
    if (m == nullptr || rte_ring_enqueue(into, m) != 0) {
      std::fprintf(stderr, "cannot inject packet %u\n", i);
      return 1;
    }
  }
  const uint64_t hz = rte_get_tsc_hz();
  const uint64_t warmup_end = rte_rdtsc() + hz / 2;
  const uint64_t end =
      warmup_end + static_cast<uint64_t>(options.seconds * static_cast<double>(hz));
  std::atomic<int> phase{kWarmup};
  std::vector<ShardRun> runs(n);
  for (uint32_t k = 0; k < n; ++k) {
    runs[k] = ShardRun{
        (*shards_a)[k].get(),    (*shards_b)[k].get(), raw_b[k], &tsc, tai_offset_ns, &phase,
        k == 0 ? warmup_end : 0, k == 0 ? end : 0,     0,        0};
  }
  std::vector<unsigned> lcores;
  unsigned lcore = 0;
  RTE_LCORE_FOREACH_WORKER(lcore) {
    if (lcores.size() + 1 < n) lcores.push_back(lcore);
  }
  for (uint32_t k = 1; k < n; ++k) {
    if (rte_eal_remote_launch(run_shard, &runs[k], lcores[k - 1]) != 0) {
      std::fprintf(stderr, "lcore %u is busy\n", lcores[k - 1]);
      return 1;
    }
  }
  (void)run_shard(&runs[0]);
  rte_eal_mp_wait_lcore();
  double total_pps = 0;
  std::string per_shard;
  uint64_t dispatched = 0, dispatch_dropped = 0;
  common::LogLinearHistogram departure_error;
  for (uint32_t k = 0; k < n; ++k) {
    const double pps = static_cast<double>(runs[k].delivered) / runs[k].seconds;
    total_pps += pps;
    per_shard += fmt::format("{}{:.0f}", k > 0 ? "," : "", pps);
    for (auto* shards : {&*shards_a, &*shards_b}) {
      dispatched += (*shards)[k]->counters().dispatched;
      dispatch_dropped += (*shards)[k]->counters().dispatch_dropped;
    }
    for (uint32_t p = 0; p < ports; ++p) {
      (void)departure_error.merge(raw_a[k]->scheduler(p).port_counters().departure_error_ns);
    }
  }
  std::printf(
      R"({"shards":%u,"wan_ports":%u,"tunnels":%u,"steering":"%s","packets_circulating":%u,)"
      R"("inner_frame_bytes":%u,"traversals_pps":%.0f,"gateway_forwards_pps":%.0f,)"
      R"("traversals_pps_per_shard":[%s],"dispatched":%lu,"dispatch_dropped":%lu,)"
      R"("departure_error_ns":%s})"
      "\n",
      n, ports, options.tunnels, options.dispatch ? "dispatch" : "queues", options.packets,
      outer_header_bytes(false) + options.payload_bytes, total_pps, 2 * total_pps,
      per_shard.c_str(), static_cast<unsigned long>(dispatched),
      static_cast<unsigned long>(dispatch_dropped), departure_error.summary_json().c_str());
  if (std::getenv("DETWAN_BENCH_DEBUG") != nullptr) {  // every engine's and shard's counters
    const int64_t now = tsc.now_ns() + tai_offset_ns;
    for (uint32_t k = 0; k < n; ++k) {
      std::fprintf(stderr, "A%u %s\nB%u %s\nA%u-backend %s\nB%u-backend %s\n", k,
                   raw_a[k]->stats_json(now).c_str(), k, raw_b[k]->stats_json(now).c_str(), k,
                   (*shards_a)[k]->counters_json().c_str(), k,
                   (*shards_b)[k]->counters_json().c_str());
    }
  }
  return 0;
}

}  // namespace detwan::dataplane::dpdk::testing

// Harness of tools/bench/gw-vs-testpmd: the forwarding cost of the DPDK gateway on one lcore.
//
// Two gateways, A and B, in one process on the calling lcore, joined by net_ring devices built
// with rte_eth_from_rings, in a closed loop as dpdk-testpmd --tx-first circulates its packets:
//
//   ring X -> [local port A -> engine A (classify, police, slot schedule) -> encap -> wanA]
//          -> ring AB -> [wanB -> parse, checksum -> engine B (decode, replay window, playout)
//          -> decap -> local port B] -> ring X
//
// --packets IPv4/UDP packets are injected once and circulate for --seconds. Every circulation
// is one tunnel traversal = two gateway forwards (each one RX burst + one TX burst on a ring
// device, as one testpmd io forward). Prints one JSON object: rates, the TSC accounting of each
// phase of the loop, and micro-costs of the framing steps measured alone.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <rte_cycles.h>
#include <rte_mempool.h>

#include "common/clock.h"
#include "dataplane/aead/aead.h"
#include "dataplane/dpdk/gateway.h"
#include "dataplane/gw/classify.h"
#include "dataplane/gw/engine.h"
#include "dataplane/wire/byte_order.h"
#include "dataplane/wire/header.h"
#include "tests/dataplane/dpdk/dpdk_test_util.h"
#include "tests/dataplane/dpdk/fwd_bench_shards.h"

namespace dpdk = detwan::dataplane::dpdk;
namespace gw = detwan::dataplane::gw;
namespace wire = detwan::dataplane::wire;
namespace aead = detwan::dataplane::aead;
using namespace dpdk::testing;

namespace {

struct Options {
  double seconds = 5;
  uint32_t packets = 64;
  uint32_t payload_bytes = 18;  // UDP payload: 64-byte inner Ethernet frames, as testpmd's
  std::vector<std::string> eal = {"--no-huge", "-m", "512", "--no-pci"};
  // WAN devices of A and B, e.g. net_af_packet0,net_af_packet1 named by --vdev in the EAL
  // arguments; empty: a net_ring pair made here.
  std::string wan_a, wan_b;
  std::string cipher = "none";  // or an AEAD: the tunnel is authenticated and encrypted
  uint32_t shards = 0;          // > 0: the sharded mode (fwd_bench_shards.cc)
  uint32_t tunnels = 64;        // sharded mode
  bool dispatch = false;        // sharded mode: every packet enters on queue 0
  uint32_t ports = 1;           // sharded mode: WAN ports
  // The tunnel bound to its tenants at both ends (match.src: the hosts' /24s): the source
  // lookup at A's classifier and the egress check at B run per packet.
  bool match_src = false;
};

int usage(const char* why) {
  std::fprintf(stderr,
               "%s\nusage: dataplane_dpdk_fwd_bench [--seconds S] [--packets N] "
               "[--payload-bytes B] [--wan-devices A,B] "
               "[--cipher none|aes-256-gcm|chacha20-poly1305] [--match-src yes] "
               "[--shards N [--tunnels T] [--wan-ports P] [--dispatch yes]] [-- EAL args...]\n",
               why);
  return 2;
}

gw::GatewayConfig bench_config(bool is_a, const std::string& device, const std::string& cipher,
                               bool match_src) {
  gw::GatewayConfig config = pair_config(is_a, device);
  config.dpdk.mbuf_count = 4095;
  config.batch = 32;
  gw::WanPortConfig& port = config.wan_ports[0];
  port.line_rate_bps = 100'000'000'000;  // far above what one core forwards: never the limit
  port.capacity_frames = 8192;
  gw::TunnelConfig& tunnel = config.tunnels[0];
  tunnel.rate_bps = 90'000'000'000;
  tunnel.queue_frames = 4096;
  tunnel.slots.clear();
  for (uint32_t slot = 0; slot < 100; ++slot) tunnel.slots.push_back(slot);  // endless window
  if (match_src) tunnel.src_prefixes = {prefix(is_a ? "10.20.1.0/24" : "10.20.2.0/24")};
  if (cipher != "none") {
    gw::TunnelAuth auth;
    auth.cipher = *detwan::dataplane::aead::cipher_from_string(cipher);
    auth.keys.push_back(
        gw::TunnelKey{1, *detwan::dataplane::aead::key_from_hex(std::string(64, 'b'))});
    auth.tx_key = 1;
    tunnel.auth = auth;
  }
  return config;
}

// Average TSC cycles of fn() over `rounds` calls.
template <typename Fn>
double cycles_per_call(uint32_t rounds, Fn&& fn) {
  const uint64_t start = rte_rdtsc();
  for (uint32_t i = 0; i < rounds; ++i) fn(i);
  return static_cast<double>(rte_rdtsc() - start) / rounds;
}

// Per-packet costs of the framing steps alone, in TSC cycles.
std::string micro_costs(uint32_t payload_bytes) {
  const gw::Endpoint a = endpoint("10.0.0.1:4789");
  const gw::Endpoint b = endpoint("10.0.0.2:4789");
  const uint32_t inner = dpdk::outer_header_bytes(false) + payload_bytes;  // inner IP + Eth
  std::vector<std::byte> frame(dpdk::outer_header_bytes(false) + wire::kHeaderSize + inner -
                               dpdk::kEtherHeaderBytes);
  dpdk::OuterSpec spec;
  (void)dpdk::parse_mac(kMacA, &spec.source_mac);
  (void)dpdk::parse_mac(kMacB, &spec.destination_mac);
  spec.source = &a;
  spec.destination = &b;
  wire::TunnelHeader header;
  header.tunnel_id = 7;
  header.type = static_cast<uint8_t>(wire::DataType::kIpv4);
  header.payload_length = static_cast<uint16_t>(frame.size() - 42 - wire::kHeaderSize);
  constexpr uint32_t kRounds = 2'000'000;
  volatile uint64_t sink = 0;
  const double encode = cycles_per_call(kRounds, [&](uint32_t i) {
    header.sequence = i;
    sink = sink + static_cast<uint64_t>(
                      wire::encode(header, std::span<std::byte>(frame).subspan(42)).size);
  });
  const double build = cycles_per_call(kRounds, [&](uint32_t i) {
    frame[frame.size() - 1] = static_cast<std::byte>(i);
    sink = sink + (dpdk::build_outer_headers(frame, spec, false, false) ? 1 : 0);
  });
  dpdk::WanAddress address;
  (void)dpdk::parse_mac(kMacB, &address.mac);
  address.local = b;
  dpdk::ParsedFrame parsed;
  const double parse = cycles_per_call(kRounds, [&](uint32_t) {
    sink = sink + static_cast<uint64_t>(dpdk::parse_wan_frame(
                      frame, address, dpdk::ChecksumState::kUnknown,
                      dpdk::ChecksumState::kUnknown, &parsed));
  });
  const double parse_offloaded = cycles_per_call(kRounds, [&](uint32_t) {
    sink = sink + static_cast<uint64_t>(dpdk::parse_wan_frame(
                      frame, address, dpdk::ChecksumState::kGood, dpdk::ChecksumState::kGood,
                      &parsed));
  });
  const double decode = cycles_per_call(kRounds, [&](uint32_t) {
    sink = sink + wire::decode(std::span<const std::byte>(frame).subspan(42)).value().header.sequence;
  });
  // The classifier with 64 tunnels of one /32 each, any source or each bound to its tenant's
  // /32 (docs/gateway.md, "match"), over packets to all 64; and the egress check.
  std::vector<gw::TunnelConfig> any(64), bound(64);
  for (uint32_t t = 0; t < 64; ++t) {
    any[t].id = bound[t].id = t + 1;
    any[t].dst_prefixes = {prefix(fmt::format("10.20.2.{}/32", t + 1).c_str())};
    bound[t].dst_prefixes = any[t].dst_prefixes;
    bound[t].src_prefixes = {prefix(fmt::format("10.20.1.{}/32", t + 1).c_str())};
  }
  const auto any_classifier = gw::Classifier::create(any).value();
  const auto bound_classifier = gw::Classifier::create(bound).value();
  std::vector<gw::IpInfo> packets(64);
  for (uint32_t t = 0; t < 64; ++t) {
    const auto datagram =
        host_frame(fmt::format("10.20.1.{}:5000", t + 1).c_str(),
                   fmt::format("10.20.2.{}:6000", t + 1).c_str(), kHostMacA, payload_bytes, t);
    (void)gw::parse_ip(std::span<const std::byte>(datagram).subspan(dpdk::kEtherHeaderBytes),
                       &packets[t]);
  }
  const double classify_any = cycles_per_call(kRounds, [&](uint32_t i) {
    sink = sink + any_classifier.classify(packets[i % 64]).tunnel_index;
  });
  const double classify_bound = cycles_per_call(kRounds, [&](uint32_t i) {
    sink = sink + bound_classifier.classify(packets[i % 64]).tunnel_index;
  });
  gw::TunnelConfig egress;  // site b's view of tunnel 1
  egress.dst_prefixes = {prefix("10.20.1.1/32")};
  egress.src_prefixes = {prefix("10.20.2.1/32")};
  const auto inner_frame =
      host_frame("10.20.1.1:5000", "10.20.2.1:6000", kHostMacA, payload_bytes, 0);
  const auto inner_ip = std::span<const std::byte>(inner_frame).subspan(dpdk::kEtherHeaderBytes);
  const double egress_check = cycles_per_call(kRounds, [&](uint32_t) {
    sink = sink +
           static_cast<uint64_t>(gw::inner_verdict(egress, wire::DataType::kIpv4, inner_ip, false));
  });
  return fmt::format(
      R"({{"frame_bytes":{},"encode_header":{:.1f},"build_outer_with_checksums":{:.1f},)"
      R"("parse_outer_sw_checksums":{:.1f},"parse_outer_offloaded":{:.1f},"decode_header":{:.1f},)"
      R"("classify_64_tunnels_any_source":{:.1f},"classify_64_tunnels_tenant_bound":{:.1f},)"
      R"("egress_tenant_check":{:.1f}}})",
      frame.size(), encode, build, parse, parse_offloaded, decode, classify_any, classify_bound,
      egress_check);
}

// The cipher's own cost for this packet, alone (issue 33, "the cipher's own cost and no more"):
// seal then open of one tunnel packet with the key the gateways use (the same library:
// DETWAN_AEAD_BACKEND picks it for both), in TSC cycles per seal+open pair, twice: "seal_open"
// on one buffer (hot in L1: the library's best case) and "seal_open_population" cycling over
// `population` buffers 2 KiB apart, the working set of the forward's circulating packets (the
// cipher reads and writes payload the forward itself never touches when it does not encrypt).
// "null" without a cipher.
std::string aead_costs(const std::string& cipher_name, uint32_t payload_bytes,
                       uint32_t population) {
  const auto cipher = aead::cipher_from_string(cipher_name);
  if (!cipher) return "null";
  aead::Key raw{};
  for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<std::byte>(i * 5 + 3);
  auto key = aead::AeadKey::create(*cipher, raw);
  if (!key) return "null";
  const uint32_t plain = dpdk::outer_header_bytes(false) + payload_bytes - dpdk::kEtherHeaderBytes;
  constexpr std::size_t kStride = 2048;
  const std::size_t bytes = wire::kHeaderSize + plain + aead::kTagBytes;
  population = std::max<uint32_t>(population, 1);
  std::vector<std::byte> buffers(kStride * population + bytes);
  wire::TunnelHeader header;
  header.flags = wire::kFlagData | wire::kFlagAuth;
  header.tunnel_id = 7;
  header.type = static_cast<uint8_t>(wire::DataType::kIpv4);
  header.session = 1;
  header.payload_length = static_cast<uint16_t>(plain);
  for (uint32_t k = 0; k < population; ++k) {
    (void)wire::encode(header, std::span(buffers).subspan(k * kStride, bytes));
  }
  constexpr uint32_t kRounds = 500'000;
  uint64_t failures = 0;
  const auto seal_open = [&](uint32_t round, uint32_t k) {
    const std::span<std::byte> packet = std::span(buffers).subspan(k * kStride, bytes);
    wire::store_be64(packet.data() + wire::kSequenceOffset, round);
    if (aead::seal_packet(*key, packet, plain) == 0 || !aead::open_packet(*key, packet)) {
      ++failures;
    }
  };
  const double hot = cycles_per_call(kRounds, [&](uint32_t i) { seal_open(i, 0); });
  const double spread =
      cycles_per_call(kRounds, [&](uint32_t i) { seal_open(i, i % population); });
  return fmt::format(
      R"({{"backend":"{}","plaintext_bytes":{},"seal_open":{:.1f},"seal_open_population":{:.1f},)"
      R"("population":{},"failures":{}}})",
      aead::to_string(key->backend()), plain, hot, spread, population, failures);
}

int run_bench(const Options& options) {
  auto eal = dpdk::init_eal(options.eal);
  if (!eal) {
    std::fprintf(stderr, "%s\n", eal.error().describe().c_str());
    return 1;
  }
  RingPtr loop = make_ring("bench_x", 4096);
  RingPtr ab = make_ring("bench_ab", 4096);
  RingPtr ba = make_ring("bench_ba", 4096);
  RingPtr unused = make_ring("bench_unused", 64);
  // Local port A receives from X; local port B sends into X: the loop closes without help.
  const bool ring_wan = options.wan_a.empty();
  if (ring_port("benchHostA", loop.get(), unused.get()) < 0 ||
      (ring_wan && ring_port("benchWanA", ba.get(), ab.get()) < 0) ||
      (ring_wan && ring_port("benchWanB", ab.get(), ba.get()) < 0) ||
      ring_port("benchHostB", unused.get(), loop.get()) < 0) {
    std::fprintf(stderr, "rte_eth_from_rings failed\n");
    return 1;
  }
  const gw::GatewayConfig config_a = bench_config(
      true, ring_wan ? "net_ring_benchWanA" : options.wan_a, options.cipher, options.match_src);
  const gw::GatewayConfig config_b = bench_config(
      false, ring_wan ? "net_ring_benchWanB" : options.wan_b, options.cipher, options.match_src);
  const detwan::common::TscClock tsc;
  const int64_t tai_offset_ns = detwan::common::TaiClock().now_ns() - tsc.now_ns();
  const int64_t start_ns = tsc.now_ns() + tai_offset_ns;
  auto engine_a = gw::Engine::create(config_a, start_ns);
  auto engine_b = gw::Engine::create(config_b, start_ns);
  if (!engine_a || !engine_b) {
    std::fprintf(stderr, "engine: %s\n",
                 (!engine_a ? engine_a.error() : engine_b.error()).describe().c_str());
    return 1;
  }
  dpdk::GatewayOptions options_a;
  options_a.local_port = dpdk::LocalPortOptions{"net_ring_benchHostA", kHostMacA, 1024, 1024};
  dpdk::GatewayOptions options_b;
  options_b.local_port = dpdk::LocalPortOptions{"net_ring_benchHostB", kHostMacB, 1024, 1024};
  auto gateway_a = dpdk::Gateway::open(**engine_a, config_a, options_a);
  auto gateway_b = dpdk::Gateway::open(**engine_b, config_b, options_b);
  if (!gateway_a || !gateway_b) {
    std::fprintf(stderr, "gateway: %s\n",
                 (!gateway_a ? gateway_a.error() : gateway_b.error()).describe().c_str());
    return 1;
  }
  // An authenticated tunnel carries data once each gateway knows the other's epoch (the
  // keepalive handshake): the population is injected after it, so none of it is refused.
  const uint64_t handshake_end = rte_rdtsc() + rte_get_tsc_hz() * 2;
  while (!((*engine_a)->tunnel_ready(0) && (*engine_b)->tunnel_ready(0))) {
    if (rte_rdtsc() > handshake_end) {
      std::fprintf(stderr, "the gateways did not exchange their epochs within 2 s\n");
      return 1;
    }
    const int64_t now = tsc.now_ns() + tai_offset_ns;
    (void)(*gateway_a)->poll_once_st(now);
    (void)(*gateway_b)->poll_once_st(now);
  }
  for (uint32_t i = 0; i < options.packets; ++i) {
    rte_mbuf* m = mbuf_from((*gateway_a)->pool(),
                            host_frame("10.20.1.5:5000", "10.20.2.9:6000", kHostMacA,
                                       options.payload_bytes, i));
    if (m == nullptr || rte_ring_enqueue(loop.get(), m) != 0) {
      std::fprintf(stderr, "cannot inject packet %u\n", i);
      return 1;
    }
  }
  const uint64_t hz = rte_get_tsc_hz();
  const uint64_t warmup_end = rte_rdtsc() + hz / 2;
  while (rte_rdtsc() < warmup_end) {
    const int64_t now = tsc.now_ns() + tai_offset_ns;
    (void)(*gateway_a)->poll_once_st(now);
    (void)(*gateway_b)->poll_once_st(now);
  }
  const dpdk::BackendCounters a0 = (*gateway_a)->counters();
  const dpdk::BackendCounters b0 = (*gateway_b)->counters();
  const uint64_t delivered0 = (*engine_b)->local_io().tun_tx_packets;
  const uint64_t t0 = rte_rdtsc();
  const uint64_t end = t0 + static_cast<uint64_t>(options.seconds * static_cast<double>(hz));
  uint64_t t = t0;
  while (t < end) {
    const int64_t now = tsc.now_ns() + tai_offset_ns;
    (void)(*gateway_a)->poll_once_st(now);
    (void)(*gateway_b)->poll_once_st(now);
    t = rte_rdtsc();
  }
  const double elapsed_s = static_cast<double>(t - t0) / static_cast<double>(hz);
  const int64_t end_ns = tsc.now_ns() + tai_offset_ns;
  const uint64_t delivered = (*engine_b)->local_io().tun_tx_packets - delivered0;
  const dpdk::BackendCounters a1 = (*gateway_a)->counters();
  const dpdk::BackendCounters b1 = (*gateway_b)->counters();
  const double per = delivered > 0 ? static_cast<double>(delivered) : 1.0;
  auto phase = [&](uint64_t dpdk::BackendCounters::*field) {
    return static_cast<double>((a1.*field - a0.*field) + (b1.*field - b0.*field)) / per;
  };
  std::printf(
      R"({"cipher":"%s","match_src":%s,"seconds":%.3f,"packets_circulating":%u,"inner_frame_bytes":%u,"delivered":%lu,)"
      R"("traversals_pps":%.0f,"gateway_forwards_pps":%.0f,"tsc_hz":%lu,)"
      R"("cycles_per_traversal":%.1f,"phase_cycles_per_traversal":{"wan_rx":%.1f,)"
      R"("local_rx":%.1f,"control":%.1f,"transmit":%.1f,"release":%.1f},)"
      R"("tx_failed":%lu,"micro_cycles":%s,"aead_cycles":%s,"engine_a":%s,"engine_b":%s})"
      "\n",
      options.cipher.c_str(), options.match_src ? "true" : "false", elapsed_s, options.packets,
      dpdk::outer_header_bytes(false) + options.payload_bytes,
      static_cast<unsigned long>(delivered), static_cast<double>(delivered) / elapsed_s,
      2.0 * static_cast<double>(delivered) / elapsed_s, static_cast<unsigned long>(hz),
      static_cast<double>(t - t0) / per, phase(&dpdk::BackendCounters::cycles_wan_rx),
      phase(&dpdk::BackendCounters::cycles_local_rx), phase(&dpdk::BackendCounters::cycles_control),
      phase(&dpdk::BackendCounters::cycles_transmit), phase(&dpdk::BackendCounters::cycles_release),
      static_cast<unsigned long>(a1.tx_failed + b1.tx_failed),
      micro_costs(options.payload_bytes).c_str(),
      aead_costs(options.cipher, options.payload_bytes, options.packets).c_str(),
      (*engine_a)->stats_json(end_ns).c_str(),
      (*engine_b)->stats_json(end_ns).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      options.eal.assign(argv + i + 1, argv + argc);
      break;
    }
    if (i + 1 >= argc) return usage(("missing value after " + arg).c_str());
    const std::string value = argv[++i];
    try {
      if (arg == "--seconds") {
        options.seconds = std::stod(value);
      } else if (arg == "--packets") {
        options.packets = static_cast<uint32_t>(std::stoul(value));
      } else if (arg == "--payload-bytes") {
        options.payload_bytes = static_cast<uint32_t>(std::stoul(value));
      } else if (arg == "--cipher") {
        if (value != "none" && !detwan::dataplane::aead::cipher_from_string(value)) {
          return usage("--cipher: none, aes-256-gcm or chacha20-poly1305");
        }
        options.cipher = value;
      } else if (arg == "--shards") {
        options.shards = static_cast<uint32_t>(std::stoul(value));
      } else if (arg == "--tunnels") {
        options.tunnels = static_cast<uint32_t>(std::stoul(value));
      } else if (arg == "--wan-ports") {
        options.ports = static_cast<uint32_t>(std::stoul(value));
      } else if (arg == "--dispatch") {
        options.dispatch = value == "yes";
      } else if (arg == "--match-src") {
        options.match_src = value == "yes";
      } else if (arg == "--wan-devices") {
        const auto comma = value.find(',');
        if (comma == std::string::npos) return usage("--wan-devices takes A,B");
        options.wan_a = value.substr(0, comma);
        options.wan_b = value.substr(comma + 1);
      } else {
        return usage(("unknown option " + arg).c_str());
      }
    } catch (const std::exception&) {
      return usage(("bad value '" + value + "' for " + arg).c_str());
    }
  }
  if (options.seconds <= 0 || options.packets == 0 ||
      (options.shards == 0 && options.packets > 2048) || options.payload_bytes > 1400) {
    return usage("need --seconds > 0, 1 <= --packets <= 2048, --payload-bytes <= 1400");
  }
  if (options.shards > 0) {
    if (options.tunnels == 0 || options.tunnels > 100 || options.packets > 8192 ||
        options.ports == 0 || options.ports > 4) {
      return usage("need 1 <= --tunnels <= 100, --packets <= 8192, 1 <= --wan-ports <= 4");
    }
    auto eal = dpdk::init_eal(options.eal);
    if (!eal) {
      std::fprintf(stderr, "%s\n", eal.error().describe().c_str());
      return 1;
    }
    return dpdk::testing::run_sharded_bench({options.shards, options.tunnels, options.packets,
                                             options.payload_bytes, options.seconds,
                                             options.dispatch, options.ports});
  }
  return run_bench(options);
}

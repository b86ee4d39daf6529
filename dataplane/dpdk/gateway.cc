// Setup of the DPDK gateway and the backend entry point run().
#include "dataplane/dpdk/gateway.h"

#include <algorithm>
#include <atomic>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <rte_cycles.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include "common/clock.h"
#include "common/logging.h"
#include "dataplane/dpdk/eal.h"
#include "dataplane/dpdk/gateway_impl.h"

namespace detwan::dataplane::dpdk {
namespace {

constexpr uint32_t kPoolCacheSize = 256;
constexpr uint32_t kVlanRoomBytes = 4;        // room for one tag in received frames
constexpr unsigned kDispatchRingSize = 4096;  // per shard and direction (a power of two)

std::string pool_name() {
  static std::atomic<uint32_t> next{0};  // one pool per gateway; names must be unique
  return fmt::format("dtw_gw_{}", next.fetch_add(1));
}

common::Result<std::unique_ptr<EthPort>> open_wan_port(const gw::GatewayConfig& gateway,
                                                       const GatewayOptions& gateway_options,
                                                       rte_mempool* pool, uint32_t index,
                                                       uint16_t queues) {
  const gw::WanPortConfig& config = gateway.wan_ports[index];
  const std::string label = fmt::format("wan_ports[{}] ({})", index, config.name);
  if (!config.dpdk) {
    return common::make_error(common::ErrorCode::kConfig,
                              fmt::format("{}: the dpdk backend needs a 'dpdk' section (device, "
                                          "next_hop_mac)",
                                          label));
  }
  const gw::DpdkPortConfig& dpdk = *config.dpdk;
  MacAddress next_hop;
  if (!parse_mac(dpdk.next_hop_mac, &next_hop)) {
    return common::make_error(
        common::ErrorCode::kConfig,
        fmt::format("{}: field 'dpdk.next_hop_mac': '{}' is not a MAC address like "
                    "02:00:00:00:00:01",
                    label, dpdk.next_hop_mac));
  }
  EthPortOptions options;
  options.label = label;
  options.device = dpdk.device;
  options.local_mac = dpdk.local_mac;
  options.rx_queue_size = dpdk.rx_queue_size;
  options.tx_queue_size = dpdk.tx_queue_size;
  options.mtu_bytes = config.mtu_bytes;
  options.want_checksum_offload = gateway_options.checksum_offload;
  options.queues = queues;
  return EthPort::open(options, pool);
}

// A shard's view of WAN port `index` (the device is shared; the counters are its engine's).
WanPortState wan_state(Gateway::Impl& impl, uint32_t index) {
  const gw::WanPortConfig& config = impl.config.wan_ports[index];
  WanPortState state;
  state.port = impl.shared->wan_ports[index].get();
  state.device = config.dpdk->device;
  (void)parse_mac(config.dpdk->next_hop_mac, &state.next_hop_mac);
  state.address.mac = state.port->mac();
  state.address.local = config.local;
  state.io = &impl.engine.port_io(index);
  return state;
}

// The pool, the devices, the host side and the dispatch rings of a gateway of `engines.size()`
// shards; `first` is shard 0's Impl (the host side is opened through it).
common::Result<void> open_shared(SharedState& shared, Gateway::Impl& first,
                                 const gw::GatewayConfig& config, const GatewayOptions& options,
                                 uint32_t shard_count) {
  uint32_t largest_frame = config.tun.mtu_bytes + kEtherHeaderBytes;
  for (const gw::WanPortConfig& port : config.wan_ports) {
    largest_frame = std::max(largest_frame, port.mtu_bytes + kEtherHeaderBytes + kVlanRoomBytes);
  }
  // Default mbufs (2048 bytes of data room) unless an MTU needs more; jumbo frames stay in
  // one segment.
  const uint32_t data_room =
      RTE_PKTMBUF_HEADROOM + std::max<uint32_t>(largest_frame, RTE_MBUF_DEFAULT_DATAROOM);
  if (data_room > UINT16_MAX) {
    return common::make_error(
        common::ErrorCode::kConfig,
        fmt::format("an MTU of {} bytes needs mbufs above 64 KiB", largest_frame));
  }
  const std::string name = pool_name();
  shared.pool = rte_pktmbuf_pool_create(
      name.c_str(), config.dpdk.mbuf_count, std::min(kPoolCacheSize, config.dpdk.mbuf_count / 2), 0,
      static_cast<uint16_t>(data_room), static_cast<int>(rte_socket_id()));
  if (shared.pool == nullptr) {
    return std::unexpected(
        rte_error(common::ErrorCode::kIo,
                  fmt::format("mbuf pool of {} buffers of {} bytes (field 'dpdk.mbufs'; without "
                              "hugepages give the EAL more memory with -m)",
                              config.dpdk.mbuf_count, data_room)));
  }
  first.pool = shared.pool;
  shared.shard_count = shard_count;
  for (uint32_t i = 0; i < config.wan_ports.size(); ++i) {
    auto port = open_wan_port(config, options, shared.pool, i, static_cast<uint16_t>(shard_count));
    if (!port) return std::unexpected(port.error());
    for (const auto& other : shared.wan_ports) {
      if (other->port_id() == (*port)->port_id()) {
        return common::make_error(common::ErrorCode::kConfig,
                                  fmt::format("{} and {} both use DPDK device '{}'", other->label(),
                                              (*port)->label(), config.wan_ports[i].dpdk->device));
      }
    }
    shared.wan_ports.push_back(std::move(*port));
  }
  if (shard_count > 1) {
    for (uint32_t i = 0; i < config.wan_ports.size(); ++i) {
      const EthPort& port = *shared.wan_ports[i];
      std::unique_ptr<FlowSteering> steering;
      std::string note;
      if (port.rx_queue_count() < shard_count) {
        note = fmt::format("{}: {} RX queue(s) for {} shards: no flow rules", port.label(),
                           port.rx_queue_count(), shard_count);
      } else if (auto installed = FlowSteering::install(port.port_id(), port.label(),
                                                        config.wan_ports[i].local, shard_count);
                 installed) {
        steering = std::move(*installed);
        note = fmt::format("{}: {} flow rules", port.label(), steering->rule_count());
      } else {
        note = installed.error().message;
      }
      shared.wan_steering.push_back(std::move(steering));
      shared.wan_steering_note.push_back(std::move(note));
    }
  }
  if (shard_count > 1) {
    shared.peers = std::make_unique<gw::PeerBoards>(first.engine.peer_count());
    for (uint32_t k = 0; k < shard_count; ++k) {
      for (auto* rings : {&shared.wan_in, &shared.local_in}) {
        const std::string ring_name =
            fmt::format("{}_{}{}", name, rings == &shared.wan_in ? "w" : "l", k);
        rte_ring* ring = rte_ring_create(ring_name.c_str(), kDispatchRingSize,
                                         static_cast<int>(rte_socket_id()), RING_F_SC_DEQ);
        if (ring == nullptr) {
          return std::unexpected(
              rte_error(common::ErrorCode::kIo, fmt::format("dispatch ring of shard {}", k)));
        }
        rings->push_back(ring);
      }
    }
  }
  return open_local_side(first, static_cast<uint16_t>(shard_count));
}

}  // namespace

SharedState::~SharedState() {
  wan_steering.clear();  // rules before their devices
  wan_ports.clear();     // devices first: they may hold buffered mbufs of the pool
  local.port.reset();
  for (auto* rings : {&wan_in, &local_in}) {
    for (rte_ring* ring : *rings) {
      void* m = nullptr;
      while (rte_ring_dequeue(ring, &m) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
      rte_ring_free(ring);
    }
  }
  if (pool != nullptr) rte_mempool_free(pool);
}

Gateway::Impl::~Impl() {
  if (spare != nullptr) rte_pktmbuf_free(spare);
  spare = nullptr;
}

Gateway::Gateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Gateway::~Gateway() = default;

common::Result<std::vector<std::unique_ptr<Gateway>>> Gateway::open_shards(
    const std::vector<gw::Engine*>& engines, const gw::GatewayConfig& config,
    const GatewayOptions& options) {
  const auto count = static_cast<uint32_t>(engines.size());
  if (count == 0 || count > RTE_MAX_LCORE) {
    return common::make_error(common::ErrorCode::kInvalidArgument,
                              fmt::format("{} shards: need 1 .. {}", count, RTE_MAX_LCORE));
  }
  for (uint32_t k = 0; k < count; ++k) {
    const gw::ShardSpec& spec = engines[k]->shard();
    if (spec.index != k || spec.count != count) {
      return common::make_error(common::ErrorCode::kInvalidArgument,
                                fmt::format("engine {} was created as shard {} of {}, not {} of {}",
                                            k, spec.index, spec.count, k, count));
    }
    if (engines[k]->port_count() != config.wan_ports.size()) {
      return common::make_error(common::ErrorCode::kInternal,
                                fmt::format("engine has {} WAN ports, configuration {}",
                                            engines[k]->port_count(), config.wan_ports.size()));
    }
  }
  auto shared = std::make_shared<SharedState>();
  std::vector<std::unique_ptr<Gateway>> shards;
  for (uint32_t k = 0; k < count; ++k) {
    auto impl = std::make_unique<Impl>(*engines[k], config, shared);
    impl->options = options;
    impl->shard = k;
    impl->batch = std::clamp<uint32_t>(config.batch, 1, EthPort::kMaxBurst);
    if (k == 0) {
      if (auto ok = open_shared(*shared, *impl, config, options, count); !ok) {
        return std::unexpected(ok.error());
      }
    }
    impl->pool = shared->pool;
    for (uint32_t i = 0; i < config.wan_ports.size(); ++i) impl->wan.push_back(wan_state(*impl, i));
    shards.push_back(std::unique_ptr<Gateway>(new Gateway(std::move(impl))));
  }
  return shards;
}

common::Result<std::unique_ptr<Gateway>> Gateway::open(gw::Engine& engine,
                                                       const gw::GatewayConfig& config,
                                                       const GatewayOptions& options) {
  if (engine.shard().count != 1) {
    return common::make_error(common::ErrorCode::kInvalidArgument,
                              "an engine created as one shard of several: use open_shards");
  }
  auto shards = open_shards({&engine}, config, options);
  if (!shards) return std::unexpected(shards.error());
  return std::move(shards->front());
}

BackendCounters Gateway::counters() const noexcept { return impl_->counters; }

uint16_t Gateway::wan_port_id(uint32_t port_index) const noexcept {
  return port_index < impl_->wan.size() ? impl_->wan[port_index].port->port_id() : UINT16_MAX;
}

rte_mempool* Gateway::pool() const noexcept { return impl_->pool; }

uint16_t Gateway::service_port(uint32_t tunnel_index) const noexcept {
  const auto& service = impl_->local.service;
  return tunnel_index < service.size() ? service[tunnel_index].port : uint16_t{0};
}

namespace {

std::string eth_json(const EthPort& port, bool with_frame_drops) {
  const EthCounters c = port.total_counters();
  std::string text =
      fmt::format(R"("port_id":{},"rx_packets":{},"rx_bytes":{},"tx_packets":{},"tx_bytes":{},)"
                  R"("tx_failed":{},"encap_failed":{})",
                  port.port_id(), c.rx_packets, c.rx_bytes, c.tx_packets, c.tx_bytes, c.tx_failed,
                  c.encap_failed);
  if (with_frame_drops) {
    text += R"(,"frame_drops":{)";
    for (int i = 1; i < kFrameDropCount; ++i) {
      text += fmt::format(R"({}"{}":{})", i > 1 ? "," : "", to_string(static_cast<FrameDrop>(i)),
                          c.frame_drops[i]);
    }
    text += "}";
  }
  return text;
}

}  // namespace

const std::vector<std::string>& Gateway::wan_steering_notes() const noexcept {
  return impl_->shared->wan_steering_note;
}

std::string Gateway::counters_json() const {
  const Impl& impl = *impl_;
  std::string text = R"({"wan_ports":[)";
  for (std::size_t i = 0; i < impl.wan.size(); ++i) {
    // How its frames reach their owner shard: "flow_rules" (the device steers them),
    // "dispatch" (RSS at best, then the dispatch rings), or "none" with one shard.
    const SharedState& shared = *impl.shared;
    const char* steering = i >= shared.wan_steering.size() ? "none"
                           : shared.wan_steering[i]        ? "flow_rules"
                                                           : "dispatch";
    text += fmt::format(R"({}{{"name":"{}","device":"{}",{},"rx_steering":"{}"}})",
                        i > 0 ? "," : "", impl.config.wan_ports[i].name, impl.wan[i].device,
                        eth_json(*impl.wan[i].port, true), steering);
  }
  text += "],";
  if (impl.local.port) {
    text += fmt::format(R"("local_port":{{{}}},)", eth_json(*impl.local.port, false));
  }
  const BackendCounters& c = impl.counters;
  text += fmt::format(
      R"("wan_frame_drops":{},"encap_failed":{},"tx_failed":{},"no_buffer":{},)"
      R"("local_dropped":{},"loop_iterations":{},"shard":{},"shards":{},"dispatched":{},)"
      R"("dispatch_dropped":{},"tsc_hz":{},"cycles":{{"wan_rx":{},)"
      R"("local_rx":{},"control":{},"transmit":{},"release":{}}}}})",
      c.wan_frame_drops_total, c.encap_failed, c.tx_failed, c.no_buffer, c.local_dropped,
      c.loop_iterations, impl.shard, impl.shared->shard_count, c.dispatched, c.dispatch_dropped,
      rte_get_tsc_hz(), c.cycles_wan_rx, c.cycles_local_rx, c.cycles_control, c.cycles_transmit,
      c.cycles_release);
  return text;
}

namespace {

struct LoopArgs {
  Gateway* gateway;
  gw::RunContext* context;
};

int loop_on_lcore(void* arg) {
  auto* args = static_cast<LoopArgs*>(arg);
  args->gateway->run_st(args->context->stop, args->context->control, args->context->admin);
  return 0;
}

}  // namespace

namespace {

// run() with config.dpdk.lcores: the other shards' engines, the shards, run_shards.
common::Result<void> run_sharded(gw::RunContext& context) {
  const gw::GatewayConfig& config = context.config;
  auto log = common::logger("dpdk");
  const auto count = static_cast<uint32_t>(config.dpdk.lcores.size());
  const gw::ShardSpec first = context.engine.shard();
  if (first.count != count || first.index != 0) {
    return common::make_error(
        common::ErrorCode::kInternal,
        fmt::format("field 'dpdk.lcores' names {} lcores but the engine was created as shard {} "
                    "of {}",
                    count, first.index, first.count));
  }
  std::vector<std::unique_ptr<gw::Engine>> others;
  std::vector<gw::Engine*> engines{&context.engine};
  const int64_t now_ns = common::TaiClock().now_ns();
  for (uint32_t k = 1; k < count; ++k) {
    auto engine = gw::Engine::create(config, now_ns, gw::ShardSpec{k, count, first.epoch});
    if (!engine) return std::unexpected(engine.error());
    engines.push_back(engine->get());
    others.push_back(std::move(*engine));
  }
  auto shards = Gateway::open_shards(engines, config);
  if (!shards) return std::unexpected(shards.error());
  for (const std::string& note : (*shards)[0]->wan_steering_notes()) {
    log->info("receive steering: {}", note);
  }
  log->info("{} shards on lcores {} (tunnel id mod {} picks the shard), {}", count,
            fmt::join(config.dpdk.lcores, ", "), count,
            config.timing == gw::TimingMode::kBusy ? "busy polling" : "low-cpu idle sleeps");
  common::Result<void> outcome = run_shards(*shards, engines, config.dpdk.lcores, context.stop,
                                            context.control, context.admin);
  for (uint32_t k = 0; k < count; ++k) {
    log->info("dpdk backend counters, shard {}: {}", k, (*shards)[k]->counters_json());
  }
  return outcome;
}

}  // namespace

common::Result<void> run(gw::RunContext& context) {
  const gw::GatewayConfig& config = context.config;
  auto log = common::logger("dpdk");
  auto eal = init_eal(config.dpdk.eal_args);
  if (!eal) return std::unexpected(eal.error());
  if (eal->initialised) {
    log->info("EAL arguments: {}", fmt::join(eal->words.begin() + 1, eal->words.end(), " "));
  } else {
    log->info("EAL already initialised in this process; dpdk.eal not applied again");
  }
  if (config.dpdk.lcores.size() > 1) {
    common::Result<void> outcome = run_sharded(context);
    if (eal->initialised) cleanup_eal();
    return outcome;
  }
  common::Result<void> outcome;
  {
    auto gateway = Gateway::open(context.engine, config);
    if (!gateway) {
      if (eal->initialised) cleanup_eal();
      return std::unexpected(gateway.error());
    }
    for (uint32_t i = 0; i < config.wan_ports.size(); ++i) {
      log->info("{}: DPDK device '{}' (port {}), next hop {}", config.wan_ports[i].name,
                config.wan_ports[i].dpdk->device, (*gateway)->wan_port_id(i),
                config.wan_ports[i].dpdk->next_hop_mac);
    }
    const unsigned main_lcore = rte_get_main_lcore();
    const int lcore = config.dpdk.lcore;
    if (lcore < 0 || static_cast<unsigned>(lcore) == main_lcore) {
      log->info("datapath on the calling thread (main lcore {}), {}", main_lcore,
                config.timing == gw::TimingMode::kBusy ? "busy polling" : "low-cpu idle sleeps");
      (*gateway)->run_st(context.stop, context.control, context.admin);
    } else if (!rte_lcore_is_enabled(static_cast<unsigned>(lcore))) {
      outcome = common::make_error(
          common::ErrorCode::kConfig,
          fmt::format("field 'dpdk.lcore': lcore {} is not enabled by dpdk.eal (-l/--lcores)",
                      lcore));
    } else {
      LoopArgs args{gateway->get(), &context};
      log->info("datapath on lcore {}", lcore);
      if (rte_eal_remote_launch(loop_on_lcore, &args, static_cast<unsigned>(lcore)) != 0) {
        outcome = common::make_error(common::ErrorCode::kUnavailable,
                                     fmt::format("lcore {} is busy", lcore));
      } else {
        (void)rte_eal_wait_lcore(static_cast<unsigned>(lcore));
      }
    }
    log->info("dpdk backend counters: {}", (*gateway)->counters_json());
  }
  if (eal->initialised) cleanup_eal();
  return outcome;
}

}  // namespace detwan::dataplane::dpdk

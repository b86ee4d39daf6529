// Setup of the io_uring backend: buffers, sockets, TUN device, ring.
#include "dataplane/uring/gateway.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/logging.h"
#include "common/reuseport_steering.h"
#include "dataplane/uring/datapath.h"
#include "dataplane/uring/gateway_state.h"
#include "dataplane/uring/shards.h"
#include "dataplane/uring/timing.h"

namespace detwan::dataplane::uring {
namespace {

constexpr uint32_t kMaxSubmissionEntries = 4096;

// Largest payload a buffer must hold: a full WAN datagram (header + payload) of any port, the
// TUN MTU. Service datagrams above it cannot enter any tunnel anyway (too big for every port).
uint32_t payload_capacity_bytes(const gw::GatewayConfig& config) {
  uint32_t capacity = config.tun.enabled ? config.tun.mtu_bytes : 0;
  for (const gw::WanPortConfig& port : config.wan_ports) {
    capacity = std::max(capacity, gw::max_tunnel_payload_bytes(port));
  }
  return std::max<uint32_t>(capacity, 1);
}

common::Result<void> open_ring(GatewayState& state, uint32_t receives) {
  const uint32_t in_flight = receives + state.config.buffer_count + 64;
  io_uring_params params{};
  const uint32_t entries = std::min(
      kMaxSubmissionEntries, std::bit_ceil(std::max(256u, 2 * receives + 4 * state.config.batch)));
  int error = -EINVAL;
  if (state.config.timing == gw::TimingMode::kLowCpu) {
    // Completion work runs only when the loop asks for it (Linux >= 6.1): a loop that coalesces
    // arrivals (gateway.rx_coalesce) sleeps outside the ring and is not woken by them. The
    // thread that runs the loop enables the ring (run_datapath) and is its only submitter.
    params.flags = IORING_SETUP_CQSIZE | IORING_SETUP_CLAMP | IORING_SETUP_SUBMIT_ALL |
                   IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
                   IORING_SETUP_R_DISABLED;
    params.cq_entries = std::bit_ceil(in_flight);
    error = io_uring_queue_init_params(entries, &state.ring, &params);
    state.deferred_taskrun = error == 0;
  }
  if (error == -EINVAL) {  // kernels before 6.1 (or busy timing): completions as they come
    params = io_uring_params{};
    params.flags = IORING_SETUP_CQSIZE | IORING_SETUP_CLAMP | IORING_SETUP_SUBMIT_ALL;
    params.cq_entries = std::bit_ceil(in_flight);
    error = io_uring_queue_init_params(entries, &state.ring, &params);
  }
  if (error == -EINVAL) {  // kernels before 5.18 know no SUBMIT_ALL
    params = io_uring_params{};
    params.flags = IORING_SETUP_CQSIZE | IORING_SETUP_CLAMP;
    params.cq_entries = std::bit_ceil(in_flight);
    error = io_uring_queue_init_params(entries, &state.ring, &params);
  }
  if (error < 0) {
    std::string message =
        "io_uring_queue_init (" + std::to_string(entries) + " entries): " + std::strerror(-error);
    if (error == -EPERM) message += " (io_uring disabled? see sysctl kernel.io_uring_disabled)";
    if (error == -ENOMEM) message += " (locked memory limit: raise ulimit -l)";
    return common::make_error(common::ErrorCode::kIo, message);
  }
  if ((params.features & IORING_FEAT_NODROP) == 0) {
    io_uring_queue_exit(&state.ring);
    return common::make_error(common::ErrorCode::kIo,
                              "io_uring: the kernel lacks IORING_FEAT_NODROP (needs Linux >= 5.5)");
  }
  state.ring_open = true;
  return {};
}

// UDP_GRO on the WAN sockets (config.wan_gro), and a LargeReceive per receive in flight on them
// and on an offloading TUN device. A kernel without UDP_GRO (before 5.0) leaves the port on one
// recvmsg per datagram.
void open_large_receives(GatewayState& state) {
  state.gro_enabled.assign(state.wan.size(), 0);
  uint32_t ports = 0;
  for (size_t i = 0; i < state.wan.size() && state.config.wan_gro; ++i) {
    const int on = 1;
    if (::setsockopt(state.wan[i].fd(), SOL_UDP, UDP_GRO, &on, sizeof on) == 0) {
      state.gro_enabled[i] = 1;
      ++ports;
    } else {
      common::logger("uring")->warn("WAN port '{}': UDP_GRO refused ({}): one receive per datagram",
                                    state.config.wan_ports[i].name, std::strerror(errno));
    }
  }
  size_t receives = size_t{ports} * state.wan_receive_depth;
  if (state.tun_fd >= 0 && state.tun_header_bytes > 0) receives += kLocalReceiveDepth;
  state.large_memory.assign(receives * kLargeBufferBytes, std::byte{0});
  state.large_receives.assign(receives, LargeReceive{});
  for (size_t i = 0; i < receives; ++i) {
    state.large_receives[i].data = state.large_memory.data() + i * kLargeBufferBytes;
  }
}

}  // namespace

common::Result<void> Datapath::prepare() {
  const gw::GatewayConfig& config = context_.config;
  if (config.wan_ports.size() != state_.wan.size() || engine_.port_count() != state_.wan.size()) {
    return common::make_error(common::ErrorCode::kConfig,
                              "uring gateway: opened " + std::to_string(state_.wan.size()) +
                                  " WAN ports, the run configuration has " +
                                  std::to_string(config.wan_ports.size()) + " (engine " +
                                  std::to_string(engine_.port_count()) + ")");
  }
  uint32_t large_next = 0;  // the next large source's first LargeReceive
  for (size_t i = 0; i < state_.wan.size(); ++i) {
    if (config.wan_ports[i].local.ipv6 != state_.wan[i].ipv6()) {
      return common::make_error(common::ErrorCode::kConfig,
                                "uring gateway: WAN port '" + config.wan_ports[i].name +
                                    "' changed address family between open and run");
    }
    sources_.push_back(Source{SourceKind::kWan, state_.wan[i].fd(), &state_.wan[i],
                              static_cast<uint32_t>(i), state_.wan_receive_depth, 0});
    if (state_.gro_enabled[i] != 0) {
      sources_.back().large = true;
      sources_.back().large_first = large_next;
      large_next += state_.wan_receive_depth;
    }
  }
  if (config.tunnels.size() != state_.services.size()) {
    return common::make_error(common::ErrorCode::kConfig,
                              "uring gateway: opened " + std::to_string(state_.services.size()) +
                                  " tunnels, the run configuration has " +
                                  std::to_string(config.tunnels.size()));
  }
  services_.assign(engine_.tunnel_count(), nullptr);
  for (size_t i = 0; i < config.tunnels.size(); ++i) {
    const gw::TunnelConfig& tunnel = config.tunnels[i];
    const ServiceSockets& sockets = state_.services[i];
    const uint32_t index = engine_.tunnel_index(tunnel.id);
    // A tunnel's service sockets belong to the shard that owns it (shards.h).
    const bool owned = gw::shard_of_tunnel(tunnel.id, engine_.shard().count) == state_.shard;
    if (index == gw::Engine::kNoTunnel || index >= services_.size() ||
        (owned && tunnel.service_listen.has_value()) != sockets.listen.has_value() ||
        (owned && tunnel.service_deliver.has_value()) != sockets.deliver.has_value()) {
      return common::make_error(common::ErrorCode::kConfig,
                                "uring gateway: tunnel " + std::to_string(tunnel.id) +
                                    " differs between open and run (or the engine lacks it)");
    }
    services_[index] = &sockets;
    if (sockets.listen) {
      sources_.push_back(Source{SourceKind::kService, sockets.listen->fd(), &*sockets.listen, index,
                                kLocalReceiveDepth, 0});
    }
  }
  if (state_.tun_fd >= 0) {
    sources_.push_back(Source{SourceKind::kTun, state_.tun_fd, nullptr, 0, kLocalReceiveDepth, 0});
    tun_header_bytes_ = state_.tun_header_bytes;
    if (tun_header_bytes_ > 0) {
      sources_.back().large = true;
      sources_.back().large_first = large_next;
    }
  }
  state_.gso_sends.assign(kGsoSendRecords, GsoSend{});
  state_.tun_runs.assign(kTunRunRecords, TunRun{});
  state_.tun_gso = tun_header_bytes_ > 0;
  state_.gso_enabled.assign(state_.wan.size(), config.wan_gso ? 1 : 0);
  if (state_.cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(state_.cpu, &set);
    if (const int error = pthread_setaffinity_np(pthread_self(), sizeof set, &set); error != 0) {
      return common::make_error(common::ErrorCode::kInvalidArgument,
                                "cpu " + std::to_string(state_.cpu) + ": cannot pin shard " +
                                    std::to_string(state_.shard) +
                                    "'s datapath thread: " + std::strerror(error));
    }
  }
  return prepare_shard();
}

common::Result<void> run_datapath(GatewayState& state, gw::RunContext& context) {
  if (state.deferred_taskrun) {
    // This thread becomes the ring's only submitter. -EBADFD: enabled by an earlier run.
    // (Debian 12's liburing declares io_uring_enable_rings but does not export it.)
    if (::syscall(__NR_io_uring_register, state.ring.ring_fd, IORING_REGISTER_ENABLE_RINGS,
                  nullptr, 0) != 0 &&
        errno != EBADFD) {
      return common::make_error(common::ErrorCode::kIo,
                                std::string("io_uring enable rings: ") + std::strerror(errno));
    }
  }
  Datapath datapath(state, context);
  if (auto prepared = datapath.prepare(); !prepared) return prepared;
  auto log = common::logger("uring");
  if (context.config.timing == gw::TimingMode::kBusy) {
    const bool tsc = common::TscClock::tsc_is_invariant();
    if (!tsc) log->warn("busy timing: the TSC is not invariant here; reading CLOCK_TAI instead");
    if (context.config.cpu < 0) log->warn("busy timing without a cpu: the loop shares its core");
    BusyTiming timing(tsc);
    datapath.loop(timing);
  } else {
    // One wake-up per batch (docs/gateway.md, "Wake-ups"): a slot window's frames, the on-time
    // packets due together, the arrivals until then.
    context.engine.set_release_ahead_st(context.config.release_ahead_ns,
                                        context.config.playout_ahead_ns);
    LowCpuTiming timing(context.config.rx_coalesce_ns, state.deferred_taskrun);
    datapath.loop(timing);
  }
  return {};
}

namespace {

// Shard `shard` of `count`: its buffers, its WAN sockets (after shard 0's, on the ports shard 0
// got: `first`), the service sockets of the tunnels it owns, its TUN queue (shard 0 opens the
// device with every queue), its ring.
common::Result<std::unique_ptr<GatewayState>> open_shard(const gw::GatewayConfig& config,
                                                         uint32_t shard, uint32_t count,
                                                         const GatewayState* first) {
  auto state = std::make_unique<GatewayState>();
  state->config = config;
  state->shard = shard;
  if (!config.shard_cpus.empty()) {
    state->cpu = static_cast<int>(config.shard_cpus.at(shard));
  } else if (shard == 0) {
    state->cpu = config.cpu;
  }
  const uint32_t batch = std::max<uint32_t>(config.batch, 1);
  state->wan_receive_depth = std::clamp<uint32_t>(batch / 2, 1, kMaxWanReceiveDepth);
  const auto owned = [&](const gw::TunnelConfig& tunnel) {
    return gw::shard_of_tunnel(tunnel.id, count) == shard;
  };

  uint32_t receives = static_cast<uint32_t>(config.wan_ports.size()) * state->wan_receive_depth;
  if (config.tun.enabled) receives += kLocalReceiveDepth;
  for (const gw::TunnelConfig& tunnel : config.tunnels) {
    if (tunnel.service_listen && owned(tunnel)) receives += kLocalReceiveDepth;
  }
  // The receives hold their buffers all the time; the engine's queues need the rest.
  if (config.buffer_count < 2 * receives) {
    return common::make_error(common::ErrorCode::kConfig,
                              "buffer_count " + std::to_string(config.buffer_count) +
                                  " is too small: the receives in flight alone hold " +
                                  std::to_string(receives) + " buffers; use at least " +
                                  std::to_string(2 * receives));
  }
  auto pool = BufferPool::create(config.buffer_count, payload_capacity_bytes(config));
  if (!pool) return std::unexpected(pool.error());
  state->pool.emplace(std::move(*pool));

  for (size_t i = 0; i < config.wan_ports.size(); ++i) {
    const gw::WanPortConfig& port = config.wan_ports[i];
    std::string what = "WAN port '" + port.name + "'";
    if (count > 1) what += " (shard " + std::to_string(shard) + ")";
    auto socket = UdpSocket::bind(first != nullptr ? first->wan[i].local() : port.local, true, what,
                                  count > 1);
    if (!socket) return std::unexpected(socket.error());
    state->wan.push_back(std::move(*socket));
  }
  for (const gw::TunnelConfig& tunnel : config.tunnels) {
    ServiceSockets sockets;
    const std::string what = "tunnel " + std::to_string(tunnel.id) + " service port";
    if (tunnel.service_listen && owned(tunnel)) {
      auto socket = UdpSocket::bind(*tunnel.service_listen, false, what);
      if (!socket) return std::unexpected(socket.error());
      sockets.listen.emplace(std::move(*socket));
    }
    if (tunnel.service_deliver && owned(tunnel)) {
      sockets.deliver = tunnel.service_deliver;
      // The listen socket sends too when it can reach the deliver endpoint.
      const bool listen_reaches =
          sockets.listen && (sockets.listen->ipv6() || !tunnel.service_deliver->ipv6);
      if (!listen_reaches) {
        auto socket = UdpSocket::unbound(tunnel.service_deliver->ipv6, what + " (deliver)");
        if (!socket) return std::unexpected(socket.error());
        sockets.sender.emplace(std::move(*socket));
      }
    }
    state->services.push_back(std::move(sockets));
  }
  if (config.tun.enabled && shard == 0) {
    auto tun = gw::TunDevice::open(config.tun, config.tun.offload, count);
    if (!tun) return std::unexpected(tun.error());
    state->tun.emplace(std::move(*tun));
  }
  const GatewayState& owner = shard == 0 ? *state : *first;
  if (owner.tun) {
    state->tun_fd = owner.tun->queue_fd(shard);
    state->tun_header_bytes = owner.tun->vnet_header_bytes();
  }
  open_large_receives(*state);
  if (auto ring = open_ring(*state, receives); !ring) return std::unexpected(ring.error());
  return state;
}

}  // namespace

common::Result<std::unique_ptr<Gateway>> Gateway::open(const gw::GatewayConfig& config) {
  return open(config, OpenOptions{});
}

common::Result<std::unique_ptr<Gateway>> Gateway::open(const gw::GatewayConfig& config,
                                                       const OpenOptions& options) {
  const uint32_t count = std::max<uint32_t>(config.shards, 1);
  if (count > gw::kMaxUringShards ||
      (!config.shard_cpus.empty() && config.shard_cpus.size() != count)) {
    return common::make_error(common::ErrorCode::kConfig,
                              "field 'gateway.shards': " + std::to_string(count) + " shards with " +
                                  std::to_string(config.shard_cpus.size()) + " shard_cpus (1.." +
                                  std::to_string(gw::kMaxUringShards) +
                                  " shards, one CPU each or none)");
  }
  auto shards = std::make_unique<GatewayShards>();
  for (uint32_t k = 0; k < count; ++k) {
    auto state = open_shard(config, k, count, k == 0 ? nullptr : shards->states[0].get());
    if (!state) return std::unexpected(state.error());
    shards->states.push_back(std::move(*state));
  }
  if (count > 1) {
    GatewayState& first = *shards->states[0];
    if (options.steer_wan) {
      for (size_t i = 0; i < first.wan.size(); ++i) {
        auto steered = common::attach_reuseport_steering(
            first.wan[i].fd(), common::ReuseportKey{static_cast<uint32_t>(wire::kTunnelIdOffset)},
            count, "WAN port '" + config.wan_ports[i].name + "'");
        if (!steered) return std::unexpected(steered.error());
      }
    }
    shards->group =
        std::make_unique<ShardGroup>(count, static_cast<uint32_t>(config.peers.size()),
                                     static_cast<uint32_t>(first.pool->whole(0).size()));
    for (auto& state : shards->states) {
      state->group = shards->group.get();
      shards->group->states.push_back(state.get());
    }
  }
  return std::unique_ptr<Gateway>(new Gateway(std::move(shards)));
}

Gateway::Gateway(std::unique_ptr<GatewayShards> shards) : shards_(std::move(shards)) {}
Gateway::~Gateway() = default;

gw::Endpoint Gateway::wan_endpoint(size_t port) const {
  return shards_->states[0]->wan.at(port).local();
}

std::optional<gw::Endpoint> Gateway::service_endpoint(size_t tunnel) const {
  const auto count = static_cast<uint32_t>(shards_->states.size());
  const uint32_t owner =
      gw::shard_of_tunnel(shards_->states[0]->config.tunnels.at(tunnel).id, count);
  const ServiceSockets& sockets = shards_->states[owner]->services.at(tunnel);
  if (!sockets.listen) return std::nullopt;
  return sockets.listen->local();
}

uint32_t Gateway::shard_count() const { return static_cast<uint32_t>(shards_->states.size()); }

const gw::Engine* Gateway::shard_engine(uint32_t shard) const {
  if (shard == 0 || shard > shards_->engines.size()) return nullptr;
  return shards_->engines[shard - 1].get();
}

ShardStats Gateway::shard_stats(uint32_t shard) const {
  const ShardCounters& c = shards_->states.at(shard)->counters;
  return ShardStats{c.loop_iterations, c.tun_dispatched,   c.wan_misdirected,
                    c.dispatched,      c.dispatch_dropped, c.dispatch_received};
}

common::Result<void> Gateway::run(gw::RunContext& context) {
  GatewayState& first = *shards_->states[0];
  if (first.ran) {
    return common::make_error(common::ErrorCode::kInvalidArgument,
                              "uring gateway: run() may be called once per open()");
  }
  first.ran = true;
  if (shards_->group == nullptr) return run_datapath(first, context);
  return run_shards(*shards_, context);
}

common::Result<void> run(gw::RunContext& context) {
  auto gateway = Gateway::open(context.config);
  if (!gateway) return std::unexpected(gateway.error());
  auto log = common::logger("uring");
  for (size_t i = 0; i < context.config.wan_ports.size(); ++i) {
    log->info("WAN port '{}' bound to {}", context.config.wan_ports[i].name,
              gw::format_endpoint((*gateway)->wan_endpoint(i)));
  }
  return (*gateway)->run(context);
}

}  // namespace detwan::dataplane::uring

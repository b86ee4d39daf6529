// Engine setup: validates what the engine itself relies on and builds one gate control list and
// transmit scheduler per WAN port, two playouts and a replay window per tunnel, the classifier
// and the per-peer control state. Everything the datapath uses is allocated here.
#include "dataplane/gw/engine.h"

#include <algorithm>
#include <cassert>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "common/crypto.h"
#include "dataplane/gw/engine_impl.h"
#include "dataplane/sched/gate_control_list.h"
#include "dataplane/wire/status.h"

namespace detwan::dataplane::gw {
namespace {

using common::ErrorCode;
using common::make_error;

std::unexpected<common::Error> config_error(std::string message) {
  return make_error(ErrorCode::kConfig, std::move(message));
}

common::Result<PortState> make_port(const GatewayConfig& config, uint32_t index, int64_t start_ns,
                                    const ShardSpec& shard) {
  const WanPortConfig& port = config.wan_ports[index];
  const std::string where = fmt::format("port '{}': ", port.name);
  const wire::IpVersion ip = port.local.ipv6 ? wire::IpVersion::kV6 : wire::IpVersion::kV4;
  const uint32_t max_payload = max_tunnel_payload_bytes(port);
  if (max_payload == 0) {
    return config_error(fmt::format("{}mtu {} cannot hold the {}-byte encapsulation", where,
                                    port.mtu_bytes, wire::encap_overhead_bytes(ip)));
  }
  sched::GclConfig gcl_config = port_gcl_config(config, port);
  restrict_best_effort(gcl_config, shard);
  auto gcl = sched::GateControlList::create(gcl_config);
  if (!gcl) return config_error(where + gcl.error().message);
  auto scheduler =
      sched::TxScheduler::create(std::move(*gcl), port_tx_config(config, port), start_ns);
  if (!scheduler) return config_error(where + scheduler.error().message);
  return PortState{
      .config_index = index,
      .ip = ip,
      .max_payload_bytes = max_payload,
      .frame_overhead_bytes =
          static_cast<uint32_t>(wire::encap_overhead_bytes(ip)) + kEthernetOverheadBytes,
      .scheduler = std::move(*scheduler),
      .rx_drops = {},
      .io = {},
  };
}

common::Result<void> check_names(const GatewayConfig& config) {
  if (config.wan_ports.empty()) return config_error("the gateway has no WAN port");
  std::set<std::string> names;
  for (const WanPortConfig& port : config.wan_ports) {
    if (!names.insert(port.name).second) {
      return config_error(fmt::format("port '{}': name used twice", port.name));
    }
  }
  names.clear();
  for (const PeerConfig& peer : config.peers) {
    if (!names.insert(peer.name).second) {
      return config_error(fmt::format("peer '{}': name used twice", peer.name));
    }
  }
  std::set<uint32_t> ids;
  for (const TunnelConfig& tunnel : config.tunnels) {
    if (tunnel.id == 0) return config_error("tunnel id 0 is invalid (ids are 1 .. 2^32-1)");
    if (!ids.insert(tunnel.id).second) {
      return config_error(fmt::format("tunnel {}: id used twice", tunnel.id));
    }
  }
  return {};
}

common::Result<PeerState> make_peer(const GatewayConfig& config, uint32_t index, int64_t start_ns) {
  const PeerConfig& peer = config.peers[index];
  const std::string where = fmt::format("peer '{}': ", peer.name);
  PeerState state;
  state.config_index = index;
  state.port = kNoIndex;
  for (uint32_t p = 0; p < config.wan_ports.size(); ++p) {
    if (config.wan_ports[p].name == peer.wan_port) state.port = p;
  }
  if (state.port == kNoIndex) {
    return config_error(fmt::format("{}wan_port '{}' is not a WAN port", where, peer.wan_port));
  }
  if (peer.endpoint.ipv6 != config.wan_ports[state.port].local.ipv6) {
    return config_error(fmt::format("{}endpoint is IPv{} but port '{}' is IPv{}", where,
                                    peer.endpoint.ipv6 ? 6 : 4, peer.wan_port,
                                    config.wan_ports[state.port].local.ipv6 ? 6 : 4));
  }
  if (peer.keepalive_interval_ns < wire::kMinKeepaliveIntervalNs ||
      peer.keepalive_interval_ns > wire::kMaxKeepaliveIntervalNs) {
    return config_error(fmt::format("{}keepalive_interval_ns {} out of range [{}, {}]", where,
                                    peer.keepalive_interval_ns, wire::kMinKeepaliveIntervalNs,
                                    wire::kMaxKeepaliveIntervalNs));
  }
  if (peer.time_exchange_interval_ns <= 0) {
    return config_error(where + "time_exchange_interval_ns must be > 0");
  }
  if (peer.dead_after_ns <= 0) return config_error(where + "dead_after_ns must be > 0");
  state.next_time_request_ns = start_ns;
  state.next_keepalive_ns = start_ns;
  state.playout_offset_ns = peer.clock_offset_ns.value_or(0);
  auto window = wire::make_replay_window(kControlReplayWindowBits);
  if (!window) return config_error(where + window.error().message);
  state.control_replay.emplace(std::move(*window));
  return state;
}

}  // namespace

common::Result<TunnelSetup> tunnel_setup(const GatewayConfig& config,
                                         const std::vector<PeerState>& peers,
                                         const TunnelConfig& tunnel, AuthEnv& env) {
  const std::string where = fmt::format("tunnel {}: ", tunnel.id);
  uint32_t peer = kNoIndex;
  for (uint32_t p = 0; p < config.peers.size(); ++p) {
    if (config.peers[p].name == tunnel.peer) peer = p;
  }
  if (peer == kNoIndex)
    return config_error(fmt::format("{}peer '{}' is not a peer", where, tunnel.peer));
  TunnelSetup setup;
  setup.peer = peer;
  setup.port = peers[peer].port;
  if (tunnel.protection) {
    for (uint32_t p = 0; p < config.peers.size(); ++p) {
      if (config.peers[p].name == tunnel.protection->peer) setup.protect_peer = p;
    }
    if (setup.protect_peer == kNoIndex) {
      return config_error(fmt::format("{}protection peer '{}' is not a peer", where,
                                      tunnel.protection->peer));
    }
    setup.protect_port = peers[setup.protect_peer].port;
  }
  sched::PlayoutConfig& playout = setup.on_time;
  playout.bound_ns = tunnel.bound_ns;
  playout.clock_offset_ns = peers[peer].playout_offset_ns;
  playout.late_action = tunnel.late;
  playout.max_hold_ns = tunnel.max_hold_ns;
  playout.capacity_frames = tunnel.playout_capacity_frames;
  if (auto ok = sched::Playout::validate(playout); !ok) {
    return config_error(where + ok.error().message);
  }
  setup.best_effort = playout;
  setup.best_effort.bound_ns = 0;
  if (auto ok = sched::Playout::validate(setup.best_effort); !ok) {
    return config_error(where + ok.error().message);
  }
  if (tunnel.auth) {
    auto auth = make_auth(*tunnel.auth, tunnel.id, peers[peer].epoch, nullptr, env);
    if (!auth) return config_error(where + auth.error().message);
    setup.auth = std::move(*auth);
  }
  setup.config = tunnel;
  return setup;
}

common::Result<TunnelState> make_tunnel(TunnelSetup setup) {
  const std::string where = fmt::format("tunnel {}: ", setup.config.id);
  auto on_time = sched::Playout::create(setup.on_time);
  if (!on_time) return config_error(where + on_time.error().message);
  auto best_effort = sched::Playout::create(setup.best_effort);
  if (!best_effort) return config_error(where + best_effort.error().message);
  auto replay = wire::make_replay_window(setup.config.replay_window_bits);
  if (!replay) return config_error(where + replay.error().message);
  const bool had_service =
      setup.config.service_listen.has_value() || setup.config.service_deliver.has_value();
  const uint32_t id = setup.config.id;
  return TunnelState{
      .config = std::move(setup.config),
      .active = true,
      .had_service = had_service,
      .id = id,
      .peer = setup.peer,
      .port = setup.port,
      .protect_peer = setup.protect_peer,
      .protect_port = setup.protect_port,
      .on_time = std::move(*on_time),
      .best_effort = std::move(*best_effort),
      .replay = std::move(*replay),
      .replay_drops = {},
      .next_sequence = 0,
      .peer_epoch = setup.auth ? setup.auth->peer_epoch : 0,
      .counters = {},
      .windows = {},
      .auth = std::move(setup.auth),
  };
}

common::Result<TunnelState> make_tunnel(const GatewayConfig& config,
                                        const std::vector<PeerState>& peers,
                                        const TunnelConfig& tunnel, AuthEnv& env) {
  auto setup = tunnel_setup(config, peers, tunnel, env);
  if (!setup) return std::unexpected(setup.error());
  return make_tunnel(std::move(*setup));
}

bool fits(const TunnelState& drained, const TunnelSetup& setup) noexcept {
  return drained.on_time.held_frames() == 0 && drained.best_effort.held_frames() == 0 &&
         drained.on_time.config().capacity_frames == setup.on_time.capacity_frames &&
         drained.best_effort.config().capacity_frames == setup.best_effort.capacity_frames &&
         drained.replay.window_bits() == setup.config.replay_window_bits;
}

void restart_tunnel(TunnelState& drained, TunnelSetup&& setup) noexcept {
  const bool restarted =
      drained.on_time.restart(setup.on_time) && drained.best_effort.restart(setup.best_effort);
  assert(restarted);  // fits(), and tunnel_setup() validated both configurations
  (void)restarted;
  drained.replay.reset();
  drained.had_service =
      setup.config.service_listen.has_value() || setup.config.service_deliver.has_value();
  drained.id = setup.config.id;
  drained.config = std::move(setup.config);
  drained.active = true;
  drained.peer = setup.peer;
  drained.port = setup.port;
  drained.protect_peer = setup.protect_peer;
  drained.protect_port = setup.protect_port;
  drained.replay_drops = {};
  drained.next_sequence = 0;
  drained.peer_epoch = setup.auth ? setup.auth->peer_epoch : 0;
  drained.counters = {};
  drained.windows.clear();  // its copies are of the drained tunnel's histograms
  drained.auth = std::move(setup.auth);
}

namespace {

// A random 64-bit value from the CSPRNG, never 0: the session epoch, also shown as the boot id.
// It is a key schedule input (aead/key_schedule.h): a new one per start means new keys.
common::Result<uint64_t> random_epoch() {
  for (;;) {
    auto value = common::crypto::random_u64();
    if (!value) {
      return common::make_error(common::ErrorCode::kInternal,
                                "cannot draw a session epoch: " + value.error().message);
    }
    if (*value != 0) return *value;
  }
}

}  // namespace

void Engine::Impl::choose_control_tunnels() noexcept {
  for (PeerState& peer : peers) peer.control_tunnel = kNoIndex;
  for (const TunnelConfig& tunnel : config.tunnels) {
    const uint32_t index = find_tunnel(tunnel.id);
    if (index == kNoIndex) continue;
    PeerState& peer = peers[tunnels[index].peer];
    if (peer.control_tunnel == kNoIndex) peer.control_tunnel = index;
    // A protection path's peer exchanges control packets on the tunnel's path 1.
    if (tunnels[index].protected_path()) {
      PeerState& replica = peers[tunnels[index].protect_peer];
      if (replica.control_tunnel == kNoIndex) replica.control_tunnel = index;
    }
  }
}

std::string_view to_string(EngineDrop reason) noexcept {
  switch (reason) {
    case EngineDrop::kNoRoute:
      return "no_route";
    case EngineDrop::kNotIp:
      return "not_ip";
    case EngineDrop::kTooBig:
      return "too_big";
    case EngineDrop::kUnknownTunnel:
      return "unknown_tunnel";
    case EngineDrop::kWrongPeer:
      return "wrong_peer";
    case EngineDrop::kWrongPort:
      return "wrong_port";
    case EngineDrop::kControlBacklog:
      return "control_backlog";
    case EngineDrop::kUnknownPath:
      return "unknown_path";
    case EngineDrop::kAuthMissing:
      return "auth_missing";
    case EngineDrop::kAuthUnexpected:
      return "auth_unexpected";
    case EngineDrop::kAuthTruncated:
      return "auth_truncated";
    case EngineDrop::kAuthFailed:
      return "auth_failed";
    case EngineDrop::kReflected:
      return "reflected";
    case EngineDrop::kAuthAwaitingPeer:
      return "auth_awaiting_peer";
    case EngineDrop::kAuthRateLimited:
      return "auth_rate_limited";
    case EngineDrop::kControlReplayed:
      return "control_replayed";
    case EngineDrop::kControlStale:
      return "control_stale";
    case EngineDrop::kForeignSource:
      return "foreign_source";
    case EngineDrop::kForeignInner:
      return "foreign_inner";
    case EngineDrop::kCount:
      break;
  }
  return "unknown";
}

uint32_t Engine::Impl::find_tunnel(uint32_t id) const noexcept {
  const auto it =
      std::lower_bound(tunnel_ids.begin(), tunnel_ids.end(), std::pair<uint32_t, uint32_t>{id, 0});
  return it != tunnel_ids.end() && it->first == id ? it->second : kNoIndex;
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

common::Result<std::unique_ptr<Engine>> Engine::create(const GatewayConfig& config,
                                                       int64_t start_ns, ShardSpec shard) {
  if (auto ok = check_names(config); !ok) return std::unexpected(ok.error());
  if (shard.count == 0 || shard.index >= shard.count) {
    return config_error(fmt::format("shard {} of {}: the index must be below the count (>= 1)",
                                    shard.index, shard.count));
  }
  auto impl = std::make_unique<Impl>();
  impl->shard = shard;
  impl->config = config;
  impl->start_ns = start_ns;
  for (const TunnelConfig& t : config.tunnels) impl->file_tunnel_ids.push_back(t.id);
  const GatewayConfig& c = impl->config;
  for (uint32_t i = 0; i < c.wan_ports.size(); ++i) {
    auto port = make_port(c, i, start_ns, shard);
    if (!port) return std::unexpected(port.error());
    impl->ports.push_back(std::move(*port));
  }
  for (uint32_t i = 0; i < c.peers.size(); ++i) {
    auto peer = make_peer(c, i, start_ns);
    if (!peer) return std::unexpected(peer.error());
    impl->peers.push_back(std::move(*peer));
  }
  if (shard.epoch != 0) {
    impl->epoch = shard.epoch;
  } else {
    auto epoch = random_epoch();
    if (!epoch) return std::unexpected(epoch.error());
    impl->epoch = *epoch;
  }
  impl->boot_id = fmt::format("{:016x}", impl->epoch);
  auto deriver = aead::KeyDeriver::create();
  if (!deriver) return std::unexpected(deriver.error());
  impl->deriver = std::make_unique<aead::KeyDeriver>(std::move(*deriver));
  impl->auth_env = AuthEnv{impl->epoch, 1, impl->deriver.get()};
  for (uint32_t i = 0; i < c.tunnels.size(); ++i) {
    auto tunnel = make_tunnel(c, impl->peers, c.tunnels[i], impl->auth_env);
    if (!tunnel) return std::unexpected(tunnel.error());
    impl->tunnel_ids.emplace_back(tunnel->id, i);
    impl->tunnels.push_back(std::move(*tunnel));
  }
  std::sort(impl->tunnel_ids.begin(), impl->tunnel_ids.end());
  impl->held_playouts.assign((impl->tunnels.size() * 2 + 63) / 64 + 1, 0);
  impl->choose_control_tunnels();
  auto classifier = Classifier::create(c.tunnels);
  if (!classifier) return std::unexpected(classifier.error());
  impl->classifier = std::move(*classifier);
  impl->outbox.resize(
      std::max<std::size_t>(kMinControlOutbox, kControlOutboxPerPeer * impl->peers.size()));
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

const GatewayConfig& Engine::config() const noexcept { return impl_->config; }
const ShardSpec& Engine::shard() const noexcept { return impl_->shard; }
uint32_t Engine::port_count() const noexcept { return static_cast<uint32_t>(impl_->ports.size()); }
uint32_t Engine::tunnel_count() const noexcept {
  return static_cast<uint32_t>(impl_->tunnels.size());
}
uint32_t Engine::peer_count() const noexcept { return static_cast<uint32_t>(impl_->peers.size()); }
uint32_t Engine::tunnel_index(uint32_t tunnel_id) const noexcept {
  const uint32_t index = impl_->find_tunnel(tunnel_id);
  return index == kNoIndex ? kNoTunnel : index;
}
bool Engine::tunnel_active(uint32_t tunnel_index) const noexcept {
  return tunnel_index < impl_->tunnels.size() && impl_->tunnels[tunnel_index].active;
}
bool Engine::tunnel_ready(uint32_t tunnel_index) const noexcept {
  if (!tunnel_active(tunnel_index)) return false;
  const TunnelState& t = impl_->tunnels[tunnel_index];
  return !t.auth || t.auth->has_data_keys();
}
uint32_t Engine::tunnel_id(uint32_t tunnel_index) const noexcept {
  return tunnel_index < impl_->tunnels.size() ? impl_->tunnels[tunnel_index].id : 0;
}
uint64_t Engine::generation() const noexcept { return impl_->generation; }
const std::vector<uint32_t>& Engine::file_tunnel_ids() const noexcept {
  return impl_->file_tunnel_ids;
}
void Engine::set_file_tunnel_ids(std::vector<uint32_t> ids) {
  impl_->file_tunnel_ids = std::move(ids);
}
const std::string& Engine::boot_id() const noexcept { return impl_->boot_id; }
ControlIo& Engine::control_io() noexcept { return impl_->control; }
uint32_t Engine::port_of_tunnel(uint32_t tunnel_index) const noexcept {
  return tunnel_index < impl_->tunnels.size() ? impl_->tunnels[tunnel_index].port : kNoIndex;
}
uint32_t Engine::max_payload_bytes(uint32_t port_index) const noexcept {
  return port_index < impl_->ports.size() ? impl_->ports[port_index].max_payload_bytes : 0;
}
PortIo& Engine::port_io(uint32_t port_index) noexcept { return impl_->ports[port_index].io; }
LocalIo& Engine::local_io() noexcept { return impl_->local; }
uint64_t Engine::drops(EngineDrop reason) const noexcept {
  const auto i = static_cast<std::size_t>(reason);
  return i < impl_->drops.size() ? impl_->drops[i] : 0;
}
const wire::DropCounters& Engine::rx_drops(uint32_t port_index) const noexcept {
  return impl_->ports[port_index].rx_drops;
}
const sched::TxScheduler& Engine::scheduler(uint32_t port_index) const noexcept {
  return impl_->ports[port_index].scheduler;
}
const sched::Playout& Engine::playout(uint32_t tunnel_index, bool best_effort) const noexcept {
  const TunnelState& t = impl_->tunnels[tunnel_index];
  return best_effort ? t.best_effort : t.on_time;
}

PeerStatus Engine::peer_status(uint32_t peer_index) const noexcept {
  PeerStatus status;
  if (peer_index >= impl_->peers.size()) return status;
  const PeerState& p = impl_->peers[peer_index];
  status.up = p.up;
  status.has_control_tunnel = p.control_tunnel != kNoIndex;
  status.offset_configured = impl_->peer_config(p).clock_offset_ns.has_value();
  status.playout_offset_ns = p.playout_offset_ns;
  status.best_sample = p.clock.best();
  status.clock_samples = p.clock.samples();
  status.last_rx_ns = p.last_rx_ns;
  return status;
}

}  // namespace detwan::dataplane::gw

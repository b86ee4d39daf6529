// Engine::apply_st(): tunnels added, modified and removed at run time (engine.h). Setup tier on
// the datapath thread between polls: everything new is built or prepared first (each port's
// scheduler change, tunnel states, classifier, id table); only then is it swapped in, by moves
// and commits that cannot fail, so a refused or failed change leaves the engine exactly as it
// was.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dataplane/gw/engine.h"
#include "dataplane/gw/engine_impl.h"
#include "dataplane/sched/gate_control_list.h"

namespace detwan::dataplane::gw {
namespace {

// An index a new tunnel may take: removed, drained, and never known to a backend as a tunnel
// with service sockets.
bool reusable(const TunnelState& tunnel) noexcept {
  return !tunnel.active && !tunnel.had_service && tunnel.on_time.held_frames() == 0 &&
         tunnel.best_effort.held_frames() == 0;
}

}  // namespace

common::Result<ApplyResult> Engine::apply_st(const TunnelChanges& changes, int64_t now_ns) {
  Impl& m = *impl_;
  auto next = apply_tunnel_changes(m.config, changes);
  if (!next) return std::unexpected(next.error());
  const auto internal = [](const std::string& what, const common::Error& error) {
    return common::make_error(error.code, what + ": " + error.message);
  };

  // Indices: kept for existing tunnels; a new one takes a reusable index or a new one. A new
  // tunnel at a drained index whose storage fits restarts that storage at the commit (no
  // allocation); otherwise its state is built here.
  std::vector<uint32_t> index_of(next->tunnels.size());
  std::vector<bool> taken(m.tunnels.size(), false);
  std::vector<std::pair<uint32_t, TunnelState>> fresh;
  std::vector<std::pair<uint32_t, TunnelSetup>> restarted;
  auto appended = static_cast<uint32_t>(m.tunnels.size());
  for (size_t i = 0; i < next->tunnels.size(); ++i) {
    const TunnelConfig& tunnel = next->tunnels[i];
    const uint32_t existing = m.find_tunnel(tunnel.id);
    if (existing != kNoIndex) {
      index_of[i] = existing;
      continue;
    }
    uint32_t index = kNoIndex;
    for (uint32_t j = 0; j < m.tunnels.size() && index == kNoIndex; ++j) {
      if (!taken[j] && reusable(m.tunnels[j])) index = j;
    }
    if (index == kNoIndex) {
      index = appended++;
    } else {
      taken[index] = true;
    }
    index_of[i] = index;
    auto setup = tunnel_setup(*next, m.peers, tunnel, m.auth_env);
    if (!setup) return std::unexpected(setup.error());
    if (index < m.tunnels.size() && fits(m.tunnels[index], *setup)) {
      restarted.emplace_back(index, std::move(*setup));
      continue;
    }
    auto state = make_tunnel(std::move(*setup));
    if (!state) return std::unexpected(state.error());
    fresh.emplace_back(index, std::move(*state));
  }

  // Modified tunnels: their new release policy, checked before anything changes.
  std::vector<std::pair<uint32_t, TunnelConfig>> modified;
  std::vector<std::unique_ptr<TunnelAuthState>> modified_auth;  // new keys (nullptr: none)
  for (const TunnelConfig& requested : changes.modify) {
    // The tunnel as applied: an x25519 tunnel's secrets are derived there (config_runtime.cc).
    const TunnelConfig& tunnel =
        *std::find_if(next->tunnels.begin(), next->tunnels.end(),
                      [&](const TunnelConfig& t) { return t.id == requested.id; });
    const uint32_t index = m.find_tunnel(tunnel.id);
    std::unique_ptr<TunnelAuthState> auth;
    if (tunnel.auth) {
      auto made = make_auth(*tunnel.auth, tunnel.id, m.tunnels[index].peer_epoch,
                            m.tunnels[index].auth.get(), m.auth_env);
      if (!made)
        return std::unexpected(internal(fmt::format("tunnel {}", tunnel.id), made.error()));
      auth = std::move(*made);
    }
    modified_auth.push_back(std::move(auth));
    sched::PlayoutConfig playout = m.tunnels[index].on_time.config();
    playout.bound_ns = tunnel.bound_ns;
    playout.late_action = tunnel.late;
    playout.max_hold_ns = tunnel.max_hold_ns;
    if (auto ok = sched::Playout::validate(playout); !ok) {
      return std::unexpected(internal(fmt::format("tunnel {}", tunnel.id), ok.error()));
    }
    modified.emplace_back(index, tunnel);
  }

  // Every port's new schedule, prepared (checked, allocated) without changing the port; the
  // commit below keeps, re-places or hands back its queued frames.
  std::vector<sched::TxScheduler::Change> schedules;
  schedules.reserve(m.ports.size());
  for (const PortState& port : m.ports) {
    const WanPortConfig& port_config = next->wan_ports[port.config_index];
    const std::string where = fmt::format("port '{}'", port_config.name);
    sched::GclConfig gcl_config = port_gcl_config(*next, port_config);
    restrict_best_effort(gcl_config, m.shard);
    auto gcl = sched::GateControlList::create(std::move(gcl_config));
    if (!gcl) return std::unexpected(internal(where, gcl.error()));
    auto schedule = port.scheduler.prepare_reconfigure(std::move(*gcl),
                                                       port_tx_config(*next, port_config), now_ns);
    if (!schedule) return std::unexpected(internal(where, schedule.error()));
    schedules.push_back(std::move(*schedule));
  }
  auto classifier = Classifier::create(next->tunnels, index_of);
  if (!classifier) return std::unexpected(classifier.error());
  std::vector<std::pair<uint32_t, uint32_t>> ids;
  ids.reserve(next->tunnels.size());
  for (size_t i = 0; i < next->tunnels.size(); ++i)
    ids.emplace_back(next->tunnels[i].id, index_of[i]);
  std::sort(ids.begin(), ids.end());
  std::vector<uint32_t> removed_indices;
  for (const uint32_t id : changes.remove) removed_indices.push_back(m.find_tunnel(id));
  ApplyResult result;
  for (const TunnelConfig& tunnel : changes.add) result.added.push_back(tunnel.id);
  for (const TunnelConfig& tunnel : changes.modify) result.modified.push_back(tunnel.id);
  result.removed = changes.remove;
  m.tunnels.reserve(appended);
  m.held_playouts.reserve((appended * 2 + 63) / 64 + 1);

  // ---- commit: moves, plain stores and the schedulers' commits, none of which can fail ----
  for (size_t p = 0; p < m.ports.size(); ++p) m.ports[p].scheduler.commit(std::move(schedules[p]));
  for (auto& [index, setup] : restarted) restart_tunnel(m.tunnels[index], std::move(setup));
  for (auto& [index, state] : fresh) {
    if (index < m.tunnels.size()) {
      m.tunnels[index] = std::move(state);
    } else {
      m.tunnels.push_back(std::move(state));  // in index order; capacity reserved
    }
  }
  m.held_playouts.resize((m.tunnels.size() * 2 + 63) / 64 + 1, 0);  // capacity reserved
  for (const uint32_t index : removed_indices) m.tunnels[index].active = false;
  for (size_t k = 0; k < modified.size(); ++k) {
    auto& [index, config] = modified[k];
    TunnelState& tunnel = m.tunnels[index];
    tunnel.auth = std::move(modified_auth[k]);  // auth on/off cannot change (config_runtime)
    tunnel.on_time.set_release_policy(config.bound_ns, config.late, config.max_hold_ns);
    tunnel.best_effort.set_release_policy(0, config.late, config.max_hold_ns);
    tunnel.config = std::move(config);
  }
  m.config = std::move(*next);
  m.tunnel_ids = std::move(ids);
  m.classifier = std::move(*classifier);
  m.choose_control_tunnels();
  result.generation = ++m.generation;
  return result;
}

}  // namespace detwan::dataplane::gw

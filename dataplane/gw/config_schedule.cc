// The slot schedule of each WAN port: the GclConfig a port maps to, and the checks that its
// tunnels' slots and rates make a valid sched::GateControlList, each failure mapped to the
// tunnel's field with a hint of what would fit.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "common/units.h"
#include "dataplane/gw/config_internal.h"
#include "dataplane/sched/gate_control_list.h"
#include "dataplane/sched/tx_scheduler.h"

namespace detwan::dataplane::gw {

uint32_t max_frame_bytes(const WanPortConfig& port) noexcept {
  return port.mtu_bytes + kEthernetOverheadBytes;
}

uint32_t max_tunnel_payload_bytes(const WanPortConfig& port) noexcept {
  return static_cast<uint32_t>(
      wire::max_payload_for_mtu(port.mtu_bytes, config_detail::ip_version(port.local)));
}

const WanPortConfig* find_wan_port(const GatewayConfig& config, std::string_view name) noexcept {
  for (const WanPortConfig& port : config.wan_ports) {
    if (port.name == name) return &port;
  }
  return nullptr;
}

const PeerConfig* find_peer(const GatewayConfig& config, std::string_view name) noexcept {
  for (const PeerConfig& peer : config.peers) {
    if (peer.name == name) return &peer;
  }
  return nullptr;
}

const std::vector<uint32_t>* slots_on_port(const GatewayConfig& config, const TunnelConfig& tunnel,
                                           const WanPortConfig& port) noexcept {
  const PeerConfig* peer = find_peer(config, tunnel.peer);
  if (peer != nullptr && peer->wan_port == port.name) return &tunnel.slots;
  if (!tunnel.protection) return nullptr;
  const PeerConfig* replica = find_peer(config, tunnel.protection->peer);
  if (replica != nullptr && replica->wan_port == port.name) return &tunnel.protection->slots;
  return nullptr;
}

sched::GclConfig port_gcl_config(const GatewayConfig& config, const WanPortConfig& port) {
  sched::GclConfig gcl;
  gcl.cycle_ns = port.cycle_ns;
  gcl.slot_count = port.slot_count;
  gcl.base_time_ns = port.base_time_ns;
  gcl.guard_ns = port.guard_ns;
  gcl.line_rate_bps = port.line_rate_bps;
  gcl.max_frame_bytes = max_frame_bytes(port);
  for (const TunnelConfig& tunnel : config.tunnels) {
    const std::vector<uint32_t>* slots = slots_on_port(config, tunnel, port);
    if (slots == nullptr) continue;
    gcl.tunnels.push_back(sched::GclTunnel{tunnel.id, tunnel.rate_bps, *slots});
  }
  return gcl;
}

sched::TunnelTxPolicy tunnel_tx_policy(const TunnelConfig& tunnel) noexcept {
  sched::TunnelTxPolicy policy;
  policy.tunnel_id = tunnel.id;
  policy.burst_bytes = tunnel.burst_bytes;
  policy.over_rate = tunnel.over_rate;
  policy.shaper_rate_bps = tunnel.shaper_rate_bps;
  policy.queue_frames = tunnel.queue_frames;
  policy.max_wait_ns = tunnel.max_wait_ns == 0 ? sched::kNoMaxWait : tunnel.max_wait_ns;
  policy.missed_slot = tunnel.missed_slot;
  return policy;
}

sched::TxSchedulerConfig port_tx_config(const GatewayConfig& config, const WanPortConfig& port) {
  sched::TxSchedulerConfig tx;
  tx.capacity_frames = port.capacity_frames;
  for (const TunnelConfig& tunnel : config.tunnels) {
    if (slots_on_port(config, tunnel, port) == nullptr) continue;
    tx.tunnels.push_back(tunnel_tx_policy(tunnel));
  }
  return tx;
}

namespace config_detail {

std::string tunnel_path(size_t i) { return fmt::format("tunnels[{}]", i); }
std::string peer_path(size_t i) { return fmt::format("peers[{}]", i); }

namespace {

std::string without_prefix(std::string message) {
  constexpr std::string_view kPrefix = "gate control list: ";
  if (message.starts_with(kPrefix)) message.erase(0, kPrefix.size());
  return message;
}

sched::GclConfig single_tunnel(const sched::GclConfig& port, uint32_t id, uint64_t rate_bps,
                               std::vector<uint32_t> slots) {
  sched::GclConfig gcl = port;
  gcl.tunnels = {sched::GclTunnel{id, rate_bps, std::move(slots)}};
  return gcl;
}

// Fewest consecutive slots that carry rate_bps on this port (GateControlList's own rule, so
// the hint is exact). A single tunnel's rate never exceeds the line rate here, and all slots
// always carry it.
uint32_t contiguous_slots_needed(const sched::GclConfig& port, uint32_t id, uint64_t rate_bps) {
  uint32_t low = 1;
  uint32_t high = port.slot_count;
  while (low < high) {
    const uint32_t mid = low + (high - low) / 2;
    std::vector<uint32_t> slots(mid);
    for (uint32_t s = 0; s < mid; ++s) slots[s] = s;
    if (sched::GateControlList::create(single_tunnel(port, id, rate_bps, std::move(slots)))) {
      high = mid;
    } else {
      low = mid + 1;
    }
  }
  return low;
}

// Runs of consecutive slots, the cycle boundary included ("98-99,0-1" is one window).
uint32_t window_count(const std::vector<uint32_t>& sorted_slots, uint32_t slot_count) {
  if (sorted_slots.empty()) return 0;
  if (sorted_slots.size() >= slot_count) return 1;
  uint32_t windows = 0;
  for (size_t i = 0; i < sorted_slots.size(); ++i) {
    if (i == 0 || sorted_slots[i] != sorted_slots[i - 1] + 1) ++windows;
  }
  if (windows > 1 && sorted_slots.front() == 0 && sorted_slots.back() == slot_count - 1) {
    --windows;
  }
  return windows;
}

// Fails at the field of the tunnel `message` names ("tunnel 7: ..."), else at fallback_path.
[[noreturn]] void fail_mapped(const GatewayConfig& config, const std::vector<size_t>& members,
                              const FieldLocator& at, const std::string& message,
                              std::string_view field, const std::string& fallback_path) {
  for (const size_t i : members) {
    const std::string name = fmt::format("tunnel {}", config.tunnels[i].id);
    for (size_t pos = message.find(name); pos != std::string::npos;
         pos = message.find(name, pos + 1)) {
      const size_t end = pos + name.size();
      if (end == message.size() || message[end] < '0' || message[end] > '9') {
        at.fail(tunnel_path(i) + std::string(field), without_prefix(message));
      }
    }
  }
  at.fail(fallback_path, without_prefix(message));
}

void validate_port_schedule(const GatewayConfig& config, size_t port_index,
                            const FieldLocator& at) {
  const WanPortConfig& port = config.wan_ports[port_index];
  const sched::GclConfig gcl = port_gcl_config(config, port);
  std::vector<size_t> members;  // config.tunnels indices on this port
  for (size_t i = 0; i < config.tunnels.size(); ++i) {
    if (slots_on_port(config, config.tunnels[i], port) != nullptr) members.push_back(i);
  }
  // The whole port's list, as the engine builds it. When it is valid, so is every tunnel's list
  // alone (a tunnel's checks depend only on its own slots and rate), and the per-tunnel lists
  // below, built only to name the tunnel at fault, are skipped: each costs O(slot_count) and a
  // run-time change goes through here.
  auto whole = sched::GateControlList::create(gcl);
  std::vector<size_t> owner(port.slot_count, SIZE_MAX);
  sched::Uint128 total_bps = 0;
  std::string ids;
  for (const size_t i : members) {
    const TunnelConfig& tunnel = config.tunnels[i];
    const std::vector<uint32_t>& slots = *slots_on_port(config, tunnel, port);
    // Its slots on this port: the primary's, or those of its protection path.
    const std::string path =
        tunnel_path(i) + (&slots == &tunnel.slots ? std::string() : std::string(".protection"));
    for (const uint32_t slot : slots) {
      if (slot >= port.slot_count) {
        at.fail(path + ".slots", fmt::format("slot {} out of range [0, {}) of WAN port '{}'", slot,
                                             port.slot_count, port.name));
      }
      if (owner[slot] != SIZE_MAX) {
        const size_t first = owner[slot];
        at.fail(path + ".slots",
                fmt::format("slot {} of WAN port '{}' is claimed by two tunnels: tunnel {} ({}) "
                            "and tunnel {} ({})",
                            slot, port.name, config.tunnels[first].id, tunnel_path(first),
                            tunnel.id, path));
      }
      owner[slot] = i;
    }
    total_bps += tunnel.rate_bps;
    ids += fmt::format("{}{}", ids.empty() ? "" : ", ", tunnel.id);
    if (total_bps > port.line_rate_bps) {
      at.fail(path + ".rate",
              fmt::format("the reserved rates on WAN port '{}' add up to {} (tunnels {}), above "
                          "its line rate {}",
                          port.name, rate_text(static_cast<uint64_t>(total_bps)), ids,
                          rate_text(port.line_rate_bps)));
    }
    if (tunnel.burst_bytes != 0 && tunnel.burst_bytes < gcl.max_frame_bytes) {
      at.fail(path + ".burst",
              fmt::format("burst {} is smaller than one frame of WAN port '{}' ({} bytes = mtu "
                          "{} + {}): no full-size frame would ever conform",
                          common::format_size_bytes(tunnel.burst_bytes), port.name,
                          gcl.max_frame_bytes, port.mtu_bytes, kEthernetOverheadBytes));
    }
    // A tunnel's guaranteed rate depends only on its own slots, so checking it alone maps
    // the GateControlList's verdict to this tunnel exactly.
    if (whole) continue;
    auto alone =
        sched::GateControlList::create(single_tunnel(gcl, tunnel.id, tunnel.rate_bps, slots));
    if (!alone) {
      const uint32_t needed = contiguous_slots_needed(gcl, tunnel.id, tunnel.rate_bps);
      const uint32_t windows = window_count(slots, port.slot_count);
      at.fail(path + ".slots",
              fmt::format("{}; on WAN port '{}' (slot {}, line rate {}) it needs at least {} "
                          "consecutive slots{}",
                          without_prefix(alone.error().message), port.name,
                          common::format_duration_ns(port.cycle_ns / port.slot_count),
                          rate_text(port.line_rate_bps), needed,
                          windows > 1 ? fmt::format(" (its {} slots form {} windows, each losing "
                                                    "the guard and up to one frame)",
                                                    slots.size(), windows)
                                      : std::string()));
    }
  }
  const auto unreserved = static_cast<size_t>(std::count(owner.begin(), owner.end(), SIZE_MAX));
  for (const size_t i : members) {
    if (config.tunnels[i].over_rate == sched::OverRateAction::kBestEffort && unreserved == 0) {
      at.fail(tunnel_path(i) + ".over_rate",
              fmt::format("over_rate best-effort needs unreserved slots, but every slot of WAN "
                          "port '{}' is owned by a tunnel",
                          port.name));
    }
    if (config.tunnels[i].foreign_source == ForeignSource::kBestEffort && unreserved == 0) {
      at.fail(tunnel_path(i) + ".foreign_source",
              fmt::format("foreign_source best-effort needs unreserved slots, but every slot of "
                          "WAN port '{}' is owned by a tunnel",
                          port.name));
    }
  }

  // The whole port's list, then the scheduler's checks of the tunnels' policies
  // (TxScheduler::check builds nothing).
  if (!whole) {
    fail_mapped(config, members, at, whole.error().message, ".slots",
                fmt::format("wan_ports[{}]", port_index));
  }
  const sched::TxSchedulerConfig tx = port_tx_config(config, port);
  size_t longest_wait = SIZE_MAX;
  for (const size_t i : members) {
    const TunnelConfig& tunnel = config.tunnels[i];
    if (tunnel.max_wait_ns != 0 &&
        (longest_wait == SIZE_MAX ||
         tunnel.max_wait_ns > config.tunnels[longest_wait].max_wait_ns)) {
      longest_wait = i;
    }
  }
  const auto checked = sched::TxScheduler::check(*whole, tx, port.base_time_ns);
  if (checked) return;
  const std::string& message = checked.error().message;
  if (message.find("timing wheel") != std::string::npos && longest_wait != SIZE_MAX) {
    at.fail(tunnel_path(longest_wait) + ".max_wait", message);
  }
  fail_mapped(config, members, at, message, "", fmt::format("wan_ports[{}]", port_index));
}

}  // namespace

void validate_schedules(const GatewayConfig& config, const FieldLocator& at) {
  for (size_t p = 0; p < config.wan_ports.size(); ++p) validate_port_schedule(config, p, at);
}

std::string rate_text(uint64_t bps) {
  std::string exact = common::format_rate_bps(bps);
  if (exact.size() <= 12) return exact;
  return fmt::format("~{:.6g}mbit", static_cast<double>(bps) / 1e6);
}

}  // namespace config_detail
}  // namespace detwan::dataplane::gw

// reload_changes() (config.h): what a configuration reload (SIGHUP, {"cmd":"reload"}) changes.
// Setup tier: may allocate, never throws.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dataplane/gw/config.h"

namespace detwan::dataplane::gw {
namespace {

// The first section other than the tunnels that differs, or "" (control_socket, admin_socket,
// timing and cpu, which command-line options may override, are not compared).
std::string changed_section(const GatewayConfig& a, const GatewayConfig& b) {
  const std::pair<const char*, bool> sections[] = {
      {"gateway.name", a.name != b.name},
      {"gateway.backend", a.backend != b.backend},
      {"gateway.admin_mode", a.admin_mode != b.admin_mode},
      {"gateway.admin_uids", a.admin_uids != b.admin_uids},
      {"gateway.buffer_count", a.buffer_count != b.buffer_count},
      {"gateway.shards", a.shards != b.shards || a.shard_cpus != b.shard_cpus},
      {"gateway.batch", a.batch != b.batch},
      {"gateway.wan_gso / wan_gro", a.wan_gso != b.wan_gso || a.wan_gro != b.wan_gro},
      {"gateway.release_ahead / playout_ahead / rx_coalesce",
       a.release_ahead_ns != b.release_ahead_ns || a.playout_ahead_ns != b.playout_ahead_ns ||
           a.rx_coalesce_ns != b.rx_coalesce_ns},
      {"tun", !(a.tun == b.tun)},
      {"identity", a.identity != b.identity},
      {"wan_ports", a.wan_ports != b.wan_ports},
      {"peers", a.peers != b.peers},
      {"dpdk", !(a.dpdk == b.dpdk)},
      {"metrics", !(a.metrics == b.metrics)},
  };
  for (const auto& [name, differs] : sections) {
    if (differs) return name;
  }
  return "";
}

}  // namespace

common::Result<TunnelChanges> reload_changes(const GatewayConfig& running,
                                             const std::vector<uint32_t>& file_ids,
                                             const GatewayConfig& file) {
  if (std::string section = changed_section(running, file); !section.empty()) {
    return common::make_error(
        common::ErrorCode::kConfig,
        fmt::format("{}: '{}' changed; a reload applies tunnel changes only: restart the gateway "
                    "to apply it (nothing was changed)",
                    file.source, section));
  }
  TunnelChanges changes;
  const auto running_tunnel = [&](uint32_t id) -> const TunnelConfig* {
    const auto it = std::find_if(running.tunnels.begin(), running.tunnels.end(),
                                 [id](const TunnelConfig& t) { return t.id == id; });
    return it == running.tunnels.end() ? nullptr : &*it;
  };
  for (const TunnelConfig& tunnel : file.tunnels) {
    const TunnelConfig* now = running_tunnel(tunnel.id);
    if (now == nullptr) {
      changes.add.push_back(tunnel);
    } else if (!(*now == tunnel)) {
      changes.modify.push_back(tunnel);
    }
  }
  for (const uint32_t id : file_ids) {
    const bool still_named =
        std::any_of(file.tunnels.begin(), file.tunnels.end(),
                    [id](const TunnelConfig& t) { return t.id == id; });
    if (!still_named && running_tunnel(id) != nullptr) changes.remove.push_back(id);
  }
  return changes;
}

}  // namespace detwan::dataplane::gw

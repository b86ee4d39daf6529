#pragma once
// The control channel of a gateway spread over shards (shard.h): one answer for the whole
// gateway. Setup tier: runs on shard 0's thread while the other shards are paused (the backend
// pauses them), may allocate, never throws.
//   stats      one document of the stats_json() schema (docs/gateway-stats.md): each tunnel's entry
//              from the shard that owns it, each peer's from its lead, the drops, port I/O,
//              port scheduler counters and host-side counters summed over the shards, plus
//              "shards": N. Histograms of summed counter sets add their counts and keep the
//              exact minimum, maximum and mean; their percentiles are those of the shard with
//              the most samples (one shard's view, not a merge).
//   prometheus one exposition (Engine::prometheus_text over the shards): each tunnel's series
//              from its owner, each peer's from its lead, the rest summed with histograms merged
//              exactly, plus detwan_gw_shards.
//   writes     applied to shard 0 (answer_control_request); when its generation moved, the same
//              change is applied to every other shard as the difference between its tunnels
//              and shard 0's (the same configuration passes the same checks).
//   others     shard 0's answer (config, tunnels: every shard holds the same configuration).
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "dataplane/gw/config.h"
#include "dataplane/gw/control_server.h"
#include "dataplane/gw/engine.h"

namespace detwan::dataplane::gw {

// The changes that turn the tunnels `from` into `to` (add: in `to` only, in its order; modify:
// in both and different; remove: in `from` only).
[[nodiscard]] TunnelChanges tunnel_difference(const std::vector<TunnelConfig>& from,
                                              const std::vector<TunnelConfig>& to);

// The merged stats of shards[0..N) (shards[k] is shard k of N).
[[nodiscard]] std::string merge_shard_stats(const std::vector<Engine*>& shards, int64_t now_ns);

// `backend` (optional): the backend's per-shard counters as a JSON value (text), added to the
// merged stats document as "backend_shards" (the uring backend's loop and dispatch counters).
[[nodiscard]] std::string answer_sharded_request(const std::vector<Engine*>& shards,
                                                 std::string_view request, int64_t now_ns,
                                                 const ControlChannel& channel,
                                                 const std::function<std::string()>& backend = {});

}  // namespace detwan::dataplane::gw

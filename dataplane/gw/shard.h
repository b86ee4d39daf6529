#pragma once
// A gateway spread over several cores (docs/gateway-dpdk.md, "Many cores"): N engine instances, the
// shards, each run by one datapath thread (a DPDK lcore). Every shard is built from the whole
// configuration, so every shard's gate control list of a port is the same list: the reserved
// slots of each tunnel are the same slots everywhere. A tunnel is *owned* by exactly one shard
// (shard_of_tunnel); only that shard is handed its local packets and its WAN packets (the
// backend steers them: NIC queues where the device can, a software dispatch ring where it
// cannot), so only that shard ever transmits in the tunnel's slots. The schedule of a port
// therefore stays exact with N cores feeding it: reserved slots are disjoint in time and each
// is fed by one core; the unreserved (best-effort) slots are split into N contiguous runs, one
// per shard, and a shard sees the others' runs as closed (owned by kClosedSlotOwner).
//
// Per-peer control state (time exchange, keepalives, liveness, the peer's epoch) lives in the
// shard that owns the peer's control tunnel, its *lead*. The lead publishes it as a PeerSync;
// the other shards adopt it (clock offset for their playouts, liveness, replay-window resets
// when the peer restarts) and send no control packets of their own.
#include <cstdint>

#include "dataplane/sched/gate_control_list.h"

namespace detwan::dataplane::gw {

struct ShardSpec {
  uint32_t index = 0;  // this shard, < count
  uint32_t count = 1;  // shards of the gateway; 1 = not sharded (every tunnel is owned)
  // The gateway's session epoch, the same in every shard (a peer sees one gateway); 0: drawn at
  // random by Engine::create.
  uint64_t epoch = 0;
};

// The shard that owns a tunnel: its id modulo the shard count (an operator can predict it).
[[nodiscard]] constexpr uint32_t shard_of_tunnel(uint32_t tunnel_id, uint32_t count) noexcept {
  return count <= 1 ? 0 : tunnel_id % count;
}

// Owner id of the unreserved slots another shard uses: tunnel id 0 is invalid in a configuration,
// so it never collides with a tunnel.
inline constexpr uint32_t kClosedSlotOwner = 0;

// Gives the unreserved slots outside this shard's run to kClosedSlotOwner (no change with one
// shard). The run of shard k is the k-th of `count` near-equal contiguous parts of the list of
// unreserved slots in slot order, so each shard's best effort keeps whole windows.
void restrict_best_effort(sched::GclConfig& gcl, const ShardSpec& shard);

// What a peer's lead shard knows about it, for the other shards (Engine::peer_sync_st and
// adopt_peer_st).
struct PeerSync {
  bool up = false;
  int64_t last_rx_ns = INT64_MIN;
  bool has_offset = false;        // an estimate exists (or the offset is configured)
  int64_t playout_offset_ns = 0;  // receiver - sender
  uint64_t epoch = 0;             // the peer's session epoch; 0: none heard yet
  uint64_t last_rx_keepalive = 0;
};

}  // namespace detwan::dataplane::gw

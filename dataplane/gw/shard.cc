// Setup of a sharded gateway's schedules (shard.h).
#include "dataplane/gw/shard.h"

#include <vector>

namespace detwan::dataplane::gw {

void restrict_best_effort(sched::GclConfig& gcl, const ShardSpec& shard) {
  if (shard.count <= 1) return;
  std::vector<bool> reserved(gcl.slot_count, false);
  for (const sched::GclTunnel& tunnel : gcl.tunnels) {
    for (const uint32_t slot : tunnel.slots) {
      if (slot < gcl.slot_count) reserved[slot] = true;
    }
  }
  std::vector<uint32_t> free_slots;
  for (uint32_t slot = 0; slot < gcl.slot_count; ++slot) {
    if (!reserved[slot]) free_slots.push_back(slot);
  }
  if (free_slots.empty()) return;
  const std::size_t n = free_slots.size();
  const std::size_t first = n * shard.index / shard.count;
  const std::size_t last = n * (shard.index + 1) / shard.count;  // exclusive
  sched::GclTunnel closed;
  closed.tunnel_id = kClosedSlotOwner;
  closed.reserved_rate_bps = 1;  // nothing is admitted: no tunnel has this id
  for (std::size_t i = 0; i < n; ++i) {
    if (i < first || i >= last) closed.slots.push_back(free_slots[i]);
  }
  if (!closed.slots.empty()) gcl.tunnels.push_back(std::move(closed));
}

}  // namespace detwan::dataplane::gw

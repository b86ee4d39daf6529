#pragma once
// The io_uring backend spread over several threads (gateway.shards = N > 1; gw/shard.h): N
// engines (ShardSpec {k, N, one epoch}) run by N datapath threads, each with its own io_uring,
// buffer pool and loop (Datapath), shard k's thread pinned to gateway.shard_cpus[k] if given.
// Private to dataplane/uring.
//
// WAN side (the NIC-RSS equivalent). Each shard has its own UDP socket per WAN port, all bound
// to the port's address:port with SO_REUSEPORT, shard 0's first (a socket's index in the group
// is its bind order). The group's classic BPF program (common/reuseport_steering.h) returns
// tunnel id mod N, the tunnel id read big-endian at wire::kTunnelIdOffset of the UDP payload:
// each datagram goes to the socket of the shard that owns its tunnel. A datagram too short for
// a tunnel id fails the load, the program returns 0: shard 0, whose engine drops and counts it.
// Each shard sends from its own socket (the same source address:port the peer checks).
// What the program cannot steer: the kernel runs it once per skb, and one skb can carry several
// datagrams: a UDP GSO send delivered whole to a UDP_GRO socket (veth, loopback), or a run the
// receiving device's GRO merged (one 4-tuple: one peer's port, every tunnel to that peer). The
// whole skb goes to the socket its first datagram picks. So every shard checks each datagram's
// tunnel id (Engine::peek_tunnel_id) and hands one of another shard's tunnel to that shard
// through the dispatch ring (counted wan_misdirected). Without UDP GSO/GRO nothing needs it.
//
// TUN side. The device is multi-queue (IFF_MULTI_QUEUE, one queue per shard, with or without
// the virtio-net header); the kernel picks a queue by flow hash, not by tunnel. Each shard reads
// its queue, finds the packet's tunnel (Engine::route_st, shard_of_tunnel), submits what it
// owns and copies the rest into the owner's dispatch ring (counted tun_dispatched; a full ring:
// dispatch_dropped). Each shard writes its releases to its own queue. A tunnel's service
// sockets are opened and read by its owner only.
//
// Rings and wake-ups: one DispatchRing per ordered pair of shards; a shard drains the rings into
// it every loop turn (a bounded number of entries) and sleeps only when they are empty; a
// producer that finds a ring emptied writes the owner's eventfd, which the owner keeps a poll
// on in its io_uring. Shard 0 wakes every shard the same way when it pauses them.
//
// Control: shard 0 serves the control and admin sockets for the whole gateway
// (gw::answer_sharded_request) inside a gw::PauseScope; peers: gw::PeerBoards, synced by each
// shard at most every gw::kPeerSyncIntervalNs.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "dataplane/gw/engine.h"
#include "dataplane/gw/shard_sync.h"
#include "dataplane/uring/dispatch_ring.h"
#include "dataplane/uring/gateway_state.h"

namespace detwan::dataplane::uring {

// Entries a shard takes from one incoming ring per loop turn (then engine polls run again).
inline constexpr uint32_t kDispatchDrainPerTurn = 256;
// Slots of all rings into one shard together (each ring: this over N - 1, a power of two >= 64).
inline constexpr uint32_t kDispatchSlotsPerShard = 2048;

struct ShardGroup {
  ShardGroup(uint32_t shard_count, uint32_t peers, uint32_t slot_bytes);
  ShardGroup(const ShardGroup&) = delete;
  ShardGroup& operator=(const ShardGroup&) = delete;

  [[nodiscard]] DispatchRing& ring(uint32_t from, uint32_t to) noexcept {
    return *rings[std::size_t{from} * count + to];
  }
  // Ends shard k's wait in its io_uring (eventfd write; never blocks).
  void wake(uint32_t k) const noexcept;
  // Every shard's ShardCounters as a JSON array (shard 0's thread, others paused or ended).
  [[nodiscard]] std::string counters_json() const;

  uint32_t count;
  std::vector<std::unique_ptr<DispatchRing>> rings;  // [from * count + to], none for from == to
  std::vector<common::UniqueFd> wake_fds;            // eventfd per shard
  gw::PeerBoards peers;
  gw::ShardPause pause;
  std::vector<GatewayState*> states;  // by shard
  std::vector<gw::Engine*> engines;   // by shard, set by run_shards()
};

// What a Gateway owns: the shards' states (GatewayState), their group, and the engines of shards
// 1.. (created by run_shards from the run configuration with shard 0's epoch).
struct GatewayShards {
  GatewayShards() = default;
  GatewayShards(const GatewayShards&) = delete;
  GatewayShards& operator=(const GatewayShards&) = delete;
  ~GatewayShards() {
    // The last shard's ring first: shard 0's state owns the TUN device every queue belongs to.
    while (!states.empty()) states.pop_back();
  }

  std::unique_ptr<ShardGroup> group;                  // nullptr: one shard
  std::vector<std::unique_ptr<gw::Engine>> engines;   // shards 1..
  std::vector<std::unique_ptr<GatewayState>> states;  // by shard
};

// Runs shard 0 on the calling thread and shards 1.. on threads of their own until context.stop;
// creates their engines first (context.engine must be shard 0 of states.size()).
common::Result<void> run_shards(GatewayShards& shards, gw::RunContext& context);

}  // namespace detwan::dataplane::uring

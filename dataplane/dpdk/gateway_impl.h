#pragma once
// Private state of the DPDK gateway, shared by its setup (gateway.cc, local.cc) and its loop
// (gateway_datapath.cc, local_datapath.cc). Not part of the backend's interface.
#include <array>
#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include <rte_prefetch.h>
#include <rte_ring.h>

#include "common/clock.h"
#include "common/unique_fd.h"
#include "dataplane/dpdk/flow_steering.h"
#include "dataplane/dpdk/frame.h"
#include "dataplane/dpdk/gateway.h"
#include "dataplane/dpdk/port.h"
#include "dataplane/gw/shard_sync.h"
#include "dataplane/gw/tun.h"

namespace detwan::dataplane::dpdk {

struct WanPortState {
  EthPort* port = nullptr;  // SharedState::wan_ports[i]
  std::string device;
  WanAddress address;        // our MAC + local endpoint: what received frames must match
  MacAddress next_hop_mac;   // destination of every frame we send
  gw::PortIo* io = nullptr;  // the engine's I/O counters of this port
  // This shard's queue counters as last added to `io` (a send may flush a full burst before
  // flush_wan_st does, so io follows the queue's totals, not one flush's).
  uint64_t reported_tx_packets = 0, reported_tx_bytes = 0, reported_tx_failed = 0;
};

struct ServiceSocket {
  common::UniqueFd fd;
  uint16_t port = 0;  // bound UDP port (host order)
  bool ipv6 = false;
};

// The host side: TUN or a DPDK local port, plus the service sockets. One per gateway, shared by
// its shards: shard 0 reads TUN and the service sockets; every shard writes (a TUN write or a
// sendto is one system call, safe from several threads) and has its own local port queue.
struct LocalSide {
  std::optional<gw::TunDevice> tun;
  std::unique_ptr<EthPort> port;
  MacAddress peer_mac;
  // Per engine tunnel index as of open(); fd invalid if it has no listener. Tunnels added at
  // run time lie beyond it (or reuse an index without one): look up in bounds.
  std::vector<ServiceSocket> service;
  common::UniqueFd sender_v4, sender_v6;  // for tunnels that deliver but do not listen
};

// TSC read as TAI nanoseconds: TscClock (CLOCK_MONOTONIC scale) plus the TAI-monotonic offset
// measured once at start. ~10 ns per read, for a loop that reads it every iteration. The shards
// of one gateway read one instance: one calibration, one time base for the slots they share.
class TscTaiClock {
 public:
  TscTaiClock() : offset_ns_(common::TaiClock().now_ns() - tsc_.now_ns()) {}
  [[nodiscard]] int64_t now_ns() const noexcept { return tsc_.now_ns() + offset_ns_; }

 private:
  common::TscClock tsc_;
  int64_t offset_ns_ = 0;
};

// What the shards of one gateway share (gw/shard.h): the mbuf pool, the devices (one queue pair
// per shard), the host side, and each shard's dispatch rings, into which the other shards put
// the packets of its tunnels that reached them (multi-producer, single-consumer).
struct SharedState {
  SharedState() = default;
  SharedState(const SharedState&) = delete;
  SharedState& operator=(const SharedState&) = delete;
  ~SharedState();  // devices and rings first (they hold mbufs of the pool), the pool last

  rte_mempool* pool = nullptr;
  std::vector<std::unique_ptr<EthPort>> wan_ports;  // by WAN port index
  // By WAN port index, with several shards: the flow rules that steer its frames to their owner
  // shard's RX queue (null where the device refused them: RSS and dispatch only), and what
  // happened, for the log and counters_json() ("4 flow rules" or the refusal).
  std::vector<std::unique_ptr<FlowSteering>> wan_steering;
  std::vector<std::string> wan_steering_note;
  LocalSide local;
  uint32_t shard_count = 1;
  std::vector<rte_ring*> wan_in;    // per shard: WAN frames (hash.usr = WAN port index)
  std::vector<rte_ring*> local_in;  // per shard: host packets, ready to submit
  // Per peer: what its lead shard last published, for the other shards (gw/shard_sync.h).
  std::unique_ptr<gw::PeerBoards> peers;
  // Shard 0 answers a control request with the other shards paused (gw/shard_sync.h; a new
  // one for each run_shards()).
  std::unique_ptr<gw::ShardPause> pause;
};

// The outer-header tag kept in mbuf->hash.usr between submit/receive and transmit/release:
// the tunnel payload's wire::DataType.
inline void set_data_type(rte_mbuf* mbuf, wire::DataType type) noexcept {
  mbuf->hash.usr = static_cast<uint32_t>(type);
}
[[nodiscard]] inline wire::DataType data_type_of(const rte_mbuf* mbuf) noexcept {
  return static_cast<wire::DataType>(mbuf->hash.usr);
}

// Prefetching as DPDK's l3fwd does: while frame i is handled, the data of frame i + kPrefetchAhead
// is fetched (a burst's mbuf headers first, since the data address is in them). With thousands
// of frames in flight their buffers are not in cache (docs/benchmarks/dataplane.md, issue 17).
inline constexpr uint32_t kPrefetchAhead = 3;
inline void prefetch_data(const rte_mbuf* m) noexcept {
  rte_prefetch0(rte_pktmbuf_mtod(m, const void*));
}

struct Gateway::Impl {
  Impl(gw::Engine& engine_ref, const gw::GatewayConfig& config_ref,
       std::shared_ptr<SharedState> shared_ref)
      : engine(engine_ref),
        config(config_ref),
        shared(std::move(shared_ref)),
        local(shared->local) {}
  ~Impl();

  gw::Engine& engine;
  const gw::GatewayConfig& config;
  GatewayOptions options;
  std::shared_ptr<SharedState> shared;
  LocalSide& local;             // shared->local
  rte_mempool* pool = nullptr;  // shared->pool
  uint32_t shard = 0;           // this shard's index = its queue on every device
  uint32_t batch = 32;
  std::vector<WanPortState> wan;
  rte_mbuf* spare = nullptr;  // kept between host reads so an empty read costs no pool round trip
  BackendCounters counters;
  int64_t next_peer_sync_ns = 0;
  uint64_t local_reported_tx_packets = 0, local_reported_tx_failed = 0;  // as WanPortState's
  // The engine's bursts (Engine::next_tx_burst_st / next_rx_burst_st), kept here so that a poll
  // does not construct them: every mbuf of a burst is prefetched before the first is touched.
  static constexpr uint32_t kEmitBurst = 32;
  std::array<gw::TxEmit, kEmitBurst> tx_emits;
  std::array<gw::RxEmit, kEmitBurst> rx_emits;

  [[nodiscard]] uint16_t queue() const noexcept { return static_cast<uint16_t>(shard); }
  [[nodiscard]] bool sharded() const noexcept { return shared->shard_count > 1; }

  // ---- datapath (gateway_datapath.cc, local_datapath.cc) ----
  uint32_t wan_rx_st(int64_t now_ns) noexcept;
  // One received WAN frame of WAN port `index`, owned by this shard: parse, engine, keep or free.
  bool wan_frame_st(uint32_t index, rte_mbuf* m, int64_t now_ns) noexcept;
  uint32_t transmit_st(int64_t now_ns, uint32_t max_frames) noexcept;  // no flush
  void flush_wan_st() noexcept;
  uint32_t release_st(int64_t now_ns) noexcept;
  uint32_t local_rx_st(int64_t now_ns) noexcept;
  // A host packet (hash.usr = its data type; a datagram's tunnel index in hash.fdir.hi): to the
  // shard that owns its tunnel, or submitted here. True if the engine (or a ring) took it.
  bool local_packet_st(rte_mbuf* m, int64_t now_ns) noexcept;
  bool submit_local_st(rte_mbuf* m, int64_t now_ns) noexcept;
  // Puts m on shard `owner`'s ring; frees and counts it when the ring is full.
  void dispatch_st(rte_ring* ring, rte_mbuf* m) noexcept;
  void send_data_st(const gw::TxEmit& emit) noexcept;
  void send_control_st(const gw::TxEmit& emit) noexcept;
  // Takes the mbuf (payload = the tunnel payload) and delivers or frees it.
  void deliver_local_st(rte_mbuf* mbuf, const gw::RxEmit& emit) noexcept;
  void flush_local_st() noexcept;
  // Sharded: publish the peers this shard leads, adopt the others (every 100 us at most).
  void sync_peers_st(int64_t now_ns) noexcept;
};

// Setup of the local side (local.cc), through shard 0; a local port gets `queues` queue pairs.
common::Result<void> open_local_side(Gateway::Impl& impl, uint16_t queues);

}  // namespace detwan::dataplane::dpdk

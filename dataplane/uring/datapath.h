#pragma once
// The io_uring backend's loop state (private to dataplane/uring). Datapath::prepare() is setup
// (gateway.cc); everything else runs per packet on the datapath thread (gateway_datapath.cc).
#include <cstdint>
#include <span>
#include <vector>

#include <liburing.h>

#include "common/status.h"
#include "dataplane/gw/engine.h"
#include "dataplane/gw/run_context.h"
#include "dataplane/uring/gateway_state.h"
#include "dataplane/uring/timing.h"

namespace detwan::dataplane::uring {

inline constexpr int64_t kControlPeriodNs = 10'000'000;     // RunContext: at least every 10 ms
inline constexpr int64_t kControlBusyPeriodNs = 1'000'000;  // while a client is connected
inline constexpr int64_t kStarvedRetryNs = 100'000;         // receives waiting for a free buffer
inline constexpr unsigned kCqeBatch = 64;
inline constexpr unsigned kMaxCqesPerTurn = 1024;  // then engine polls run again

// user_data: kind (8 bits) | object (24 bits: source or WAN port) | buffer index (32 bits).
enum class Op : uint8_t {
  kReceive = 1,    // recvmsg/read on source `object`
  kReadiness = 2,  // POLL_ADD after a receive saw EAGAIN: then receive again into `buffer`
  kWanSend = 3,    // sendmsg on WAN port `object`
  kTunWrite = 4,
  kServiceSend = 5,
  kControlReady = 6,  // POLL_ADD on a control server's listening socket (object 0: control,
                      // 1: admin)
  kWanGsoSend = 7,    // sendmsg with UDP_SEGMENT on WAN port `object`; `buffer`: the GsoSend
  kTunRunWrite = 8,   // writev of a UDP GSO run to the TUN device; `buffer`: the TunRun
  kWake = 9,          // POLL_ADD on this shard's eventfd (shards.h): a ring filled, or a pause
};

inline constexpr uint64_t pack(Op op, uint32_t object, uint32_t buffer) noexcept {
  return (uint64_t{static_cast<uint8_t>(op)} << 56) | (uint64_t{object & 0xFFFFFF} << 32) | buffer;
}
inline constexpr Op op_of(uint64_t data) noexcept { return static_cast<Op>(data >> 56); }
inline constexpr uint32_t object_of(uint64_t data) noexcept { return (data >> 32) & 0xFFFFFF; }
inline constexpr uint32_t buffer_of(uint64_t data) noexcept { return static_cast<uint32_t>(data); }

enum class SourceKind : uint8_t { kWan, kTun, kService };

// Something the loop keeps receives in flight on.
struct Source {
  SourceKind kind = SourceKind::kWan;
  int fd = -1;
  const UdpSocket* socket = nullptr;  // kWan, kService
  uint32_t index = 0;                 // WAN port index, or engine tunnel index (kService)
  uint32_t depth = 1;                 // receives wanted in flight
  uint32_t armed = 0;                 // receives in flight
  // Receives into LargeReceive buffers (wan_batch.h): a WAN port with UDP_GRO, or a TUN device
  // with offload (tun_offload.h); its records are [large_first, large_first + depth).
  bool large = false;
  uint32_t large_first = 0;
};

class Datapath {
 public:
  Datapath(GatewayState& state, gw::RunContext& context)
      : state_(state),
        pool_(*state.pool),
        ring_(&state.ring),
        engine_(context.engine),
        context_(context),
        controls_{context.control, context.admin} {}

  common::Result<void> prepare();
  // Runs until context.stop. Instantiated for LowCpuTiming and BusyTiming.
  template <typename Timing>
  void loop(Timing& timing);

 private:
  io_uring_sqe* get_sqe() noexcept {
    io_uring_sqe* sqe = io_uring_get_sqe(ring_);
    if (sqe == nullptr) {
      (void)io_uring_submit(ring_);
      sqe = io_uring_get_sqe(ring_);
    }
    return sqe;
  }
  void arm(uint32_t source_id) noexcept;
  bool submit_receive(uint32_t source_id, uint32_t buffer) noexcept;
  void arm_starved() noexcept;
  void arm_control() noexcept;
  void reap(int64_t now_ns) noexcept;
  void on_completion(uint64_t data, int32_t result, int64_t now_ns) noexcept;
  void on_receive(uint32_t source_id, uint32_t buffer, int32_t result, int64_t now_ns) noexcept;
  void on_send(Op op, uint32_t object, uint32_t buffer, int32_t result) noexcept;
  // A protected tunnel's copy of `buffer` (length payload bytes) for its protection path.
  void submit_replica(const gw::SubmitInfo& submit, uint32_t buffer, uint32_t length,
                      int64_t now_ns) noexcept;
  void count_receive_error(const Source& source) noexcept;
  void transmit(const gw::TxEmit& emit) noexcept;
  void transmit_control(const gw::TxEmit& emit) noexcept;
  void deliver(const gw::RxEmit& emit) noexcept;
  void send_wan(uint32_t port, uint32_t buffer, std::span<const std::byte> bytes,
                const gw::Endpoint& destination, uint8_t dscp) noexcept;
  // UDP GSO batches (wan_batch.h, wan_batch_datapath.cc): a frame joins the open batch or sends
  // it and opens the next; flush_wan_batch() sends the open batch (after every engine tx poll).
  void queue_wan(uint32_t port, uint32_t buffer, std::span<const std::byte> bytes,
                 const gw::Endpoint& destination, uint8_t dscp) noexcept;
  void flush_wan_batch() noexcept;
  void on_gso_send(uint32_t port, uint32_t record, int32_t result) noexcept;
  // UDP GRO receives (wan_batch_datapath.cc): `record` indexes GatewayState::large_receives.
  bool submit_large_receive(uint32_t source_id, uint32_t record) noexcept;
  void arm_large(uint32_t source_id) noexcept;
  // A large receive's completion that carries no data (EAGAIN: wait for readiness; cancelled):
  // handled, true. rearm_large() submits the record again (or leaves the source starved).
  bool large_receive_ended(uint32_t source_id, uint32_t record, int32_t result) noexcept;
  void rearm_large(uint32_t source_id, uint32_t record) noexcept;
  void on_gro_receive(uint32_t source_id, uint32_t record, int32_t result, int64_t now_ns) noexcept;
  // A read of the offloading TUN device (tun_offload_datapath.cc): one packet or a UDP GSO run,
  // cut into packets with complete checksums.
  void on_tun_read(uint32_t source_id, uint32_t record, int32_t result, int64_t now_ns) noexcept;
  // Writes to the TUN device: write_tun() one packet; queue_tun() lets it join the open run
  // (tun_offload.h) or writes the run and opens the next; flush_tun_run() writes the open run
  // (after every engine rx poll).
  void write_tun(uint32_t buffer) noexcept;
  void queue_tun(uint32_t buffer) noexcept;
  void flush_tun_run() noexcept;
  void on_tun_run_write(uint32_t record, int32_t result) noexcept;
  // A packet from the TUN device in `buffer` (payload at its offset, `length` bytes) to the
  // engine: kOk when the engine holds the buffer now.
  common::Status tun_packet(uint32_t buffer, uint32_t length, int64_t now_ns) noexcept;
  // One WAN datagram of `length` bytes at the start of `buffer`, from `from`, to the engine:
  // kOk when the engine holds the buffer now.
  common::Status wan_datagram(uint32_t port, const sockaddr_storage& from, uint32_t buffer,
                              uint32_t length, int64_t now_ns) noexcept;
  // The two without the shard check: the packet belongs to this shard.
  common::Status submit_tun(uint32_t buffer, uint32_t length, int64_t now_ns) noexcept;
  common::Status owned_wan_datagram(uint32_t port, const gw::Endpoint& from, uint32_t buffer,
                                    uint32_t length, int64_t now_ns) noexcept;

  // ---- several shards (shards.h; shard_datapath.cc, setup in shards.cc) ----
  common::Result<void> prepare_shard();
  // A packet of another shard's tunnel: copied into its owner's ring (or counted lost), true.
  // False: this shard's (or no tunnel's: the engine here counts it).
  bool dispatch_tun_st(uint32_t buffer, uint32_t length) noexcept;
  bool dispatch_wan_st(uint32_t port, const sockaddr_storage& from, uint32_t buffer,
                       uint32_t length) noexcept;
  // Shards k > 0 at the top of each turn: waits while shard 0 answers a request; true if it did.
  bool wait_if_paused_st() noexcept;
  // Each turn: peer sync (at most every gw::kPeerSyncIntervalNs), the incoming rings drained.
  void shard_turn_st(int64_t now_ns) noexcept;
  // Before the wait: wakes the owners whose rings this turn filled; true if an incoming ring
  // still holds entries (then the loop must not sleep).
  bool end_turn_st() noexcept;
  void arm_wake() noexcept;
  void on_wake() noexcept;
  // One control server's poll: with several shards, shard 0 answers for all of them, paused.
  void serve_control_st(gw::ControlServer& server, int64_t now_ns);

  GatewayState& state_;
  BufferPool& pool_;
  io_uring* ring_;
  gw::Engine& engine_;
  gw::RunContext& context_;
  std::vector<Source> sources_;
  // By engine tunnel index as of start (nullptr: none). Tunnels added at run time have higher
  // indices (or reuse one without service sockets) and no service port: look up in bounds.
  std::vector<const ServiceSockets*> services_;
  bool starved_ = false;  // some source has fewer receives in flight than wanted
  // The control and admin servers (either may be nullptr), by Op::kControlReady object.
  gw::ControlServer* controls_[2] = {nullptr, nullptr};
  bool control_armed_[2] = {false, false};
  bool control_ready_ = false;
  int32_t open_batch_ = -1;        // the GsoSend frames join, -1: none
  int32_t open_tun_run_ = -1;      // the TunRun packets join, -1: none
  uint32_t tun_header_bytes_ = 0;  // the TUN device's virtio-net header in front of each packet
  // Several shards (nullptr / 0 otherwise).
  ShardGroup* group_ = nullptr;
  uint64_t wake_pending_ = 0;  // bit k: shard k's ring went from empty to not this turn
  bool wake_armed_ = false;
  int64_t next_peer_sync_ns_ = 0;
};

}  // namespace detwan::dataplane::uring

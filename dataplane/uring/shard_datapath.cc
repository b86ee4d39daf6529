// The io_uring loop's part in a gateway of several shards (shards.h): dispatch of packets of
// other shards' tunnels, the incoming rings, wake-ups, peer sync, the pause while shard 0
// answers a control request. Per packet: no allocation, no exception, no logging; a full ring
// or a missing buffer is counted.
#include <cstring>

#include <poll.h>
#include <unistd.h>

#include "dataplane/gw/control_server.h"
#include "dataplane/gw/shard_control.h"
#include "dataplane/uring/datapath.h"
#include "dataplane/uring/shards.h"

namespace detwan::dataplane::uring {
namespace {

// Copies a packet into the owner's ring; counts it either way.
void hand_over(ShardGroup& group, ShardCounters& counters, uint32_t from, uint32_t owner,
               const DispatchHeader& header, std::span<const std::byte> bytes,
               uint64_t* wake_pending) noexcept {
  bool woke = false;
  if (group.ring(from, owner).push(header, bytes, &woke)) {
    ++counters.dispatched;
    if (woke) *wake_pending |= uint64_t{1} << owner;
  } else {
    ++counters.dispatch_dropped;
  }
}

}  // namespace

bool Datapath::dispatch_tun_st(uint32_t buffer, uint32_t length) noexcept {
  const std::span<const std::byte> packet{pool_.payload(buffer), length};
  const uint32_t index = engine_.route_st(packet);
  if (index == gw::Engine::kNoTunnel) return false;  // the engine here counts no_route
  const uint32_t owner = gw::shard_of_tunnel(engine_.tunnel_id(index), group_->count);
  if (owner == state_.shard) return false;
  ++state_.counters.tun_dispatched;
  DispatchHeader header;
  header.kind = DispatchKind::kTun;
  hand_over(*group_, state_.counters, state_.shard, owner, header, packet, &wake_pending_);
  return true;
}

bool Datapath::dispatch_wan_st(uint32_t port, const sockaddr_storage& from, uint32_t buffer,
                               uint32_t length) noexcept {
  if (length > pool_.whole(buffer).size()) return false;  // truncated: counted by the owner path
  const std::span<const std::byte> datagram = pool_.whole(buffer).first(length);
  const uint32_t id = gw::Engine::peek_tunnel_id(datagram);
  if (id == 0) return false;  // too short for a tunnel: the engine here drops and counts it
  const uint32_t owner = gw::shard_of_tunnel(id, group_->count);
  if (owner == state_.shard) return false;
  ++state_.counters.wan_misdirected;
  DispatchHeader header;
  header.kind = DispatchKind::kWan;
  header.port = port;
  header.from = from_sockaddr(from);
  hand_over(*group_, state_.counters, state_.shard, owner, header, datagram, &wake_pending_);
  return true;
}

void Datapath::shard_turn_st(int64_t now_ns) noexcept {
  ++state_.counters.loop_iterations;
  if (now_ns >= next_peer_sync_ns_) {
    group_->peers.sync_st(engine_);
    next_peer_sync_ns_ = now_ns + gw::kPeerSyncIntervalNs;
  }
  for (uint32_t from = 0; from < group_->count; ++from) {
    if (from == state_.shard) continue;
    DispatchRing& ring = group_->ring(from, state_.shard);
    std::span<const std::byte> bytes;
    for (uint32_t taken = 0; taken < kDispatchDrainPerTurn; ++taken) {
      const DispatchHeader* header = ring.front(&bytes);
      if (header == nullptr) break;
      const uint32_t buffer = pool_.alloc();
      if (buffer == kNoBuffer) {  // stays in the ring for a later turn
        ++state_.counters.dispatch_no_buffer;
        starved_ = true;
        return;
      }
      ++state_.counters.dispatch_received;
      common::Status status = common::Status::kDropped;
      if (header->kind == DispatchKind::kTun) {
        pool_.info(buffer).offset = kHeadroomBytes;
        std::memcpy(pool_.payload(buffer), bytes.data(), bytes.size());
        status = submit_tun(buffer, static_cast<uint32_t>(bytes.size()), now_ns);
      } else {
        pool_.info(buffer).offset = 0;
        std::memcpy(pool_.data(buffer), bytes.data(), bytes.size());
        status = owned_wan_datagram(header->port, header->from, buffer,
                                    static_cast<uint32_t>(bytes.size()), now_ns);
      }
      ring.pop();
      if (status != common::Status::kOk) pool_.release(buffer);
    }
  }
}

bool Datapath::end_turn_st() noexcept {
  for (uint32_t k = 0; wake_pending_ != 0 && k < group_->count; ++k) {
    if ((wake_pending_ & (uint64_t{1} << k)) != 0) group_->wake(k);
  }
  wake_pending_ = 0;
  for (uint32_t from = 0; from < group_->count; ++from) {
    if (from != state_.shard && !group_->ring(from, state_.shard).empty()) return true;
  }
  return false;
}

void Datapath::arm_wake() noexcept {
  if (group_ == nullptr || wake_armed_) return;
  io_uring_sqe* sqe = get_sqe();
  if (sqe == nullptr) return;  // the next wake-up comes with the loop's next deadline
  io_uring_prep_poll_add(sqe, group_->wake_fds[state_.shard].get(), POLLIN);
  io_uring_sqe_set_data64(sqe, pack(Op::kWake, 0, 0));
  wake_armed_ = true;
}

void Datapath::on_wake() noexcept {
  wake_armed_ = false;
  uint64_t value = 0;  // resets the (non-blocking) eventfd; EAGAIN when already read
  (void)!::read(group_->wake_fds[state_.shard].get(), &value, sizeof value);
  arm_wake();
}

bool Datapath::wait_if_paused_st() noexcept {
  if (state_.shard == 0) return false;
  return group_->pause.wait_if_requested(context_.stop);
}

void Datapath::serve_control_st(gw::ControlServer& server, int64_t now_ns) {
  if (group_ == nullptr) {
    server.poll_st(engine_, now_ns);
    return;
  }
  ShardGroup& group = *group_;
  const std::atomic<bool>& stop = context_.stop;
  // The other shards are paused only while a request is answered, not for every poll.
  server.poll_st(now_ns, [&](std::string_view request) {
    const gw::PauseScope pause(group.pause, stop, [&group] {
      for (uint32_t k = 1; k < group.count; ++k) group.wake(k);
    });
    return gw::answer_sharded_request(group.engines, request, now_ns, server.channel(),
                                      [&group] { return group.counters_json(); });
  });
  server.report_counters(engine_);
}

}  // namespace detwan::dataplane::uring

#pragma once
// Private building blocks of the algorithms in collectives/algo/ (not installed, not part of
// the contract in algorithms.h).
//
// SendQueue: the zero-copy sends of one operation, in posting order. A send's source must stay
// unmodified until its acknowledgement, so an algorithm that later overwrites a region it sent
// calls wait_through(index) first; every algorithm calls wait_all() before returning. Small
// messages (<= kCopySendMaxBytes), and messages to another site within the retain budget
// (kRetainMaxMessageBytes, Peers::retain_budget_bytes), are sent as copies instead: nothing to wait for,
// so an operation completes once the data it needs has arrived, not a round trip later.
// If a SendQueue is destroyed with sends still pending (an error path), it aborts the Peers
// (the communicator is unusable after a failed collective anyway) and waits for the pending
// sends, so the transport never reads the caller's buffer after the call has returned.
//
// RecvQueue: receives from one peer, posted ahead (expect) and consumed in order (next), each
// checked against the size the plan expects.
//
// Threading: the executor thread of one communicator only.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <utility>
#include <vector>

#include "collectives/algo/algorithms.h"

namespace detwan::collectives::algo::detail {

// Messages up to this size are copied (Peers::send_copy) rather than sent zero-copy.
inline constexpr size_t kCopySendMaxBytes = size_t{64} << 10;
// A message to another site up to this size is copied too while the copies not yet
// acknowledged (Peers::retained_bytes) stay within Peers::retain_budget_bytes(): the operation then
// completes when its data has arrived, without waiting a WAN round trip for the acknowledgement
// of its own sends (the copies are retained until acknowledged). Larger messages, and any beyond
// the budget, are sent zero-copy and waited for, so a large broadcast never doubles its memory.
inline constexpr size_t kRetainMaxMessageBytes = size_t{4} << 20;
// Receives posted ahead of the one being waited for, per peer.
inline constexpr size_t kRecvWindow = 16;
// Returned by SendQueue::post for a copied send: there is nothing to wait for.
inline constexpr size_t kNoWait = SIZE_MAX;

inline std::byte* as_bytes(void* p) { return static_cast<std::byte*>(p); }
inline const std::byte* as_bytes(const void* p) { return static_cast<const std::byte*>(p); }

// Effective chunk size in whole elements (>= 1).
[[nodiscard]] size_t chunk_elems(const OpContext& ctx, DataType type);
// Number of chunks of `count` elements (0 for an empty block).
[[nodiscard]] inline size_t num_chunks(size_t count, size_t chunk) {
  return (count + chunk - 1) / chunk;
}

class SendQueue {
 public:
  explicit SendQueue(OpContext& ctx) : ctx_(ctx) {}
  ~SendQueue();
  SendQueue(const SendQueue&) = delete;
  SendQueue& operator=(const SendQueue&) = delete;

  // Index of this send for wait_through(), or kNoWait when it was copied.
  size_t post(int peer, std::span<const std::byte> data);
  // Always a copy (returns kNoWait): for the last messages of an operation, whose
  // acknowledgement would otherwise add a round trip at its end.
  size_t post_copy(int peer, std::span<const std::byte> data);
  // Waits for every zero-copy send with index <= index (kNoWait: nothing).
  Result<void> wait_through(size_t index);
  // Waits for that one send only (kNoWait or already waited: nothing).
  Result<void> wait_for(size_t index);
  Result<void> wait_all();
  // Index the next zero-copy send will get.
  [[nodiscard]] size_t next_index() const { return first_index_ + pending_.size(); }

 private:
  OpContext& ctx_;
  std::deque<PendingSend> pending_;
  size_t first_index_ = 0;  // index of pending_.front()
};

// A received message; its buffer goes back to the channel it came from when this is dropped
// (Peers::recycle), so the next message from that peer lands in memory that is mapped already.
class Received {
 public:
  Received(Peers& peers, int peer, std::vector<std::byte> bytes)
      : peers_(&peers), peer_(peer), bytes_(std::move(bytes)) {}
  ~Received() {
    if (peers_ != nullptr) peers_->recycle(peer_, std::move(bytes_));
  }
  Received(Received&& other) noexcept
      : peers_(std::exchange(other.peers_, nullptr)), peer_(other.peer_),
        bytes_(std::move(other.bytes_)) {}
  Received& operator=(Received&&) = delete;
  Received(const Received&) = delete;
  Received& operator=(const Received&) = delete;

  [[nodiscard]] const std::byte* data() const { return bytes_.data(); }
  [[nodiscard]] size_t size() const { return bytes_.size(); }
  [[nodiscard]] std::span<const std::byte> span() const { return bytes_; }

 private:
  Peers* peers_;
  int peer_;
  std::vector<std::byte> bytes_;
};

class RecvQueue {
 public:
  RecvQueue(OpContext& ctx, int peer) : ctx_(ctx), peer_(peer) {}

  // Posts a receive for the next message, expected to be `bytes` long.
  void expect(size_t bytes);
  [[nodiscard]] size_t posted() const { return pending_.size(); }
  // Waits for the oldest posted receive; kInvalidArgument if its size differs from expected.
  Result<Received> next();

 private:
  OpContext& ctx_;
  int peer_;
  std::deque<std::pair<PendingRecv, size_t>> pending_;
};

// Sends `count` elements at `data` to `peer` as chunk-sized messages (all posted at once);
// returns the index of the last zero-copy send (kNoWait if none).
size_t send_chunked(SendQueue& sends, int peer, const std::byte* data, size_t count,
                    size_t elem_bytes, size_t chunk);
// Receives `count` elements from `peer` as chunk-sized messages (the matching send_chunked)
// and calls on_chunk(element_offset, message bytes) for each, in order. on_chunk returns
// Result<void>; the first error stops the loop.
template <typename OnChunk>
Result<void> recv_chunked(OpContext& ctx, int peer, size_t count, size_t elem_bytes,
                          size_t chunk, OnChunk&& on_chunk) {
  const size_t chunks = num_chunks(count, chunk);
  RecvQueue queue(ctx, peer);
  size_t posted = 0;
  auto size_of = [&](size_t i) { return std::min(chunk, count - i * chunk) * elem_bytes; };
  for (size_t i = 0; i < chunks; ++i) {
    while (posted < chunks && posted < i + kRecvWindow) queue.expect(size_of(posted++));
    auto message = queue.next();
    if (!message) return std::unexpected(message.error());
    if (auto ok = on_chunk(i * chunk, message->span()); !ok) return ok;
  }
  return {};
}

// The steps [first_step, end_step) of a pipelined ring over `group` (ring order, contains this
// rank) on `count` elements at `buf`, split into |group| blocks (block_of). Steps 0..g-2 are
// the reduce-scatter (block i ends reduced at group[i]), steps g-1..2g-3 the allgather. At step
// s the rank at position p sends block (p-s-1) mod g and receives block (p-s-2) mod g, chunk by
// chunk; a chunk is forwarded as soon as it has been received, so every step's chunks are in
// flight together. Sends go through `sends` (the caller waits for them); a region this run
// overwrites after having sent it is waited for first.
// `src` (optional, only with first_step == 0 and end_step == 2g-2, not overlapping buf): this
// rank's input, read where the in-place run would read buf before writing it, so an
// out-of-place allreduce needs no copy of the input into buf first (every block of buf is
// written by the run).
Result<void> run_ring(OpContext& ctx, std::span<const int> group, std::byte* buf, size_t count,
                      DataType type, ReduceOp op, int first_step, int end_step,
                      SendQueue& sends, const std::byte* src = nullptr);

// Position of this rank in `group`, or kInvalidArgument naming the group.
Result<size_t> position_in(const OpContext& ctx, std::span<const int> group);

// Copies send to recv when they differ (the algorithms then run in place on recv).
void copy_to_recv(const void* send, void* recv, size_t count, DataType type);
// The input a full ring run (run_ring's `src`) may read instead of copying it into recv first:
// send, or null when send is recv or overlaps it (then it is copied into recv).
const std::byte* ring_source(const void* send, void* recv, size_t count, DataType type);

}  // namespace detwan::collectives::algo::detail

#include "collectives/algo/detail.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace detwan::collectives::algo::detail {

size_t chunk_elems(const OpContext& ctx, DataType type) {
  const int64_t chunk_bytes = ctx.chunk_bytes > 0 ? ctx.chunk_bytes : kDefaultChunkBytes;
  return std::max<size_t>(1, static_cast<size_t>(chunk_bytes) / data_type_size(type));
}

SendQueue::~SendQueue() {
  if (pending_.empty()) return;
  // Error path (a failed collective leaves the communicator unusable anyway): close the
  // channels so the pending sends complete now, then wait for them, so no transport still
  // reads the caller's buffer once we return.
  ctx_.peers.abort();
  for (auto& send : pending_) {
    if (send.valid()) (void)ctx_.peers.wait(send, ctx_.deadline);
  }
}

size_t SendQueue::post(int peer, std::span<const std::byte> data) {
  const bool retain = data.size() <= kRetainMaxMessageBytes &&
                      !ctx_.topology.same_site(ctx_.peers.rank(), peer) &&
                      ctx_.peers.retained_bytes() + static_cast<int64_t>(data.size()) <=
                          ctx_.peers.retain_budget_bytes();
  if (data.size() <= kCopySendMaxBytes || retain) {
    ctx_.peers.send_copy(peer, data);
    return kNoWait;
  }
  pending_.push_back(ctx_.peers.send(peer, data));
  return next_index() - 1;
}

size_t SendQueue::post_copy(int peer, std::span<const std::byte> data) {
  ctx_.peers.send_copy(peer, data);
  return kNoWait;
}

Result<void> SendQueue::wait_through(size_t index) {
  if (index == kNoWait) return {};
  while (!pending_.empty() && first_index_ <= index) {
    if (pending_.front().valid()) {
      if (auto ok = ctx_.peers.wait(pending_.front(), ctx_.deadline); !ok) return ok;
    }
    pending_.pop_front();
    ++first_index_;
  }
  return {};
}

Result<void> SendQueue::wait_for(size_t index) {
  if (index == kNoWait || index < first_index_ || index >= next_index()) return {};
  PendingSend& send = pending_[index - first_index_];
  if (send.valid()) {
    if (auto ok = ctx_.peers.wait(send, ctx_.deadline); !ok) return ok;
  }
  while (!pending_.empty() && !pending_.front().valid()) {
    pending_.pop_front();
    ++first_index_;
  }
  return {};
}

Result<void> SendQueue::wait_all() {
  if (pending_.empty()) return {};
  return wait_through(next_index() - 1);
}

void RecvQueue::expect(size_t bytes) { pending_.emplace_back(ctx_.peers.recv(peer_), bytes); }

Result<Received> RecvQueue::next() {
  if (pending_.empty()) {
    return make_error(ErrorCode::kInternal,
                      fmt::format("rank {}: no receive posted from {}", ctx_.peers.rank(),
                                  ctx_.peers.peer_name(peer_)));
  }
  auto [pending, expected] = std::move(pending_.front());
  pending_.pop_front();
  auto message = ctx_.peers.wait(pending, ctx_.deadline);
  if (!message) return std::unexpected(message.error());
  if (message->size() != expected) {
    // The ranks disagree about the operation: nothing that follows can match. Fail the
    // channels so the peers stop now instead of waiting for messages that will never come.
    Error error{ErrorCode::kInvalidArgument,
                fmt::format("rank {}: {} sent {} bytes where {} were expected (do the ranks "
                            "call the same operation with the same count, type and chunk "
                            "size?)",
                            ctx_.peers.rank(), ctx_.peers.peer_name(peer_), message->size(),
                            expected)};
    ctx_.peers.fail(peer_, error);
    return std::unexpected(std::move(error));
  }
  return Received(ctx_.peers, peer_, std::move(*message));
}

size_t send_chunked(SendQueue& sends, int peer, const std::byte* data, size_t count,
                    size_t elem_bytes, size_t chunk) {
  size_t last = kNoWait;
  for (size_t offset = 0; offset < count; offset += chunk) {
    const size_t n = std::min(chunk, count - offset);
    const size_t index = sends.post(peer, {data + offset * elem_bytes, n * elem_bytes});
    if (index != kNoWait) last = index;
  }
  return last;
}

Result<size_t> position_in(const OpContext& ctx, std::span<const int> group) {
  const int rank = ctx.peers.rank();
  for (size_t i = 0; i < group.size(); ++i) {
    if (group[i] == rank) return i;
  }
  return make_error(ErrorCode::kInvalidArgument,
                    fmt::format("rank {}: not a member of the group [{}]", rank,
                                fmt::join(group, " ")));
}

void copy_to_recv(const void* send, void* recv, size_t count, DataType type) {
  if (send != recv && count > 0) std::memmove(recv, send, count * data_type_size(type));
}

const std::byte* ring_source(const void* send, void* recv, size_t count, DataType type) {
  const size_t bytes = count * data_type_size(type);
  const auto* s = as_bytes(send);
  const auto* r = as_bytes(recv);
  if (send == recv || bytes == 0 || (s < r + bytes && r < s + bytes)) {
    copy_to_recv(send, recv, count, type);
    return nullptr;
  }
  return s;
}

}  // namespace detwan::collectives::algo::detail

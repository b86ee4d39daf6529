// A group of sends and receives: every operation is posted before any is waited for, so a
// group whose sends and receives match never deadlocks whatever the order within it. Sends are
// zero copy (the caller's buffers are not touched until the call returns). Messages between
// two ranks match in posting order, as NCCL's. A send to oneself is matched, in order, by a
// receive from oneself in the same group (a local copy).
#include <cstring>
#include <deque>
#include <vector>

#include <fmt/format.h>

#include "collectives/algo/algorithms.h"

namespace detwan::collectives::algo {

Result<void> point_to_point(OpContext& ctx, std::span<const P2pOp> ops) {
  const int n = ctx.peers.size();
  const int rank = ctx.peers.rank();
  std::deque<const P2pOp*> self_sends;
  size_t self_recvs = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2pOp& op = ops[i];
    if (op.peer < 0 || op.peer >= n) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("rank {}: {} #{} names peer {} (communicator of {} ranks)",
                                    rank, op.is_send ? "send" : "recv", i, op.peer, n));
    }
    if (op.bytes > 0 && (op.is_send ? op.send == nullptr : op.recv == nullptr)) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("rank {}: {} #{} to/from peer {}: null buffer for {} bytes",
                                    rank, op.is_send ? "send" : "recv", i, op.peer, op.bytes));
    }
    if (op.peer == rank) {
      if (op.is_send) {
        self_sends.push_back(&op);
      } else {
        ++self_recvs;
      }
    }
  }
  if (self_sends.size() != self_recvs) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("rank {}: {} sends to itself but {} receives from itself", rank,
                                  self_sends.size(), self_recvs));
  }

  std::vector<PendingSend> sends;
  std::vector<PendingRecv> recvs;
  for (const P2pOp& op : ops) {
    if (op.peer == rank) continue;
    if (op.is_send) {
      sends.push_back(ctx.peers.send(op.peer, {static_cast<const std::byte*>(op.send), op.bytes}));
    } else {
      recvs.push_back(ctx.peers.recv(op.peer));
    }
  }

  // Every pending send is waited for even after a failure: the sends read the caller's
  // buffers, which must not be in use once we return.
  Result<void> status;
  // After a failure the group cannot complete (the ranks disagree or a peer is gone): closing
  // the channels, as a failed collective does, makes every pending operation finish now
  // instead of at the deadline.
  auto fail = [&](Error error) {
    if (!status) return;
    ctx.peers.fail(-1, error);  // keeps a cause already recorded (e.g. the failed peer's)
    status = std::unexpected(std::move(error));
  };
  size_t next_recv = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2pOp& op = ops[i];
    if (op.is_send) continue;
    if (op.peer == rank) {
      const P2pOp* from = self_sends.front();
      self_sends.pop_front();
      if (from->bytes != op.bytes) {
        fail(Error{ErrorCode::kInvalidArgument,
                   fmt::format("rank {}: recv #{} from itself expects {} bytes but the matching "
                               "send has {}",
                               rank, i, op.bytes, from->bytes)});
      } else if (op.bytes > 0) {
        std::memmove(op.recv, from->send, op.bytes);
      }
      continue;
    }
    auto message = ctx.peers.wait(recvs[next_recv++], ctx.deadline);
    if (!message) {
      fail(message.error());
    } else if (message->size() != op.bytes) {
      fail(Error{ErrorCode::kInvalidArgument,
                 fmt::format("rank {}: recv #{} from {} expects {} bytes but {} arrived", rank, i,
                             ctx.peers.peer_name(op.peer), op.bytes, message->size())});
    } else if (op.bytes > 0) {
      std::memcpy(op.recv, message->data(), op.bytes);
    }
  }
  for (auto& send : sends) {
    if (auto ok = ctx.peers.wait(send, ctx.deadline); !ok) fail(ok.error());
  }
  return status;
}

}  // namespace detwan::collectives::algo

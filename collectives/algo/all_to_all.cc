// All-to-all by pairwise exchange: at step k (1..n-1) rank r sends its block for (r+k) % n and
// receives the block of (r-k+n) % n. Each ordered pair of ranks meets at exactly one step, so
// the per-peer message order is trivially the same on both sides. kStepsInFlight steps are
// posted at once so several links are busy together without posting all n-1 at once.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <vector>

#include <fmt/format.h>

#include "collectives/algo/algorithms.h"
#include "collectives/algo/detail.h"

namespace detwan::collectives::algo {
namespace {

constexpr int kStepsInFlight = 4;

struct Step {
  int from;
  detail::RecvQueue queue;
  size_t posted = 0;  // chunks whose receive is posted
};

}  // namespace

Result<void> all_to_all(OpContext& ctx, const void* send, void* recv, size_t count, DataType type) {
  const int n = ctx.peers.size();
  const int rank = ctx.peers.rank();
  if (count == 0) return {};
  if (send == nullptr || recv == nullptr) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("all_to_all: rank {}: null {} buffer for {} elements", rank,
                                  send == nullptr ? "send" : "recv", count));
  }
  const size_t elem = data_type_size(type);
  const auto nranks = static_cast<size_t>(n);
  if (count > SIZE_MAX / elem / nranks) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("all_to_all: {} elements x {} ranks overflows", count, n));
  }
  const size_t bytes = count * elem;
  const size_t total = nranks * bytes;
  auto* dst = detail::as_bytes(recv);
  const auto* src = detail::as_bytes(send);
  // Overlapping buffers (in place): blocks would be overwritten while still to be sent, so
  // send from a copy. Declared before `sends`, which may read it until destroyed.
  std::vector<std::byte> copy;
  const auto src_at = reinterpret_cast<uintptr_t>(src);
  const auto dst_at = reinterpret_cast<uintptr_t>(dst);
  if (src_at < dst_at + total && dst_at < src_at + total) {
    copy.assign(src, src + total);
    src = copy.data();
  }
  const auto own = static_cast<size_t>(rank) * bytes;
  std::memcpy(dst + own, src + own, bytes);
  if (n == 1) return {};

  const size_t chunk = detail::chunk_elems(ctx, type);
  const size_t chunks = detail::num_chunks(count, chunk);
  auto chunk_size = [&](size_t c) { return std::min(chunk, count - c * chunk) * elem; };
  detail::SendQueue sends(ctx);
  std::deque<Step> active;
  auto top_up = [&](Step& step, size_t done) {
    for (; step.posted < chunks && step.posted < done + detail::kRecvWindow; ++step.posted) {
      step.queue.expect(chunk_size(step.posted));
    }
  };
  int next_step = 1;
  auto start_step = [&] {
    const int to = (rank + next_step) % n;
    const int from = (rank - next_step + n) % n;
    ++next_step;
    (void)detail::send_chunked(sends, to, src + static_cast<size_t>(to) * bytes, count, elem,
                               chunk);
    active.push_back(Step{from, detail::RecvQueue(ctx, from)});
    top_up(active.back(), 0);
  };
  while (next_step < n && next_step <= kStepsInFlight) start_step();
  while (!active.empty()) {
    Step& step = active.front();
    std::byte* block = dst + static_cast<size_t>(step.from) * bytes;
    for (size_t c = 0; c < chunks; ++c) {
      top_up(step, c);
      auto message = step.queue.next();
      if (!message) return std::unexpected(message.error());
      std::memcpy(block + c * chunk * elem, message->data(), message->size());
    }
    active.pop_front();
    if (next_step < n) start_step();
  }
  return sends.wait_all();
}

}  // namespace detwan::collectives::algo

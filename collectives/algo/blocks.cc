// block_of, the pipelined ring engine (detail::run_ring) and the group reduce-scatter /
// allgather built on it.
#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/algo/algorithms.h"
#include "collectives/algo/detail.h"
#include "collectives/reduce/reduce.h"

namespace detwan::collectives::algo {

Block block_of(size_t count, size_t blocks, size_t index) {
  if (blocks == 0 || index >= blocks) return {};
  const size_t base = count / blocks;
  const size_t extra = count % blocks;
  return Block{index * base + std::min(index, extra), base + (index < extra ? 1 : 0)};
}

std::vector<Block> ramped_pieces(size_t count, size_t min_piece, size_t body_pieces) {
  min_piece = std::max<size_t>(min_piece, 1);
  body_pieces = std::max<size_t>(body_pieces, 1);
  const size_t body = std::max(min_piece, count / body_pieces);
  std::vector<size_t> ramp;
  size_t ramp_total = 0;
  for (size_t size = min_piece; size < body; size *= 2) {
    ramp.push_back(size);
    ramp_total += size;
  }
  std::vector<Block> pieces;
  if (ramp.empty() || count < 2 * ramp_total + body) {
    const size_t n = std::clamp<size_t>(count / min_piece, 1, body_pieces);
    for (size_t i = 0; i < n; ++i) pieces.push_back(block_of(count, n, i));
    return pieces;
  }
  size_t offset = 0;
  auto add = [&](size_t n) {
    pieces.push_back(Block{offset, n});
    offset += n;
  };
  for (size_t size : ramp) add(size);
  const size_t middle = count - 2 * ramp_total;
  const size_t middle_pieces = std::max<size_t>(1, middle / body);
  for (size_t i = 0; i < middle_pieces; ++i) add(block_of(middle, middle_pieces, i).count);
  for (auto it = ramp.rbegin(); it != ramp.rend(); ++it) add(*it);
  return pieces;
}

namespace detail {

Result<void> run_ring(OpContext& ctx, std::span<const int> group, std::byte* buf, size_t count,
                      DataType type, ReduceOp op, int first_step, int end_step,
                      SendQueue& sends, const std::byte* src) {
  auto position = position_in(ctx, group);
  if (!position) return std::unexpected(position.error());
  const auto g = static_cast<int64_t>(group.size());
  if (src != nullptr && (first_step != 0 || end_step != 2 * (g - 1))) {
    return make_error(ErrorCode::kInternal, "run_ring: a source buffer needs the full ring");
  }
  if (g <= 1 || count == 0 || first_step >= end_step) {
    if (src != nullptr) copy_to_recv(src, buf, count, type);
    return {};
  }
  const auto p = static_cast<int64_t>(*position);
  const int next = group[(p + 1) % g];
  const int prev = group[(p + g - 1) % g];
  const size_t elem = data_type_size(type);
  const size_t chunk = chunk_elems(ctx, type);
  const int64_t rs_steps = g - 1;

  auto block_index = [&](int64_t shift) { return static_cast<size_t>(((p - shift) % g + g) % g); };
  auto send_block = [&](int64_t s) { return block_of(count, g, block_index(s + 1)); };
  auto recv_block = [&](int64_t s) { return block_of(count, g, block_index(s + 2)); };
  auto chunk_span = [&](Block b, size_t c) {
    const size_t n = std::min(chunk, b.count - c * chunk);
    return std::span<std::byte>(buf + (b.offset + c * chunk) * elem, n * elem);
  };
  // This rank's input for a region of buf not yet written by this run.
  auto input_of = [&](std::span<std::byte> region) -> const std::byte* {
    return src == nullptr ? region.data() : src + (region.data() - buf);
  };

  // Send indices of this run's reduce-scatter chunks: the allgather overwrites exactly the
  // regions the reduce-scatter sent (step t's block is received again at step t + g - 1).
  std::vector<std::vector<size_t>> rs_sent(static_cast<size_t>(std::max<int64_t>(0, g)));
  auto post_step = [&](int64_t s, size_t c) {
    const std::span<std::byte> region = chunk_span(send_block(s), c);
    // Step 0 sends the input itself; later steps what this run wrote into buf.
    const size_t index =
        sends.post(next, {s == 0 ? input_of(region) : region.data(), region.size()});
    if (s < rs_steps) {
      auto& list = rs_sent[static_cast<size_t>(s)];
      if (list.size() <= c) list.resize(c + 1, kNoWait);
      list[c] = index;
    }
  };

  // Step first_step's sends need nothing received: post them all now.
  const Block first = send_block(first_step);
  for (size_t c = 0; c < num_chunks(first.count, chunk); ++c) post_step(first_step, c);

  struct Cursor {
    int64_t step;
    size_t chunk;
  };
  // Moves `cur` to the next (step, chunk) with something to receive; false past end_step.
  auto settle = [&](Cursor& cur) {
    while (cur.step < end_step && cur.chunk >= num_chunks(recv_block(cur.step).count, chunk)) {
      ++cur.step;
      cur.chunk = 0;
    }
    return cur.step < end_step;
  };

  RecvQueue from_prev(ctx, prev);
  Cursor post{first_step, 0};
  for (Cursor cur{first_step, 0}; settle(cur); ++cur.chunk) {
    while (from_prev.posted() < kRecvWindow && settle(post)) {
      from_prev.expect(chunk_span(recv_block(post.step), post.chunk).size());
      ++post.chunk;
    }
    auto message = from_prev.next();
    if (!message) return std::unexpected(message.error());
    const std::span<std::byte> region = chunk_span(recv_block(cur.step), cur.chunk);
    if (cur.step < rs_steps) {
      // mine OP theirs, as reduce_inplace on an in-place buffer.
      reduce::reduce_to(region.data(), input_of(region), message->data(), region.size() / elem,
                        type, op);
    } else {
      const int64_t t = cur.step - rs_steps;  // the reduce-scatter step that sent this region
      if (t >= first_step && cur.chunk < rs_sent[static_cast<size_t>(t)].size()) {
        if (auto ok = sends.wait_for(rs_sent[static_cast<size_t>(t)][cur.chunk]); !ok) {
          return ok;
        }
      }
      std::memcpy(region.data(), message->data(), region.size());
    }
    if (cur.step + 1 < end_step) post_step(cur.step + 1, cur.chunk);
  }
  return {};
}

}  // namespace detail

Result<void> ring_reduce_scatter_inplace(OpContext& ctx, std::span<const int> group, void* buf,
                                         size_t count, DataType type, ReduceOp op) {
  detail::SendQueue sends(ctx);
  const int g = static_cast<int>(group.size());
  auto ok = detail::run_ring(ctx, group, detail::as_bytes(buf), count, type, op, 0, g - 1,
                             sends);
  if (!ok) return ok;
  return sends.wait_all();
}

Result<void> ring_all_gather_inplace(OpContext& ctx, std::span<const int> group, void* buf,
                                     size_t count, DataType type) {
  detail::SendQueue sends(ctx);
  const int g = static_cast<int>(group.size());
  // The op is unused by allgather steps.
  auto ok = detail::run_ring(ctx, group, detail::as_bytes(buf), count, type, ReduceOp::kSum,
                             g - 1, 2 * (g - 1), sends);
  if (!ok) return ok;
  return sends.wait_all();
}

}  // namespace detwan::collectives::algo

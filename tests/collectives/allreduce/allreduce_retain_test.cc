// Completion on arrival: a message to another site up to kRetainMaxMessageBytes is sent as a
// retained copy (detail.h), so the allreduce returns once the data it needs has arrived while
// the acknowledgement of its own sends is still on the way back — and the caller may overwrite
// its input at once without the peers seeing it. Inside a site, above the size limit and beyond
// the budget, the sends stay zero-copy and are waited for. The loopback links delay every
// datagram by 100 ms, so an acknowledgement comes back 100 ms after the data it acknowledges
// arrived.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/algo/algorithms.h"
#include "collectives/algo/detail.h"
#include "tests/collectives/mesh_util.h"

namespace detwan::collectives::testing {
namespace {

struct Outcome {
  std::vector<std::vector<float>> results;
  std::vector<int64_t> retained_at_return;
};

// Every rank allreduces `count` floats (rank r holds r + 1 + i % 7 at i) with the hierarchical
// algorithm, records Peers::retained_bytes() the moment the call returns, then overwrites its
// input with garbage.
Outcome run(Mesh& mesh, size_t count, int64_t chunk_bytes) {
  const int n = static_cast<int>(mesh.peers.size());
  Outcome out;
  out.results.assign(n, std::vector<float>(count));
  out.retained_at_return.assign(n, -1);
  std::vector<std::vector<float>> inputs(n, std::vector<float>(count));
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) inputs[r][i] = static_cast<float>(r + 1 + i % 7);
  }
  const auto results = run_ranks(n, [&](int r) -> Result<void> {
    algo::OpContext ctx{*mesh.peers[r], mesh.topology, guard_deadline(), chunk_bytes};
    auto ok = algo::all_reduce(ctx, Algorithm::kHierarchical, inputs[r].data(),
                               out.results[r].data(), count, DataType::kFloat32, ReduceOp::kSum);
    out.retained_at_return[r] = mesh.peers[r]->retained_bytes();
    std::memset(inputs[r].data(), 0xff, count * sizeof(float));  // NaN everywhere
    if (!ok) return ok;
    return mesh.peers[r]->flush(guard_deadline());
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(results[r].has_value()) << results[r].error().message;
  return out;
}

void expect_sums(const Outcome& out, size_t count) {
  const int n = static_cast<int>(out.results.size());
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) {
      const float want = static_cast<float>(n * (n + 1) / 2 + n * static_cast<int>(i % 7));
      ASSERT_EQ(out.results[r][i], want) << "rank " << r << " element " << i;
    }
  }
}

TEST(AllReduceRetain, CrossSiteSendsAreRetainedSoTheCallReturnsOnArrival) {
  auto mesh = make_mesh({"a", "b"}, "delay=100ms");
  ASSERT_NE(mesh, nullptr);
  const size_t count = 256 * 1024;  // 1 MiB: one 1 MiB message each way, above the copy size
  const Outcome out = run(*mesh, count, int64_t{1} << 20);
  expect_sums(out, count);  // the garbage written right after the return never left
  // The call returned with part of its own sends still unacknowledged (held as copies). Which
  // rank shows it depends on when the threads started: the rank whose peer's data arrives
  // first may see its own acknowledged too if the peer started a delay later, but the later
  // rank returns when the earlier one's data has arrived, before its own sends' round trip.
  EXPECT_GT(std::max(out.retained_at_return[0], out.retained_at_return[1]), 0)
      << out.retained_at_return[0] << " and " << out.retained_at_return[1];
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(mesh->peers[r]->retained_bytes(), 0) << "rank " << r << " after flush";
  }
}

TEST(AllReduceRetain, SendsInsideASiteStayZeroCopy) {
  auto mesh = make_mesh({"a", "a"}, "delay=100ms");
  ASSERT_NE(mesh, nullptr);
  const size_t count = 256 * 1024;
  const Outcome out = run(*mesh, count, int64_t{1} << 20);
  expect_sums(out, count);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(out.retained_at_return[r], 0) << "rank " << r;
}

// The rule itself, message by message: SendQueue::post copies (kNoWait) a cross-site message
// up to the size limit while the budget allows (4 MiB here), and sends the rest zero-copy (an
// index to wait for). The links delay by 200 ms, so nothing posted is acknowledged within the
// first 400 ms.
TEST(AllReduceRetain, TheSizeLimitAndTheBudgetBoundWhatIsRetained) {
  using algo::detail::kNoWait;
  using algo::detail::kRetainMaxMessageBytes;
  auto mesh = make_mesh({"a", "a", "b"}, "delay=200ms");
  ASSERT_NE(mesh, nullptr);
  constexpr int64_t kBudget = int64_t{4} << 20;
  mesh->peers[0]->set_retain_budget_bytes(kBudget);
  const std::vector<std::byte> big(kRetainMaxMessageBytes + 1, std::byte{1});
  const std::vector<std::byte> mib(size_t{1} << 20, std::byte{2});
  const std::vector<std::byte> small(1000, std::byte{3});
  std::vector<bool> copied;
  auto results = run_ranks(3, [&](int r) -> Result<void> {
    algo::OpContext ctx{*mesh->peers[r], mesh->topology, guard_deadline(), 0};
    if (r == 0) {
      algo::detail::SendQueue sends(ctx);
      EXPECT_NE(sends.post(1, mib), kNoWait) << "inside the site: zero-copy";
      EXPECT_NE(sends.post(2, big), kNoWait) << "above the size limit: zero-copy";
      for (int i = 0; i < 6; ++i) {  // 4 fit the budget, then zero-copy
        copied.push_back(sends.post(2, mib) == kNoWait);
        EXPECT_LE(ctx.peers.retained_bytes(), kBudget);
      }
      EXPECT_EQ(sends.post(2, small), kNoWait) << "small messages are always copies";
      return sends.wait_all();
    }
    for (int i = 0; i < (r == 1 ? 1 : 8); ++i) {
      auto pending = ctx.peers.recv(0);
      auto message = ctx.peers.wait(pending, guard_deadline());
      if (!message) return std::unexpected(message.error());
    }
    return {};
  });
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(results[r].has_value()) << results[r].error().message;
  EXPECT_EQ(copied, (std::vector<bool>{true, true, true, true, false, false}));
  EXPECT_TRUE(mesh->peers[0]->flush(guard_deadline()).has_value());
  EXPECT_EQ(mesh->peers[0]->retained_bytes(), 0);
}

}  // namespace
}  // namespace detwan::collectives::testing

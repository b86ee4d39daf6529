// Communicator::split: a collective over the parent. The (color, key) pairs and then the child
// ranks' bootstrap blobs are all-gathered over the parent's channels on the parent's executor,
// so the split is ordered with the parent's other operations.
#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "collectives/algo/algorithms.h"
#include "collectives/comm/comm_impl.h"
#include "common/clock.h"

namespace detwan::collectives {
namespace {

Deadline deadline_in(int64_t timeout_ns) {
  return Deadline{common::MonotonicClock().now_ns() + timeout_ns};
}

// Runs `body` on the parent's executor (after its pending operations) and waits for it.
Result<void> on_parent(Communicator::Impl& parent, const std::function<Result<void>()>& body) {
  Request request = parent.post([&parent, body]() -> Result<void> {
    if (auto error = parent.current_error()) return std::unexpected(*error);
    auto done = body();
    if (!done) return std::unexpected(parent.fail(done.error()));
    return {};
  });
  return *request.wait(-1);
}

// Every parent rank's blob (index = parent rank); ranks outside the child contribute "".
Result<std::vector<std::string>> parent_exchange(Communicator::Impl& parent,
                                                 const std::string& mine, int64_t timeout_ns) {
  std::vector<std::string> blobs;
  auto done = on_parent(parent, [&]() -> Result<void> {
    auto all = all_gather_blobs(*parent.peers, parent.topology, mine, deadline_in(timeout_ns));
    if (!all) return std::unexpected(all.error());
    blobs = std::move(*all);
    return {};
  });
  if (!done) return std::unexpected(done.error());
  return blobs;
}

}  // namespace

std::string ParentBootstrap::local_host() const { return parent_.listen_host; }

Result<std::vector<std::string>> ParentBootstrap::exchange(const std::string& mine,
                                                           int64_t timeout_ns) {
  auto all = parent_exchange(parent_, mine, timeout_ns);
  if (!all) return std::unexpected(all.error());
  std::vector<std::string> blobs;
  blobs.reserve(members_.size());
  for (int member : members_) blobs.push_back((*all)[member]);
  return blobs;
}

Result<std::unique_ptr<Communicator>> Communicator::split(int color, int key,
                                                          const std::optional<CommConfig>& config) {
  Impl& parent = *impl_;
  const CommConfig child_config = config ? *config : parent.config;
  const int n = parent.size;
  const int64_t timeout_ns = child_config.setup_timeout_ns;
  const uint64_t split_index = parent.splits++;  // the same on every rank: split is collective

  std::vector<int64_t> pairs(static_cast<size_t>(2) * n, 0);
  const std::array<int64_t, 2> mine{color < 0 ? -1 : color, key};
  auto gathered = on_parent(parent, [&]() -> Result<void> {
    if (n == 1) {
      std::copy(mine.begin(), mine.end(), pairs.begin());
      return {};
    }
    algo::OpContext ctx{*parent.peers, parent.topology, deadline_in(timeout_ns), 0};
    return algo::all_gather(ctx, Algorithm::kRing, mine.data(), pairs.data(), 2,
                            DataType::kInt64);
  });
  if (!gathered) return std::unexpected(gathered.error());

  if (color < 0) {
    auto done = parent_exchange(parent, "", timeout_ns);
    if (!done) return std::unexpected(done.error());
    return std::unique_ptr<Communicator>();
  }
  std::vector<int> members;
  for (int r = 0; r < n; ++r) {
    if (pairs[2 * r] == color) members.push_back(r);
  }
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
    return std::make_pair(pairs[2 * a + 1], a) < std::make_pair(pairs[2 * b + 1], b);
  });
  const auto me = std::find(members.begin(), members.end(), parent.rank);
  if (me == members.end()) {
    return make_error(ErrorCode::kInternal,
                      fmt::format("split: rank {} missing from its own color {}", parent.rank,
                                  color));
  }
  auto child_key = split_key(parent.key, split_index, color, members);
  if (!child_key) return std::unexpected(child_key.error());
  ParentBootstrap bootstrap(parent, members, *child_key);
  auto child = build_communicator(bootstrap, static_cast<int>(me - members.begin()),
                                  static_cast<int>(members.size()), child_config);
  if (!child) return std::unexpected(child.error());
  if (auto lanes = add_lanes(**child); !lanes) return std::unexpected(lanes.error());
  return std::unique_ptr<Communicator>(new Communicator(std::move(*child)));
}

}  // namespace detwan::collectives

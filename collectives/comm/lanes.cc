// Operations in flight together (CommConfig::inflight_ops; docs/collectives.md "Operations in
// flight together"). A communicator of K lanes is K communicators of the same ranks: lane 0 is
// the communicator itself, lanes 1..K-1 are built right after it over its channels (as split()
// builds a child), each with its own channels and executor thread. Their channels toward a site
// join the communicator's pacing groups, so the lanes together keep the rank's share.
//
// Which lane: a submission with a collective goes to lane (number of such submissions so far)
// mod K -- the same lane on every rank, since every rank issues its collectives in the same order
// (the ordering contract); a submission of only sends and receives involves some ranks only, so
// it goes to lane 0, where its peer's matching one goes too. Before it runs, an operation waits
// for each earlier one on another lane that writes a buffer it reads or writes, or reads one it
// writes (a barrier: for all of them), so every buffer sees what running them one at a time
// would leave there. The algorithms do not change: deterministic mode stays bit-identical.
// Waits point to earlier operations only, so the lanes cannot wait for each other in a circle.
#include <algorithm>
#include <numeric>
#include <utility>

#include <fmt/format.h>

#include "collectives/comm/comm_impl.h"

namespace detwan::collectives {
namespace {

using Range = std::pair<uintptr_t, uintptr_t>;

void add_range(std::vector<Range>& to, const void* base, size_t bytes) {
  if (base == nullptr || bytes == 0) return;
  const auto begin = reinterpret_cast<uintptr_t>(base);
  to.emplace_back(begin, begin + bytes);
}

// The bytes each operation reads (send) and writes (recv), as the collective defines them.
void footprint(const std::vector<OpDesc>& ops, int nranks, Communicator::Impl::InFlight& out) {
  for (const OpDesc& op : ops) {
    const size_t bytes = op.count * data_type_size(op.type);
    const size_t n = static_cast<size_t>(nranks);
    size_t send_bytes = bytes;
    size_t recv_bytes = bytes;
    switch (op.collective) {
      case Collective::kAllGather:
        recv_bytes = bytes * n;
        break;
      case Collective::kReduceScatter:
        send_bytes = bytes * n;
        break;
      case Collective::kAllToAll:
        send_bytes = recv_bytes = bytes * n;
        break;
      case Collective::kSendRecv:
        if (op.is_send) recv_bytes = 0;
        else send_bytes = 0;
        break;
      default:
        break;
    }
    add_range(out.reads, op.send, send_bytes);
    add_range(out.writes, op.recv, recv_bytes);
  }
}

bool overlap(const std::vector<Range>& a, const std::vector<Range>& b) {
  for (const Range& x : a) {
    for (const Range& y : b) {
      if (x.first < y.second && y.first < x.second) return true;
    }
  }
  return false;
}

bool conflicts(const Communicator::Impl::InFlight& earlier,
               const Communicator::Impl::InFlight& later) {
  return overlap(earlier.writes, later.reads) || overlap(earlier.writes, later.writes) ||
         overlap(earlier.reads, later.writes);
}

bool finished(const Communicator::Impl::InFlight& f) {
  std::lock_guard lock(f.state->mutex);
  return f.state->result.has_value();
}

}  // namespace

Result<void> add_lanes(Communicator::Impl& impl) {
  const int lanes = impl.config.inflight_ops;
  if (lanes <= 1 || impl.size == 1) return {};
  std::vector<int> members(static_cast<size_t>(impl.size));
  std::iota(members.begin(), members.end(), 0);
  CommConfig config = impl.config;
  config.inflight_ops = 1;
  // The retained copies of all lanes together stay within one communicator's budget.
  const int64_t budget = impl.peers->retain_budget_bytes() / lanes;
  impl.peers->set_retain_budget_bytes(budget);
  for (int lane = 1; lane < lanes; ++lane) {
    auto key = lane_key(impl.key, lane);
    if (!key) return std::unexpected(key.error());
    ParentBootstrap bootstrap(impl, members, *key);
    auto built = build_communicator(bootstrap, impl.rank, impl.size, config, {}, &impl.wan_pacing);
    if (!built) {
      return make_error(built.error().code, fmt::format("rank {}: lane {} of {}: {}", impl.rank,
                                                        lane, lanes, built.error().message));
    }
    (*built)->peers->set_retain_budget_bytes(budget);
    impl.lanes.push_back(std::move(*built));
  }
  return {};
}

Request Communicator::Impl::submit(std::vector<OpDesc> ops, int64_t op_timeout_ns) {
  if (lanes.empty()) {
    return post([this, ops = std::move(ops), op_timeout_ns] { return run_ops(ops, op_timeout_ns); });
  }
  std::lock_guard lock(submit_mutex);
  std::erase_if(in_flight, finished);
  const bool collective = std::any_of(ops.begin(), ops.end(), [](const OpDesc& op) {
    return op.collective != Collective::kSendRecv;
  });
  const bool barrier = std::any_of(ops.begin(), ops.end(), [](const OpDesc& op) {
    return op.collective == Collective::kBarrier;
  });
  InFlight mine;
  mine.lane = collective ? static_cast<size_t>(collectives_issued++ % (lanes.size() + 1)) : 0;
  footprint(ops, size, mine);
  std::vector<std::shared_ptr<Request::State>> waits;
  for (const InFlight& earlier : in_flight) {
    if (earlier.lane != mine.lane && (barrier || conflicts(earlier, mine))) {
      waits.push_back(earlier.state);
    }
  }
  Impl* lane = mine.lane == 0 ? this : lanes[mine.lane - 1].get();
  mine.state = std::make_shared<Request::State>();
  lane->executor->post(
      [this, lane, ops = std::move(ops), op_timeout_ns, waits = std::move(waits)]() -> Result<void> {
        for (const auto& earlier : waits) (void)earlier->wait(-1);
        if (auto error = current_error()) return std::unexpected(*error);
        auto done = lane->run_ops(ops, op_timeout_ns);
        if (!done) return std::unexpected(fail(done.error()));
        return {};
      },
      mine.state);
  Request request(mine.state);
  in_flight.push_back(std::move(mine));
  return request;
}

}  // namespace detwan::collectives

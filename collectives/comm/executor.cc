// The executor thread and what it runs: one operation or group at a time, dispatched to the
// algorithms with the plan the cost model picks.
#include "collectives/comm/executor.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "collectives/algo/algorithms.h"
#include "collectives/comm/comm_impl.h"
#include "common/clock.h"
#include "common/logging.h"

namespace detwan::collectives {

Executor::Executor() : thread_([this] { loop(); }) {}

Executor::~Executor() {
  queue_.close();  // the loop runs what is queued, then ends
  thread_.join();
}

void Executor::post(Task task, std::shared_ptr<Request::State> state) {
  Item item{std::move(task), std::move(state)};
  if (!queue_.post(item)) {  // only while the executor is being destroyed
    item.second->complete(
        make_error(ErrorCode::kUnavailable, "communicator: destroyed while posting"));
  }
}

void Executor::loop() {
  queue_.set_owner(std::this_thread::get_id());
  std::vector<Item> batch;
  // False once closed and empty: every posted task has run.
  while (queue_.wait_drain_st(batch)) {
    for (Item& item : batch) item.second->complete(item.first());
    batch.clear();
  }
}

namespace {

// nccl-tests' per-rank byte count of a collective: what the cost model is fed.
int64_t model_bytes(const OpDesc& op, int nranks) {
  const auto bytes = static_cast<int64_t>(op.count * data_type_size(op.type));
  switch (op.collective) {
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return bytes * nranks;
    default:
      return bytes;
  }
}

// One rank: every collective is a copy from send to recv (avg over one rank is the value).
void run_single_rank(const OpDesc& op) {
  if (op.recv == nullptr || op.send == nullptr || op.recv == op.send || op.count == 0) return;
  std::memmove(op.recv, op.send, op.count * data_type_size(op.type));
}

}  // namespace

Result<void> Communicator::Impl::run_ops(std::span<const OpDesc> ops, int64_t op_timeout_ns) {
  if (auto error_now = current_error()) return std::unexpected(*error_now);
  const Deadline deadline{common::MonotonicClock().now_ns() + op_timeout_ns};
  std::vector<algo::P2pOp> p2p;
  std::vector<const OpDesc*> self_sends;
  std::vector<const OpDesc*> self_recvs;
  for (const OpDesc& op : ops) {
    const size_t bytes = op.count * data_type_size(op.type);
    if (op.collective == Collective::kSendRecv) {
      if (op.root == rank) {
        (op.is_send ? self_sends : self_recvs).push_back(&op);
      } else {
        p2p.push_back(algo::P2pOp{op.is_send, op.root, op.send, op.recv, bytes});
      }
      continue;
    }
    if (size == 1) {
      run_single_rank(op);
      continue;
    }
    if (op.count == 0 && op.collective != Collective::kBarrier) continue;
    algo::OpContext ctx{*peers, topology, deadline, 0};
    Result<void> done;
    auto planned = [&](Collective collective) {
      const Plan plan = plan_for(collective, model_bytes(op, size), true);
      ctx.chunk_bytes = plan.chunk_bytes;
      return plan.algorithm;
    };
    switch (op.collective) {
      case Collective::kAllReduce:
        done = algo::all_reduce(ctx, planned(op.collective), op.send, op.recv, op.count, op.type,
                                op.op);
        break;
      case Collective::kBroadcast:
        done = algo::broadcast(ctx, planned(op.collective), op.send, op.recv, op.count, op.type,
                               op.root);
        break;
      case Collective::kReduce:
        done = algo::reduce(ctx, planned(op.collective), op.send, op.recv, op.count, op.type, op.op,
                            op.root);
        break;
      case Collective::kAllGather:
        done = algo::all_gather(ctx, planned(op.collective), op.send, op.recv, op.count, op.type);
        break;
      case Collective::kReduceScatter:
        done = algo::reduce_scatter(ctx, planned(op.collective), op.send, op.recv, op.count,
                                    op.type, op.op);
        break;
      case Collective::kAllToAll:
        done = algo::all_to_all(ctx, op.send, op.recv, op.count, op.type);
        break;
      case Collective::kBarrier:
        done = algo::barrier(ctx);
        break;
      case Collective::kSendRecv:
        break;
    }
    if (!done) return std::unexpected(fail(done.error()));
  }
  // Sends to self pair with receives from self in issue order, inside the group.
  if (self_sends.size() != self_recvs.size()) {
    return std::unexpected(fail(
        Error{ErrorCode::kInvalidArgument,
              fmt::format("rank {}: {} send(s) to self but {} receive(s) from self in one group "
                          "(a rank can only send to itself inside a group with a matching recv)",
                          rank, self_sends.size(), self_recvs.size())}));
  }
  for (size_t i = 0; i < self_sends.size(); ++i) {
    const size_t send_bytes = self_sends[i]->count * data_type_size(self_sends[i]->type);
    const size_t recv_bytes = self_recvs[i]->count * data_type_size(self_recvs[i]->type);
    if (send_bytes != recv_bytes) {
      return std::unexpected(
          fail(Error{ErrorCode::kInvalidArgument,
                     fmt::format("rank {}: send to self of {} bytes matched a recv of {} bytes",
                                 rank, send_bytes, recv_bytes)}));
    }
    if (send_bytes > 0) std::memmove(self_recvs[i]->recv, self_sends[i]->send, send_bytes);
  }
  if (!p2p.empty()) {
    algo::OpContext ctx{*peers, topology, deadline, 0};
    if (auto done = algo::point_to_point(ctx, p2p); !done) {
      return std::unexpected(fail(done.error()));
    }
  }
  return {};
}

Error Communicator::Impl::fail(const Error& cause) {
  bool first = false;
  Error out;
  {
    std::lock_guard lock(error_mutex);
    first = !error;
    out = record_error(cause);
  }
  // The communicator is unusable from now on: close every channel at once, so the peers
  // learn it now ("peer closed the channel", naming this rank) instead of waiting for this
  // rank's next message until their own timeout. Keeps the cause already recorded.
  if (first && peers && !aborted.load()) peers->fail(-1, cause);
  if (first && !aborted.load()) {
    for (auto& lane : lanes) {
      if (lane->peers) lane->peers->fail(-1, cause);
    }
  }
  return out;
}

Error Communicator::Impl::record_error(const Error& cause) {
  if (!error) {
    AsyncError async;
    async.code = cause.code;
    async.message = cause.message;
    if (aborted.load()) {
      async.aborted = true;
      async.code = ErrorCode::kUnavailable;
      async.message = fmt::format("rank {}: communicator aborted", rank);
    } else if (peers) {
      if (auto failure = peers->failure()) {
        async.failed_rank = failure->peer;
        async.code = failure->error.code;
        async.message = failure->error.message;
      }
    }
    error = std::move(async);
  }
  return Error{error->code, error->message};
}

std::optional<Error> Communicator::Impl::current_error() const {
  std::lock_guard lock(error_mutex);
  if (!error) return std::nullopt;
  return Error{error->code, error->message};
}

Plan Communicator::Impl::plan_for(Collective collective, int64_t bytes, bool log) const {
  const PlanOverride override{config.algorithm, config.chunk_bytes};
  Plan plan = choose_plan(collective, bytes, topology, model, override);
  if (!log || rank != 0) return plan;
  {
    std::lock_guard lock(plan_mutex);
    const auto key = std::make_pair(static_cast<int>(collective), static_cast<int>(plan.algorithm));
    if (!logged_plans.insert(key).second) return plan;
  }
  // "allreduce 64 MiB: hier chunk 4 MiB (predicted 2.9 s; ring 4.3 s, hd 4.6 s)"
  std::string others;
  for (Algorithm a : {Algorithm::kRing, Algorithm::kHalvingDoubling, Algorithm::kTree,
                      Algorithm::kHierarchical}) {
    if (a == plan.algorithm) continue;
    const double ns = predict_ns(collective, a, bytes, plan.chunk_bytes, topology, model);
    if (!(ns < 1e300)) continue;  // cannot run on this topology
    others += fmt::format("{}{} {}", others.empty() ? "" : ", ", to_string(a), human_ns(ns));
  }
  common::logger("collectives")
      ->info(
          "{} {}: {} chunk {} (predicted {}{}{}){}", to_string(collective), human_bytes(bytes),
          to_string(plan.algorithm),
          plan.chunk_bytes > 0 ? human_bytes(plan.chunk_bytes) : std::string("whole"),
          human_ns(plan.predicted_ns), others.empty() ? "" : "; ", others,
          // the cost model's reason matters when an override was not honoured
          config.algorithm == Algorithm::kAuto || plan.reason.empty() ? "" : " - " + plan.reason);
  return plan;
}

Request Communicator::Impl::post(Executor::Task task) {
  auto state = std::make_shared<Request::State>();
  executor->post(std::move(task), state);
  return Request(state);
}

Result<void> Communicator::Impl::executor_flush() {
  Peers* channels = peers.get();
  const int64_t wait_ns = std::min<int64_t>(timeout_ns.load(), kFinalizeTimeoutNs);
  auto request = post([channels, wait_ns]() -> Result<void> {
    if (channels == nullptr) return {};
    return channels->flush(Deadline{common::MonotonicClock().now_ns() + wait_ns});
  });
  auto result = request.wait(-1);
  Result<void> out = result ? *result : Result<void>{};
  for (auto& lane : lanes) {
    if (auto done = lane->executor_flush(); !done && out) out = done;
  }
  return out;
}

std::string human_bytes(int64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  if (value == static_cast<double>(static_cast<int64_t>(value))) {
    return fmt::format("{} {}", static_cast<int64_t>(value), kUnits[unit]);
  }
  return fmt::format("{:.1f} {}", value, kUnits[unit]);
}

std::string human_ns(double ns) {
  if (ns >= 1e9) return fmt::format("{:.3g} s", ns / 1e9);
  if (ns >= 1e6) return fmt::format("{:.3g} ms", ns / 1e6);
  if (ns >= 1e3) return fmt::format("{:.3g} us", ns / 1e3);
  return fmt::format("{:.3g} ns", ns);
}

}  // namespace detwan::collectives

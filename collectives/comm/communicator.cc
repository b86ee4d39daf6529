// Communicator: creation, argument validation, submission to the executor, abort and errors.
// Setup lives in setup.cc, split() in split.cc, the executor in executor.cc.
#include "collectives/comm/communicator.h"

#include <algorithm>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "collectives/comm/comm_impl.h"

namespace detwan::collectives {

Result<std::unique_ptr<Communicator>> Communicator::create(const UniqueId& id, int rank,
                                                           int nranks,
                                                           const CommConfig& config) {
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("rank {} of nranks {}: need nranks >= 1 and 0 <= rank < nranks",
                                  rank, nranks));
  }
  auto bootstrap = join_bootstrap(id.to_string(), rank, nranks, config.setup_timeout_ns);
  if (!bootstrap) return std::unexpected(bootstrap.error());
  auto impl = build_communicator(**bootstrap, rank, nranks, config);
  if (!impl) return std::unexpected(impl.error());
  if (auto lanes = add_lanes(**impl); !lanes) return std::unexpected(lanes.error());
  return std::unique_ptr<Communicator>(new Communicator(std::move(*impl)));
}

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Communicator::~Communicator() { (void)finalize(); }

Result<void> Communicator::finalize() {
  if (!impl_ || impl_->finalized.exchange(true)) return {};
  if (impl_->size == 1 || impl_->aborted.load() || impl_->current_error()) return {};
  // Bounded: a peer that died without the communicator noticing must not hold destroy for the
  // full operation timeout.
  const int64_t saved_timeout_ns = impl_->timeout_ns.load();
  impl_->timeout_ns.store(std::min<int64_t>(saved_timeout_ns, kFinalizeTimeoutNs));
  auto done = barrier();
  impl_->timeout_ns.store(saved_timeout_ns);
  if (!done) return done;
  // Every rank has finished its operations, so every message this rank sent was received;
  // waiting for the acknowledgements of the last (copied) sends only makes sure they left
  // before the close. A peer that closed first (after its own barrier) makes this fail
  // harmlessly.
  (void)impl_->executor_flush();
  // The job is done with the WAN: a reservation released from now on is no error of it.
  if (impl_->watch) impl_->watch->stop();
  return {};
}

int Communicator::rank() const { return impl_->rank; }
int Communicator::size() const { return impl_->size; }
const Topology& Communicator::topology() const { return impl_->topology; }
const NetworkModel& Communicator::network_model() const { return impl_->model; }
const CommConfig& Communicator::config() const { return impl_->config; }
std::optional<transport::ChannelStats> Communicator::peer_stats(int peer) const {
  if (impl_->peers == nullptr || peer < 0 || peer >= impl_->size || peer == impl_->rank) {
    return std::nullopt;
  }
  return impl_->peers->channel_stats(peer);
}

namespace {

OpDesc make_op(Collective collective, const void* send, void* recv, size_t count, DataType type,
               ReduceOp op, int root) {
  OpDesc desc;
  desc.collective = collective;
  desc.send = send;
  desc.recv = recv;
  desc.count = count;
  desc.type = type;
  desc.op = op;
  desc.root = root;
  return desc;
}

}  // namespace

Result<void> Communicator::all_reduce(const void* send, void* recv, size_t count, DataType type,
                                      ReduceOp op) {
  return run(make_op(Collective::kAllReduce, send, recv, count, type, op, 0));
}

Result<void> Communicator::broadcast(const void* send, void* recv, size_t count, DataType type,
                                     int root) {
  return run(make_op(Collective::kBroadcast, send, recv, count, type, ReduceOp::kSum, root));
}

Result<void> Communicator::reduce(const void* send, void* recv, size_t count, DataType type,
                                  ReduceOp op, int root) {
  return run(make_op(Collective::kReduce, send, recv, count, type, op, root));
}

Result<void> Communicator::all_gather(const void* send, void* recv, size_t send_count,
                                      DataType type) {
  return run(make_op(Collective::kAllGather, send, recv, send_count, type, ReduceOp::kSum, 0));
}

Result<void> Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count,
                                          DataType type, ReduceOp op) {
  return run(make_op(Collective::kReduceScatter, send, recv, recv_count, type, op, 0));
}

Result<void> Communicator::all_to_all(const void* send, void* recv, size_t count,
                                      DataType type) {
  return run(make_op(Collective::kAllToAll, send, recv, count, type, ReduceOp::kSum, 0));
}

Result<void> Communicator::send(const void* buf, size_t count, DataType type, int peer) {
  OpDesc desc = make_op(Collective::kSendRecv, buf, nullptr, count, type, ReduceOp::kSum, peer);
  desc.is_send = true;
  if (peer == impl_->rank) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("peer {}: a blocking send to self would never complete (use a "
                                  "group with the matching recv)",
                                  peer));
  }
  return run(desc);
}

Result<void> Communicator::recv(void* buf, size_t count, DataType type, int peer) {
  if (peer == impl_->rank) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("peer {}: a blocking recv from self would never complete (use "
                                  "a group with the matching send)",
                                  peer));
  }
  return run(make_op(Collective::kSendRecv, nullptr, buf, count, type, ReduceOp::kSum, peer));
}

Result<void> Communicator::barrier() {
  return run(make_op(Collective::kBarrier, nullptr, nullptr, 0, DataType::kInt8, ReduceOp::kSum,
                     0));
}

Result<void> Communicator::validate(const OpDesc& op) const {
  const int n = impl_->size;
  const int me = impl_->rank;
  auto invalid = [](std::string message) {
    return make_error(ErrorCode::kInvalidArgument, std::move(message));
  };
  if (static_cast<int>(op.collective) > static_cast<int>(Collective::kBarrier)) {
    return invalid(fmt::format("collective: bad value {}", static_cast<int>(op.collective)));
  }
  const std::string_view name = to_string(op.collective);
  if (static_cast<int>(op.type) >= kNumDataTypes) {
    return invalid(fmt::format("{}: datatype: bad value {} (0..{})", name,
                               static_cast<int>(op.type), kNumDataTypes - 1));
  }
  const bool reduces = op.collective == Collective::kAllReduce ||
                       op.collective == Collective::kReduce ||
                       op.collective == Collective::kReduceScatter;
  if (reduces && static_cast<int>(op.op) >= kNumReduceOps) {
    return invalid(fmt::format("{}: op: bad value {} (0..{})", name, static_cast<int>(op.op),
                               kNumReduceOps - 1));
  }
  const bool rooted =
      op.collective == Collective::kBroadcast || op.collective == Collective::kReduce;
  if (rooted && (op.root < 0 || op.root >= n)) {
    return invalid(fmt::format("{}: root {} out of range (communicator of {} ranks)", name,
                               op.root, n));
  }
  if (op.collective == Collective::kSendRecv && (op.root < 0 || op.root >= n)) {
    return invalid(fmt::format("{}: peer {} out of range (communicator of {} ranks)",
                               op.is_send ? "send" : "recv", op.root, n));
  }
  // The largest buffer the operation touches, in elements (n blocks for the gathers).
  const size_t blocks = (op.collective == Collective::kAllGather ||
                         op.collective == Collective::kReduceScatter ||
                         op.collective == Collective::kAllToAll)
                            ? static_cast<size_t>(n)
                            : 1;
  const size_t element = data_type_size(op.type);
  if (op.count > std::numeric_limits<size_t>::max() / element / blocks ||
      op.count * element * blocks > (size_t{1} << 62)) {
    return invalid(fmt::format("{}: count {} too large", name, op.count));
  }
  if (op.count == 0 || op.collective == Collective::kBarrier) return {};
  const char* send_name = "sendbuff";
  const char* recv_name = "recvbuff";
  bool need_send = true;
  bool need_recv = true;
  switch (op.collective) {
    case Collective::kBroadcast:
      need_send = me == op.root;
      break;
    case Collective::kReduce:
      need_recv = me == op.root;
      break;
    case Collective::kSendRecv:
      need_send = op.is_send;
      need_recv = !op.is_send;
      break;
    default:
      break;
  }
  if (need_send && op.send == nullptr) {
    return invalid(fmt::format("{}: {} is NULL with count {}", name, send_name, op.count));
  }
  if (need_recv && op.recv == nullptr) {
    return invalid(fmt::format("{}: {} is NULL with count {}", name, recv_name, op.count));
  }
  return {};
}

Result<Request> Communicator::submit(const OpDesc& op) {
  return submit_group(std::vector<OpDesc>{op});
}

Result<Request> Communicator::submit_group(std::vector<OpDesc> ops) {
  for (const OpDesc& op : ops) {
    if (auto ok = validate(op); !ok) return std::unexpected(ok.error());
  }
  if (auto error = impl_->current_error()) {
    auto state = std::make_shared<Request::State>();
    state->complete(std::unexpected(*error));
    return Request(state);
  }
  const int64_t timeout_ns = impl_->timeout_ns.load();
  return impl_->submit(std::move(ops), timeout_ns);
}

Result<void> Communicator::run(const OpDesc& op) {
  auto request = submit(op);
  if (!request) return std::unexpected(request.error());
  return *request->wait(-1);
}

Plan Communicator::plan_for(Collective collective, int64_t bytes) const {
  return impl_->plan_for(collective, bytes, false);
}

void Communicator::set_timeout_ns(int64_t timeout_ns) {
  if (timeout_ns > 0) impl_->timeout_ns.store(timeout_ns);
}

void Communicator::abort() {
  impl_->aborted.store(true);
  impl_->fail(Error{ErrorCode::kUnavailable, "aborted"});
  if (impl_->peers) impl_->peers->abort();
  for (auto& lane : impl_->lanes) {
    lane->aborted.store(true);
    if (lane->peers) lane->peers->abort();
  }
}

std::optional<AsyncError> Communicator::async_error() const {
  std::lock_guard lock(impl_->error_mutex);
  return impl_->error;
}

}  // namespace detwan::collectives

#include "collectives/torch/process_group.h"

#include <cstdlib>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>
#include <ATen/ATen.h>

namespace detwan::torch_backend {

using collectives::Collective;
using collectives::DataType;
using collectives::OpDesc;
using collectives::ReduceOp;

namespace {

constexpr const char* kUniqueIdKey = "detwan/unique_id";

DataType data_type(const at::Tensor& t, const char* what) {
  switch (t.scalar_type()) {
    case at::kFloat: return DataType::kFloat32;
    case at::kDouble: return DataType::kFloat64;
    case at::kHalf: return DataType::kFloat16;
    case at::kBFloat16: return DataType::kBfloat16;
    case at::kChar: return DataType::kInt8;
    case at::kByte: return DataType::kUint8;
    case at::kInt: return DataType::kInt32;
    case at::kLong: return DataType::kInt64;
    default:
      TORCH_CHECK(false, "detwan ", what, ": tensor dtype ", t.scalar_type(),
                  " is not supported (float32, float64, float16, bfloat16, int8, uint8, int32, "
                  "int64)");
  }
}

ReduceOp reduce_op(const c10d::ReduceOp& op, const char* what) {
  switch (static_cast<c10d::ReduceOp::RedOpType>(op)) {
    case c10d::ReduceOp::SUM: return ReduceOp::kSum;
    case c10d::ReduceOp::AVG: return ReduceOp::kAvg;
    case c10d::ReduceOp::PRODUCT: return ReduceOp::kProd;
    case c10d::ReduceOp::MIN: return ReduceOp::kMin;
    case c10d::ReduceOp::MAX: return ReduceOp::kMax;
    default:
      TORCH_CHECK(false, "detwan ", what, ": reduce op ", static_cast<int>(op.op_),
                  " is not supported (SUM, AVG, PRODUCT, MIN, MAX)");
  }
}

void check_tensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu(), "detwan ", what, ": tensor on ", t.device(),
              "; the detwan backend takes CPU tensors");
  TORCH_CHECK(t.layout() == at::kStrided, "detwan ", what, ": sparse tensors are not supported");
}

const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == 1, "detwan ", what, ": takes one tensor per process, got ",
              tensors.size());
  check_tensor(tensors[0], what);
  return tensors[0];
}

void check_like(const at::Tensor& t, const at::Tensor& like, const char* what) {
  check_tensor(t, what);
  TORCH_CHECK(t.scalar_type() == like.scalar_type(), "detwan ", what, ": dtype ",
              t.scalar_type(), " differs from ", like.scalar_type());
  TORCH_CHECK(t.numel() == like.numel(), "detwan ", what, ": tensor of ", t.numel(),
              " elements where ", like.numel(), " are expected");
}

// A contiguous tensor to hand to the library; the epilogue copies it back into `user` when it
// had to be staged.
std::function<void()> copy_back(const at::Tensor& user, const at::Tensor& staged) {
  if (staged.is_same(user)) return {};
  return [user, staged]() mutable { user.copy_(staged.view_as(user)); };
}

// The same for several tensors: (user, staged) pairs that had to be staged.
std::function<void()> copy_back_all(std::vector<std::pair<at::Tensor, at::Tensor>> staged) {
  if (staged.empty()) return {};
  return [staged]() mutable {
    for (auto& [user, buf] : staged) user.copy_(buf.view_as(user));
  };
}

OpDesc op_desc(Collective c, const void* send, void* recv, size_t count, DataType type,
               ReduceOp op = ReduceOp::kSum, int root = 0, bool is_send = false) {
  return OpDesc{.collective = c, .send = send, .recv = recv, .count = count, .type = type,
                .op = op, .root = root, .is_send = is_send};
}

OpDesc p2p(bool is_send, const at::Tensor& t, int peer) {
  DataType type = data_type(t, is_send ? "send" : "recv");
  return op_desc(Collective::kSendRecv, is_send ? t.data_ptr() : nullptr,
                 is_send ? nullptr : t.data_ptr(), static_cast<size_t>(t.numel()), type,
                 ReduceOp::kSum, peer, is_send);
}

at::Tensor flat_cat(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

}  // namespace

c10::intrusive_ptr<c10d::ProcessGroup> ProcessGroupDetwan::create(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout) {
  return c10::make_intrusive<ProcessGroupDetwan>(store, rank, size, timeout);
}

ProcessGroupDetwan::ProcessGroupDetwan(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                       int size, std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size) {
  auto config = collectives::CommConfig::from_environment();
  TORCH_CHECK(config.has_value(), "detwan process group: ", config.error().message);
  const int64_t timeout_ns = static_cast<int64_t>(timeout.count()) * 1'000'000;
  if (timeout_ns > 0) {
    config->timeout_ns = timeout_ns;
    config->setup_timeout_ns = timeout_ns;
  }
  std::array<char, collectives::kUniqueIdBytes> id_bytes{};
  if (rank == 0) {
    // With DETWAN_BOOTSTRAP_SECRET (every rank has it) the root uses it, and the store -- which
    // anyone who reaches it may read -- gets the id without it; else a random secret travels
    // in the id.
    const char* shared = std::getenv("DETWAN_BOOTSTRAP_SECRET");
    const bool secret_shared = shared != nullptr && *shared != '\0';
    auto id = secret_shared ? collectives::UniqueId::create_root_with_secret(
                                  shared, config->listen_host, config->setup_timeout_ns)
                            : collectives::UniqueId::create_root(config->listen_host,
                                                                 config->setup_timeout_ns);
    TORCH_CHECK(id.has_value(), "detwan process group: rank 0 could not start the bootstrap "
                "root: ", id.error().message);
    id_bytes = id->to_bytes();
    const auto published = secret_shared ? id->without_secret().to_bytes() : id_bytes;
    store->set(kUniqueIdKey, std::vector<uint8_t>(published.begin(), published.end()));
  } else {
    std::vector<uint8_t> got = store->get(kUniqueIdKey);
    TORCH_CHECK(got.size() == id_bytes.size(), "detwan process group: the store's ",
                kUniqueIdKey, " has ", got.size(), " bytes, expected ", id_bytes.size());
    std::copy(got.begin(), got.end(), id_bytes.begin());
  }
  auto id = collectives::UniqueId::from_bytes(id_bytes);
  TORCH_CHECK(id.has_value(), "detwan process group: ", id.error().message);
  auto comm = collectives::Communicator::create(*id, rank, size, *config);
  TORCH_CHECK(comm.has_value(), "detwan process group: rank ", rank, " of ", size,
              " (site ", config->site, "): ", comm.error().message);
  comm_ = std::move(*comm);
  completer_ = std::make_unique<Completer>(
      [this](const DetwanWork& work, const common::Error& error) {
        return describe_failure(work, error);
      });
  init();
}

ProcessGroupDetwan::~ProcessGroupDetwan() {
  completer_.reset();  // every Work completes (the executor runs them out)
  if (comm_ && !comm_->async_error().has_value()) (void)comm_->finalize();
  comm_.reset();
}

std::string ProcessGroupDetwan::describe_failure(const DetwanWork& work,
                                                 const common::Error& error) const {
  std::string message = fmt::format("detwan {} failed on rank {} of {}: {}", work.what(),
                                    getRank(), getSize(), error.message);
  if (auto async = comm_->async_error(); async.has_value() && async->failed_rank >= 0) {
    message += fmt::format(" (failed peer: rank {})", async->failed_rank);
  }
  return message;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDetwan::issue(c10d::OpType type, const char* what,
                                                         std::vector<OpDesc> ops,
                                                         std::vector<at::Tensor> outputs,
                                                         Epilogue epilogue,
                                                         std::vector<at::Tensor> keep) {
  auto work = c10::make_intrusive<DetwanWork>(getRank(), type, what, std::move(outputs));
  std::lock_guard lock(issue_mutex_);
  ++sequence_;
  auto request = ops.size() == 1 ? comm_->submit(ops[0]) : comm_->submit_group(std::move(ops));
  TORCH_CHECK(request.has_value(), "detwan ", what, " on rank ", getRank(), ": ",
              request.error().message);
  completer_->enqueue(std::move(*request), work, std::move(epilogue), std::move(keep));
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDetwan::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = single(tensors, "broadcast");
  TORCH_CHECK(opts.rootTensor == 0, "detwan broadcast: rootTensor must be 0");
  at::Tensor buf = t.contiguous();
  OpDesc d = op_desc(Collective::kBroadcast, buf.data_ptr(), buf.data_ptr(), buf.numel(),
                     data_type(t, "broadcast"), ReduceOp::kSum, static_cast<int>(opts.rootRank));
  return issue(c10d::OpType::BROADCAST, "broadcast", {d}, {t}, copy_back(t, buf), {buf});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDetwan::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  const at::Tensor& t = single(tensors, "allreduce");
  at::Tensor buf = t.contiguous();
  OpDesc d = op_desc(Collective::kAllReduce, buf.data_ptr(), buf.data_ptr(), buf.numel(),
                     data_type(t, "allreduce"), reduce_op(opts.reduceOp, "allreduce"));
  return issue(c10d::OpType::ALLREDUCE, "allreduce", {d}, {t}, copy_back(t, buf), {buf});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDetwan::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "detwan allreduce_coalesced: no tensors");
  for (const auto& t : tensors) {
    check_tensor(t, "allreduce_coalesced");
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(),
                "detwan allreduce_coalesced: tensors of different dtypes");
  }
  at::Tensor flat = flat_cat(tensors);
  OpDesc d = op_desc(Collective::kAllReduce, flat.data_ptr(), flat.data_ptr(), flat.numel(),
                     data_type(flat, "allreduce_coalesced"),
                     reduce_op(opts.reduceOp, "allreduce_coalesced"));
  Epilogue out = [tensors, flat]() mutable {
    int64_t offset = 0;
    for (auto& t : tensors) {
      t.copy_(flat.narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
  };
  return issue(c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", {d}, tensors,
               std::move(out), {flat});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDetwan::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  const at::Tensor& t = single(tensors, "reduce");
  TORCH_CHECK(opts.rootTensor == 0, "detwan reduce: rootTensor must be 0");
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor buf = t.contiguous();
  OpDesc d = op_desc(Collective::kReduce, buf.data_ptr(),
                     getRank() == root ? buf.data_ptr() : nullptr, buf.numel(),
                     data_type(t, "reduce"), reduce_op(opts.reduceOp, "reduce"), root);
  return issue(c10d::OpType::REDUCE, "reduce", {d}, {t}, copy_back(t, buf), {buf});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDetwan::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& /*opts*/) {
  const at::Tensor& in = single(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
              "detwan allgather: expects one list of ", getSize(), " output tensors");
  for (const auto& o : outputs[0]) check_like(o, in, "allgather");
  at::Tensor src = in.contiguous();
  at::Tensor flat = at::empty({getSize() * src.numel()}, src.options());
  OpDesc d = op_desc(Collective::kAllGather, src.data_ptr(), flat.data_ptr(), src.numel(),
                     data_type(in, "allgather"));
  std::vector<at::Tensor> outs = outputs[0];
  Epilogue out = [outs, flat]() mutable {
    const int64_t n = outs.empty() ? 0 : outs[0].numel();
    for (size_t i = 0; i < outs.size(); ++i) {
      outs[i].copy_(flat.narrow(0, static_cast<int64_t>(i) * n, n).view_as(outs[i]));
    }
  };
  return issue(c10d::OpType::ALLGATHER, "allgather", {d}, outs, std::move(out), {src, flat});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDetwan::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& /*opts*/) {
  check_tensor(input, "all_gather_into_tensor");
  check_tensor(output, "all_gather_into_tensor");
  TORCH_CHECK(output.scalar_type() == input.scalar_type() &&
                  output.numel() == getSize() * input.numel(),
              "detwan all_gather_into_tensor: output must hold world_size x input elements of "
              "the input's dtype");
  at::Tensor src = input.contiguous();
  at::Tensor dst = output.contiguous();
  OpDesc d = op_desc(Collective::kAllGather, src.data_ptr(), dst.data_ptr(), src.numel(),
                     data_type(input, "all_gather_into_tensor"));
  return issue(c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor", {d}, {output},
               copy_back(output, dst), {src, dst});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDetwan::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  const at::Tensor& in = single(inputs, "gather");
  const int root = static_cast<int>(opts.rootRank);
  TORCH_CHECK(root >= 0 && root < getSize(), "detwan gather: root ", root, " out of range");
  at::Tensor src = in.contiguous();
  if (getRank() != root) {
    return issue(c10d::OpType::GATHER, "gather", {p2p(true, src, root)}, {}, {}, {src});
  }
  TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
              "detwan gather: the root expects one list of ", getSize(), " output tensors");
  std::vector<OpDesc> ops;
  std::vector<at::Tensor> keep{src};
  std::vector<std::pair<at::Tensor, at::Tensor>> back;  // (user, staged)
  for (int r = 0; r < getSize(); ++r) {
    at::Tensor& o = outputs[0][r];
    check_like(o, in, "gather");
    at::Tensor buf = o.contiguous();
    keep.push_back(buf);
    if (!buf.is_same(o)) back.emplace_back(o, buf);
    if (r == root) {
      ops.push_back(p2p(true, src, root));
      ops.push_back(p2p(false, buf, root));
    } else {
      ops.push_back(p2p(false, buf, r));
    }
  }
  return issue(c10d::OpType::GATHER, "gather", std::move(ops), outputs[0],
               copy_back_all(std::move(back)), std::move(keep));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDetwan::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const at::Tensor& out = single(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  TORCH_CHECK(root >= 0 && root < getSize(), "detwan scatter: root ", root, " out of range");
  at::Tensor buf = out.contiguous();
  std::vector<OpDesc> ops;
  std::vector<at::Tensor> keep{buf};
  if (getRank() == root) {
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                "detwan scatter: the root expects one list of ", getSize(), " input tensors");
    for (int r = 0; r < getSize(); ++r) {
      check_like(inputs[0][r], out, "scatter");
      at::Tensor src = inputs[0][r].contiguous();
      keep.push_back(src);
      ops.push_back(p2p(true, src, r));
    }
  }
  ops.push_back(p2p(false, buf, root));
  return issue(c10d::OpType::SCATTER, "scatter", std::move(ops), {out}, copy_back(out, buf),
               std::move(keep));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDetwan::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& out = single(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
              "detwan reduce_scatter: expects one list of ", getSize(), " input tensors");
  for (const auto& i : inputs[0]) check_like(i, out, "reduce_scatter");
  at::Tensor flat = flat_cat(inputs[0]);
  at::Tensor buf = out.contiguous();
  OpDesc d = op_desc(Collective::kReduceScatter, flat.data_ptr(), buf.data_ptr(), buf.numel(),
                     data_type(out, "reduce_scatter"), reduce_op(opts.reduceOp, "reduce_scatter"));
  return issue(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", {d}, {out}, copy_back(out, buf),
               {flat, buf});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDetwan::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  check_tensor(input, "reduce_scatter_tensor");
  check_tensor(output, "reduce_scatter_tensor");
  TORCH_CHECK(output.scalar_type() == input.scalar_type() &&
                  input.numel() == getSize() * output.numel(),
              "detwan reduce_scatter_tensor: input must hold world_size x output elements of "
              "the output's dtype");
  at::Tensor src = input.contiguous();
  at::Tensor dst = output.contiguous();
  OpDesc d = op_desc(Collective::kReduceScatter, src.data_ptr(), dst.data_ptr(), dst.numel(),
                     data_type(output, "reduce_scatter_tensor"),
                     reduce_op(opts.reduceOp, "reduce_scatter_tensor"));
  return issue(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", {d}, {output},
               copy_back(output, dst), {src, dst});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDetwan::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions& /*opts*/) {
  check_tensor(input, "all_to_all_single");
  check_tensor(output, "all_to_all_single");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "detwan all_to_all_single: input and output dtypes differ");
  const int n = getSize();
  at::Tensor src = input.contiguous();
  at::Tensor dst = output.contiguous();
  if (output_split_sizes.empty() && input_split_sizes.empty()) {
    TORCH_CHECK(input.numel() == output.numel() && input.numel() % n == 0,
                "detwan all_to_all_single: input and output must have the same number of "
                "elements, a multiple of world_size");
    OpDesc d = op_desc(Collective::kAllToAll, src.data_ptr(), dst.data_ptr(), src.numel() / n,
                       data_type(input, "all_to_all_single"));
    return issue(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", {d}, {output},
                 copy_back(output, dst), {src, dst});
  }
  // Uneven splits (along dim 0): one group of sends and receives.
  auto splits = [n](std::vector<int64_t>& sizes, const at::Tensor& t, const char* which) {
    if (sizes.empty()) {
      TORCH_CHECK(t.dim() > 0 && t.size(0) % n == 0, "detwan all_to_all_single: ", which,
                  " dim 0 is not a multiple of world_size");
      return std::vector<int64_t>(n, t.dim() > 0 ? t.size(0) / n : 0);
    }
    TORCH_CHECK(static_cast<int>(sizes.size()) == n, "detwan all_to_all_single: ", which,
                "_split_sizes has ", sizes.size(), " entries for ", n, " ranks");
    int64_t total = 0;
    for (int64_t s : sizes) total += s;
    TORCH_CHECK(t.dim() > 0 && total == t.size(0), "detwan all_to_all_single: ", which,
                "_split_sizes sum to ", total, " but dim 0 is ", t.dim() > 0 ? t.size(0) : 0);
    return sizes;
  };
  std::vector<int64_t> in_rows = splits(input_split_sizes, src, "input");
  std::vector<int64_t> out_rows = splits(output_split_sizes, dst, "output");
  std::vector<OpDesc> ops;
  int64_t in_off = 0;
  int64_t out_off = 0;
  for (int r = 0; r < n; ++r) {
    ops.push_back(p2p(true, src.narrow(0, in_off, in_rows[r]), r));
    ops.push_back(p2p(false, dst.narrow(0, out_off, out_rows[r]), r));
    in_off += in_rows[r];
    out_off += out_rows[r];
  }
  return issue(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", std::move(ops), {output},
               copy_back(output, dst), {src, dst});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDetwan::alltoall(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllToAllOptions& /*opts*/) {
  const int n = getSize();
  TORCH_CHECK(static_cast<int>(outputs.size()) == n && static_cast<int>(inputs.size()) == n,
              "detwan all_to_all: expects ", n, " input and ", n, " output tensors");
  std::vector<OpDesc> ops;
  std::vector<at::Tensor> keep;
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  for (int r = 0; r < n; ++r) {
    check_tensor(inputs[r], "all_to_all");
    check_tensor(outputs[r], "all_to_all");
    TORCH_CHECK(inputs[r].scalar_type() == outputs[r].scalar_type(),
                "detwan all_to_all: input and output dtypes differ");
    at::Tensor src = inputs[r].contiguous();
    at::Tensor dst = outputs[r].contiguous();
    keep.push_back(src);
    keep.push_back(dst);
    if (!dst.is_same(outputs[r])) back.emplace_back(outputs[r], dst);
    ops.push_back(p2p(true, src, r));
    ops.push_back(p2p(false, dst, r));
  }
  return issue(c10d::OpType::ALLTOALL, "all_to_all", std::move(ops), outputs,
               copy_back_all(std::move(back)), std::move(keep));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDetwan::send(std::vector<at::Tensor>& tensors,
                                                        int dst_rank, int /*tag*/) {
  const at::Tensor& t = single(tensors, "send");
  at::Tensor buf = t.contiguous();
  return issue(c10d::OpType::SEND, "send", {p2p(true, buf, dst_rank)}, {}, {}, {buf});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDetwan::recv(std::vector<at::Tensor>& tensors,
                                                        int src_rank, int /*tag*/) {
  const at::Tensor& t = single(tensors, "recv");
  at::Tensor buf = t.contiguous();
  return issue(c10d::OpType::RECV, "recv", {p2p(false, buf, src_rank)}, {t}, copy_back(t, buf),
               {buf});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDetwan::barrier(const c10d::BarrierOptions& /*opts*/) {
  OpDesc d = op_desc(Collective::kBarrier, nullptr, nullptr, 0, DataType::kUint8);
  return issue(c10d::OpType::BARRIER, "barrier", {d}, {}, {}, {});
}

void ProcessGroupDetwan::setSequenceNumberForGroup() {
  std::lock_guard lock(issue_mutex_);
  sequence_ = 0;
}

uint64_t ProcessGroupDetwan::getSequenceNumberForGroup() {
  std::lock_guard lock(issue_mutex_);
  return sequence_;
}

std::string ProcessGroupDetwan::describe() const {
  return comm_->config().describe();
}

std::string ProcessGroupDetwan::plan(int64_t bytes) const {
  auto p = comm_->plan_for(Collective::kAllReduce, bytes);
  return fmt::format("{} chunk {} B", collectives::to_string(p.algorithm), p.chunk_bytes);
}

void ProcessGroupDetwan::abort() {
  comm_->abort();
}

}  // namespace detwan::torch_backend

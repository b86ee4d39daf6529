#include "tools/bench/coll_run.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "collectives/comm/communicator.h"
#include "common/percentile.h"
#include "tools/bench/coll_pattern.h"
#include "tools/bench/coll_report.h"

namespace detwan::bench {
namespace {

namespace coll = detwan::collectives;
using common::Result;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Result<coll::CommConfig> make_config(const CollBenchOptions& o) {
  auto config = coll::CommConfig::from_environment();
  if (!config) return config;
  if (!o.site.empty()) config->site = o.site;
  if (o.wan_rate_bps >= 0) config->wan_rate_bps = o.wan_rate_bps;
  if (o.algorithm_set) config->algorithm = o.algorithm;
  if (o.chunk_bytes >= 0) config->chunk_bytes = o.chunk_bytes;
  if (o.deterministic) config->deterministic = true;
  if (o.inflight_ops > 0) config->inflight_ops = o.inflight_ops;
  if (!o.intra_backend.empty()) config->intra_backend = o.intra_backend;
  if (!o.inter_backend.empty()) config->inter_backend = o.inter_backend;
  if (!o.listen_host.empty()) config->listen_host = o.listen_host;
  if (o.op_timeout_ns > 0) config->timeout_ns = o.op_timeout_ns;
  return config;
}

// The two buffers of one rank, sized for the largest row of the sweep (one pair per operation
// of an aggregated iteration, -m).
struct Buffers {
  std::unique_ptr<std::byte[]> send;
  std::unique_ptr<std::byte[]> recv;
  size_t bytes = 0;
};

// One descriptor of an operation (a group of two for sendrecv) for submit_group.
std::vector<coll::OpDesc> descriptors(const coll::Communicator& comm, Collective collective,
                                      const void* send, void* recv, size_t count, DataType type,
                                      ReduceOp op, int root) {
  if (collective == Collective::kSendRecv) {
    const int n = comm.size();
    const int r = comm.rank();
    return {coll::OpDesc{collective, send, nullptr, count, type, op, (r + 1) % n, true},
            coll::OpDesc{collective, nullptr, recv, count, type, op, (r + n - 1) % n, false}};
  }
  return {coll::OpDesc{collective, send, recv, count, type, op, root, false}};
}

struct Operation {
  Collective collective;
  const void* send;
  void* recv;
  size_t count;
  DataType type;
  ReduceOp op;
  int root;
};

Result<void> run_once(coll::Communicator& comm, const Operation& p) {
  switch (p.collective) {
    case Collective::kAllReduce:
      return comm.all_reduce(p.send, p.recv, p.count, p.type, p.op);
    case Collective::kBroadcast:
      return comm.broadcast(p.send, p.recv, p.count, p.type, p.root);
    case Collective::kReduce:
      return comm.reduce(p.send, p.recv, p.count, p.type, p.op, p.root);
    case Collective::kAllGather:
      return comm.all_gather(p.send, p.recv, p.count, p.type);
    case Collective::kReduceScatter:
      return comm.reduce_scatter(p.send, p.recv, p.count, p.type, p.op);
    case Collective::kAllToAll:
      return comm.all_to_all(p.send, p.recv, p.count, p.type);
    case Collective::kSendRecv: {
      // nccl-tests' sendrecv: every rank sends to the next and receives from the previous.
      const int n = comm.size();
      const int r = comm.rank();
      coll::OpDesc send{Collective::kSendRecv, p.send, nullptr, p.count, p.type, p.op,
                        (r + 1) % n,           true};
      coll::OpDesc recv{Collective::kSendRecv, nullptr, p.recv, p.count, p.type, p.op,
                        (r + n - 1) % n,       false};
      auto request = comm.submit_group({send, recv});
      if (!request) return std::unexpected(request.error());
      auto done = request->wait(-1);
      if (!done) return common::make_error(common::ErrorCode::kInternal, "sendrecv: no result");
      return *done;
    }
    case Collective::kBarrier:
      return comm.barrier();
  }
  return common::make_error(common::ErrorCode::kInternal, "unknown collective");
}

class Runner {
 public:
  Runner(const CollBenchOptions& o, coll::Communicator& comm) : o_(o), comm_(comm) {}

  // Appends one row per (type, op, size); stops at the first failure (returned).
  Result<void> run(std::vector<Row>& rows, const std::vector<uint64_t>& sizes) {
    Buffers buffers;
    for (uint64_t size : sizes) buffers.bytes = std::max<size_t>(buffers.bytes, size);
    buffers.bytes = std::max<size_t>(buffers.bytes, 8);
    buffers.send.reset(new std::byte[buffers.bytes]);
    buffers.recv.reset(new std::byte[buffers.bytes]);
    std::memset(buffers.recv.get(), 0, buffers.bytes);
    aggregated_.clear();
    for (int k = 1; k < o_.agg_iters; ++k) {
      Buffers more;
      more.bytes = buffers.bytes;
      more.send.reset(new std::byte[more.bytes]);
      more.recv.reset(new std::byte[more.bytes]);
      std::memset(more.recv.get(), 0, more.bytes);
      aggregated_.push_back(std::move(more));
    }
    for (DataType type : o_.types) {
      for (ReduceOp op : o_.ops) {
        const PatternSpec spec{o_.collective, type, op, comm_.size(), o_.root};
        fill_input(spec, comm_.rank(), buffers.send.get(),
                   buffers.bytes / collectives::data_type_size(type));
        for (Buffers& more : aggregated_) {
          std::memcpy(more.send.get(), buffers.send.get(), buffers.bytes);
        }
        for (uint64_t size : sizes) {
          auto row = run_row(spec, size, buffers);
          if (!row) return std::unexpected(row.error());
          if (comm_.rank() == 0 && !o_.json) {
            std::fputs(table_row(*row).c_str(), stdout);
            std::fflush(stdout);
          }
          rows.push_back(std::move(*row));
        }
      }
    }
    return {};
  }

 private:
  Result<Row> run_row(const PatternSpec& spec, uint64_t size, Buffers& buffers) {
    const Shape shape = shape_for(spec.collective, size, spec.type, comm_.size());
    const Operation op{spec.collective, buffers.send.get(), buffers.recv.get(),
                       shape.count,     spec.type,          spec.op,
                       spec.root};
    const auto failed = [&](const char* what, const common::Error& e) {
      return common::make_error(e.code, fmt::format("{} {} bytes {} {}: {}", what, size,
                                                    collectives::to_string(spec.type),
                                                    collectives::to_string(spec.op), e.message));
    };
    std::optional<uint64_t> wrong;
    if (o_.check) {
      poison_output(spec.type, buffers.recv.get(), shape.recv_count);
      if (auto ok = run_once(comm_, op); !ok) return failed("check run of", ok.error());
      wrong = count_wrong(spec, comm_.rank(), shape, buffers.recv.get());
    }
    for (int i = 0; i < o_.warmup_iters; ++i) {
      if (auto ok = run_iteration(op); !ok) return failed("warmup of", ok.error());
    }
    if (auto ok = comm_.barrier(); !ok) return failed("barrier before", ok.error());
    const int64_t start_ns = now_ns();
    std::vector<double> iter_us(static_cast<size_t>(o_.iters));
    for (int i = 0; i < o_.iters; ++i) {
      const int64_t iter_start_ns = now_ns();
      if (auto ok = run_iteration(op); !ok) return failed("timed run of", ok.error());
      iter_us[static_cast<size_t>(i)] =
          static_cast<double>(now_ns() - iter_start_ns) / 1e3 / o_.agg_iters;
    }
    const double mean_us =
        static_cast<double>(now_ns() - start_ns) / 1e3 / o_.iters / o_.agg_iters;
    std::vector<double> max_iter_us(iter_us.size());
    if (auto ok = comm_.all_reduce(iter_us.data(), max_iter_us.data(), iter_us.size(),
                                   DataType::kFloat64, ReduceOp::kMax);
        !ok) {
      return failed("gathering the iteration times of", ok.error());
    }

    // Every rank takes part: time is the slowest rank's, #wrong the sum over ranks.
    double max_us = 0;
    if (auto ok = comm_.all_reduce(&mean_us, &max_us, 1, DataType::kFloat64, ReduceOp::kMax); !ok) {
      return failed("gathering the time of", ok.error());
    }
    if (wrong) {
      uint64_t local = *wrong, sum = 0;
      if (auto ok = comm_.all_reduce(&local, &sum, 1, DataType::kUint64, ReduceOp::kSum); !ok) {
        return failed("gathering #wrong of", ok.error());
      }
      wrong = sum;
    }
    Row row = make_row(spec.collective, shape, spec.type, spec.op, spec.root, comm_.size(), max_us);
    row.wrong = wrong;
    row.time_us_p50 = common::nearest_rank_percentile(max_iter_us, 0.50);
    row.time_us_p99 = common::nearest_rank_percentile(max_iter_us, 0.99);
    row.time_us_max = common::nearest_rank_percentile(max_iter_us, 1.0);
    row.iter_time_us = std::move(max_iter_us);
    const coll::Plan plan = comm_.plan_for(spec.collective, static_cast<int64_t>(shape.size_bytes));
    row.algorithm = std::string(collectives::to_string(plan.algorithm));
    row.chunk_bytes = plan.chunk_bytes;
    return row;
  }

  // One iteration: the operation, or -m of them submitted together (each on its own buffers)
  // and then waited for.
  Result<void> run_iteration(const Operation& op) {
    if (aggregated_.empty()) return run_once(comm_, op);
    std::vector<coll::Request> requests;
    for (size_t k = 0; k <= aggregated_.size(); ++k) {
      const void* send = k == 0 ? op.send : aggregated_[k - 1].send.get();
      void* recv = k == 0 ? op.recv : aggregated_[k - 1].recv.get();
      auto request = comm_.submit_group(descriptors(comm_, op.collective, send, recv, op.count,
                                                    op.type, op.op, op.root));
      if (!request) return std::unexpected(request.error());
      requests.push_back(std::move(*request));
    }
    Result<void> out;
    for (auto& request : requests) {
      auto done = request.wait(-1);
      if (done && !*done && out) out = *done;
    }
    return out;
  }

  const CollBenchOptions& o_;
  coll::Communicator& comm_;
  std::vector<Buffers> aggregated_;  // buffers of operations 2..-m of an iteration
};

RunInfo run_info(const CollBenchOptions& o, const coll::Communicator& comm) {
  const auto& topology = comm.topology();
  const auto& config = comm.config();
  RunInfo info;
  info.collective = o.collective_name;
  info.nranks = comm.size();
  info.sites = topology.num_sites();
  info.ranks_per_site = topology.uniform() ? topology.ranks_per_site() : 0;
  info.topology = topology.describe();
  info.intra_backend = config.intra_backend;
  info.inter_backend = config.inter_backend;
  info.wan_rate_bps = config.wan_rate_bps;
  info.reservation = config.reservation;
  info.algorithm = std::string(collectives::to_string(config.algorithm));
  info.deterministic = config.deterministic;
  info.sweep = o.sweep;
  info.iters = o.iters;
  info.warmup_iters = o.warmup_iters;
  info.agg_iters = o.agg_iters;
  info.inflight_ops = config.inflight_ops;
  info.check = o.check;
  return info;
}

// Before a communicator exists (bad config, bootstrap failed): rank 0 still prints one JSON
// object so a harness reading it sees the reason.
int fail_early(const CollBenchOptions& o, const std::string& message, int status) {
  std::fprintf(stderr, "detwan-bench %s: rank %d: %s\n", o.collective_name.c_str(), o.rank,
               message.c_str());
  if (o.json && o.rank == 0) {
    RunInfo info;
    info.collective = o.collective_name;
    info.nranks = o.nranks;
    print_report_json(report_json(info, {}, message));
  }
  return status;
}

}  // namespace

int run_rank(const CollBenchOptions& o) {
  auto sizes = sweep_sizes(o.sweep);
  if (!sizes) return fail_early(o, sizes.error().message, 2);
  auto config = make_config(o);
  if (!config) return fail_early(o, config.error().message, 2);
  auto id = coll::UniqueId::from_string(o.id);
  if (!id) return fail_early(o, fmt::format("--id '{}': {}", o.id, id.error().message), 2);
  auto comm = coll::Communicator::create(*id, o.rank, o.nranks, *config);
  if (!comm) {
    return fail_early(o, "joining the communicator: " + comm.error().message, 1);
  }
  const RunInfo info = run_info(o, **comm);
  const bool printer = o.rank == 0;
  if (printer && !o.json) {
    std::fputs(table_header(info).c_str(), stdout);
    std::fflush(stdout);
  }
  std::vector<Row> rows;
  Runner runner(o, **comm);
  const auto result = runner.run(rows, *sizes);
  std::optional<std::string> error;
  if (!result) {
    error = result.error().message;
    std::fprintf(stderr, "detwan-bench %s: rank %d: %s\n", o.collective_name.c_str(), o.rank,
                 error->c_str());
    // The peers may be waiting in an operation this rank will never issue: abort rather than
    // wait in the destructor.
    (*comm)->abort();
  }
  if (printer) {
    if (o.json) {
      print_report_json(report_json(info, rows, error));
    } else {
      if (error) std::printf("# error: %s\n", error->c_str());
      std::fputs(table_footer(rows).c_str(), stdout);
    }
    std::fflush(stdout);
  }
  if (error) return 1;
  return total_wrong(rows) == 0 ? 0 : 1;
}

}  // namespace detwan::bench

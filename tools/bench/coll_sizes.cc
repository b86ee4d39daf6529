#include "tools/bench/coll_sizes.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace detwan::bench {
namespace {

struct NamedCollective {
  std::string_view name;
  Collective collective;
};

constexpr NamedCollective kCollectives[] = {
    {"allreduce", Collective::kAllReduce},         {"broadcast", Collective::kBroadcast},
    {"reduce", Collective::kReduce},               {"allgather", Collective::kAllGather},
    {"reducescatter", Collective::kReduceScatter}, {"alltoall", Collective::kAllToAll},
    {"sendrecv", Collective::kSendRecv},
};

// A sweep longer than this is a typo (e.g. -i 1 over gigabytes), not a benchmark.
constexpr size_t kMaxRows = 100'000;

}  // namespace

common::Result<Collective> parse_bench_collective(std::string_view name) {
  for (const auto& c : kCollectives) {
    if (c.name == name) return c.collective;
  }
  return common::make_error(
      common::ErrorCode::kInvalidArgument,
      fmt::format("unknown collective '{}' (allreduce, broadcast, reduce, allgather, "
                  "reducescatter, alltoall, sendrecv)",
                  name));
}

const std::vector<std::string_view>& bench_collective_names() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out;
    for (const auto& c : kCollectives) out.push_back(c.name);
    return out;
  }();
  return names;
}

bool has_reduce_op(Collective collective) {
  return collective == Collective::kAllReduce || collective == Collective::kReduce ||
         collective == Collective::kReduceScatter;
}

bool has_root(Collective collective) {
  return collective == Collective::kBroadcast || collective == Collective::kReduce;
}

common::Result<std::vector<uint64_t>> sweep_sizes(const SweepOptions& sweep) {
  using common::ErrorCode;
  if (sweep.max_bytes < sweep.min_bytes) {
    return common::make_error(ErrorCode::kInvalidArgument,
                              fmt::format("-e/--maxbytes {} is below -b/--minbytes {}",
                                          sweep.max_bytes, sweep.min_bytes));
  }
  if (sweep.step_bytes == 0 && sweep.step_factor < 2 && sweep.max_bytes > sweep.min_bytes) {
    return common::make_error(ErrorCode::kInvalidArgument,
                              fmt::format("-f/--stepfactor {} does not advance the sweep (use "
                                          ">= 2, or -i/--stepbytes)",
                                          sweep.step_factor));
  }
  std::vector<uint64_t> sizes;
  uint64_t size = sweep.min_bytes;
  while (true) {
    sizes.push_back(size);
    if (sizes.size() > kMaxRows) {
      return common::make_error(ErrorCode::kInvalidArgument,
                                fmt::format("the sweep {}..{} has more than {} sizes: raise "
                                            "-f/--stepfactor or -i/--stepbytes",
                                            sweep.min_bytes, sweep.max_bytes, kMaxRows));
    }
    uint64_t next = 0;
    if (sweep.step_bytes > 0) {
      next = size + sweep.step_bytes;
    } else if (size == 0) {
      next = 1;
    } else {
      next = size * sweep.step_factor;
      if (next / sweep.step_factor != size) break;  // overflow: past any max
    }
    if (next <= size || next > sweep.max_bytes) break;
    size = next;
  }
  return sizes;
}

Shape shape_for(Collective collective, uint64_t size_bytes, DataType type, int nranks) {
  const size_t type_bytes = collectives::data_type_size(type);
  const size_t n = static_cast<size_t>(std::max(nranks, 1));
  const size_t count = static_cast<size_t>(size_bytes / type_bytes);
  Shape s;
  switch (collective) {
    case Collective::kAllGather:
      s.count = count / n;
      s.send_count = s.count;
      s.recv_count = s.count * n;
      break;
    case Collective::kReduceScatter:
      s.count = count / n;
      s.send_count = s.count * n;
      s.recv_count = s.count;
      break;
    case Collective::kAllToAll:
      s.count = count / n;
      s.send_count = s.count * n;
      s.recv_count = s.count * n;
      break;
    default:
      s.count = count;
      s.send_count = count;
      s.recv_count = count;
      break;
  }
  s.size_bytes = std::max(s.send_count, s.recv_count) * type_bytes;
  return s;
}

double bus_factor(Collective collective, int nranks) {
  const double n = std::max(nranks, 1);
  switch (collective) {
    case Collective::kAllReduce: return 2.0 * (n - 1) / n;
    case Collective::kReduceScatter:
    case Collective::kAllGather:
    case Collective::kAllToAll: return (n - 1) / n;
    default: return 1.0;
  }
}

double algbw_gbps(uint64_t size_bytes, double time_us) {
  if (time_us <= 0) return 0;
  return static_cast<double>(size_bytes) / 1e9 / (time_us * 1e-6);
}

}  // namespace detwan::bench

#include "collectives/types.h"

#include <array>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace detwan::collectives {
namespace {

struct TypeInfo {
  DataType type;
  size_t size;
  std::string_view name;  // nccl-tests
  std::array<std::string_view, 3> aliases;
};

constexpr std::array<TypeInfo, kNumDataTypes> kTypes = {{
    {DataType::kInt8, 1, "int8", {"i8", "char", ""}},
    {DataType::kUint8, 1, "uint8", {"u8", "", ""}},
    {DataType::kInt32, 4, "int32", {"i32", "int", ""}},
    {DataType::kUint32, 4, "uint32", {"u32", "", ""}},
    {DataType::kInt64, 8, "int64", {"i64", "", ""}},
    {DataType::kUint64, 8, "uint64", {"u64", "", ""}},
    {DataType::kFloat16, 2, "half", {"fp16", "f16", "float16"}},
    {DataType::kBfloat16, 2, "bfloat16", {"bf16", "", ""}},
    {DataType::kFloat32, 4, "float", {"fp32", "f32", "float32"}},
    {DataType::kFloat64, 8, "double", {"fp64", "f64", "float64"}},
}};

constexpr std::array<std::string_view, kNumReduceOps> kOps = {"sum", "prod", "max", "min", "avg"};

struct AlgorithmName {
  Algorithm algorithm;
  std::string_view name;
  std::string_view alias;
};
constexpr std::array<AlgorithmName, 5> kAlgorithms = {{
    {Algorithm::kAuto, "auto", "auto"},
    {Algorithm::kRing, "ring", "ring"},
    {Algorithm::kHalvingDoubling, "hd", "halving-doubling"},
    {Algorithm::kTree, "tree", "binomial"},
    {Algorithm::kHierarchical, "hier", "hierarchical"},
}};

}  // namespace

size_t data_type_size(DataType type) { return kTypes[static_cast<size_t>(type)].size; }

bool is_floating(DataType type) {
  return type == DataType::kFloat16 || type == DataType::kBfloat16 ||
         type == DataType::kFloat32 || type == DataType::kFloat64;
}

std::string_view to_string(DataType type) { return kTypes[static_cast<size_t>(type)].name; }

Result<DataType> parse_data_type(std::string_view text) {
  std::string names;
  for (const auto& info : kTypes) {
    if (text == info.name) return info.type;
    for (auto alias : info.aliases) {
      if (!alias.empty() && text == alias) return info.type;
    }
    names += names.empty() ? "" : ", ";
    names += info.name;
  }
  return make_error(ErrorCode::kInvalidArgument,
                    fmt::format("unknown data type '{}' (one of {}, or fp16/bf16/fp32/fp64)",
                                text, names));
}

std::string_view to_string(ReduceOp op) { return kOps[static_cast<size_t>(op)]; }

Result<ReduceOp> parse_reduce_op(std::string_view text) {
  for (size_t i = 0; i < kOps.size(); ++i) {
    if (text == kOps[i]) return static_cast<ReduceOp>(i);
  }
  return make_error(ErrorCode::kInvalidArgument,
                    fmt::format("unknown reduce op '{}' (sum, prod, max, min, avg)", text));
}

std::string_view to_string(Algorithm algorithm) {
  for (const auto& a : kAlgorithms) {
    if (a.algorithm == algorithm) return a.name;
  }
  return "?";
}

Result<Algorithm> parse_algorithm(std::string_view text) {
  for (const auto& a : kAlgorithms) {
    if (text == a.name || text == a.alias) return a.algorithm;
  }
  return make_error(ErrorCode::kInvalidArgument,
                    fmt::format("unknown algorithm '{}' (auto, ring, hd, tree, hier)", text));
}

std::string_view to_string(Collective collective) {
  switch (collective) {
    case Collective::kAllReduce: return "allreduce";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kAllGather: return "allgather";
    case Collective::kReduceScatter: return "reducescatter";
    case Collective::kAllToAll: return "alltoall";
    case Collective::kSendRecv: return "sendrecv";
    case Collective::kBarrier: return "barrier";
  }
  return "?";
}

}  // namespace detwan::collectives

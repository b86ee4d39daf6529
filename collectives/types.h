#pragma once
// Element types, reduce operations and algorithm names shared by every part of the collective
// library. The numeric values equal the C API's (collectives/include/detwan/collectives.h).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace detwan::collectives {

using common::Error;
using common::ErrorCode;
using common::Result;

enum class DataType : uint8_t {
  kInt8 = 0, kUint8, kInt32, kUint32, kInt64, kUint64, kFloat16, kBfloat16, kFloat32, kFloat64
};
inline constexpr int kNumDataTypes = 10;

enum class ReduceOp : uint8_t { kSum = 0, kProd, kMax, kMin, kAvg };
inline constexpr int kNumReduceOps = 5;

enum class Algorithm : uint8_t {
  kAuto = 0, kRing, kHalvingDoubling, kTree, kHierarchical
};

enum class Collective : uint8_t {
  kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll, kSendRecv, kBarrier
};

[[nodiscard]] size_t data_type_size(DataType type);
[[nodiscard]] bool is_floating(DataType type);
// nccl-tests names: int8 uint8 int32 uint32 int64 uint64 half bfloat16 float double.
[[nodiscard]] std::string_view to_string(DataType type);
// Accepts the nccl-tests names and fp16/f16, bf16, fp32/f32, fp64/f64, i8/u8/i32/... .
[[nodiscard]] Result<DataType> parse_data_type(std::string_view text);
[[nodiscard]] std::string_view to_string(ReduceOp op);  // sum prod max min avg
[[nodiscard]] Result<ReduceOp> parse_reduce_op(std::string_view text);
[[nodiscard]] std::string_view to_string(Algorithm algorithm);  // auto ring hd tree hier
// Accepts auto, ring, hd / halving-doubling, tree, hier / hierarchical.
[[nodiscard]] Result<Algorithm> parse_algorithm(std::string_view text);
[[nodiscard]] std::string_view to_string(Collective collective);  // allreduce, broadcast, ...

}  // namespace detwan::collectives

#pragma once
// Element-wise reduction kernels for every DataType x ReduceOp.
//
// fp16 (IEEE binary16) and bf16 are computed in float and rounded back to nearest-even after
// every binary operation, so a result depends only on the order of operations (what the
// deterministic mode fixes), never on vector width. Integer sum/prod wrap (two's complement,
// as NCCL); kAvg reduces like kSum and finalize_average divides at the end (integers truncate
// toward zero). min/max of NaN follow std::fmin/fmax-free semantics: `a < b ? a : b` element by
// element (NCCL's), so a NaN in `in` propagates only where it is compared first.
//
// Threading: pure functions, no state. Hot path: no allocation, no exceptions.
#include <cstddef>
#include <cstdint>

#include "collectives/types.h"

namespace detwan::collectives::reduce {

// acc[i] = acc[i] OP in[i] for i < count. acc and in may not overlap partially (equal is ok).
void reduce_inplace(void* acc, const void* in, size_t count, DataType type, ReduceOp op);
// out[i] = a[i] OP b[i]; out may equal a or b.
void reduce_to(void* out, const void* a, const void* b, size_t count, DataType type,
               ReduceOp op);
// For kAvg: buf[i] = buf[i] / nranks. No-op for the other ops.
void finalize_average(void* buf, size_t count, DataType type, ReduceOp op, int nranks);

// IEEE binary16 / bfloat16 <-> float, round to nearest even, NaN/Inf preserved.
[[nodiscard]] float half_to_float(uint16_t bits);
[[nodiscard]] uint16_t float_to_half(float value);
[[nodiscard]] float bfloat16_to_float(uint16_t bits);
[[nodiscard]] uint16_t float_to_bfloat16(float value);

}  // namespace detwan::collectives::reduce

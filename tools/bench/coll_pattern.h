#pragma once
// `-c 1`: every rank fills its input with a pattern known to every other rank, and counts the
// output elements that differ from the expected result.
//
// The values are small non-negative integers depending on (rank, index), bounded per data
// type, op and rank count so that every partial result of any reduction order is exact in
// that type (half: integers <= 2048, bfloat16 <= 256; products are powers of two below the
// type's limit; integers never wrap). So sum, prod, min, max are compared bit-exactly in every
// type whatever algorithm ran; only avg of floating types (a division at the end) is compared
// with a tolerance of 2 units of the type's precision.
//
// The expected values are computed here independently of the library's reduction kernels
// (own half/bfloat16 conversions), so a bug there is caught, not reproduced.
#include <cstddef>
#include <cstdint>

#include "collectives/types.h"
#include "tools/bench/coll_sizes.h"

namespace detwan::bench {

struct PatternSpec {
  Collective collective = Collective::kAllReduce;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int nranks = 1;
  int root = 0;
};

// The (exact, small) input element `index` of `rank`.
[[nodiscard]] double pattern_value(const PatternSpec& spec, int rank, size_t index);
// The reduction over all ranks of pattern_value(q, index), exact (avg: sum / nranks, with
// integer types truncating toward zero), before rounding to the type.
[[nodiscard]] double reduced_value(const PatternSpec& spec, size_t index);

// Writes send_count elements of `rank`'s input into `send`.
void fill_input(const PatternSpec& spec, int rank, void* send, size_t send_count);
// Sets recv_count elements to a value no correct result has (all bits one: -1 / max / NaN),
// so that an element the collective never wrote is counted.
void poison_output(DataType type, void* recv, size_t recv_count);
// The elements of `rank`'s output (shape as shape_for(spec.collective, ...)) that differ from
// the expected result. Outputs the collective leaves unspecified (reduce on a non-root rank)
// count 0.
[[nodiscard]] uint64_t count_wrong(const PatternSpec& spec, int rank, const Shape& shape,
                                   const void* recv);

// Element conversions of the reference (round to nearest even; NaN/Inf preserved).
[[nodiscard]] uint16_t reference_float_to_half(float value);
[[nodiscard]] float reference_half_to_float(uint16_t bits);
[[nodiscard]] uint16_t reference_float_to_bfloat16(float value);
[[nodiscard]] float reference_bfloat16_to_float(uint16_t bits);
// Reads element `index` of a buffer of `type` as a double (integers exactly up to 2^53).
[[nodiscard]] double load_element(DataType type, const void* buf, size_t index);
// Writes `value` (rounded / wrapped to the type) as element `index`.
void store_element(DataType type, void* buf, size_t index, double value);

}  // namespace detwan::bench

#include "tools/bench/coll_pattern.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace detwan::bench {
namespace {

using collectives::data_type_size;
using collectives::is_floating;

// A multiplicative mix, so that the pattern has no short period: a block delivered at an
// offset that is a multiple of some small period would otherwise go unnoticed.
uint64_t mix(uint64_t index, uint64_t salt) {
  uint64_t z = index * 0x9E3779B97F4A7C15ULL + salt * 0xBF58476D1CE4E5B9ULL + 0x94D049BB133111EBULL;
  z ^= z >> 31;
  z *= 0xD6E9853C4A5B7E5BULL;
  return z ^ (z >> 29);
}

// Largest integer every value and every partial sum may reach in the type: exact there, and
// never the all-ones poison (uint8 255).
uint64_t exact_cap(DataType type) {
  switch (type) {
    case DataType::kInt8: return 127;
    case DataType::kUint8: return 254;
    case DataType::kFloat16: return 2048;
    case DataType::kBfloat16: return 256;
    default: return uint64_t{1} << 20;
  }
}

// Largest power of two (as exponent) a product may reach without leaving the exact range.
uint64_t max_product_exponent(DataType type) {
  switch (type) {
    case DataType::kInt8: return 6;
    case DataType::kUint8: return 7;
    case DataType::kInt32: return 30;
    case DataType::kUint32: return 31;
    case DataType::kFloat16: return 15;
    default: return 60;
  }
}

uint64_t ranks_of(const PatternSpec& spec) {
  return static_cast<uint64_t>(std::max(spec.nranks, 1));
}

// Values in [0, max_value] for sum/avg: n ranks sum to at most the cap.
uint64_t sum_max_value(const PatternSpec& spec) {
  return std::min<uint64_t>(4, exact_cap(spec.type) / ranks_of(spec));
}

// prod: value 2 where (mix(index) + rank) % period == 0, else 1: at most ceil(n / period)
// factors of two per element.
uint64_t product_period(const PatternSpec& spec) {
  const uint64_t k = max_product_exponent(spec.type);
  return std::max<uint64_t>(3, (ranks_of(spec) + k - 1) / k);
}

double epsilon(DataType type) {
  switch (type) {
    case DataType::kFloat16: return std::ldexp(1.0, -10);
    case DataType::kBfloat16: return std::ldexp(1.0, -7);
    case DataType::kFloat32: return std::ldexp(1.0, -23);
    default: return std::ldexp(1.0, -52);
  }
}

// The expected value as the type holds it (rounded / wrapped), as a double.
double quantize(DataType type, double value) {
  alignas(8) unsigned char one[8];
  store_element(type, one, 0, value);
  return load_element(type, one, 0);
}

template <typename T>
T wrap_to(double value) {
  if constexpr (std::is_signed_v<T>) {
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(static_cast<int64_t>(value)));
  } else {
    return static_cast<T>(static_cast<uint64_t>(value));
  }
}

template <typename T>
T read_as(const void* buf, size_t index) {
  T value;
  std::memcpy(&value, static_cast<const unsigned char*>(buf) + index * sizeof(T), sizeof(T));
  return value;
}

template <typename T>
void write_as(void* buf, size_t index, T value) {
  std::memcpy(static_cast<unsigned char*>(buf) + index * sizeof(T), &value, sizeof(T));
}

bool matches(const PatternSpec& spec, double got, double expected) {
  if (spec.op == ReduceOp::kAvg && is_floating(spec.type) && has_reduce_op(spec.collective)) {
    return std::fabs(got - expected) <= 2 * epsilon(spec.type) * std::fabs(expected);
  }
  return got == expected;  // NaN (the poison) never matches
}

}  // namespace

double pattern_value(const PatternSpec& spec, int rank, size_t index) {
  const auto r = static_cast<uint64_t>(rank);
  if (!has_reduce_op(spec.collective) || spec.op == ReduceOp::kMax ||
      spec.op == ReduceOp::kMin) {
    const uint64_t top = std::min<uint64_t>(exact_cap(spec.type), 1000);
    return static_cast<double>(mix(index, r + 1) % (top + 1));
  }
  if (spec.op == ReduceOp::kProd) {
    return (mix(index, 0) + r) % product_period(spec) == 0 ? 2.0 : 1.0;
  }
  return static_cast<double>(mix(index, r + 1) % (sum_max_value(spec) + 1));
}

double reduced_value(const PatternSpec& spec, size_t index) {
  const int n = std::max(spec.nranks, 1);
  double acc = pattern_value(spec, 0, index);
  for (int q = 1; q < n; ++q) {
    const double v = pattern_value(spec, q, index);
    switch (spec.op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
    }
  }
  if (spec.op == ReduceOp::kAvg) {
    acc /= n;
    if (!is_floating(spec.type)) acc = std::trunc(acc);
  }
  return acc;
}

void fill_input(const PatternSpec& spec, int rank, void* send, size_t send_count) {
  for (size_t i = 0; i < send_count; ++i) {
    store_element(spec.type, send, i, pattern_value(spec, rank, i));
  }
}

void poison_output(DataType type, void* recv, size_t recv_count) {
  std::memset(recv, 0xFF, recv_count * data_type_size(type));
}

uint64_t count_wrong(const PatternSpec& spec, int rank, const Shape& shape, const void* recv) {
  const int n = std::max(spec.nranks, 1);
  const auto expected_at = [&](size_t j) -> double {
    switch (spec.collective) {
      case Collective::kAllReduce:
      case Collective::kReduce: return reduced_value(spec, j);
      case Collective::kBroadcast: return pattern_value(spec, spec.root, j);
      case Collective::kAllGather:
        return pattern_value(spec, static_cast<int>(j / shape.count), j % shape.count);
      case Collective::kReduceScatter:
        return reduced_value(spec, static_cast<size_t>(rank) * shape.count + j);
      case Collective::kAllToAll:
        return pattern_value(spec, static_cast<int>(j / shape.count),
                             static_cast<size_t>(rank) * shape.count + j % shape.count);
      case Collective::kSendRecv: return pattern_value(spec, (rank + n - 1) % n, j);
      case Collective::kBarrier: return 0;
    }
    return 0;
  };
  if (spec.collective == Collective::kReduce && rank != spec.root) return 0;
  uint64_t wrong = 0;
  for (size_t j = 0; j < shape.recv_count; ++j) {
    const double expected = quantize(spec.type, expected_at(j));
    if (!matches(spec, load_element(spec.type, recv, j), expected)) ++wrong;
  }
  return wrong;
}

uint16_t reference_float_to_half(float value) {
  const auto x = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint32_t>((x >> 16) & 0x8000U);
  const uint32_t exponent = (x >> 23) & 0xFFU;
  uint32_t mantissa = x & 0x7FFFFFU;
  if (exponent == 0xFF) {  // Inf stays Inf; NaN stays a (quiet) NaN
    return static_cast<uint16_t>(sign | 0x7C00U | (mantissa != 0 ? 0x200U | (mantissa >> 13) : 0));
  }
  const int e = static_cast<int>(exponent) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7C00U);
  if (e <= 0) {  // half subnormal (or zero): value = m * 2^-24
    if (e < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000U;
    const int shift = 14 - e;
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1U << shift) - 1);
    const uint32_t halfway = 1U << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1U) != 0)) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1FFFU;
  if (rest > 0x1000U || (rest == 0x1000U && (half & 1U) != 0)) ++half;  // may carry to Inf
  return static_cast<uint16_t>(half);
}

float reference_half_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000U) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1FU;
  const uint32_t mantissa = bits & 0x3FFU;
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000U | (mantissa << 13));
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t reference_float_to_bfloat16(float value) {
  const auto x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7FFFFFFFU) > 0x7F800000U) return static_cast<uint16_t>((x >> 16) | 0x40U);
  return static_cast<uint16_t>((x + 0x7FFFU + ((x >> 16) & 1U)) >> 16);
}

float reference_bfloat16_to_float(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

double load_element(DataType type, const void* buf, size_t index) {
  switch (type) {
    case DataType::kInt8: return read_as<int8_t>(buf, index);
    case DataType::kUint8: return read_as<uint8_t>(buf, index);
    case DataType::kInt32: return read_as<int32_t>(buf, index);
    case DataType::kUint32: return read_as<uint32_t>(buf, index);
    case DataType::kInt64: return static_cast<double>(read_as<int64_t>(buf, index));
    case DataType::kUint64: return static_cast<double>(read_as<uint64_t>(buf, index));
    case DataType::kFloat16: return reference_half_to_float(read_as<uint16_t>(buf, index));
    case DataType::kBfloat16: return reference_bfloat16_to_float(read_as<uint16_t>(buf, index));
    case DataType::kFloat32: return read_as<float>(buf, index);
    case DataType::kFloat64: return read_as<double>(buf, index);
  }
  return std::numeric_limits<double>::quiet_NaN();
}

void store_element(DataType type, void* buf, size_t index, double value) {
  switch (type) {
    case DataType::kInt8: write_as(buf, index, wrap_to<int8_t>(value)); break;
    case DataType::kUint8: write_as(buf, index, wrap_to<uint8_t>(value)); break;
    case DataType::kInt32: write_as(buf, index, wrap_to<int32_t>(value)); break;
    case DataType::kUint32: write_as(buf, index, wrap_to<uint32_t>(value)); break;
    case DataType::kInt64: write_as(buf, index, wrap_to<int64_t>(value)); break;
    case DataType::kUint64: write_as(buf, index, wrap_to<uint64_t>(value)); break;
    case DataType::kFloat16:
      write_as(buf, index, reference_float_to_half(static_cast<float>(value)));
      break;
    case DataType::kBfloat16:
      write_as(buf, index, reference_float_to_bfloat16(static_cast<float>(value)));
      break;
    case DataType::kFloat32: write_as(buf, index, static_cast<float>(value)); break;
    case DataType::kFloat64: write_as(buf, index, value); break;
  }
}

}  // namespace detwan::bench

#include "collectives/reduce/reduce.h"

#include <bit>
#include <cstring>
#include <type_traits>

// Kernels: one switch per call picks a (storage type, op) instantiation; the loop body loads and
// stores through std::memcpy because the buffers may be misaligned (user pointers + offsets),
// which compilers turn into plain (vectorisable) loads.

namespace detwan::collectives::reduce {
namespace {

// ---- fp16 / bf16 bit conversions (inline: used per element in the kernels) ---------------

inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in float.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(std::bit_cast<uint32_t>(magnitude) | sign);
  }
  if (exponent == 31) {  // Inf / NaN: keep the payload (a half sNaN round-trips bit-exactly)
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline uint16_t float_to_half_bits(float value) {
  const uint32_t f = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (f >> 16) & 0x8000u;
  uint32_t magnitude = f & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {
    if (magnitude == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
    // NaN: keep the top payload bits; force a non-zero mantissa so it stays a NaN.
    uint32_t payload = (magnitude >> 13) & 0x3ffu;
    if (payload == 0) payload = 0x200u;
    return static_cast<uint16_t>(sign | 0x7c00u | payload);
  }
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: Inf
  if (magnitude < 0x38800000u) {
    // Below the smallest normal half (2^-14): adding 0.5 aligns the value so the FPU's own
    // round-to-nearest-even drops exactly the bits below the half subnormal ulp (2^-24).
    const float shifted = std::bit_cast<float>(magnitude) + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(shifted) - 0x3f000000u));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even; a
  // carry out of the mantissa correctly bumps the exponent (up to Inf).
  const uint32_t odd = (magnitude >> 13) & 1u;
  magnitude += 0xc8000fffu + odd;
  return static_cast<uint16_t>(sign | (magnitude >> 13));
}

inline float bf16_bits_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t float_to_bf16_bits(float value) {
  const uint32_t f = std::bit_cast<uint32_t>(value);
  if ((f & 0x7fffffffu) > 0x7f800000u) {  // NaN: truncate, keep it a NaN
    uint32_t top = f >> 16;
    if ((top & 0x7fu) == 0) top |= 0x40u;
    return static_cast<uint16_t>(top);
  }
  const uint32_t odd = (f >> 16) & 1u;
  return static_cast<uint16_t>((f + 0x7fffu + odd) >> 16);  // carry into Inf is correct
}

// ---- element codecs: storage type <-> compute type -----------------------------------------

template <typename T>
struct Plain {
  using Storage = T;
  using Compute = T;
  static Compute load(Storage s) { return s; }
  static Storage store(Compute c) { return c; }
};
struct Half {
  using Storage = uint16_t;
  using Compute = float;
  static Compute load(Storage s) { return half_bits_to_float(s); }
  static Storage store(Compute c) { return float_to_half_bits(c); }
};
struct Bf16 {
  using Storage = uint16_t;
  using Compute = float;
  static Compute load(Storage s) { return bf16_bits_to_float(s); }
  static Storage store(Compute c) { return float_to_bf16_bits(c); }
};

// Integer sum/prod wrap: do the arithmetic in an unsigned type at least as wide as int, so
// neither the signed overflow nor the promotion of small types to int is undefined.
template <typename T>
using WideUnsigned =
    std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <typename T>
inline T add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<WideUnsigned<T>>(a) + static_cast<WideUnsigned<T>>(b));
  } else {
    return a + b;
  }
}
template <typename T>
inline T mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<WideUnsigned<T>>(a) * static_cast<WideUnsigned<T>>(b));
  } else {
    return a * b;
  }
}

enum class Kind { kSum, kProd, kMax, kMin };

template <typename Codec, Kind kKind>
inline typename Codec::Storage combine(typename Codec::Storage a, typename Codec::Storage b) {
  const auto x = Codec::load(a);
  const auto y = Codec::load(b);
  if constexpr (kKind == Kind::kSum) return Codec::store(add(x, y));
  if constexpr (kKind == Kind::kProd) return Codec::store(mul(x, y));
  // min/max select one operand's bits unchanged (no rounding, NaN payloads intact).
  if constexpr (kKind == Kind::kMax) return x > y ? a : b;
  if constexpr (kKind == Kind::kMin) return x < y ? a : b;
}

// Elements go through fixed-size local blocks: the block loop has a constant trip count and
// no aliasing (out may equal a or b), which is what lets the compiler vectorise it at -O2.
inline constexpr size_t kBlockElems = 64;

template <typename Codec, Kind kKind>
void kernel(std::byte* out, const std::byte* a, const std::byte* b, size_t count) {
  using S = typename Codec::Storage;
  size_t i = 0;
  for (; i + kBlockElems <= count; i += kBlockElems) {
    S x[kBlockElems];
    S y[kBlockElems];
    S r[kBlockElems];
    std::memcpy(x, a + i * sizeof(S), sizeof(x));
    std::memcpy(y, b + i * sizeof(S), sizeof(y));
    for (size_t j = 0; j < kBlockElems; ++j) r[j] = combine<Codec, kKind>(x[j], y[j]);
    std::memcpy(out + i * sizeof(S), r, sizeof(r));
  }
  for (; i < count; ++i) {
    S x;
    S y;
    std::memcpy(&x, a + i * sizeof(S), sizeof(S));
    std::memcpy(&y, b + i * sizeof(S), sizeof(S));
    const S r = combine<Codec, kKind>(x, y);
    std::memcpy(out + i * sizeof(S), &r, sizeof(S));
  }
}

using KernelFn = void (*)(std::byte*, const std::byte*, const std::byte*, size_t);

template <typename Codec>
KernelFn kernel_for_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return &kernel<Codec, Kind::kSum>;
    case ReduceOp::kProd:
      return &kernel<Codec, Kind::kProd>;
    case ReduceOp::kMax:
      return &kernel<Codec, Kind::kMax>;
    case ReduceOp::kMin:
      return &kernel<Codec, Kind::kMin>;
  }
  return nullptr;
}

KernelFn kernel_for(DataType type, ReduceOp op) {
  switch (type) {
    case DataType::kInt8:
      return kernel_for_op<Plain<int8_t>>(op);
    case DataType::kUint8:
      return kernel_for_op<Plain<uint8_t>>(op);
    case DataType::kInt32:
      return kernel_for_op<Plain<int32_t>>(op);
    case DataType::kUint32:
      return kernel_for_op<Plain<uint32_t>>(op);
    case DataType::kInt64:
      return kernel_for_op<Plain<int64_t>>(op);
    case DataType::kUint64:
      return kernel_for_op<Plain<uint64_t>>(op);
    case DataType::kFloat16:
      return kernel_for_op<Half>(op);
    case DataType::kBfloat16:
      return kernel_for_op<Bf16>(op);
    case DataType::kFloat32:
      return kernel_for_op<Plain<float>>(op);
    case DataType::kFloat64:
      return kernel_for_op<Plain<double>>(op);
  }
  return nullptr;
}

// ---- average ------------------------------------------------------------------------------

template <typename Codec>
void divide(std::byte* buf, size_t count, int nranks) {
  using S = typename Codec::Storage;
  using C = typename Codec::Compute;
  // Integers: C++ division truncates toward zero. Floats: one correctly rounded division (for
  // fp16/bf16 in float, then rounded to nearest even like every other op).
  const C divisor = static_cast<C>(nranks);
  for (size_t i = 0; i < count; ++i) {
    S s;
    std::memcpy(&s, buf + i * sizeof(S), sizeof(S));
    const S r = Codec::store(static_cast<C>(Codec::load(s) / divisor));
    std::memcpy(buf + i * sizeof(S), &r, sizeof(S));
  }
}

}  // namespace

void reduce_inplace(void* acc, const void* in, size_t count, DataType type, ReduceOp op) {
  reduce_to(acc, acc, in, count, type, op);
}

void reduce_to(void* out, const void* a, const void* b, size_t count, DataType type, ReduceOp op) {
  if (count == 0) return;
  const KernelFn fn = kernel_for(type, op);
  if (fn == nullptr) return;  // enum value out of range: callers validate types and ops
  fn(static_cast<std::byte*>(out), static_cast<const std::byte*>(a),
     static_cast<const std::byte*>(b), count);
}

void finalize_average(void* buf, size_t count, DataType type, ReduceOp op, int nranks) {
  if (op != ReduceOp::kAvg || count == 0 || nranks <= 1) return;
  auto* bytes = static_cast<std::byte*>(buf);
  switch (type) {
    case DataType::kInt8:
      return divide<Plain<int8_t>>(bytes, count, nranks);
    case DataType::kUint8:
      return divide<Plain<uint8_t>>(bytes, count, nranks);
    case DataType::kInt32:
      return divide<Plain<int32_t>>(bytes, count, nranks);
    case DataType::kUint32:
      return divide<Plain<uint32_t>>(bytes, count, nranks);
    case DataType::kInt64:
      return divide<Plain<int64_t>>(bytes, count, nranks);
    case DataType::kUint64:
      return divide<Plain<uint64_t>>(bytes, count, nranks);
    case DataType::kFloat16:
      return divide<Half>(bytes, count, nranks);
    case DataType::kBfloat16:
      return divide<Bf16>(bytes, count, nranks);
    case DataType::kFloat32:
      return divide<Plain<float>>(bytes, count, nranks);
    case DataType::kFloat64:
      return divide<Plain<double>>(bytes, count, nranks);
  }
}

float half_to_float(uint16_t bits) { return half_bits_to_float(bits); }
uint16_t float_to_half(float value) { return float_to_half_bits(value); }
float bfloat16_to_float(uint16_t bits) { return bf16_bits_to_float(bits); }
uint16_t float_to_bfloat16(float value) { return float_to_bf16_bits(value); }

}  // namespace detwan::collectives::reduce

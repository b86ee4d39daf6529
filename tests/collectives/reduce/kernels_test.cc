// reduce_inplace / reduce_to / finalize_average for every DataType x ReduceOp against a scalar
// reference, over unaligned buffers, counts 0/1/odd/large, aliasing (out == a, out == b).
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "collectives/reduce/reduce.h"
#include "collectives/types.h"

namespace detwan::collectives::reduce {
namespace {

constexpr DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,    DataType::kInt32,
                                  DataType::kUint32,  DataType::kInt64,    DataType::kUint64,
                                  DataType::kFloat16, DataType::kBfloat16, DataType::kFloat32,
                                  DataType::kFloat64};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin,
                                ReduceOp::kAvg};

// Scalar reference for one element (stored as raw bytes of `type`), written from the contract.
template <typename T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
void store(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

template <typename T>
T ref_int(T a, T b, ReduceOp op) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return static_cast<T>(static_cast<uint64_t>(static_cast<U>(a)) +
                            static_cast<uint64_t>(static_cast<U>(b)));
    case ReduceOp::kProd:
      return static_cast<T>(static_cast<uint64_t>(static_cast<U>(a)) *
                            static_cast<uint64_t>(static_cast<U>(b)));
    case ReduceOp::kMax:
      return a > b ? a : b;
    case ReduceOp::kMin:
      return a < b ? a : b;
  }
  return 0;
}
template <typename T>
T ref_float(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return a + b;
    case ReduceOp::kProd:
      return a * b;
    case ReduceOp::kMax:
      return a > b ? a : b;
    case ReduceOp::kMin:
      return a < b ? a : b;
  }
  return 0;
}
// fp16/bf16: compute in float, round once per op; min/max return an operand's bits.
uint16_t ref_narrow(uint16_t a, uint16_t b, ReduceOp op, bool bf16) {
  const auto to_f = bf16 ? bfloat16_to_float : half_to_float;
  const auto from_f = bf16 ? float_to_bfloat16 : float_to_half;
  const float x = to_f(a);
  const float y = to_f(b);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return from_f(x + y);
    case ReduceOp::kProd:
      return from_f(x * y);
    case ReduceOp::kMax:
      return x > y ? a : b;
    case ReduceOp::kMin:
      return x < y ? a : b;
  }
  return 0;
}

void ref_element(std::byte* out, const std::byte* a, const std::byte* b, DataType type,
                 ReduceOp op) {
  switch (type) {
    case DataType::kInt8:
      return store(out, ref_int(load<int8_t>(a), load<int8_t>(b), op));
    case DataType::kUint8:
      return store(out, ref_int(load<uint8_t>(a), load<uint8_t>(b), op));
    case DataType::kInt32:
      return store(out, ref_int(load<int32_t>(a), load<int32_t>(b), op));
    case DataType::kUint32:
      return store(out, ref_int(load<uint32_t>(a), load<uint32_t>(b), op));
    case DataType::kInt64:
      return store(out, ref_int(load<int64_t>(a), load<int64_t>(b), op));
    case DataType::kUint64:
      return store(out, ref_int(load<uint64_t>(a), load<uint64_t>(b), op));
    case DataType::kFloat16:
      return store(out, ref_narrow(load<uint16_t>(a), load<uint16_t>(b), op, false));
    case DataType::kBfloat16:
      return store(out, ref_narrow(load<uint16_t>(a), load<uint16_t>(b), op, true));
    case DataType::kFloat32:
      return store(out, ref_float(load<float>(a), load<float>(b), op));
    case DataType::kFloat64:
      return store(out, ref_float(load<double>(a), load<double>(b), op));
  }
}

// Random element values: integers over their full range (wrap-around happens), floats as
// moderate finite values so sums/products stay meaningful.
void fill_random(std::byte* p, size_t count, DataType type, std::mt19937_64& rng) {
  const size_t size = data_type_size(type);
  std::uniform_real_distribution<double> value(-100.0, 100.0);
  for (size_t i = 0; i < count; ++i) {
    std::byte* e = p + i * size;
    switch (type) {
      case DataType::kFloat16:
        store(e, float_to_half(static_cast<float>(value(rng))));
        break;
      case DataType::kBfloat16:
        store(e, float_to_bfloat16(static_cast<float>(value(rng))));
        break;
      case DataType::kFloat32:
        store(e, static_cast<float>(value(rng)));
        break;
      case DataType::kFloat64:
        store(e, value(rng));
        break;
      default: {
        const uint64_t bits = rng();
        std::memcpy(e, &bits, size);
      }
    }
  }
}

struct Case {
  DataType type;
  ReduceOp op;
};
std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(to_string(info.param.type)) + "_" + std::string(to_string(info.param.op));
}
std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (auto t : kAllTypes) {
    for (auto o : kAllOps) out.push_back({t, o});
  }
  return out;
}

class KernelTest : public ::testing::TestWithParam<Case> {};

// Buffers offset by `misalign` bytes inside a larger allocation with guard bytes after the
// end, so out-of-range writes and alignment assumptions both show.
TEST_P(KernelTest, MatchesReferenceUnalignedAllCounts) {
  const auto [type, op] = GetParam();
  const size_t size = data_type_size(type);
  std::mt19937_64 rng(static_cast<uint64_t>(type) * 31 + static_cast<uint64_t>(op));
  constexpr std::byte kGuard{0xa5};
  for (size_t count :
       {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{1023}, size_t{4096 + 3}}) {
    for (size_t misalign : {size_t{0}, size_t{1}, size_t{3}}) {
      const size_t bytes = count * size;
      std::vector<std::byte> a(bytes + 16, kGuard);
      std::vector<std::byte> b(bytes + 16, kGuard);
      std::vector<std::byte> out(bytes + 16, kGuard);
      std::byte* pa = a.data() + misalign;
      std::byte* pb = b.data() + misalign;
      std::byte* po = out.data() + misalign;
      fill_random(pa, count, type, rng);
      fill_random(pb, count, type, rng);
      std::vector<std::byte> expected(bytes + 1);
      for (size_t i = 0; i < count; ++i) {
        ref_element(expected.data() + i * size, pa + i * size, pb + i * size, type, op);
      }
      const std::string where =
          "count " + std::to_string(count) + " misalign " + std::to_string(misalign);
      // out separate
      reduce_to(po, pa, pb, count, type, op);
      ASSERT_EQ(std::memcmp(po, expected.data(), bytes), 0) << where;
      for (size_t i = misalign + bytes; i < out.size(); ++i) ASSERT_EQ(out[i], kGuard) << where;
      for (size_t i = 0; i < misalign; ++i) ASSERT_EQ(out[i], kGuard) << where;
      // out == b
      std::vector<std::byte> b_copy(b);
      reduce_to(b_copy.data() + misalign, pa, b_copy.data() + misalign, count, type, op);
      ASSERT_EQ(std::memcmp(b_copy.data() + misalign, expected.data(), bytes), 0) << where;
      // reduce_inplace (acc == a)
      reduce_inplace(pa, pb, count, type, op);
      ASSERT_EQ(std::memcmp(pa, expected.data(), bytes), 0) << where;
      for (size_t i = misalign + bytes; i < a.size(); ++i) ASSERT_EQ(a[i], kGuard) << where;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypesAllOps, KernelTest, ::testing::ValuesIn(all_cases()), case_name);

TEST(Kernel, IntegerSumAndProdWrapAround) {
  int8_t i8[2] = {127, -128};
  const int8_t i8_in[2] = {1, -1};
  reduce_inplace(i8, i8_in, 2, DataType::kInt8, ReduceOp::kSum);
  EXPECT_EQ(i8[0], -128);
  EXPECT_EQ(i8[1], 127);
  uint8_t u8[2] = {255, 16};
  const uint8_t u8_in[2] = {1, 16};
  reduce_inplace(u8, u8_in, 2, DataType::kUint8, ReduceOp::kProd);
  EXPECT_EQ(u8[0], 255);
  EXPECT_EQ(u8[1], 0);  // 256 wraps
  int32_t i32[2] = {std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()};
  const int32_t i32_in[2] = {1, -1};
  reduce_inplace(i32, i32_in, 2, DataType::kInt32, ReduceOp::kSum);
  EXPECT_EQ(i32[0], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(i32[1], std::numeric_limits<int32_t>::max());
  int64_t i64 = std::numeric_limits<int64_t>::max();
  const int64_t two = 2;
  reduce_inplace(&i64, &two, 1, DataType::kInt64, ReduceOp::kProd);
  EXPECT_EQ(i64, -2);
  uint64_t u64 = std::numeric_limits<uint64_t>::max();
  const uint64_t one = 1;
  reduce_inplace(&u64, &one, 1, DataType::kUint64, ReduceOp::kSum);
  EXPECT_EQ(u64, 0u);
  uint32_t u32 = 0x80000000u;
  const uint32_t u32_two = 2;
  reduce_inplace(&u32, &u32_two, 1, DataType::kUint32, ReduceOp::kProd);
  EXPECT_EQ(u32, 0u);
}

TEST(Kernel, HalfRoundsAfterEveryOp) {
  // 2048 + 1 is not representable in fp16 (tie, rounds to even 2048); adding 1 twice therefore
  // stays at 2048, while adding 2 once gives 2050.
  uint16_t acc = float_to_half(2048.0f);
  const uint16_t one = float_to_half(1.0f);
  reduce_inplace(&acc, &one, 1, DataType::kFloat16, ReduceOp::kSum);
  reduce_inplace(&acc, &one, 1, DataType::kFloat16, ReduceOp::kSum);
  EXPECT_EQ(half_to_float(acc), 2048.0f);
  uint16_t bf = float_to_bfloat16(256.0f);
  const uint16_t bf_one = float_to_bfloat16(1.0f);
  reduce_inplace(&bf, &bf_one, 1, DataType::kBfloat16, ReduceOp::kSum);
  EXPECT_EQ(bfloat16_to_float(bf), 256.0f);
  uint16_t big = float_to_half(60000.0f);
  reduce_inplace(&big, &big, 1, DataType::kFloat16, ReduceOp::kSum);  // acc == in allowed
  EXPECT_TRUE(std::isinf(half_to_float(big)));
}

TEST(Kernel, MinMaxNanAndInf) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  float acc[3] = {1.0f, nan, -inf};
  const float in[3] = {nan, 1.0f, 5.0f};
  float out[3];
  reduce_to(out, acc, in, 3, DataType::kFloat32, ReduceOp::kMax);
  // a > b ? a : b: a comparison with NaN is false, so `in` (b) is chosen.
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_EQ(out[1], 1.0f);
  EXPECT_EQ(out[2], 5.0f);
  reduce_to(out, acc, in, 3, DataType::kFloat32, ReduceOp::kMin);
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_EQ(out[1], 1.0f);
  EXPECT_EQ(out[2], -inf);
  uint16_t h[2] = {float_to_half(-3.0f), float_to_half(inf)};
  const uint16_t h_in[2] = {float_to_half(2.0f), float_to_half(1.0f)};
  reduce_inplace(h, h_in, 2, DataType::kFloat16, ReduceOp::kMin);
  EXPECT_EQ(half_to_float(h[0]), -3.0f);
  EXPECT_EQ(half_to_float(h[1]), 1.0f);
  double d = -0.0;
  const double d_in = 7.5;
  reduce_inplace(&d, &d_in, 1, DataType::kFloat64, ReduceOp::kProd);
  EXPECT_EQ(d, -0.0);
  EXPECT_TRUE(std::signbit(d));
}

TEST(FinalizeAverage, IntegersTruncateTowardZero) {
  int32_t i32[4] = {-7, 7, -1, std::numeric_limits<int32_t>::min()};
  finalize_average(i32, 4, DataType::kInt32, ReduceOp::kAvg, 2);
  EXPECT_EQ(i32[0], -3);
  EXPECT_EQ(i32[1], 3);
  EXPECT_EQ(i32[2], 0);
  EXPECT_EQ(i32[3], std::numeric_limits<int32_t>::min() / 2);
  int8_t i8[2] = {-128, 127};
  finalize_average(i8, 2, DataType::kInt8, ReduceOp::kAvg, 3);
  EXPECT_EQ(i8[0], -42);
  EXPECT_EQ(i8[1], 42);
  uint64_t u64 = std::numeric_limits<uint64_t>::max();
  finalize_average(&u64, 1, DataType::kUint64, ReduceOp::kAvg, 8);
  EXPECT_EQ(u64, std::numeric_limits<uint64_t>::max() / 8);
  uint8_t u8 = 255;
  finalize_average(&u8, 1, DataType::kUint8, ReduceOp::kAvg, 7);
  EXPECT_EQ(u8, 36);
  int64_t i64 = -9;
  finalize_average(&i64, 1, DataType::kInt64, ReduceOp::kAvg, 4);
  EXPECT_EQ(i64, -2);
  uint32_t u32 = 10;
  finalize_average(&u32, 1, DataType::kUint32, ReduceOp::kAvg, 3);
  EXPECT_EQ(u32, 3u);
}

TEST(FinalizeAverage, FloatsRoundOnce) {
  float f[2] = {1.0f, 10.0f};
  finalize_average(f, 2, DataType::kFloat32, ReduceOp::kAvg, 3);
  EXPECT_EQ(f[0], 1.0f / 3.0f);
  EXPECT_EQ(f[1], 10.0f / 3.0f);
  double d = 1.0;
  finalize_average(&d, 1, DataType::kFloat64, ReduceOp::kAvg, 3);
  EXPECT_EQ(d, 1.0 / 3.0);
  // Unaligned fp16 / bf16 buffers.
  std::vector<std::byte> raw(5);
  const uint16_t h = float_to_half(1.0f);
  std::memcpy(raw.data() + 1, &h, 2);
  const uint16_t b = float_to_bfloat16(1.0f);
  std::memcpy(raw.data() + 3, &b, 2);
  finalize_average(raw.data() + 1, 1, DataType::kFloat16, ReduceOp::kAvg, 3);
  finalize_average(raw.data() + 3, 1, DataType::kBfloat16, ReduceOp::kAvg, 3);
  uint16_t h_out;
  uint16_t b_out;
  std::memcpy(&h_out, raw.data() + 1, 2);
  std::memcpy(&b_out, raw.data() + 3, 2);
  EXPECT_EQ(h_out, float_to_half(1.0f / 3.0f));
  EXPECT_EQ(b_out, float_to_bfloat16(1.0f / 3.0f));
}

TEST(FinalizeAverage, NoOpForOtherOpsAndSingleRank) {
  for (auto op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin}) {
    int32_t v = 9;
    finalize_average(&v, 1, DataType::kInt32, op, 4);
    EXPECT_EQ(v, 9) << to_string(op);
  }
  int32_t v = 9;
  finalize_average(&v, 1, DataType::kInt32, ReduceOp::kAvg, 1);
  EXPECT_EQ(v, 9);
  finalize_average(nullptr, 0, DataType::kInt32, ReduceOp::kAvg, 4);  // count 0: untouched
}

TEST(Kernel, CountZeroTouchesNothing) {
  for (auto type : kAllTypes) {
    for (auto op : kAllOps) {
      reduce_to(nullptr, nullptr, nullptr, 0, type, op);
      reduce_inplace(nullptr, nullptr, 0, type, op);
    }
  }
  SUCCEED();
}

}  // namespace
}  // namespace detwan::collectives::reduce

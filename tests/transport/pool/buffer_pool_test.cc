// BufferPool: a handed-back buffer is given to the next message that fits it (smallest fit, not
// one much larger), and the pool never keeps more than its count and byte limits.
#include <gtest/gtest.h>

#include "transport/buffer_pool.h"

namespace detwan::transport {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

std::vector<std::byte> buffer_of(size_t capacity_bytes) {
  std::vector<std::byte> out;
  out.reserve(capacity_bytes);
  out.resize(capacity_bytes / 2);  // a used buffer: take() must hand it back empty
  return out;
}

TEST(BufferPool, EmptyPoolAllocatesAReservedBuffer) {
  BufferPool pool;
  auto b = pool.take(3 * kMiB);
  EXPECT_TRUE(b.empty());
  EXPECT_GE(b.capacity(), 3 * kMiB);
  EXPECT_EQ(pool.reused(), 0u);
}

TEST(BufferPool, HandedBackBufferIsReusedEmpty) {
  BufferPool pool;
  auto b = buffer_of(2 * kMiB);
  const std::byte* memory = b.data();
  pool.put(std::move(b));
  EXPECT_EQ(pool.kept_bytes(), 2 * kMiB);
  auto again = pool.take(2 * kMiB);
  EXPECT_EQ(again.data(), memory);
  EXPECT_TRUE(again.empty());
  EXPECT_EQ(pool.reused(), 1u);
  EXPECT_EQ(pool.kept_bytes(), 0u);
  // Taken: the next request allocates.
  auto fresh = pool.take(2 * kMiB);
  EXPECT_NE(fresh.data(), memory);
  EXPECT_EQ(pool.reused(), 1u);
}

TEST(BufferPool, SmallestFittingBufferIsChosen) {
  BufferPool pool;
  auto big = buffer_of(8 * kMiB);
  auto mid = buffer_of(3 * kMiB);
  auto small = buffer_of(1 * kMiB);
  const std::byte* mid_memory = mid.data();
  pool.put(std::move(big));
  pool.put(std::move(mid));
  pool.put(std::move(small));
  auto got = pool.take(2 * kMiB);  // 1 MiB too small, 3 MiB fits best
  EXPECT_EQ(got.data(), mid_memory);
  EXPECT_GE(got.capacity(), 2 * kMiB);
}

TEST(BufferPool, MuchLargerBufferIsNotPinnedBySmallMessages) {
  BufferPool pool;
  auto big = buffer_of(16 * kMiB);
  const std::byte* big_memory = big.data();
  pool.put(std::move(big));
  auto small = pool.take(1 * kMiB);  // 16 MiB > 4 x 1 MiB: left for a larger message
  EXPECT_NE(small.data(), big_memory);
  EXPECT_EQ(pool.reused(), 0u);
  auto large = pool.take(5 * kMiB);
  EXPECT_EQ(large.data(), big_memory);
}

TEST(BufferPool, SmallBuffersAreNeitherKeptNorTakenFromThePool) {
  BufferPool pool;
  pool.put(buffer_of(BufferPool::kMinRecycledBytes - 1));
  EXPECT_EQ(pool.kept_bytes(), 0u);
  pool.put(buffer_of(BufferPool::kMinRecycledBytes));
  auto b = pool.take(100);
  EXPECT_EQ(pool.reused(), 0u);
  EXPECT_GE(b.capacity(), 100u);
}

TEST(BufferPool, CountAndByteLimitsHold) {
  BufferPool pool;
  for (size_t i = 0; i < BufferPool::kMaxBuffers + 3; ++i) pool.put(buffer_of(1 * kMiB));
  EXPECT_EQ(pool.kept_bytes(), BufferPool::kMaxBuffers * kMiB);
  BufferPool bytes_pool;
  const size_t each = BufferPool::kMaxBytes / 3 + 1;  // the third would pass the byte limit
  for (int i = 0; i < 3; ++i) bytes_pool.put(buffer_of(each));
  EXPECT_LE(bytes_pool.kept_bytes(), BufferPool::kMaxBytes);
  EXPECT_EQ(bytes_pool.kept_bytes() / each, 2u);
}

// take_sized: exactly the length asked for, in a kept buffer when one fits, whose old bytes
// are not zero-filled again (the caller overwrites them all); only bytes beyond the buffer's
// previous size are initialised.
TEST(BufferPool, TakeSizedReusesAKeptBufferWithoutZeroFilling) {
  BufferPool pool;
  std::vector<std::byte> used(3 * kMiB, std::byte{0xab});
  const std::byte* memory = used.data();
  pool.put(std::move(used));
  auto smaller = pool.take_sized(2 * kMiB);
  EXPECT_EQ(smaller.data(), memory);
  ASSERT_EQ(smaller.size(), 2 * kMiB);
  EXPECT_EQ(smaller[0], std::byte{0xab});  // not cleared
  EXPECT_EQ(smaller[2 * kMiB - 1], std::byte{0xab});
  EXPECT_EQ(pool.reused(), 1u);
  pool.put(std::move(smaller));  // size 2 MiB, capacity 3 MiB
  auto larger = pool.take_sized(3 * kMiB);
  EXPECT_EQ(larger.data(), memory);
  ASSERT_EQ(larger.size(), 3 * kMiB);
  EXPECT_EQ(larger[2 * kMiB - 1], std::byte{0xab});
  EXPECT_EQ(larger[2 * kMiB], std::byte{0});  // beyond the old size: initialised
  EXPECT_EQ(pool.reused(), 2u);
}

TEST(BufferPool, TakeSizedAllocatesWhenNothingFits) {
  BufferPool pool;
  pool.put(std::vector<std::byte>(kMiB));
  auto big = pool.take_sized(8 * kMiB);  // more than any kept buffer
  EXPECT_EQ(big.size(), 8 * kMiB);
  auto tiny = pool.take_sized(100);  // below kMinRecycledBytes: never from the pool
  EXPECT_EQ(tiny.size(), 100u);
  EXPECT_EQ(pool.reused(), 0u);
  EXPECT_EQ(pool.kept_bytes(), kMiB);
}

}  // namespace
}  // namespace detwan::transport

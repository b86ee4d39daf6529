#include "transport/shm/ring.h"

#include <atomic>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "tests/transport/shm/test_util.h"

namespace detwan::transport::shm {
namespace {

using testing::random_bytes;

struct RingFixture {
  explicit RingFixture(uint64_t capacity)
      : data(capacity),
        producer(&indices, data.data(), capacity),
        consumer(&indices, data.data(), capacity) {}
  RingIndices indices{};
  std::vector<std::byte> data;
  RingProducer producer;
  RingConsumer consumer;
};

// A byte stream pushed through rings of odd capacities in random-sized pieces (so every write
// and read position wraps many times) comes out unchanged.
TEST(ShmRing, WrapAroundWithOddSizes) {
  std::mt19937_64 rng(42);
  for (uint64_t capacity : {1ULL, 7ULL, 97ULL, 1000ULL, 4099ULL}) {
    RingFixture ring(capacity);
    const std::vector<std::byte> input = random_bytes(50'000, capacity);
    std::vector<std::byte> output;
    size_t written = 0;
    while (output.size() < input.size()) {
      uint64_t free_bytes = 0;
      ASSERT_EQ(ring.producer.refresh(free_bytes), Status::kOk);
      const size_t piece = std::min<size_t>(rng() % (2 * capacity + 3), input.size() - written);
      const size_t n = ring.producer.write(std::span(input).subspan(written, piece));
      EXPECT_EQ(n, std::min<uint64_t>(piece, free_bytes));
      written += n;
      ring.producer.publish();
      uint64_t available = 0;
      ASSERT_EQ(ring.consumer.refresh(available), Status::kOk);
      EXPECT_EQ(available, written - output.size());
      EXPECT_LE(available, capacity);
      std::vector<std::byte> out(rng() % (2 * capacity + 3));
      out.resize(ring.consumer.read(out));
      output.insert(output.end(), out.begin(), out.end());
      ring.consumer.publish();
    }
    EXPECT_EQ(output, input) << "capacity " << capacity;
  }
}

TEST(ShmRing, FullRingAcceptsNothingUntilRead) {
  RingFixture ring(10);
  const std::vector<std::byte> input = random_bytes(25, 1);
  uint64_t free_bytes = 0;
  ASSERT_EQ(ring.producer.refresh(free_bytes), Status::kOk);
  EXPECT_EQ(free_bytes, 10u);
  EXPECT_EQ(ring.producer.write(input), 10u);
  ring.producer.publish();
  ASSERT_EQ(ring.producer.refresh(free_bytes), Status::kOk);
  EXPECT_EQ(free_bytes, 0u);
  EXPECT_EQ(ring.producer.write(input), 0u);
  uint64_t available = 0;
  ASSERT_EQ(ring.consumer.refresh(available), Status::kOk);
  std::vector<std::byte> out(3);
  EXPECT_EQ(ring.consumer.read(out), 3u);
  // Not yet published: the producer still sees a full ring.
  ASSERT_EQ(ring.producer.refresh(free_bytes), Status::kOk);
  EXPECT_EQ(free_bytes, 0u);
  ring.consumer.publish();
  ASSERT_EQ(ring.producer.refresh(free_bytes), Status::kOk);
  EXPECT_EQ(free_bytes, 3u);
}

TEST(ShmRing, ConsumerRejectsImpossibleProducerIndex) {
  RingFixture ring(100);
  uint64_t available = 0;
  std::atomic_ref(ring.indices.head).store(101);  // more than the ring holds
  EXPECT_EQ(ring.consumer.refresh(available), Status::kMalformed);
  std::atomic_ref(ring.indices.head).store(60);
  ASSERT_EQ(ring.consumer.refresh(available), Status::kOk);
  EXPECT_EQ(available, 60u);
  std::atomic_ref(ring.indices.head).store(50);  // went backwards
  EXPECT_EQ(ring.consumer.refresh(available), Status::kMalformed);
  std::atomic_ref(ring.indices.head).store(~uint64_t{0});
  EXPECT_EQ(ring.consumer.refresh(available), Status::kMalformed);
}

TEST(ShmRing, ProducerRejectsImpossibleConsumerIndex) {
  RingFixture ring(100);
  const std::vector<std::byte> input = random_bytes(40, 2);
  uint64_t free_bytes = 0;
  ASSERT_EQ(ring.producer.refresh(free_bytes), Status::kOk);
  ASSERT_EQ(ring.producer.write(input), 40u);
  std::atomic_ref(ring.indices.tail).store(41);  // read more than was written
  EXPECT_EQ(ring.producer.refresh(free_bytes), Status::kMalformed);
  std::atomic_ref(ring.indices.tail).store(30);
  ASSERT_EQ(ring.producer.refresh(free_bytes), Status::kOk);
  EXPECT_EQ(free_bytes, 90u);
  std::atomic_ref(ring.indices.tail).store(20);  // went backwards
  EXPECT_EQ(ring.producer.refresh(free_bytes), Status::kMalformed);
}

}  // namespace
}  // namespace detwan::transport::shm

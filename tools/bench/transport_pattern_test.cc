// The benchmark's byte check must catch what a broken transport would do: a flipped byte, a
// segment at the wrong offset, a segment from another message, a message delivered twice.
#include "tools/bench/transport_pattern.h"

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "tools/bench/transport_report.h"

namespace detwan::bench {
namespace {

constexpr size_t kMessageBytes = 3 * MessagePattern::kBlockBytes + 12345;  // wraps the block
constexpr size_t kSegmentBytes = 1414;

std::vector<std::byte> message(const MessagePattern& p, uint64_t index, size_t bytes) {
  std::vector<std::byte> m(bytes);
  p.fill(index, 1000 + static_cast<int64_t>(index), m);
  return m;
}

TEST(MessagePattern, IntactMessagesVerify) {
  const MessagePattern p;
  for (uint64_t i : {0ULL, 1ULL, 77ULL, 1ULL << 40}) {
    auto m = message(p, i, kMessageBytes);
    const auto check = p.verify(i, m);
    EXPECT_EQ(check.wrong_bytes, 0U) << i;
    EXPECT_EQ(check.index, i);
    EXPECT_EQ(check.send_time_ns, 1000 + static_cast<int64_t>(i));
  }
  auto tiny = message(p, 5, MessagePattern::kHeaderBytes);
  EXPECT_EQ(p.verify(5, tiny).wrong_bytes, 0U);
}

TEST(MessagePattern, FlippedByteIsCounted) {
  const MessagePattern p;
  auto m = message(p, 3, kMessageBytes);
  m[kMessageBytes - 1] ^= std::byte{0x01};
  m[MessagePattern::kBlockBytes + 100] ^= std::byte{0x80};
  EXPECT_EQ(p.verify(3, m).wrong_bytes, 2U);
}

TEST(MessagePattern, SegmentAtWrongOffsetIsCounted) {
  const MessagePattern p;
  auto m = message(p, 9, kMessageBytes);
  // Segment 40 overwritten by segment 41: same message, neighbouring offset.
  std::memcpy(m.data() + 40 * kSegmentBytes, m.data() + 41 * kSegmentBytes, kSegmentBytes);
  EXPECT_GT(p.verify(9, m).wrong_bytes, kSegmentBytes / 2);
}

TEST(MessagePattern, SegmentFromAnotherMessageIsCounted) {
  const MessagePattern p;
  auto m = message(p, 10, kMessageBytes);
  const auto other = message(p, 11, kMessageBytes);
  std::memcpy(m.data() + 7 * kSegmentBytes, other.data() + 7 * kSegmentBytes, kSegmentBytes);
  EXPECT_GT(p.verify(10, m).wrong_bytes, kSegmentBytes / 2);
}

TEST(MessagePattern, MessageInWrongPlaceCountsEveryByte) {
  const MessagePattern p;
  const auto m = message(p, 4, 4096);
  const auto check = p.verify(5, m);  // message 4 delivered where 5 was expected
  EXPECT_EQ(check.index, 4U);
  EXPECT_EQ(check.wrong_bytes, 4096 - MessagePattern::kHeaderBytes);
  const std::vector<std::byte> runt(5);
  EXPECT_EQ(p.verify(0, runt).wrong_bytes, 5U);
}

TEST(SummarizeNs, NearestRankPercentiles) {
  std::vector<int64_t> v;
  for (int64_t i = 100; i >= 1; --i) v.push_back(i);
  const auto s = summarize_ns(v);
  EXPECT_EQ(s.at("count").to_number<int64_t>(), 100);
  EXPECT_EQ(s.at("min").to_number<int64_t>(), 1);
  EXPECT_EQ(s.at("p50").to_number<int64_t>(), 50);
  EXPECT_EQ(s.at("p99").to_number<int64_t>(), 99);
  EXPECT_EQ(s.at("max").to_number<int64_t>(), 100);
  EXPECT_DOUBLE_EQ(s.at("mean").to_number<double>(), 50.5);
  EXPECT_EQ(summarize_ns({}).at("count").to_number<int64_t>(), 0);
}

}  // namespace
}  // namespace detwan::bench

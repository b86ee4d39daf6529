#include "dataplane/sched/token_bucket.h"

#include <cstdint>
#include <limits>

#include <gtest/gtest.h>

#include "tests/dataplane/sched/sched_test_util.h"

namespace detwan::dataplane::sched {
namespace {

using testing::Random;

constexpr int64_t kUs = 1'000;
constexpr int64_t kSecond = 1'000'000'000;

// 8 Mbit/s = exactly one byte per microsecond.
TEST(PolicerTest, AdmitsRateTimesTimePlusBurstExactly) {
  Policer policer(8'000'000, 10'000, OverRateAction::kDrop, 0);
  uint64_t admitted = 0;
  // 1000-byte frames every 10 us: 100 Mbit/s offered, 12.5x the rate, for one second.
  for (int64_t t = 0; t <= kSecond; t += 10 * kUs) {
    if (policer.police(1'000, t) == PoliceVerdict::kConform) admitted += 1'000;
  }
  // rate * time + burst = 1'000'000 + 10'000 bytes, to the byte.
  EXPECT_EQ(admitted, 1'010'000u);
  EXPECT_EQ(policer.conform_bytes(), 1'010'000u);
  EXPECT_EQ(policer.conform_packets(), 1'010u);
  EXPECT_EQ(policer.conform_packets() + policer.exceed_packets(), 100'001u);
  EXPECT_EQ(policer.exceed_bytes(), 1'000u * policer.exceed_packets());
}

// Random sizes at random instants: at every instant the admitted bytes never exceed
// burst + rate * elapsed, and under sustained overload they trail it by less than one frame.
TEST(PolicerTest, NeverAdmitsMoreThanTheEnvelopeAndWastesNothingUnderOverload) {
  Random rng(7);
  const uint64_t rate_bps = 123'456'789;  // odd on purpose: fractions of a byte per ns
  const uint64_t burst = 20'000;
  Policer policer(rate_bps, burst, OverRateAction::kDrop, 0);
  uint64_t admitted = 0;
  int64_t t = 0;
  // Empty the initial burst at once, so that the bucket never sits full (and wastes nothing).
  while (policer.police(1500, 0) == PoliceVerdict::kConform) admitted += 1500;
  for (int i = 0; i < 200'000; ++i) {
    t += rng.exponential_ns(20.0 * kUs);  // ~ 3x overload with 750-byte average frames
    const auto bytes = static_cast<uint32_t>(rng.between(64, 1500));
    if (policer.police(bytes, t) == PoliceVerdict::kConform) admitted += bytes;
    // bytes * 8e9 <= burst * 8e9 + rate * t   (all in 1e-9 bit units, exact)
    ASSERT_LE(static_cast<Uint128>(admitted) * 8'000'000'000u,
              static_cast<Uint128>(burst) * 8'000'000'000u + static_cast<Uint128>(rate_bps) * t)
        << "at t=" << t;
  }
  // Drain what is left at t with max-size frames until one is refused.
  while (policer.police(1500, t) == PoliceVerdict::kConform) admitted += 1500;
  const Uint128 envelope = static_cast<Uint128>(burst) * 8'000'000'000u +
                           static_cast<Uint128>(rate_bps) * static_cast<uint64_t>(t);
  // Offered ~3x the rate with gaps far shorter than a burst's refill time, the bucket never
  // overflowed: every token up to t was used except less than one frame's worth.
  EXPECT_LT(envelope - static_cast<Uint128>(admitted) * 8'000'000'000u,
            static_cast<Uint128>(1500) * 8'000'000'000u);
}

TEST(PolicerTest, RefusedFramesTakeNoTokens) {
  Policer policer(8'000'000, 1'500, OverRateAction::kBestEffort, 0);
  EXPECT_EQ(policer.action(), OverRateAction::kBestEffort);
  EXPECT_EQ(policer.police(1'000, 0), PoliceVerdict::kConform);
  EXPECT_EQ(policer.police(1'000, 0), PoliceVerdict::kExceed);  // 500 left
  EXPECT_EQ(policer.police(500, 0), PoliceVerdict::kConform);   // still there
  EXPECT_EQ(policer.police(1, 0), PoliceVerdict::kExceed);
  EXPECT_EQ(policer.police(1, 1 * kUs), PoliceVerdict::kConform);  // 1 byte per us
  EXPECT_EQ(policer.exceed_packets(), 2u);
  EXPECT_EQ(policer.exceed_bytes(), 1'001u);
}

TEST(TokenBucketTest, FillsToBurstOnlyAndIgnoresTimeGoingBack) {
  TokenBucket bucket(8'000'000, 3'000, 0);
  EXPECT_EQ(bucket.available_bytes(0), 3'000u);
  EXPECT_TRUE(bucket.try_consume(3'000, 0));
  EXPECT_EQ(bucket.available_bytes(0), 0u);
  EXPECT_EQ(bucket.available_bytes(999), 0u);  // 0.999 bytes
  EXPECT_EQ(bucket.available_bytes(1'000), 1u);
  EXPECT_EQ(bucket.available_bytes(kSecond), 3'000u);  // capped at the burst
  EXPECT_TRUE(bucket.try_consume(1'000, 1'000 * kUs));
  // An earlier time is treated as the latest seen: no tokens are taken back or invented.
  EXPECT_FALSE(bucket.try_consume(1, 500 * kUs));
  EXPECT_EQ(bucket.available_bytes(1'000 * kUs), 0u);
}

TEST(TokenBucketTest, ZeroRateLetsOnlyTheBurstThrough) {
  TokenBucket bucket(0, 2'000, 0);
  EXPECT_TRUE(bucket.try_consume(1'500, 0));
  EXPECT_FALSE(bucket.try_consume(1'000, kSecond));
  EXPECT_EQ(bucket.conform_time_ns(1'000, kSecond), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(bucket.conform_time_ns(500, kSecond), kSecond);
}

TEST(ShaperTest, SpacesFramesAtTheRateAfterTheBurst) {
  TokenBucket shaper(1'000'000'000, 1'500, 0);  // 1 Gbit/s: 1 byte = 8 ns
  std::vector<int64_t> times;
  for (int i = 0; i < 5; ++i) {
    const int64_t t = shaper.conform_time_ns(1'250, 0);
    times.push_back(t);
    shaper.consume_at(1'250, t);
  }
  // 1250 from the full bucket at 0, then 1000 more bytes (8 us), then 1250 each (10 us).
  EXPECT_EQ(times, (std::vector<int64_t>{0, 8'000, 18'000, 28'000, 38'000}));
  EXPECT_EQ(shaper.conform_time_ns(1'501, 0), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(shaper.conform_time_ns(1'250, 100'000), 100'000);  // idle: conforms at once
}

TEST(ShaperTest, FractionalRatesRoundUpToTheFirstConformingNanosecond) {
  TokenBucket shaper(3'000'000'000, 100, 0);  // 64 bytes = 170.67 ns; 100 bytes to start
  EXPECT_EQ(shaper.conform_time_ns(64, 0), 0);
  shaper.consume_at(64, 0);
  // Frame k (k >= 1) conforms at the first ns t with 800 + 3 t >= (k + 1) * 512 bits: the
  // fractions of a byte carry over, so after 1000 frames there is no drift at all.
  for (int64_t k = 1; k <= 1000; ++k) {
    const int64_t expected = ((k + 1) * 512 - 800 + 2) / 3;  // ceil
    const int64_t t = shaper.conform_time_ns(64, 0);
    ASSERT_EQ(t, expected) << "frame " << k;
    shaper.consume_at(64, t);
  }
  // A bucket that overflows loses what did not fit: 64-byte burst, idle, then two frames.
  TokenBucket small(3'000'000'000, 64, 0);
  small.consume_at(64, 0);
  EXPECT_EQ(small.conform_time_ns(64, 10'000), 10'000);
  small.consume_at(64, 10'000);
  EXPECT_EQ(small.conform_time_ns(64, 10'000), 10'171);
}

}  // namespace
}  // namespace detwan::dataplane::sched

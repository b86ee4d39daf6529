#include "dataplane/sched/timing_wheel.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "tests/dataplane/sched/sched_test_util.h"

namespace detwan::dataplane::sched {
namespace {

using testing::Random;

constexpr int64_t kNone = std::numeric_limits<int64_t>::max();

std::vector<std::pair<int64_t, int>> drain(TimingWheel<int>& wheel, int64_t now_ns) {
  std::vector<std::pair<int64_t, int>> out;
  int64_t ts = 0;
  int value = 0;
  while (wheel.pop_due(now_ns, &ts, &value)) out.emplace_back(ts, value);
  return out;
}

TEST(TimingWheelTest, ReleasesOnlyDueEntriesInTimestampOrder) {
  TimingWheel<int> wheel(100, 64, 16, 0);
  EXPECT_EQ(wheel.next_ts_ns(), kNone);
  ASSERT_EQ(wheel.insert(250, 1), WheelInsert::kOk);
  ASSERT_EQ(wheel.insert(210, 2), WheelInsert::kOk);  // same bucket, earlier: sorted in
  ASSERT_EQ(wheel.insert(250, 3), WheelInsert::kOk);  // equal timestamp: after entry 1
  ASSERT_EQ(wheel.insert(5'000, 4), WheelInsert::kOk);
  ASSERT_EQ(wheel.insert(90, 5), WheelInsert::kOk);
  EXPECT_EQ(wheel.size(), 5u);
  EXPECT_EQ(wheel.next_ts_ns(), 90);
  EXPECT_TRUE(drain(wheel, 89).empty());
  EXPECT_EQ(drain(wheel, 249), (std::vector<std::pair<int64_t, int>>{{90, 5}, {210, 2}}));
  EXPECT_EQ(wheel.next_ts_ns(), 250);
  EXPECT_EQ(drain(wheel, 250), (std::vector<std::pair<int64_t, int>>{{250, 1}, {250, 3}}));
  EXPECT_EQ(wheel.next_ts_ns(), 5'000);
  EXPECT_TRUE(drain(wheel, 4'999).empty());
  EXPECT_EQ(drain(wheel, 1'000'000), (std::vector<std::pair<int64_t, int>>{{5'000, 4}}));
  EXPECT_TRUE(wheel.empty());
  EXPECT_EQ(wheel.next_ts_ns(), kNone);
}

TEST(TimingWheelTest, PastTimestampsAreDueAtOnce) {
  TimingWheel<int> wheel(100, 64, 16, 10'000);
  ASSERT_EQ(wheel.insert(10'500, 1), WheelInsert::kOk);
  ASSERT_EQ(wheel.insert(3, 2), WheelInsert::kOk);  // long past
  EXPECT_EQ(wheel.next_ts_ns(), 3);
  EXPECT_EQ(drain(wheel, 10'000), (std::vector<std::pair<int64_t, int>>{{3, 2}}));
}

TEST(TimingWheelTest, RefusesBeyondHorizonAndWhenFull) {
  TimingWheel<int> wheel(1'000, 100, 3, 0);  // rounded up to 128 buckets: horizon 128 us
  EXPECT_EQ(wheel.bucket_count(), 128u);
  EXPECT_EQ(wheel.horizon_end_ns(), 128'000);
  EXPECT_EQ(wheel.insert(128'000, 1), WheelInsert::kBeyondHorizon);
  EXPECT_EQ(wheel.insert(127'999, 1), WheelInsert::kOk);
  EXPECT_EQ(wheel.insert(5, 2), WheelInsert::kOk);
  EXPECT_EQ(wheel.insert(6, 3), WheelInsert::kOk);
  EXPECT_EQ(wheel.insert(7, 4), WheelInsert::kFull);
  EXPECT_EQ(drain(wheel, 10).size(), 2u);
  EXPECT_EQ(wheel.insert(7, 4), WheelInsert::kOk);  // capacity came back
  // The horizon moves with the cursor.
  EXPECT_EQ(drain(wheel, 100'000).size(), 1u);
  EXPECT_EQ(wheel.horizon_end_ns(), 228'000);
  EXPECT_EQ(wheel.insert(227'999, 5), WheelInsert::kOk);
  EXPECT_EQ(wheel.insert(228'000, 6), WheelInsert::kBeyondHorizon);
}

TEST(TimingWheelTest, HandlesNegativeTimesAndLongIdleJumps) {
  TimingWheel<int> wheel(64, 64, 8, -10'000);
  ASSERT_EQ(wheel.insert(-9'000, 1), WheelInsert::kOk);
  ASSERT_EQ(wheel.insert(-8'999, 2), WheelInsert::kOk);
  EXPECT_EQ(drain(wheel, -9'000), (std::vector<std::pair<int64_t, int>>{{-9'000, 1}}));
  // Far beyond one turn of the wheel: the remaining entry comes out, nothing else appears.
  EXPECT_EQ(drain(wheel, 1'000'000'000), (std::vector<std::pair<int64_t, int>>{{-8'999, 2}}));
  ASSERT_EQ(wheel.insert(1'000'000'050, 3), WheelInsert::kOk);
  EXPECT_EQ(wheel.next_ts_ns(), 1'000'000'050);
  EXPECT_TRUE(drain(wheel, 1'000'000'049).empty());
  EXPECT_EQ(drain(wheel, 1'000'000'050).size(), 1u);
}

// Random inserts and extractions against an ordered multimap: same entries, same order,
// same next timestamp at every step.
TEST(TimingWheelTest, TheCursorMovesTowardNowButNeverPastABucketedEntry) {
  TimingWheel<int> wheel(100, 64, 16, 0);  // horizon 6,400 ns from the cursor
  ASSERT_EQ(wheel.insert(500, 1), WheelInsert::kOk);  // the in-order run
  ASSERT_EQ(wheel.insert(300, 2), WheelInsert::kOk);  // earlier: in the buckets (bucket 3)
  EXPECT_EQ(wheel.horizon_end_ns(), 6'400);
  wheel.advance_cursor_toward(20'000);  // a stalled caller: held back by entry 2's bucket
  EXPECT_EQ(wheel.horizon_end_ns(), 6'700);
  int64_t ts = 0;
  int value = 0;
  ASSERT_TRUE(wheel.pop_due(20'000, &ts, &value));
  EXPECT_EQ(value, 2);
  // Only the run is left: the cursor may go to now, so an insert at now fits.
  wheel.advance_cursor_toward(20'000);
  EXPECT_EQ(wheel.horizon_end_ns(), 26'400);
  ASSERT_EQ(wheel.insert(20'050, 3), WheelInsert::kOk);
  ASSERT_EQ(wheel.insert(20'010, 4), WheelInsert::kOk);  // earlier than the run's tail
  wheel.advance_cursor_toward(10'000);  // never backwards
  EXPECT_EQ(wheel.horizon_end_ns(), 26'400);
  EXPECT_EQ(drain(wheel, 20'100),
            (std::vector<std::pair<int64_t, int>>{{500, 1}, {20'010, 4}, {20'050, 3}}));
}

TEST(TimingWheelTest, MatchesAnOrderedReferenceUnderRandomLoad) {
  Random rng(99);
  const int64_t granularity = 250;
  TimingWheel<int> wheel(granularity, 256, 512, 0);
  std::multimap<int64_t, int> reference;
  int64_t now = 0;
  int next_value = 0;
  uint64_t popped = 0;
  for (int step = 0; step < 200'000; ++step) {
    if (rng.between(0, 2) != 0 && reference.size() < 512) {
      // Within the horizon as seen from the current cursor bucket.
      const int64_t cursor_start = (now / granularity) * granularity;
      const int64_t ts = now - 300 + static_cast<int64_t>(rng.between(0, 60'000));
      const WheelInsert result = wheel.insert(ts, next_value);
      if (ts >= cursor_start + 256 * granularity) {
        ASSERT_EQ(result, WheelInsert::kBeyondHorizon) << ts;
        continue;
      }
      ASSERT_EQ(result, WheelInsert::kOk);
      reference.emplace(ts, next_value++);
    } else {
      now += static_cast<int64_t>(rng.between(0, 2'000));
      int64_t ts = 0;
      int value = 0;
      while (wheel.pop_due(now, &ts, &value)) {
        ASSERT_FALSE(reference.empty());
        ASSERT_LE(ts, now);
        ASSERT_EQ(ts, reference.begin()->first);
        ASSERT_EQ(value, reference.begin()->second);  // multimap keeps insertion order on ties
        reference.erase(reference.begin());
        ++popped;
      }
      ASSERT_TRUE(reference.empty() || reference.begin()->first > now);
    }
    ASSERT_EQ(wheel.size(), reference.size());
    ASSERT_EQ(wheel.next_ts_ns(), reference.empty() ? kNone : reference.begin()->first);
  }
  EXPECT_GT(popped, 50'000u);
}

// A caller that falls behind (pops at most a few entries per wake-up, so stale entries stay
// held) and moves the cursor toward now before each insert: the order stays the reference's.
TEST(TimingWheelTest, MovingTheCursorTowardNowKeepsTheOrderOfAStalledCaller) {
  Random rng(7);
  TimingWheel<int> wheel(250, 64, 512, 0);  // horizon 16 us: stalls of up to 40 us go past it
  std::multimap<int64_t, int> reference;
  int64_t now = 0;
  int next_value = 0;
  uint64_t popped = 0;
  uint64_t accepted_past_the_old_horizon = 0;
  for (int step = 0; step < 100'000; ++step) {
    if (rng.between(0, 1) == 0 && reference.size() < 512) {
      const int64_t ts = now - 300 + static_cast<int64_t>(rng.between(0, 20'000));
      const int64_t old_horizon_end = wheel.horizon_end_ns();
      wheel.advance_cursor_toward(now);
      const WheelInsert result = wheel.insert(ts, next_value);
      if (ts >= wheel.horizon_end_ns()) {
        ASSERT_EQ(result, WheelInsert::kBeyondHorizon) << ts;
        continue;
      }
      ASSERT_EQ(result, WheelInsert::kOk);
      if (ts >= old_horizon_end) ++accepted_past_the_old_horizon;
      reference.emplace(ts, next_value++);
    } else {
      now += static_cast<int64_t>(rng.between(0, 40'000));
      int64_t ts = 0;
      int value = 0;
      for (int i = 0; i < 3 && wheel.pop_due(now, &ts, &value); ++i) {
        ASSERT_FALSE(reference.empty());
        ASSERT_LE(ts, now);
        ASSERT_EQ(ts, reference.begin()->first);
        ASSERT_EQ(value, reference.begin()->second);
        reference.erase(reference.begin());
        ++popped;
      }
    }
    ASSERT_EQ(wheel.size(), reference.size());
    ASSERT_EQ(wheel.next_ts_ns(), reference.empty() ? kNone : reference.begin()->first);
  }
  EXPECT_GT(popped, 20'000u);
  EXPECT_GT(accepted_past_the_old_horizon, 1'000u);
}

// The in-order run (timing_wheel.h): an entry no earlier than the run's last skips the
// buckets; an earlier one goes into them.
TEST(TimingWheelTest, InOrderEntriesSkipTheBuckets) {
  TimingWheel<int> wheel(100, 64, 16, 0);
  ASSERT_EQ(wheel.insert(100, 1), WheelInsert::kOk);
  ASSERT_EQ(wheel.insert(100, 2), WheelInsert::kOk);  // equal: still in order
  ASSERT_EQ(wheel.insert(350, 3), WheelInsert::kOk);
  EXPECT_EQ(wheel.bucketed_size(), 0u);
  ASSERT_EQ(wheel.insert(200, 4), WheelInsert::kOk);  // before the run's last: a bucket
  EXPECT_EQ(wheel.bucketed_size(), 1u);
  ASSERT_EQ(wheel.insert(360, 5), WheelInsert::kOk);  // after both: the run again
  ASSERT_EQ(wheel.insert(360, 6), WheelInsert::kOk);
  EXPECT_EQ(wheel.bucketed_size(), 1u);
  EXPECT_EQ(wheel.next_ts_ns(), 100);
  EXPECT_EQ(drain(wheel, 1'000), (std::vector<std::pair<int64_t, int>>{
                                     {100, 1}, {100, 2}, {200, 4}, {350, 3}, {360, 5}, {360, 6}}));
  EXPECT_EQ(wheel.bucketed_size(), 0u);
  EXPECT_TRUE(wheel.empty());
}

// The run changes no answer: a wheel with it and one without (every entry in the buckets) get
// the same inserts and extractions -- mostly in timestamp order, as a scheduler makes them,
// with late, early, equal and past timestamps among them, extractions in small batches that
// leave due entries behind, and clears -- and must agree on every result, the entries and
// their order, the size, the next timestamp and the horizon.
TEST(TimingWheelTest, TheInOrderRunAnswersExactlyAsTheBucketsAlone) {
  Random rng(17);
  constexpr int64_t kGranularity = 250;
  constexpr uint32_t kCapacity = 24;
  TimingWheel<int> run(kGranularity, 64, kCapacity, 1'000);
  TimingWheel<int> buckets(kGranularity, 64, kCapacity, 1'000, /*in_order_run=*/false);
  int64_t now = 1'000;
  int64_t last_ts = now;
  int value = 0;
  uint64_t popped = 0, beyond = 0, full = 0, ran = 0, bucketed = 0;
  for (int step = 0; step < 300'000; ++step) {
    const auto choice = rng.between(0, 99);
    if (choice < 55) {
      int64_t ts = 0;
      const auto kind = rng.between(0, 9);
      if (kind < 6) {
        ts = std::max(now, last_ts) + static_cast<int64_t>(rng.between(0, 40));  // in order
      } else if (kind < 7) {
        ts = last_ts;  // equal to the last
      } else if (kind < 8) {
        ts = now - static_cast<int64_t>(rng.between(0, 3'000));  // past
      } else if (kind < 9) {
        ts = now + static_cast<int64_t>(rng.between(0, 2'000));  // anywhere soon
      } else {
        ts = now + static_cast<int64_t>(rng.between(10'000, 20'000));  // near the horizon
      }
      const uint32_t bucketed_before = run.bucketed_size();
      const WheelInsert result = run.insert(ts, value);
      ASSERT_EQ(buckets.insert(ts, value), result) << step;
      if (result == WheelInsert::kOk) {
        last_ts = ts;
        ++value;
        if (run.bucketed_size() > bucketed_before) {
          ++bucketed;
        } else {
          ++ran;
        }
      }
      beyond += result == WheelInsert::kBeyondHorizon;
      full += result == WheelInsert::kFull;
    } else if (choice < 99) {
      now += static_cast<int64_t>(rng.between(0, 300));
      const auto batch = rng.between(1, 4);  // may leave due entries behind
      for (uint64_t i = 0; i < batch; ++i) {
        int64_t ts = 0, other_ts = 0;
        int v = 0, other_v = 0;
        const bool got = run.pop_due(now, &ts, &v);
        ASSERT_EQ(buckets.pop_due(now, &other_ts, &other_v), got) << step;
        if (!got) break;
        ASSERT_EQ(ts, other_ts) << step;
        ASSERT_EQ(v, other_v) << step;
        ++popped;
      }
    } else {
      now += static_cast<int64_t>(rng.between(0, 50'000));
      last_ts = now;
      run.clear(now);
      buckets.clear(now);
    }
    ASSERT_EQ(run.size(), buckets.size()) << step;
    ASSERT_EQ(run.next_ts_ns(), buckets.next_ts_ns()) << step;
    ASSERT_EQ(run.horizon_end_ns(), buckets.horizon_end_ns()) << step;
    if (step % 1'000 == 0) {
      std::vector<std::pair<int64_t, int>> a, b;
      run.for_each([&](int64_t ts, const int& v) { a.emplace_back(ts, v); });
      buckets.for_each([&](int64_t ts, const int& v) { b.emplace_back(ts, v); });
      ASSERT_EQ(a, b) << step;
      ASSERT_EQ(run.last_ts_ns(), buckets.last_ts_ns());
    }
  }
  // Every path was taken: the run and the buckets, the horizon and the capacity.
  EXPECT_GT(ran, 30'000u);
  EXPECT_GT(bucketed, 10'000u);
  EXPECT_GT(beyond, 100u);
  EXPECT_GT(full, 100u);
  EXPECT_GT(popped, 100'000u);
}

// A wheel cleared after use (entries left in it, its cursor moved around the ring, nodes taken
// and returned in a scrambled order) answers every insert and pop_due exactly like a wheel just
// constructed at the same start: full capacity again, the horizon counted from the new start,
// none of the old entries left.
TEST(TimingWheelTest, AClearedWheelBehavesLikeAFreshOne) {
  Random rng(5);
  constexpr int64_t kGranularity = 250;
  constexpr uint32_t kBuckets = 256;
  constexpr uint32_t kCapacity = 64;
  TimingWheel<int> used(kGranularity, kBuckets, kCapacity, 0);
  int64_t now = 0;
  int value = 0;
  uint64_t full = 0, beyond = 0, popped = 0;
  // One random step on each wheel given (insert or pop at a later time); every answer must be
  // the same on all of them.
  const auto step = [&](std::vector<TimingWheel<int>*> wheels) {
    if (rng.between(0, 2) != 0) {
      const int64_t ts = now - 300 + static_cast<int64_t>(rng.between(0, 70'000));
      const WheelInsert first = wheels[0]->insert(ts, value);
      for (size_t i = 1; i < wheels.size(); ++i) ASSERT_EQ(wheels[i]->insert(ts, value), first);
      full += first == WheelInsert::kFull;
      beyond += first == WheelInsert::kBeyondHorizon;
      ++value;
    } else {
      now += static_cast<int64_t>(rng.between(0, 3'000));
      for (;;) {
        int64_t ts = 0;
        int v = 0;
        const bool got = wheels[0]->pop_due(now, &ts, &v);
        for (size_t i = 1; i < wheels.size(); ++i) {
          int64_t other_ts = 0;
          int other_v = 0;
          ASSERT_EQ(wheels[i]->pop_due(now, &other_ts, &other_v), got);
          if (got) {
            ASSERT_EQ(other_ts, ts);
            ASSERT_EQ(other_v, v);
          }
        }
        if (!got) break;
        ++popped;
      }
    }
    for (size_t i = 1; i < wheels.size(); ++i) {
      ASSERT_EQ(wheels[i]->size(), wheels[0]->size());
      ASSERT_EQ(wheels[i]->next_ts_ns(), wheels[0]->next_ts_ns());
      ASSERT_EQ(wheels[i]->horizon_end_ns(), wheels[0]->horizon_end_ns());
    }
  };
  for (int round = 0; round < 40; ++round) {
    // Restart somewhere: a little later, several turns of the wheel later, or earlier.
    const auto choice = rng.between(0, 2);
    const int64_t start = choice == 0   ? now + static_cast<int64_t>(rng.between(0, 1'000))
                          : choice == 1 ? now + static_cast<int64_t>(rng.between(0, 500'000))
                                        : now - static_cast<int64_t>(rng.between(0, 100'000));
    if (round > 0) {
      ASSERT_GT(used.size(), 0u) << round;  // cleared with entries in it
    }
    used.clear(start);
    TimingWheel<int> fresh(kGranularity, kBuckets, kCapacity, start);
    EXPECT_TRUE(used.empty());
    EXPECT_EQ(used.next_ts_ns(), kNone);
    now = start;
    for (int i = 0; i < 2'000; ++i) {
      step({&used, &fresh});
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  EXPECT_GT(full, 100u);  // capacity was reached again after clearing
  EXPECT_GT(beyond, 1'000u);
  EXPECT_GT(popped, 10'000u);
}

}  // namespace
}  // namespace detwan::dataplane::sched

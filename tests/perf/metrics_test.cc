#include "tools/perf/metrics.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "tests/common/counting_new.h"

namespace detwan::perf {
namespace {

using Bursts = std::vector<std::pair<uint64_t, uint64_t>>;
using Verdict = StreamReceiver::Verdict;

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kUs = 1'000;
constexpr int64_t kGapNs = kMs;  // packet i leaves at i ms
constexpr uint32_t kBytes = 100;

// Feeds packet `seq` sent at seq * 1 ms with one-way delay `owd_ns`.
Verdict feed(StreamReceiver& r, uint64_t seq, int64_t owd_ns, int64_t correction_ns = 0) {
  const auto tx = static_cast<int64_t>(seq) * kGapNs;
  return r.on_packet(seq, tx, tx + owd_ns, kBytes, correction_ns);
}

// 0.1 % buckets (sub_bucket_bits 10), plus one ns of rounding.
void expect_close(int64_t actual, int64_t expected, const char* what) {
  EXPECT_LE(std::llabs(actual - expected), std::llabs(expected) / 1000 + 1)
      << what << ": " << actual << " vs " << expected;
}

TEST(Summarize, EmptyIsAllZero) {
  const common::LogLinearHistogram h;
  const Distribution d = summarize(h, 12345);
  EXPECT_EQ(d.count, 0u);
  EXPECT_EQ(d.min, 0);
  EXPECT_EQ(d.mean, 0);
  EXPECT_EQ(d.p50, 0);
  EXPECT_EQ(d.p99_999, 0);
  EXPECT_EQ(d.max, 0);
}

TEST(Summarize, ShiftIsSubtractedFromEveryValue) {
  common::LogLinearHistogram h;
  for (int64_t v = 1; v <= 100; ++v) h.record(v);  // below 2^8: recorded exactly
  const Distribution d = summarize(h, 10);
  EXPECT_EQ(d.count, 100u);
  EXPECT_EQ(d.min, -9);
  EXPECT_EQ(d.max, 90);
  EXPECT_DOUBLE_EQ(d.mean, 50.5 - 10);
  EXPECT_EQ(d.p50, 40);
  EXPECT_EQ(d.p90, 80);
  EXPECT_EQ(d.p99, 89);
  EXPECT_EQ(d.p99_9, 90);
}

TEST(StreamReceiver, NoLoss) {
  StreamReceiver r(1000, 0);
  for (uint64_t s = 0; s < 100; ++s) EXPECT_EQ(feed(r, s, 5 * kMs), Verdict::kNew);
  const DirectionResult res = r.result(0, 0, 100 * kMs);
  EXPECT_EQ(res.sent, 100u);
  EXPECT_EQ(res.received, 100u);
  EXPECT_EQ(res.lost, 0u);
  EXPECT_TRUE(res.loss_bursts.empty());
  EXPECT_EQ(res.reordered, 0u);
  EXPECT_EQ(res.duplicates, 0u);
  EXPECT_EQ(res.received_bytes, 100u * kBytes);
  EXPECT_DOUBLE_EQ(res.throughput_bps, 100.0 * kBytes * 8 / 0.1);  // 10000 bytes in 100 ms
  EXPECT_EQ(res.owd_ns.count, 100u);
  EXPECT_EQ(res.owd_ns.min, 5 * kMs);
  EXPECT_EQ(res.owd_ns.max, 5 * kMs);
  expect_close(res.owd_ns.p50, 5 * kMs, "p50");
  EXPECT_EQ(res.pdv_ns.max, 0);
  EXPECT_EQ(res.ipdv_ns.count, 99u);
  EXPECT_EQ(res.ipdv_ns.max, 0);
  EXPECT_EQ(res.rfc3550_jitter_ns, 0);
  EXPECT_FALSE(res.clock_corrected);
  EXPECT_EQ(r.result(0, 5, 5).throughput_bps, 0);  // empty span
}

TEST(StreamReceiver, NothingReceived) {
  StreamReceiver r(10, 0);
  const DirectionResult res = r.result(0, 0, kMs);
  EXPECT_EQ(res.sent, 0u);
  EXPECT_EQ(res.lost, 0u);
  EXPECT_EQ(res.owd_ns.count, 0u);
  r.set_sent(10);
  const DirectionResult all_lost = r.result(0, 0, kMs);
  EXPECT_EQ(all_lost.lost, 10u);
  EXPECT_EQ(all_lost.loss_bursts, (Bursts{{10, 1}}));
}

TEST(StreamReceiver, LossBursts) {
  const std::set<uint64_t> dropped{3, 10, 11, 12, 20, 21, 22};
  StreamReceiver r(100, 0);
  for (uint64_t s = 0; s < 30; ++s) {
    if (!dropped.contains(s)) feed(r, s, kMs);
  }
  r.set_sent(30);
  const DirectionResult res = r.result(0, 0, 30 * kMs);
  EXPECT_EQ(res.sent, 30u);
  EXPECT_EQ(res.received, 23u);
  EXPECT_EQ(res.lost, 7u);
  EXPECT_EQ(res.loss_bursts, (Bursts{{1, 1}, {3, 2}}));
}

TEST(StreamReceiver, LossOfTheTailNeedsTheSendersCount) {
  StreamReceiver r(100, 0);
  for (uint64_t s = 0; s < 10; ++s) feed(r, s, kMs);
  EXPECT_EQ(r.result(0, 0, 1).lost, 0u);  // highest + 1 stands in for sent
  EXPECT_EQ(r.result(0, 0, 1).sent, 10u);
  r.set_sent(15);
  const DirectionResult res = r.result(0, 0, 1);
  EXPECT_EQ(res.sent, 15u);
  EXPECT_EQ(res.lost, 5u);
  EXPECT_EQ(res.loss_bursts, (Bursts{{5, 1}}));
}

TEST(StreamReceiver, RandomLossMatchesANaiveScan) {
  // Crosses 64-bit word boundaries in every way; a sent count beyond max_packets counts the
  // numbers that could never be recorded as lost.
  constexpr uint64_t kMax = 1000;
  constexpr uint64_t kSent = 1100;
  std::mt19937_64 rng(3);
  std::bernoulli_distribution drop(0.3);
  std::vector<bool> got(kSent, false);
  StreamReceiver r(kMax, 0);
  for (uint64_t s = 0; s < kMax; ++s) {
    if (!drop(rng)) {
      got[s] = true;
      feed(r, s, kMs);
    }
  }
  r.set_sent(kSent);
  std::map<uint64_t, uint64_t> runs;
  uint64_t lost = 0, run = 0;
  for (uint64_t s = 0; s <= kSent; ++s) {
    if (s < kSent && !got[s]) {
      ++run;
      ++lost;
    } else if (run > 0) {
      ++runs[run];
      run = 0;
    }
  }
  const DirectionResult res = r.result(0, 0, 1);
  EXPECT_EQ(res.lost, lost);
  EXPECT_EQ(res.loss_bursts, Bursts(runs.begin(), runs.end()));
}

TEST(StreamReceiver, ReorderingPerRfc4737) {
  StreamReceiver a(100, 0);  // RFC 4737 example 1,2,4,3,5 (0-based here): only "3" is late
  for (uint64_t s : {0, 1, 3, 2, 4}) feed(a, s, kMs);
  EXPECT_EQ(a.result(0, 0, 1).reordered, 1u);
  EXPECT_EQ(a.result(0, 0, 1).lost, 0u);

  StreamReceiver b(100, 0);  // 1,2,3,7,4,5,6: all of 4,5,6 arrive below next expected (8)
  for (uint64_t s : {1, 2, 3, 7, 4, 5, 6}) feed(b, s, kMs);
  EXPECT_EQ(b.result(0, 0, 1).reordered, 3u);
}

TEST(StreamReceiver, DuplicatesAndOutOfRange) {
  StreamReceiver r(10, 0);
  EXPECT_EQ(feed(r, 5, kMs), Verdict::kNew);
  EXPECT_EQ(feed(r, 5, 2 * kMs), Verdict::kDuplicate);
  EXPECT_EQ(feed(r, 10, kMs), Verdict::kOutOfRange);
  EXPECT_EQ(feed(r, UINT64_MAX, kMs), Verdict::kOutOfRange);
  r.on_malformed();
  EXPECT_EQ(r.received(), 1u);
  EXPECT_EQ(r.malformed(), 3u);
  const DirectionResult res = r.result(0, 0, 1);
  EXPECT_EQ(res.duplicates, 1u);
  EXPECT_EQ(res.malformed, 3u);
  EXPECT_EQ(res.received, 1u);
  EXPECT_EQ(res.received_bytes, kBytes);
  EXPECT_EQ(res.owd_ns.count, 1u);  // the duplicate's delay is not a sample
}

TEST(StreamReceiver, IpdvIsTheSameWhateverTheArrivalOrder) {
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int64_t> owd(10 * kMs, 12 * kMs);
  std::vector<int64_t> owds(50);
  for (auto& o : owds) o = owd(rng);
  // Expected: owd(i) - owd(i-1) over pairs with both received; 17 is lost.
  int64_t min = INT64_MAX, max = INT64_MIN, sum = 0, n = 0;
  for (size_t i = 1; i < owds.size(); ++i) {
    if (i == 17 || i - 1 == 17) continue;
    const int64_t d = owds[i] - owds[i - 1];
    min = std::min(min, d);
    max = std::max(max, d);
    sum += d;
    ++n;
  }
  std::vector<uint64_t> in_order;
  for (uint64_t s = 0; s < owds.size(); ++s) {
    if (s != 17) in_order.push_back(s);
  }
  std::vector<uint64_t> shuffled = in_order;  // local swaps, and one packet 30 places late
  std::swap(shuffled[3], shuffled[4]);
  std::swap(shuffled[10], shuffled[12]);
  shuffled.erase(shuffled.begin() + 5);
  shuffled.insert(shuffled.begin() + 35, 5);

  for (const auto* order : {&in_order, &shuffled}) {
    StreamReceiver r(100, 0);
    for (uint64_t s : *order) feed(r, s, owds[s]);
    const Distribution ipdv = r.result(0, 0, 1).ipdv_ns;
    EXPECT_EQ(ipdv.count, static_cast<uint64_t>(n));
    EXPECT_EQ(ipdv.min, min);
    EXPECT_EQ(ipdv.max, max);
    EXPECT_DOUBLE_EQ(ipdv.mean, static_cast<double>(sum) / static_cast<double>(n));
  }
}

TEST(StreamReceiver, IpdvCancelsAClockOffset) {
  StreamReceiver r(10, 0);
  constexpr int64_t kOffsetNs = -3'600'000'000'000;  // receiver clock an hour behind
  feed(r, 0, kOffsetNs + 10 * kMs);
  feed(r, 1, kOffsetNs + 13 * kMs);
  feed(r, 2, kOffsetNs + 9 * kMs);
  const Distribution ipdv = r.result(0, 0, 1).ipdv_ns;
  EXPECT_EQ(ipdv.count, 2u);
  EXPECT_EQ(ipdv.max, 3 * kMs);
  EXPECT_EQ(ipdv.min, -4 * kMs);
}

TEST(StreamReceiver, Rfc3550JitterMatchesTheRfcFormula) {
  std::mt19937_64 rng(9);
  std::uniform_int_distribution<int64_t> owd(5 * kMs, 8 * kMs);
  StreamReceiver r(1000, 0);
  double reference = 0;
  int64_t previous_transit = 0;
  for (uint64_t s = 0; s < 1000; ++s) {
    const int64_t tx = 1'000'000'000 + static_cast<int64_t>(s) * kGapNs;
    const int64_t rx = tx + owd(rng) - 777 * kMs;  // an offset must not matter
    ASSERT_EQ(r.on_packet(s, tx, rx, kBytes, 0), Verdict::kNew);
    const int64_t transit = rx - tx;
    if (s > 0) {
      const double d = std::abs(static_cast<double>(transit - previous_transit));
      reference = reference + (d - reference) / 16;  // RFC 3550 A.8
    }
    previous_transit = transit;
  }
  const double jitter = r.result(0, 0, 1).rfc3550_jitter_ns;
  EXPECT_GT(jitter, 100 * kUs);
  EXPECT_NEAR(jitter, reference, reference * 1e-12);
}

TEST(StreamReceiver, PdvIsPreciseOnALargeDelay) {
  // 20 ms + 0..100 us: owd buckets at 20 ms are ~20 us wide, PDV must still be exact to 1 us.
  std::mt19937_64 rng(13);
  std::uniform_int_distribution<int64_t> variation(0, 100 * kUs);
  StreamReceiver r(2000, 0);
  feed(r, 0, 20 * kMs + 57 * kUs);  // the first (reference) packet is not the minimum
  feed(r, 1, 20 * kMs);             // min
  feed(r, 2, 20 * kMs + 100 * kUs);  // max
  for (uint64_t s = 3; s < 2000; ++s) feed(r, s, 20 * kMs + variation(rng));
  const DirectionResult res = r.result(0, 0, 1);
  EXPECT_EQ(res.pdv_ns.min, 0);
  EXPECT_NEAR(static_cast<double>(res.pdv_ns.max), 100.0 * kUs, 1.0 * kUs);
  EXPECT_NEAR(static_cast<double>(res.pdv_ns.p50), 50.0 * kUs, 3.0 * kUs);
  EXPECT_NEAR(static_cast<double>(res.pdv_ns.p90), 90.0 * kUs, 3.0 * kUs);
  EXPECT_LE(res.pdv_ns.p99, res.pdv_ns.max);
  EXPECT_EQ(res.owd_ns.min, 20 * kMs);
  EXPECT_EQ(res.owd_ns.max, 20 * kMs + 100 * kUs);
}

TEST(StreamReceiver, NegativeDelayIsKeptNotClamped) {
  StreamReceiver r(10, 0);
  feed(r, 0, -3 * kMs);  // receiver clock 5 ms behind, true delay 2 ms
  feed(r, 1, -4 * kMs);
  const DirectionResult raw = r.result(0, 0, 1);
  EXPECT_EQ(raw.owd_ns.min, -4 * kMs);
  EXPECT_EQ(raw.owd_ns.max, -3 * kMs);
  EXPECT_DOUBLE_EQ(raw.owd_ns.mean, -3.5 * kMs);
  const DirectionResult corrected = r.result(-5 * kMs, 0, 1);
  EXPECT_TRUE(corrected.clock_corrected);
  EXPECT_EQ(corrected.owd_ns.min, 1 * kMs);
  EXPECT_EQ(corrected.owd_ns.max, 2 * kMs);
  EXPECT_EQ(corrected.pdv_ns.max, 1 * kMs);  // PDV does not depend on the correction
}

TEST(StreamReceiver, BeyondBound) {
  const std::vector<int64_t> owds{5 * kMs, 9 * kMs, 11 * kMs, 20 * kMs};
  StreamReceiver plain(10, 10 * kMs);
  for (uint64_t s = 0; s < owds.size(); ++s) feed(plain, s, owds[s]);
  EXPECT_EQ(plain.result(0, 0, 1).beyond_bound, 2u);  // 11 and 20 ms
  EXPECT_EQ(plain.result(0, 0, 1).bound_ns, 10 * kMs);

  StreamReceiver corrected(10, 10 * kMs);  // receiver clock 8 ms ahead: true delays -8 ms
  for (uint64_t s = 0; s < owds.size(); ++s) feed(corrected, s, owds[s], 8 * kMs);
  EXPECT_EQ(corrected.result(8 * kMs, 0, 1).beyond_bound, 1u);  // only 20 - 8 = 12 ms

  StreamReceiver unbounded(10, 0);
  for (uint64_t s = 0; s < owds.size(); ++s) feed(unbounded, s, owds[s]);
  EXPECT_EQ(unbounded.result(0, 0, 1).beyond_bound, 0u);
}

TEST(StreamReceiver, IntervalsReportTheirOwnSamples) {
  StreamReceiver r(1000, 0);
  for (uint64_t s = 0; s < 100; ++s) feed(r, s, 10 * kMs);
  const DirectionResult first = r.take_interval(0, 100 * kMs);
  EXPECT_EQ(first.start_ns, 0);  // the first tx seen
  EXPECT_EQ(first.end_ns, 100 * kMs);
  EXPECT_EQ(first.received, 100u);
  EXPECT_EQ(first.sent, 100u);
  EXPECT_EQ(first.lost, 0u);
  expect_close(first.owd_ns.p50, 10 * kMs, "interval 1 p50");
  EXPECT_DOUBLE_EQ(first.throughput_bps, 100.0 * kBytes * 8 / 0.1);

  for (uint64_t s = 100; s < 200; ++s) {
    if (s != 150) feed(r, s, 30 * kMs + static_cast<int64_t>(s % 10) * kUs);
  }
  const DirectionResult second = r.take_interval(0, 200 * kMs);
  EXPECT_EQ(second.start_ns, 100 * kMs);
  EXPECT_EQ(second.received, 99u);
  EXPECT_EQ(second.sent, 100u);
  EXPECT_EQ(second.lost, 1u);
  EXPECT_EQ(second.loss_bursts, (Bursts{{1, 1}}));
  expect_close(second.owd_ns.p50, 30 * kMs + 5 * kUs, "interval 2 p50");
  EXPECT_EQ(second.owd_ns.min, 30 * kMs);
  EXPECT_EQ(second.pdv_ns.min, 0);  // relative to this interval's minimum
  EXPECT_EQ(second.pdv_ns.max, 9 * kUs);

  const DirectionResult whole = r.result(0, 0, 200 * kMs);
  EXPECT_EQ(whole.received, 199u);
  EXPECT_EQ(whole.lost, 1u);
  EXPECT_EQ(whole.owd_ns.min, 10 * kMs);
  EXPECT_EQ(whole.owd_ns.max, 30 * kMs + 9 * kUs);
  expect_close(whole.owd_ns.p50, 10 * kMs, "whole p50");  // rank 100 of 199 is a 10 ms one
  expect_close(whole.owd_ns.p90, 30 * kMs + 8 * kUs, "whole p90");
  EXPECT_EQ(whole.pdv_ns.max, 20 * kMs + 9 * kUs);

  const DirectionResult empty = r.take_interval(0, 300 * kMs);
  EXPECT_EQ(empty.start_ns, 200 * kMs);
  EXPECT_EQ(empty.received, 0u);
  EXPECT_EQ(empty.sent, 0u);
  EXPECT_EQ(empty.owd_ns.count, 0u);
}

TEST(StreamReceiver, IntervalLossIsNotTakenBackByAStraggler) {
  StreamReceiver r(100, 0);
  for (uint64_t s = 0; s < 10; ++s) {
    if (s != 4) feed(r, s, kMs);
  }
  const DirectionResult first = r.take_interval(0, 10 * kMs);
  EXPECT_EQ(first.lost, 1u);
  feed(r, 4, 20 * kMs);  // the straggler
  for (uint64_t s = 10; s < 20; ++s) feed(r, s, kMs);
  const DirectionResult second = r.take_interval(0, 20 * kMs);
  EXPECT_EQ(second.lost, 0u);
  EXPECT_EQ(second.sent, 10u);
  EXPECT_EQ(second.received, 11u);
  EXPECT_EQ(second.reordered, 1u);
  EXPECT_EQ(r.result(0, 0, 1).lost, 0u);  // the whole-test view does count it
}

TEST(StreamReceiver, OnPacketDoesNotAllocate) {
  StreamReceiver r(100'000, 5 * kMs);
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<int64_t> owd(-kMs, 50 * kMs);
  const uint64_t before = g_allocations.load();
  for (uint64_t s = 0; s < 100'000; ++s) {
    const uint64_t seq = (s % 7 == 3) ? s - 2 : s;  // duplicates and reordering on the way
    (void)feed(r, seq, owd(rng), kMs);
  }
  (void)feed(r, 200'000, 0);
  r.on_malformed();
  EXPECT_EQ(g_allocations.load(), before);
  EXPECT_GT(r.received(), 80'000u);
}

TEST(StreamSender, ScheduleErrorAndIntervals) {
  StreamSender s;
  s.on_sent(1000, 1010, 64);
  s.on_sent(2000, 1995, 64);  // early: negative
  EXPECT_EQ(s.sent(), 2u);
  EXPECT_EQ(s.sent_bytes(), 128u);
  const common::LogLinearHistogram first = s.take_interval_schedule_error();
  EXPECT_EQ(first.count(), 2u);
  EXPECT_EQ(first.min(), -5);
  EXPECT_EQ(first.max(), 10);
  s.on_sent(3000, 3100, 64);
  const common::LogLinearHistogram second = s.take_interval_schedule_error();
  EXPECT_EQ(second.count(), 1u);
  EXPECT_EQ(second.min(), 100);
  EXPECT_EQ(s.schedule_error().count(), 3u);
  EXPECT_EQ(s.schedule_error().min(), -5);
  EXPECT_EQ(s.schedule_error().max(), 100);
  EXPECT_EQ(s.take_interval_schedule_error().count(), 0u);
}

}  // namespace
}  // namespace detwan::perf

// Replay / duplicate window: sizes, in-order, reordering, duplicates, too old, jumps beyond the
// window (including stale bits in the ring), the 2^64 boundary, and a seeded comparison with a
// naive model over several window sizes.
#include "dataplane/wire/replay_window.h"

#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

namespace detwan::dataplane::wire {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
using V = ReplayVerdict;

ReplayWindow make(uint64_t bits) {
  auto w = ReplayWindow::create(bits);
  if (!w) throw std::runtime_error("bad window size in test");
  return std::move(*w);
}

TEST(ReplayWindowSize, OnlyPowersOfTwoInRange) {
  for (uint64_t bits : {64u, 128u, 1024u, 4096u, 65536u}) {
    EXPECT_TRUE(ReplayWindow::valid_window_bits(bits)) << bits;
    const auto w = ReplayWindow::create(bits);
    ASSERT_TRUE(w.has_value()) << bits;
    EXPECT_EQ(w->window_bits(), bits);
    EXPECT_TRUE(w->empty());
  }
  for (uint64_t bits :
       {uint64_t{0}, uint64_t{1}, uint64_t{32}, uint64_t{63}, uint64_t{65}, uint64_t{100},
        uint64_t{1000}, uint64_t{3072}, uint64_t{131072}, uint64_t{1} << 63, kMax}) {
    EXPECT_FALSE(ReplayWindow::valid_window_bits(bits)) << bits;
    EXPECT_FALSE(ReplayWindow::create(bits).has_value()) << bits;
  }
  EXPECT_EQ(ReplayWindow::kDefaultWindowBits, 4096u);
  EXPECT_TRUE(ReplayWindow::valid_window_bits(ReplayWindow::kDefaultWindowBits));
}

TEST(ReplayWindow, InOrderThenReplayed) {
  ReplayWindow w = make(1024);
  for (uint64_t s = 0; s < 5000; ++s) ASSERT_EQ(w.check_and_update(s), V::kNew) << s;
  EXPECT_EQ(w.top(), 4999u);
  for (uint64_t s = 0; s < 5000; ++s) {
    const V expected = 4999 - s < 1024 ? V::kDuplicate : V::kTooOld;
    ASSERT_EQ(w.check_and_update(s), expected) << s;
  }
  EXPECT_EQ(w.top(), 4999u);
}

TEST(ReplayWindow, ReorderedWithinTheWindowAndItsExactEdge) {
  ReplayWindow w = make(64);
  EXPECT_EQ(w.check_and_update(100), V::kNew);
  EXPECT_EQ(w.check_and_update(36), V::kTooOld);  // 100 - 36 = 64 = W: just outside
  for (uint64_t s = 99; s >= 37; --s) ASSERT_EQ(w.check_and_update(s), V::kLate) << s;
  for (uint64_t s = 37; s <= 100; ++s) ASSERT_EQ(w.check_and_update(s), V::kDuplicate) << s;
  EXPECT_EQ(w.check_and_update(36), V::kTooOld);
  EXPECT_EQ(w.check_and_update(0), V::kTooOld);
}

TEST(ReplayWindow, FirstPacketMayBeAnyNumber) {
  for (uint64_t first : {uint64_t{0}, uint64_t{1}, uint64_t{12345}, kMax}) {
    ReplayWindow w = make(128);
    EXPECT_EQ(w.check(first), V::kNew);
    EXPECT_EQ(w.check_and_update(first), V::kNew) << first;
    EXPECT_FALSE(w.empty());
    EXPECT_EQ(w.top(), first);
    EXPECT_EQ(w.check_and_update(first), V::kDuplicate) << first;
  }
}

TEST(ReplayWindow, CheckDoesNotRecord) {
  ReplayWindow w = make(64);
  EXPECT_EQ(w.check(5), V::kNew);
  EXPECT_EQ(w.check(5), V::kNew);
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(w.check_and_update(5), V::kNew);
  EXPECT_EQ(w.check(3), V::kLate);
  EXPECT_EQ(w.check(3), V::kLate);
  EXPECT_EQ(w.check(5), V::kDuplicate);
  EXPECT_EQ(w.check(6), V::kNew);
  EXPECT_EQ(w.top(), 5u);
}

TEST(ReplayWindow, JumpBeyondTheWindowForgetsIt) {
  ReplayWindow w = make(64);
  for (uint64_t s = 0; s < 64; ++s) ASSERT_EQ(w.check_and_update(s), V::kNew);
  // Block 2 lands on block 0's ring slot (two slots for W = 64): its old bits must not count.
  EXPECT_EQ(w.check_and_update(191), V::kNew);
  for (uint64_t s = 128; s < 191; ++s) ASSERT_EQ(w.check_and_update(s), V::kLate) << s;
  EXPECT_EQ(w.check_and_update(127), V::kTooOld);
  EXPECT_EQ(w.check_and_update(63), V::kTooOld);
  // A jump of many windows.
  EXPECT_EQ(w.check_and_update(1'000'000), V::kNew);
  for (uint64_t s = 1'000'000 - 63; s < 1'000'000; ++s) {
    ASSERT_EQ(w.check_and_update(s), V::kLate) << s;
  }
  EXPECT_EQ(w.check_and_update(191), V::kTooOld);
}

// W = 128 has a ring of 4 slots but a big jump clears only W/64 + 1 = 3 of them: the fourth
// keeps stale bits until the window slides onto it, which must clear it before use.
TEST(ReplayWindow, StaleRingSlotIsClearedBeforeReuse) {
  ReplayWindow w = make(128);
  for (uint64_t s = 0; s < 256; ++s) ASSERT_EQ(w.check_and_update(s), V::kNew);  // 4 slots full
  const uint64_t base =
      uint64_t{64} * 100;  // block 100 (slot 0); clears blocks 98..100 (slots 2, 3, 0)
  EXPECT_EQ(w.check_and_update(base), V::kNew);
  for (uint64_t s = base - 127; s < base; ++s) ASSERT_EQ(w.check_and_update(s), V::kLate) << s;
  // Block 101 is slot 1, still holding block 1's bits: entering it must clear them.
  EXPECT_EQ(w.check_and_update(base + 127), V::kNew);
  for (uint64_t s = base + 64; s < base + 127; ++s) {
    ASSERT_EQ(w.check_and_update(s), V::kLate) << s;
  }
  for (uint64_t s = base + 1; s < base + 64; ++s) ASSERT_EQ(w.check_and_update(s), V::kLate) << s;
  for (uint64_t s = base; s <= base + 127; ++s) ASSERT_EQ(w.check(s), V::kDuplicate) << s;
}

TEST(ReplayWindow, TopOfTheSequenceSpace) {
  ReplayWindow w = make(64);
  for (uint64_t s = kMax - 200; s != 0; ++s) {  // up to and including 2^64 - 1, then wraps to 0
    ASSERT_EQ(w.check_and_update(s), V::kNew) << s;
  }
  EXPECT_EQ(w.top(), kMax);
  EXPECT_EQ(w.check_and_update(kMax), V::kDuplicate);
  EXPECT_EQ(w.check_and_update(kMax - 63), V::kDuplicate);
  EXPECT_EQ(w.check_and_update(kMax - 64), V::kTooOld);
  // No wrap-around: after 2^64 - 1 nothing is new, small numbers are too old.
  for (uint64_t s : {uint64_t{0}, uint64_t{1}, uint64_t{63}, uint64_t{1} << 63}) {
    EXPECT_EQ(w.check(s), V::kTooOld) << s;
    EXPECT_EQ(w.check_and_update(s), V::kTooOld) << s;
  }
  // A new epoch.
  w.reset();
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(w.top(), 0u);
  EXPECT_EQ(w.check_and_update(0), V::kNew);
  EXPECT_EQ(w.check_and_update(1), V::kNew);
  EXPECT_EQ(w.check_and_update(0), V::kDuplicate);
}

TEST(ReplayWindow, JumpStraightToTheTopAndLateBelowIt) {
  ReplayWindow w = make(4096);
  EXPECT_EQ(w.check_and_update(0), V::kNew);
  EXPECT_EQ(w.check_and_update(kMax), V::kNew);
  EXPECT_EQ(w.check_and_update(0), V::kTooOld);
  EXPECT_EQ(w.check_and_update(kMax - 4095), V::kLate);
  EXPECT_EQ(w.check_and_update(kMax - 4096), V::kTooOld);
  EXPECT_EQ(w.check_and_update(kMax - 1), V::kLate);
  EXPECT_EQ(w.check_and_update(kMax - 1), V::kDuplicate);
}

TEST(ReplayWindow, PreofEliminationPassesOneCopyOfEach) {
  // Two paths deliver the same numbers with different delays and reordering.
  ReplayWindow w = make(1024);
  std::mt19937_64 rng(5);
  std::vector<uint64_t> arrivals;
  for (uint64_t s = 0; s < 2000; ++s) {
    arrivals.push_back(s);
    arrivals.push_back(s);
  }
  // Bounded displacement (< 200 positions): reordering well inside the window.
  for (std::size_t i = 0; i + 1 < arrivals.size(); ++i) {
    const std::size_t j = i + rng() % std::min<std::size_t>(200, arrivals.size() - i);
    std::swap(arrivals[i], arrivals[j]);
  }
  std::vector<int> passed(2000, 0);
  int duplicates = 0;
  for (uint64_t s : arrivals) {
    const V v = w.check_and_update(s);
    if (accepted(v)) ++passed[s];
    duplicates += v == V::kDuplicate ? 1 : 0;
    ASSERT_NE(v, V::kTooOld) << s;
  }
  for (uint64_t s = 0; s < 2000; ++s) ASSERT_EQ(passed[s], 1) << s;
  EXPECT_EQ(duplicates, 2000);
}

TEST(ReplayVerdict, NamesAndDropReasons) {
  EXPECT_EQ(to_string(V::kNew), "new");
  EXPECT_EQ(to_string(V::kLate), "late");
  EXPECT_EQ(to_string(V::kDuplicate), "duplicate");
  EXPECT_EQ(to_string(V::kTooOld), "too_old");
  EXPECT_TRUE(accepted(V::kNew));
  EXPECT_TRUE(accepted(V::kLate));
  EXPECT_FALSE(accepted(V::kDuplicate));
  EXPECT_FALSE(accepted(V::kTooOld));
  EXPECT_EQ(drop_reason(V::kNew), std::nullopt);
  EXPECT_EQ(drop_reason(V::kLate), std::nullopt);
  EXPECT_EQ(drop_reason(V::kDuplicate), DropReason::kDuplicate);
  EXPECT_EQ(drop_reason(V::kTooOld), DropReason::kTooOld);
}

// --- against a naive model -----------------------------------------------------------------

class Model {
 public:
  explicit Model(uint64_t bits) : bits_(bits) {}
  V step(uint64_t s) {
    if (empty_ || s > top_) {
      empty_ = false;
      top_ = s;
      seen_.insert(s);
      return V::kNew;
    }
    if (top_ - s >= bits_) return V::kTooOld;
    return seen_.insert(s).second ? V::kLate : V::kDuplicate;
  }
  uint64_t top() const { return top_; }

 private:
  uint64_t bits_;
  bool empty_ = true;
  uint64_t top_ = 0;
  std::set<uint64_t> seen_;
};

uint64_t sat_add(uint64_t a, uint64_t b) { return a > kMax - b ? kMax : a + b; }
uint64_t sat_sub(uint64_t a, uint64_t b) { return a < b ? 0 : a - b; }

class ReplayWindowModel : public ::testing::TestWithParam<uint64_t> {};

TEST_P(ReplayWindowModel, SeededTrafficMatchesTheModel) {
  const uint64_t bits = GetParam();
  for (uint64_t start : {uint64_t{0}, uint64_t{1} << 40, kMax - 20 * bits}) {
    std::mt19937_64 rng(bits * 31 + start);
    ReplayWindow w = make(bits);
    Model m(bits);
    uint64_t next = start;
    for (int i = 0; i < 60000; ++i) {
      uint64_t s = 0;
      const uint64_t top = m.top();
      switch (rng() % 10) {
        case 0:
        case 1:
        case 2:
        case 3:
          s = next;
          next = sat_add(next, 1);
          break;  // in order
        case 4:
        case 5:
          s = sat_sub(top, rng() % (bits + bits / 4));
          break;  // reordered/old
        case 6:
          s = sat_sub(top, rng() % 8);
          break;  // duplicates
        case 7:
          s = sat_add(top, 1 + rng() % (bits / 2));
          next = sat_add(s, 1);
          break;  // gap
        case 8:
          s = sat_add(top, rng() % (3 * bits));
          next = sat_add(s, 1);
          break;  // big jump
        default:
          s = sat_add(top, 64 * (1 + rng() % 4));
          break;  // block steps
      }
      if (i == 0) s = start;
      const V expected = m.step(s);
      ASSERT_EQ(w.check(s), expected) << "bits " << bits << " start " << start << " step " << i;
      ASSERT_EQ(w.check_and_update(s), expected)
          << "bits " << bits << " start " << start << " step " << i << " seq " << s;
      ASSERT_EQ(w.top(), m.top());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, ReplayWindowModel, ::testing::Values(64, 128, 256, 1024, 4096));

}  // namespace
}  // namespace detwan::dataplane::wire

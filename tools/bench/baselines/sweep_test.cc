// The sweep shared by the baselines, over a fake library: sizes, bandwidth arithmetic and the
// result check (a wrong element must be counted), without gloo or MPI.
#include "tools/bench/baselines/sweep.h"

#include <gtest/gtest.h>

namespace detwan::bench::baselines {
namespace {

// Rank 0 of `nranks` ranks whose peers hold their sweep_pattern data: the "allreduce" computes
// the true sum locally, optionally spoiling one element.
class FakeCollective final : public Collective {
 public:
  FakeCollective(int nranks, bool spoil) : nranks_(nranks), spoil_(spoil) {}
  [[nodiscard]] int rank() const override { return 0; }
  [[nodiscard]] int nranks() const override { return nranks_; }
  void allreduce_sum(const float* in, float* out, size_t count) override {
    for (size_t i = 0; i < count; ++i) {
      out[i] = in[i];
      for (int r = 1; r < nranks_; ++r) out[i] += sweep_pattern(r, static_cast<int64_t>(i));
    }
    if (spoil_ && count > 0) out[count / 2] += 1.0f;
    ++calls_;
  }
  [[nodiscard]] double max_over_ranks(double value) override { return value; }
  [[nodiscard]] int64_t sum_over_ranks(int64_t value) override { return value; }
  int calls_ = 0;

 private:
  int nranks_;
  bool spoil_;
};

TEST(BaselineSweep, ParsesSizesWithBinaryPrefixes) {
  EXPECT_EQ(parse_size_bytes("8"), 8);
  EXPECT_EQ(parse_size_bytes("64K"), 64 << 10);
  EXPECT_EQ(parse_size_bytes("64M"), 64 << 20);
  EXPECT_EQ(parse_size_bytes("1G"), int64_t{1} << 30);
  EXPECT_EQ(parse_size_bytes("1x"), -1);
  EXPECT_EQ(parse_size_bytes(""), -1);
  EXPECT_EQ(parse_size_bytes("-4"), -1);
}

TEST(BaselineSweep, SweepsSizesAndChecksExactSums) {
  SweepOptions options;
  options.min_bytes = 8;
  options.max_bytes = 4096;
  options.step_factor = 8;
  options.iters = 3;
  options.warmup_iters = 1;
  FakeCollective coll(4, false);
  auto rows = run_sweep(options, coll);
  ASSERT_EQ(rows.size(), 4u);  // 8, 64, 512, 4096
  EXPECT_EQ(rows[0].size_bytes, 8);
  EXPECT_EQ(rows[3].size_bytes, 4096);
  EXPECT_EQ(rows[3].count, 1024);
  EXPECT_EQ(coll.calls_, 4 * (3 + 1));
  for (const auto& row : rows) {
    EXPECT_EQ(row.wrong, 0);
    if (row.time_us > 0) {
      EXPECT_DOUBLE_EQ(row.busbw_gbps, row.algbw_gbps * 1.5);  // 2 (n - 1) / n for n = 4
    }
  }
}

TEST(BaselineSweep, CountsAWrongElement) {
  SweepOptions options;
  options.min_bytes = 1024;
  options.max_bytes = 1024;
  options.iters = 1;
  options.warmup_iters = 0;
  FakeCollective coll(2, true);
  auto rows = run_sweep(options, coll);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].wrong, 1);
}

TEST(BaselineSweep, NoCheckReportsMinusOne) {
  SweepOptions options;
  options.min_bytes = 64;
  options.max_bytes = 64;
  options.check = 0;
  FakeCollective coll(2, true);
  auto rows = run_sweep(options, coll);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].wrong, -1);
}

}  // namespace
}  // namespace detwan::bench::baselines

// The per-packet functions never allocate: this binary replaces the global operator new with a
// counting one and runs decode/encode/control/replay over good and bad input in between two
// readings of the counter.
#include <atomic>
#include <cstdlib>
#include <new>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "dataplane/wire/control.h"
#include "dataplane/wire/header.h"
#include "dataplane/wire/replay_window.h"
#include "tests/common/counting_new.h"
#include "tests/dataplane/wire/wire_test_util.h"

namespace detwan::dataplane::wire {
namespace {

using testing::Bytes;

TEST(NoAllocation, PerPacketPathsDoNotAllocate) {
  // Inputs prepared up front (allocating is fine here).
  std::vector<Bytes> packets;
  packets.push_back(testing::datagram(testing::sample_header(), testing::payload_of(100)));
  Bytes control(kHeaderSize + 64);
  TunnelHeader ch = testing::sample_header();
  control.resize(encode_control(ch, TimeResponse{1, 2, 3, 4}, control).size);
  packets.push_back(control);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200; ++i) {
    Bytes b = packets[i % 2];
    b[rng() % b.size()] = std::byte(static_cast<uint8_t>(rng()));
    b.resize(rng() % (b.size() + 1));
    packets.push_back(b);
  }
  auto window = ReplayWindow::create(4096);
  ASSERT_TRUE(window.has_value());
  Bytes out(kHeaderSize + 64);
  DropCounters counters;

  const uint64_t before = g_allocations.load();
  uint64_t accepted_count = 0;
  for (int round = 0; round < 50; ++round) {
    for (const Bytes& b : packets) {
      const auto d = decode(b);
      if (!d) {
        counters.add(d.error());
        continue;
      }
      if (d->header.is_control()) {
        const auto body = decode_control(*d);
        if (!body) counters.add(body.error());
        if (body) (void)encode_control(d->header, *body, out);
      }
      (void)encode(d->header, out);
      const ReplayVerdict v = window->check_and_update(d->header.sequence + rng() % 5000);
      if (auto reason = drop_reason(v)) counters.add(*reason);
      accepted_count += accepted(v) ? 1 : 0;
    }
    (void)window->check_and_update(rng());  // jumps
  }
  const uint64_t after = g_allocations.load();

  EXPECT_EQ(after - before, 0u);
  EXPECT_GT(accepted_count, 0u);  // the loop did real work
  EXPECT_GT(counters.total(), 0u);
  // The counter works: an allocation between two readings is seen.
  const uint64_t probe = g_allocations.load();
  auto* leak_check = new std::vector<int>(3);
  delete leak_check;
  EXPECT_GT(g_allocations.load(), probe);
}

}  // namespace
}  // namespace detwan::dataplane::wire

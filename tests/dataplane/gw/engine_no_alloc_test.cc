// The engine's datapath never allocates: this binary replaces the global operator new with a
// counting one and runs two engines back to back (submit, control timers, poll_tx, encode,
// on_wan_datagram, poll_rx, stats excluded) over good and bad input for hundreds of cycles,
// with every buffer and queue of the test itself allocated beforehand.
#include <array>
#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include <gtest/gtest.h>

#include "dataplane/gw/engine.h"
#include "tests/common/counting_new.h"
#include "tests/dataplane/gw/engine_test_util.h"

namespace detwan::dataplane::gw {
namespace {

using common::Status;
using testing::Bytes;
using testing::kMs;
using testing::kUs;

constexpr int64_t kStart = 1'000'000'000'000;
constexpr uint32_t kBuffers = 4096;
constexpr int64_t kDelay = 1 * kMs;

struct Datagram {
  int64_t at_ns = 0;
  uint32_t to = 0;
  uint32_t buffer = 0;
  uint32_t size = 0;
};

TEST(EngineNoAlloc, DatapathNeverAllocates) {
  testing::SiteOptions o;
  o.peer_clock_offset_ns = 0;
  const uint64_t at_setup = g_allocations.load();
  auto a = Engine::create(testing::site_config(0, o), kStart);
  auto b = Engine::create(testing::site_config(1, o), kStart);
  ASSERT_TRUE(a && b);
  ASSERT_GT(g_allocations.load(), at_setup);  // the counter works: setup allocates
  Engine* engines[2] = {a->get(), b->get()};

  std::vector<Bytes> pool(kBuffers, Bytes(wire::kHeaderSize + 1500));
  std::vector<uint32_t> sizes(kBuffers, 0);
  std::vector<uint32_t> free_list;
  free_list.reserve(kBuffers);
  for (uint32_t i = 0; i < kBuffers; ++i) free_list.push_back(i);
  std::vector<Datagram> ring(kBuffers);  // FIFO: the delay is constant
  std::size_t head = 0, tail = 0;
  const uint8_t to7[4] = {10, 2, 0, 1}, to9[4] = {10, 102, 0, 1}, nowhere[4] = {192, 168, 0, 1};
  const Bytes packets[] = {testing::ipv4_packet(to7, 80, 1200, {}),
                           testing::ipv4_packet(to9, 5001, 600, {}),
                           testing::ipv4_packet(to9, 80, 300, {}),  // best effort
                           testing::ipv4_packet(nowhere, 80, 300, {}), Bytes(7)};
  const Bytes garbage(50, std::byte{0x5A});
  const Endpoint from_a = engines[0]->config().wan_ports[0].local;
  const Endpoint from_b = engines[1]->config().wan_ports[0].local;
  uint64_t sent = 0, received = 0, released = 0, not_ok = 0;
  int64_t next_submit = kStart;
  uint64_t submits = 0;

  const auto run = [&](int64_t end_ns) {
    for (;;) {
      int64_t t = std::min({next_submit, engines[0]->next_event_ns(), engines[1]->next_event_ns(),
                            head == tail ? INT64_MAX : ring[head % kBuffers].at_ns});
      if (t > end_ns) break;
      while (head != tail && ring[head % kBuffers].at_ns <= t) {
        const Datagram d = ring[head++ % kBuffers];
        RxInfo info;
        const Status s = engines[d.to]->on_wan_datagram_st(
            0, d.to == 1 ? from_a : from_b, d.buffer,
            std::span<const std::byte>(pool[d.buffer].data(), d.size), t, &info);
        if (s == Status::kOk) {
          ++received;
        } else {
          free_list.push_back(d.buffer);
        }
        Engine& e = *engines[d.to];
        RxInfo ignored;
        (void)e.on_wan_datagram_st(0, from_a, 0, garbage, t, &ignored);  // counted, refused
      }
      if (t == next_submit && !free_list.empty()) {
        const Bytes& p = packets[submits++ % std::size(packets)];
        const uint32_t h = free_list.back();
        free_list.pop_back();
        std::copy(p.begin(), p.end(), pool[h].begin() + wire::kHeaderSize);
        sizes[h] = static_cast<uint32_t>(p.size());
        const Status s = engines[0]->submit_tun_st(
            h, std::span<const std::byte>(pool[h].data() + wire::kHeaderSize, p.size()), t);
        if (s != Status::kOk) {
          ++not_ok;
          free_list.push_back(h);
        }
        next_submit += 40 * kUs;
      }
      for (uint32_t i = 0; i < 2; ++i) {
        Engine& e = *engines[i];
        e.poll_control_st(t);
        (void)e.poll_tx_st(t, [&](const TxEmit& x) {
          uint32_t h = 0;
          uint32_t size = 0;
          if (x.control) {
            if (free_list.empty()) return;
            h = free_list.back();
            free_list.pop_back();
            std::copy(x.bytes.begin(), x.bytes.end(), pool[h].begin());
            size = static_cast<uint32_t>(x.bytes.size());
          } else {
            h = static_cast<uint32_t>(x.handle);
            if (!x.send) {
              free_list.push_back(h);
              return;
            }
            wire::TunnelHeader header = x.header;
            header.type = static_cast<uint8_t>(wire::DataType::kIpv4);
            (void)wire::encode(header, pool[h]);
            size = static_cast<uint32_t>(wire::kHeaderSize) + sizes[h];
          }
          ++sent;
          ring[tail++ % kBuffers] = {t + kDelay, 1 - i, h, size};
        });
        (void)e.poll_rx_st(t, [&](const RxEmit& x) {
          ++released;
          free_list.push_back(static_cast<uint32_t>(x.handle));
        });
      }
    }
  };

  run(kStart + 20 * kMs);  // warm-up (nothing in the engine should need it, but be fair)
  const uint64_t before = g_allocations.load();
  run(kStart + 400 * kMs);
  const uint64_t allocations = g_allocations.load() - before;
  EXPECT_EQ(allocations, 0u);
  EXPECT_GT(sent, 5000u);
  EXPECT_GT(received, 2000u);
  EXPECT_GT(released, 2000u);
  EXPECT_GT(not_ok, 1000u);
  EXPECT_GT(engines[1]->rx_drops(0)[wire::DropReason::kBadMagic], 1000u);
  EXPECT_TRUE(engines[0]->peer_status(0).up);
}

}  // namespace
}  // namespace detwan::dataplane::gw

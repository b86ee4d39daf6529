// The engine's datapath never allocates: this binary replaces the global operator new with a
// counting one, and OpenSSL's allocator (CRYPTO_set_mem_functions) with one counting into the
// same counter, and runs two engines back to back (submit, control timers, poll_tx,
// encode_frame_st, on_wan_datagram, poll_rx, stats excluded) over good and bad input for
// hundreds of cycles, unauthenticated and with each AEAD cipher (seal and open included), with
// every buffer and queue of the test itself allocated beforehand. And run-time changes
// (apply_st, setup tier: it may allocate) reuse their large storage instead of allocating it.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include <gtest/gtest.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <boost/json.hpp>

#include "dataplane/gw/engine.h"
#include "tests/common/counting_new.h"
#include "tests/dataplane/gw/engine_test_util.h"

namespace detwan::dataplane::gw {
namespace {

using common::Status;
using testing::Bytes;
using testing::kMs;
using testing::kUs;

// OpenSSL allocates through these from the first use on (installed before main, before any
// OpenSSL call): every allocation counts like an operator new.
void* openssl_malloc(size_t size, const char*, int) { return counted_malloc(size); }
void* openssl_realloc(void* p, size_t size, const char*, int) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::realloc(p, size);
}
void openssl_free(void* p, const char*, int) { std::free(p); }
const bool g_openssl_counted =
    CRYPTO_set_mem_functions(openssl_malloc, openssl_realloc, openssl_free) == 1;

constexpr int64_t kStart = 1'000'000'000'000;
constexpr uint32_t kBuffers = 4096;
constexpr int64_t kDelay = 1 * kMs;

struct Datagram {
  int64_t at_ns = 0;
  uint32_t to = 0;
  uint32_t buffer = 0;
  uint32_t size = 0;
};

class EngineNoAllocCipher : public ::testing::TestWithParam<int> {};  // 0 none, 1 aes, 2 chacha

TEST_P(EngineNoAllocCipher, DatapathNeverAllocates) {
  ASSERT_TRUE(g_openssl_counted);
  const uint64_t before_openssl = g_allocations.load();
  EVP_CIPHER_CTX_free(EVP_CIPHER_CTX_new());
  ASSERT_GT(g_allocations.load(), before_openssl);  // OpenSSL's allocations are counted
  testing::SiteOptions o;
  o.peer_clock_offset_ns = 0;
  if (GetParam() != 0) {
    TunnelAuth auth;
    auth.cipher = GetParam() == 1 ? aead::Cipher::kAes256Gcm : aead::Cipher::kChacha20Poly1305;
    auth.keys.push_back(TunnelKey{1, *aead::key_from_hex(std::string(64, '7'))});
    auth.tx_key = 1;
    o.auth = auth;
  }
  const uint64_t at_setup = g_allocations.load();
  // Tunnel 7 bound to its tenants at both ends (match.src, foreign_source best effort): the
  // per-packet source lookups and the egress check run too, and a co-tenant's packet below.
  GatewayConfig config_a = testing::site_config(0, o);
  GatewayConfig config_b = testing::site_config(1, o);
  config_a.tunnels[0].src_prefixes = {testing::v4_prefix(10, 99, 0, 0, 16),
                                      testing::v6_prefix(1, 16)};
  config_b.tunnels[0].dst_prefixes.push_back(testing::v4_prefix(10, 99, 0, 0, 16));
  config_b.tunnels[0].src_prefixes = {testing::v4_prefix(10, 2, 0, 0, 16),
                                      testing::v6_prefix(2, 16)};
  for (GatewayConfig* c : {&config_a, &config_b}) {
    c->tunnels[0].foreign_source = ForeignSource::kBestEffort;
  }
  auto a = Engine::create(config_a, kStart);
  auto b = Engine::create(config_b, kStart);
  ASSERT_TRUE(a && b);
  ASSERT_GT(g_allocations.load(), at_setup);  // the counter works: setup allocates
  Engine* engines[2] = {a->get(), b->get()};

  std::vector<Bytes> pool(kBuffers, Bytes(wire::kHeaderSize + 1500 + aead::kTagBytes));
  std::vector<uint32_t> sizes(kBuffers, 0);
  std::vector<uint32_t> free_list;
  free_list.reserve(kBuffers);
  for (uint32_t i = 0; i < kBuffers; ++i) free_list.push_back(i);
  std::vector<Datagram> ring(kBuffers);  // FIFO: the delay is constant
  std::size_t head = 0, tail = 0;
  const uint8_t to7[4] = {10, 2, 0, 1}, to9[4] = {10, 102, 0, 1}, nowhere[4] = {192, 168, 0, 1};
  Bytes co_tenant = testing::ipv4_packet(to7, 80, 400, {});  // from 10.98.0.1: best effort
  co_tenant[13] = std::byte{98};
  const Bytes packets[] = {testing::ipv4_packet(to7, 80, 1200, {}),
                           testing::ipv4_packet(to9, 5001, 600, {}),
                           testing::ipv4_packet(to9, 80, 300, {}),  // best effort
                           testing::ipv4_packet(nowhere, 80, 300, {}),
                           Bytes(7),
                           co_tenant};
  Bytes garbage(50, std::byte{0x5A});
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
            std::span<std::byte>(pool[d.buffer].data(), d.size), t, &info);
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
            size = static_cast<uint32_t>(
                e.encode_frame_st(x, wire::DataType::kIpv4, pool[h], sizes[h]));
            if (size == 0) {
              free_list.push_back(h);
              return;
            }
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
  // The co-tenant's packets went best effort at a and were let in at b by the same policy.
  const auto tunnels_a = boost::json::parse(engines[0]->stats_json(kStart)).at("tunnels");
  EXPECT_GT(tunnels_a.at(0).at("tx").at("foreign_source_best_effort_packets").to_number<int>(),
            100);
  EXPECT_EQ(engines[1]->drops(EngineDrop::kForeignInner), 0u);
  if (GetParam() != 0) {  // the traffic really was sealed and opened
    const std::string stats = engines[1]->stats_json(kStart + 400 * kMs);
    EXPECT_NE(stats.find("\"opened_packets\":"), std::string::npos);
    EXPECT_EQ(engines[1]->drops(EngineDrop::kAuthFailed), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Ciphers, EngineNoAllocCipher, ::testing::Values(0, 1, 2));

// What one apply_st call allocated.
struct ApplyCost {
  uint64_t bytes = 0;
  uint64_t largest_bytes = 0;
};

// Run-time changes reuse what they can instead of allocating it again: each port's timing wheel
// (65536 entries by default, several MB: the spare wheel is filled and swapped), the scheduler
// counters (~120 kB per histogram) of the tunnels that remain and of those removed (for the next
// tunnel added), and a drained tunnel index's playouts (4096 entries each) and replay window. Forty rounds of add / modify rate / modify slots / modify
// bound / remove with frames queued: after the first round (whose add takes a new index and
// builds its tunnel) no change allocates anything of that size, and the heap does not grow.
TEST(EngineNoAlloc, RunTimeChangesReuseTheirStorageAndTheEngineDoesNotGrow) {
  testing::SiteOptions o;
  o.peer_clock_offset_ns = 0;
  auto created = Engine::create(testing::site_config(0, o), kStart);
  ASSERT_TRUE(created);
  Engine& engine = **created;
  const uint8_t to7[4] = {10, 2, 0, 1}, to_b[4] = {10, 3, 0, 1};
  const Bytes packets[] = {testing::ipv4_packet(to7, 80, 1200, {}),
                           testing::ipv4_packet(to_b, 80, 1200, {})};
  int64_t now = kStart;
  uint64_t handle = 0, queued = 0;
  // 250 us of traffic: 10 packets to each destination, every due frame sent.
  const auto traffic = [&] {
    for (int i = 0; i < 10; ++i) {
      for (const Bytes& p : packets)
        queued += engine.submit_tun_st(++handle, p, now) == Status::kOk;
    }
    const int64_t end = now + 250 * kUs;
    for (int64_t t = std::max(now, engine.next_event_ns()); t <= end;
         t = std::max(t + 1, engine.next_event_ns())) {
      engine.poll_control_st(t);
      (void)engine.poll_tx_st(t, [](const TxEmit&) {});
      (void)engine.poll_rx_st(t, [](const RxEmit&) {});
    }
    now = end;
  };
  TunnelConfig b;
  b.id = 1001;
  b.peer = "site-b";
  b.rate_bps = 100'000'000;
  b.slots = {14, 15, 16};
  b.bound_ns = 5 * kMs;
  b.dst_prefixes = {testing::v4_prefix(10, 3, 0, 0, 16)};
  TunnelConfig seven = engine.config().tunnels[0];
  const auto apply = [&](const TunnelChanges& changes) {
    traffic();
    g_largest_allocation_bytes = 0;
    const uint64_t before = g_allocated_bytes.load();
    const auto result = engine.apply_st(changes, now);
    EXPECT_TRUE(result) << result.error().message;
    return ApplyCost{g_allocated_bytes.load() - before, g_largest_allocation_bytes.load()};
  };
  constexpr int kRounds = 40;
  ApplyCost add, change, remove;
  int64_t live_after_first = 0;
  for (int round = 0; round < kRounds; ++round) {
    TunnelChanges c;
    c.add = {b};
    const ApplyCost added = apply(c);
    c = {};
    c.modify = {b};
    c.modify[0].rate_bps = 120'000'000;
    const ApplyCost rate = apply(c);
    c.modify[0].slots = {15, 16, 17, 18};
    const ApplyCost slots = apply(c);
    c = {};
    c.modify = {seven};
    c.modify[0].bound_ns = round % 2 == 0 ? 4 * kMs : 5 * kMs;
    const ApplyCost bound = apply(c);
    c = {};
    c.remove = {b.id};
    const ApplyCost removed = apply(c);
    traffic();
    if (round == 0) {
      EXPECT_GT(added.bytes, 1'000'000u);  // a new index: two playouts of 4096 entries built
      live_after_first = g_live_bytes.load();
      continue;
    }
    add.bytes = std::max(add.bytes, added.bytes);
    add.largest_bytes = std::max(add.largest_bytes, added.largest_bytes);
    for (const ApplyCost& cost : {rate, slots, bound}) {
      change.bytes = std::max(change.bytes, cost.bytes);
      change.largest_bytes = std::max(change.largest_bytes, cost.largest_bytes);
    }
    remove.bytes = std::max(remove.bytes, removed.bytes);
    remove.largest_bytes = std::max(remove.largest_bytes, removed.largest_bytes);
  }
  EXPECT_EQ(engine.tunnel_count(), 3u);  // B took its drained index again every time
  EXPECT_EQ(engine.generation(), 5u * kRounds);
  EXPECT_GT(queued, 2'000u);
  // A histogram side is 59392 bytes, a playout heap 294912, a wheel several MB: no change
  // allocates anything of that size. What they allocate is small: configuration copies, the
  // new gate control list, the classifier, the scheduler change's tables.
  constexpr uint64_t kSmall = 32'768;
  for (const ApplyCost& cost : {add, change, remove}) {
    EXPECT_LT(cost.largest_bytes, 16'384u);
    EXPECT_LT(cost.bytes, kSmall);
  }
  EXPECT_LT(std::abs(g_live_bytes.load() - live_after_first), 16'384) << live_after_first;
}

}  // namespace
}  // namespace detwan::dataplane::gw

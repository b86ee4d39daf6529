#pragma once
// Shared helpers of the proto tests: default options, bulk transfer and result checks.
#include <cstddef>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "tests/transport/proto/virtual_net.h"

namespace detwan::transport::proto::testing {

inline ChannelOptions reserved_options(int64_t rate_bps = 100'000'000) {
  ChannelOptions o;
  PathSpec p;
  p.rate_bps = rate_bps;
  o.paths = {p};
  o.initial_rtt_ns = 20'000'000;
  return o;
}

inline size_t count_events(const std::vector<Event>& events, Event::Kind kind) {
  size_t n = 0;
  for (const Event& e : events) n += e.kind == kind ? 1 : 0;
  return n;
}

// Queues `messages` on the client and runs until the server received all of them and the
// client saw every send completion. Checks order and bytes. Returns false on timeout.
inline bool transfer(VirtualNet& net, const std::vector<std::vector<std::byte>>& messages,
                     int64_t limit_ns = 60'000'000'000) {
  const size_t base_rx = count_events(net.events(1), Event::Kind::kMessage);
  const size_t base_tx = count_events(net.events(0), Event::Kind::kSendComplete);
  for (size_t i = 0; i < messages.size(); ++i) {
    EXPECT_EQ(net.client().queue_message(messages[i], 1000 + i), Status::kOk);
  }
  const bool done = net.run_until(
      [&] {
        return count_events(net.events(1), Event::Kind::kMessage) == base_rx + messages.size() &&
               count_events(net.events(0), Event::Kind::kSendComplete) ==
                   base_tx + messages.size();
      },
      limit_ns);
  if (!done) return false;
  EXPECT_EQ(net.spins(), 0u) << "next_wakeup_ns() <= now with nothing to send";
  size_t i = 0;
  size_t seen = 0;
  for (const Event& e : net.events(1)) {
    if (e.kind != Event::Kind::kMessage) continue;
    if (seen++ < base_rx) continue;
    EXPECT_EQ(e.message.size(), messages[i].size()) << "message " << i;
    EXPECT_TRUE(e.message == messages[i]) << "message " << i << " differs";
    ++i;
  }
  uint64_t token = 1000;
  seen = 0;
  for (const Event& e : net.events(0)) {
    if (e.kind != Event::Kind::kSendComplete) continue;
    if (seen++ < base_tx) continue;
    EXPECT_EQ(e.token, token++);
  }
  return true;
}

inline std::vector<std::vector<std::byte>> random_messages(const std::vector<size_t>& sizes,
                                                           uint64_t seed) {
  std::vector<std::vector<std::byte>> out;
  for (size_t i = 0; i < sizes.size(); ++i) out.push_back(random_bytes(sizes[i], seed + i));
  return out;
}

}  // namespace detwan::transport::proto::testing

#pragma once
// Counters of the backends that carry whole messages over a reliable medium (tcp, shm, verbs):
// written by the progress thread, read by Channel::stats() from any thread.
#include <atomic>
#include <cstdint>

#include "transport/transport.h"

namespace detwan::transport {

struct StreamCounters {
  std::atomic<uint64_t> messages_sent{0};
  std::atomic<uint64_t> bytes_sent{0};
  std::atomic<uint64_t> messages_received{0};
  std::atomic<uint64_t> bytes_received{0};
  std::atomic<uint64_t> segments_sent{0};       // verbs: work requests posted
  std::atomic<uint64_t> dropped_malformed{0};   // hostile or broken framing from the peer
  std::atomic<uint64_t> dropped_auth{0};        // tcp: a record whose tag does not verify

  [[nodiscard]] ChannelStats snapshot() const {
    ChannelStats stats;
    stats.messages_sent = messages_sent.load(std::memory_order_relaxed);
    stats.bytes_sent = bytes_sent.load(std::memory_order_relaxed);
    stats.messages_received = messages_received.load(std::memory_order_relaxed);
    stats.bytes_received = bytes_received.load(std::memory_order_relaxed);
    stats.segments_sent = segments_sent.load(std::memory_order_relaxed);
    stats.dropped_malformed = dropped_malformed.load(std::memory_order_relaxed);
    stats.dropped_auth = dropped_auth.load(std::memory_order_relaxed);
    return stats;
  }
};

}  // namespace detwan::transport

#pragma once
// A token bucket that several channels pace through together: the reserved rate of one sender
// toward one destination, however many channels (ranks of the other site, concurrent
// operations' lanes) it is spread over (docs/transport.md "Pacing groups").
//
// A channel that joins a group (Channel::set_pacing_group) sends a datagram only when both its
// own path pacer and the group allow it, and charges both: the channels of a group together
// never exceed the group's rate, and one channel alone may use all of it. Control datagrams
// (ACKs, keepalives) are charged the way a path's own pacer charges them.
//
// Threading: the channels of a group may be driven by different progress threads (udp lanes,
// several endpoints); every call takes the group's mutex, held for a few arithmetic operations.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "transport/proto/pacer.h"

namespace detwan::transport {

class PacingGroup {
 public:
  // A group paced at `rate_bps` (> 0) for datagrams of an `mtu_bytes` link, each charged
  // `frame_overhead_bytes` more on the wire; its catch-up burst is the one a reserved path of
  // that rate gets, at most `max_burst_bytes` on the wire when > 0 (the reservation's shaper).
  static std::shared_ptr<PacingGroup> reserved(int64_t rate_bps, int32_t mtu_bytes,
                                               int32_t frame_overhead_bytes,
                                               int64_t max_burst_bytes);

  [[nodiscard]] int64_t rate_bps() const {
    std::lock_guard lock(mutex_);
    return pacer_.rate_bps();
  }
  // Earliest time the group lets a datagram leave (<= now: now).
  [[nodiscard]] int64_t release_ns(int64_t now_ns) const {
    std::lock_guard lock(mutex_);
    return pacer_.release_ns(now_ns);
  }
  void on_send(int64_t now_ns, size_t datagram_bytes) {
    std::lock_guard lock(mutex_);
    pacer_.on_send(now_ns, datagram_bytes);
  }
  void on_unpaced_send(int64_t now_ns, size_t datagram_bytes) {
    std::lock_guard lock(mutex_);
    pacer_.on_unpaced_send(now_ns, datagram_bytes);
  }

  explicit PacingGroup(proto::Pacer pacer) : pacer_(pacer) {}

 private:
  mutable std::mutex mutex_;
  proto::Pacer pacer_;
};

}  // namespace detwan::transport

#pragma once
// Per-source reply budget of the STAMP reflector (docs/perf.md, "What a request can make the
// reflector send"): one token bucket (dataplane/sched/token_bucket.h: rate_bps, burst_bytes,
// exact integer arithmetic) per source IP address, so a spoofed stream of requests naming a
// victim gets at most rate_bps of replies sent to it, whatever ports and SSIDs it uses.
//
// The table is fixed (kMaxSources slots, allocated at construction) and probed a bounded number
// of times per packet. A source whose bucket had time to refill completely is as good as new,
// so its slot is reused after idle_ns() (the refill time, at least kMinIdleNs). When none of a
// source's probe slots is free, its replies draw on one shared bucket of the same rate
// (counted in shared()): under a flood of spoofed sources the reflector's total output stays
// bounded by (sources in the table + 1) x rate.
//
// Threading: one owner thread (the reflector's). No allocation after construction, no throw.
#include <cstdint>
#include <vector>

#include <netinet/in.h>

#include "dataplane/sched/token_bucket.h"

namespace detwan::perf::stamp {

class SourceLimiter {
 public:
  static constexpr size_t kMaxSources = 4096;
  static constexpr size_t kProbes = 16;
  static constexpr int64_t kMinIdleNs = 1'000'000'000;

  // rate_bps > 0 and burst_bytes > 0 (the reflector's options are checked before).
  SourceLimiter(uint64_t rate_bps, uint64_t burst_bytes);

  // True when `bytes` may go to `source` at now_ns (monotonic, never going back); its tokens
  // are then taken. A refused reply takes none.
  [[nodiscard]] bool admit(const in6_addr& source, uint32_t bytes, int64_t now_ns) noexcept;

  [[nodiscard]] uint64_t shared() const noexcept { return shared_; }
  [[nodiscard]] int64_t idle_ns() const noexcept { return idle_ns_; }

 private:
  struct Source {
    in6_addr address{};
    bool used = false;
    int64_t last_ns = 0;
    dataplane::sched::TokenBucket bucket;
  };

  uint64_t rate_bps_;
  uint64_t burst_bytes_;
  int64_t idle_ns_;
  std::vector<Source> sources_;
  dataplane::sched::TokenBucket shared_bucket_;
  uint64_t shared_ = 0;
};

}  // namespace detwan::perf::stamp

#include "tools/perf/stamp_limiter.h"

#include <algorithm>
#include <cstring>

namespace detwan::perf::stamp {

SourceLimiter::SourceLimiter(uint64_t rate_bps, uint64_t burst_bytes)
    : rate_bps_(rate_bps),
      burst_bytes_(burst_bytes),
      // Time for an empty bucket to fill: burst x 8 bits at rate_bps (in double: no overflow).
      idle_ns_(std::max<int64_t>(
          kMinIdleNs, static_cast<int64_t>(static_cast<double>(burst_bytes) * 8e9 /
                                           static_cast<double>(std::max<uint64_t>(rate_bps, 1))) +
                          1)),
      sources_(kMaxSources, Source{in6_addr{}, false, 0,
                                   dataplane::sched::TokenBucket(rate_bps, burst_bytes, 0)}),
      shared_bucket_(rate_bps, burst_bytes, 0) {}

bool SourceLimiter::admit(const in6_addr& source, uint32_t bytes, int64_t now_ns) noexcept {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a over the address
  for (const uint8_t b : source.s6_addr) hash = (hash ^ b) * 1099511628211ull;
  Source* reusable = nullptr;
  for (size_t probe = 0; probe < kProbes; ++probe) {
    Source& s = sources_[(hash + probe) % kMaxSources];
    if (s.used && std::memcmp(&s.address, &source, sizeof(source)) == 0) {
      s.last_ns = now_ns;
      return s.bucket.try_consume(bytes, now_ns);
    }
    if (reusable == nullptr && (!s.used || now_ns - s.last_ns >= idle_ns_)) reusable = &s;
  }
  if (reusable != nullptr) {
    // A fresh (full) bucket: what an idle source's bucket would hold by now anyway.
    *reusable = Source{source, true, now_ns,
                       dataplane::sched::TokenBucket(rate_bps_, burst_bytes_, now_ns)};
    return reusable->bucket.try_consume(bytes, now_ns);
  }
  ++shared_;
  return shared_bucket_.try_consume(bytes, now_ns);
}

}  // namespace detwan::perf::stamp

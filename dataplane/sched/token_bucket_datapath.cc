// Token bucket arithmetic (per packet): exact integers, no allocation, no exceptions.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "dataplane/sched/token_bucket.h"

namespace detwan::dataplane::sched {

TokenBucket::TokenBucket(uint64_t rate_bps, uint64_t burst_bytes, int64_t start_ns) noexcept
    : rate_bps_(rate_bps),
      burst_bytes_(burst_bytes),
      capacity_(static_cast<Uint128>(burst_bytes) * kUnitsPerByte),
      credit_(capacity_),
      last_ns_(start_ns) {}

Uint128 TokenBucket::credit_at(int64_t t_ns) const noexcept {
  if (t_ns <= last_ns_) return credit_;
  // rate <= 2^64 and the gap <= 2^63: the product fits in 128 bits.
  const Uint128 gained = static_cast<Uint128>(rate_bps_) * static_cast<uint64_t>(t_ns - last_ns_);
  return gained >= capacity_ - credit_ ? capacity_ : credit_ + gained;
}

bool TokenBucket::try_consume(uint32_t bytes, int64_t now_ns) noexcept {
  credit_ = credit_at(now_ns);
  last_ns_ = std::max(last_ns_, now_ns);
  const Uint128 cost = static_cast<Uint128>(bytes) * kUnitsPerByte;
  if (credit_ < cost) return false;
  credit_ -= cost;
  return true;
}

int64_t TokenBucket::conform_time_ns(uint32_t bytes, int64_t now_ns) const noexcept {
  const int64_t t0 = std::max(now_ns, last_ns_);
  const Uint128 cost = static_cast<Uint128>(bytes) * kUnitsPerByte;
  const Uint128 credit = credit_at(t0);
  if (credit >= cost) return t0;
  if (cost > capacity_ || rate_bps_ == 0) return std::numeric_limits<int64_t>::max();
  const Uint128 wait_ns = (cost - credit + rate_bps_ - 1) / rate_bps_;
  return t0 + static_cast<int64_t>(wait_ns);
}

void TokenBucket::consume_at(uint32_t bytes, int64_t t_ns) noexcept {
  credit_ = credit_at(t_ns);
  last_ns_ = std::max(last_ns_, t_ns);
  const Uint128 cost = static_cast<Uint128>(bytes) * kUnitsPerByte;
  credit_ = credit_ >= cost ? credit_ - cost : 0;
}

uint64_t TokenBucket::available_bytes(int64_t now_ns) const noexcept {
  return static_cast<uint64_t>(credit_at(now_ns) / kUnitsPerByte);
}

}  // namespace detwan::dataplane::sched

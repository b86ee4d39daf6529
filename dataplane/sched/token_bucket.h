#pragma once
// Token bucket (rate_bps, burst_bytes) in exact integer arithmetic, and the ingress policer
// built on it.
//
// Tokens are kept in units of 1e-9 bit, so a bucket refilled at rate_bps for d ns gains exactly
// rate_bps * d units: no rounding, ever. Over any interval [t0, t1] with the bucket full at t0,
// the bytes it lets through are at most burst_bytes + rate_bps * (t1 - t0) / 8e9, and exactly
// that (to the byte) when it is offered more in frames that divide it.
//
// Used two ways:
//  * policing: try_consume() admits a frame now or refuses it (refused frames take no tokens);
//  * shaping:  conform_time_ns() says when a frame would conform, consume_at() takes its tokens
//    at that instant; successive frames are spaced at rate_bps after a burst of burst_bytes.
//
// Time arguments must not go backwards; an earlier time is treated as the latest one seen.
// Threading: one owner thread. Datapath-safe: no allocation, no exceptions.
#include <cstdint>

#include "dataplane/sched/link_time.h"

namespace detwan::dataplane::sched {

class TokenBucket {
 public:
  // Starts full at start_ns. rate_bps 0 never refills (only the initial burst passes).
  TokenBucket(uint64_t rate_bps, uint64_t burst_bytes, int64_t start_ns) noexcept;

  // Policer: takes the frame's tokens and returns true if the bucket holds them at now_ns.
  [[nodiscard]] bool try_consume(uint32_t bytes, int64_t now_ns) noexcept;
  // Shaper: earliest instant >= max(now_ns, last update) at which the bucket holds `bytes`;
  // INT64_MAX if it never can (bytes above the burst, or rate 0 and not enough left).
  [[nodiscard]] int64_t conform_time_ns(uint32_t bytes, int64_t now_ns) const noexcept;
  // Shaper: takes the tokens at t_ns, a time returned by conform_time_ns() (so they are there).
  void consume_at(uint32_t bytes, int64_t t_ns) noexcept;

  // Whole bytes of credit at now_ns (without changing state).
  [[nodiscard]] uint64_t available_bytes(int64_t now_ns) const noexcept;
  [[nodiscard]] uint64_t rate_bps() const noexcept { return rate_bps_; }
  [[nodiscard]] uint64_t burst_bytes() const noexcept { return burst_bytes_; }

 private:
  static constexpr uint64_t kUnitsPerByte = 8'000'000'000;  // 1e-9 bit units
  [[nodiscard]] Uint128 credit_at(int64_t t_ns) const noexcept;

  uint64_t rate_bps_;
  uint64_t burst_bytes_;
  Uint128 capacity_;  // burst_bytes * kUnitsPerByte
  Uint128 credit_;    // at last_ns_
  int64_t last_ns_;
};

// What a policer does with a frame above the reservation.
enum class OverRateAction : uint8_t {
  kDrop = 0,        // drop it (counted)
  kBestEffort = 1,  // send it as best effort, in unreserved slots (counted)
};

enum class PoliceVerdict : uint8_t { kConform = 0, kExceed = 1 };

// Ingress policer of one tunnel: single rate, two colours (RFC 2697 without the excess bucket).
// Exceeding frames take no tokens; the caller applies the tunnel's OverRateAction.
class Policer {
 public:
  Policer(uint64_t rate_bps, uint64_t burst_bytes, OverRateAction action, int64_t start_ns) noexcept
      : bucket_(rate_bps, burst_bytes, start_ns), action_(action) {}

  [[nodiscard]] PoliceVerdict police(uint32_t bytes, int64_t now_ns) noexcept {
    if (bucket_.try_consume(bytes, now_ns)) {
      ++conform_packets_;
      conform_bytes_ += bytes;
      return PoliceVerdict::kConform;
    }
    ++exceed_packets_;
    exceed_bytes_ += bytes;
    return PoliceVerdict::kExceed;
  }

  [[nodiscard]] OverRateAction action() const noexcept { return action_; }
  [[nodiscard]] const TokenBucket& bucket() const noexcept { return bucket_; }
  [[nodiscard]] uint64_t conform_packets() const noexcept { return conform_packets_; }
  [[nodiscard]] uint64_t conform_bytes() const noexcept { return conform_bytes_; }
  [[nodiscard]] uint64_t exceed_packets() const noexcept { return exceed_packets_; }
  [[nodiscard]] uint64_t exceed_bytes() const noexcept { return exceed_bytes_; }

 private:
  TokenBucket bucket_;
  OverRateAction action_;
  uint64_t conform_packets_ = 0;
  uint64_t conform_bytes_ = 0;
  uint64_t exceed_packets_ = 0;
  uint64_t exceed_bytes_ = 0;
};

}  // namespace detwan::dataplane::sched

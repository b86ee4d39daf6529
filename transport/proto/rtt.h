#pragma once
// RTT estimator and retransmission timeout of one path (RFC 6298), docs/transport.md "Timers".
#include <algorithm>
#include <cstdint>

namespace detwan::transport::proto {

class RttEstimator {
 public:
  RttEstimator(int64_t initial_rtt_ns, int64_t min_rto_ns)
      : initial_rtt_ns_(initial_rtt_ns), min_rto_ns_(min_rto_ns) {}

  // One sample (ack delay already removed). First sample: srtt = r, rttvar = r/2.
  void on_sample(int64_t rtt_ns) {
    rtt_ns = std::max<int64_t>(rtt_ns, 1);
    if (!has_sample_) {
      srtt_ns_ = rtt_ns;
      rttvar_ns_ = rtt_ns / 2;
      has_sample_ = true;
    } else {
      const int64_t err = srtt_ns_ > rtt_ns ? srtt_ns_ - rtt_ns : rtt_ns - srtt_ns_;
      rttvar_ns_ = (3 * rttvar_ns_ + err) / 4;   // beta = 1/4
      srtt_ns_ = (7 * srtt_ns_ + rtt_ns) / 8;    // alpha = 1/8
    }
    backoff_ = 0;
  }
  void on_timeout() { backoff_ = std::min(backoff_ + 1, 16); }

  [[nodiscard]] bool has_sample() const { return has_sample_; }
  [[nodiscard]] int64_t srtt_ns() const { return has_sample_ ? srtt_ns_ : initial_rtt_ns_; }
  [[nodiscard]] int64_t rttvar_ns() const { return has_sample_ ? rttvar_ns_ : initial_rtt_ns_ / 2; }
  // Clock granularity floor of the variance term (RFC 6298 "G"): on a path without jitter
  // rttvar decays to 0 and an RTO of exactly one RTT would fire spuriously.
  static constexpr int64_t kGranularityNs = 1'000'000;
  // The peer may hold an ACK this long (delayed ACK); samples exclude it, the RTO must not.
  static constexpr int64_t kMaxAckDelayNs = 1'000'000;

  // RTO = max(min_rto, srtt + max(4 rttvar, srtt/2, G) + max_ack_delay), doubled per
  // consecutive timeout (exponential backoff), capped at 60 s. The srtt/2 floor keeps the RTO
  // behind the RACK deadline (sent + srtt + srtt/4), so a hole with later segments acked is
  // repaired by fast retransmit, not by a timeout that collapses a best-effort window; and it
  // absorbs a stall of the peer (descheduled receiver, ACKs held) of up to half an RTT on a
  // jitter-free path, where rttvar has decayed and a timeout would retransmit a whole RTO's
  // worth of segments that are merely waiting in a queue.
  [[nodiscard]] int64_t rto_ns() const {
    const int64_t var = std::max({4 * rttvar_ns(), srtt_ns() / 2, kGranularityNs});
    const int64_t base = std::max(min_rto_ns_, srtt_ns() + var + kMaxAckDelayNs);
    return std::min<int64_t>(base << backoff_, int64_t{60'000'000'000});
  }

 private:
  int64_t initial_rtt_ns_;
  int64_t min_rto_ns_;
  int64_t srtt_ns_ = 0;
  int64_t rttvar_ns_ = 0;
  bool has_sample_ = false;
  int backoff_ = 0;
};

}  // namespace detwan::transport::proto

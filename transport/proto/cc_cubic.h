#pragma once
// CUBIC congestion control (RFC 9438) for best-effort paths (rate_bps == 0).
// docs/transport.md "Pacing and congestion control".
//
// Window in bytes. Slow start until the first loss; then the cubic function
// W(t) = C (t - K)^3 + W_max with C = 0.4 and beta = 0.7, bounded below by the Reno-friendly
// estimate W_est. One window reduction per recovery episode: a loss of a segment sent before
// the current episode started does not reduce again. The pacing rate is 1.25 cwnd / srtt.
//
// Window validation (RFC 7661; Linux's tcp_is_cwnd_limited): an ACK grows the window only while
// the sender uses it, i.e. the most it had in flight lately is at least half the window. A
// sender limited by the application or by its own CPU would otherwise grow the window without
// bound on a loss-free path, and the pacing rate derived from it with it, until pacing stops
// shaping anything. While the window is not in use the cubic curve's clock stands still.
#include <cstdint>

namespace detwan::transport::proto {

class Cubic {
 public:
  static constexpr double kC = 0.4;
  static constexpr double kBeta = 0.7;

  explicit Cubic(int64_t mss_bytes, int64_t initial_window_segments = 10);

  // `acked_bytes` newly acknowledged (cumulative or SACK) of a segment sent at `sent_ns`.
  // `cwnd_limited`: the path had at least half the window in flight lately (the caller's
  // measure); false = the ACK does not grow the window.
  void on_ack(int64_t acked_bytes, int64_t sent_ns, int64_t now_ns, int64_t srtt_ns,
              bool cwnd_limited = true);
  // A segment sent at `sent_ns` was declared lost.
  void on_loss(int64_t sent_ns, int64_t now_ns);
  // Retransmission timeout: collapse to the minimum window (RFC 9438 section 4.8).
  void on_timeout(int64_t now_ns);

  [[nodiscard]] int64_t cwnd_bytes() const { return static_cast<int64_t>(cwnd_); }
  [[nodiscard]] int64_t ssthresh_bytes() const { return static_cast<int64_t>(ssthresh_); }
  [[nodiscard]] bool in_slow_start() const { return cwnd_ < ssthresh_; }
  [[nodiscard]] int64_t pacing_rate_bps(int64_t srtt_ns) const;

 private:
  void start_episode(int64_t now_ns);

  double mss_;
  double cwnd_;
  double ssthresh_;
  double w_max_ = 0;  // bytes
  double w_est_ = 0;  // Reno-friendly estimate, bytes
  double k_s_ = 0;    // seconds
  int64_t epoch_start_ns_ = -1;
  int64_t last_ack_ns_ = -1;
  int64_t recovery_start_ns_ = INT64_MIN;
};

}  // namespace detwan::transport::proto

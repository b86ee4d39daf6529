#include "transport/proto/cc_cubic.h"

#include <algorithm>
#include <cmath>

namespace detwan::transport::proto {

namespace {
// Bound so that the window (and the pacing rate derived from it) stays finite when the
// sender is application-limited and never meets a loss.
constexpr double kMaxWindowBytes = 1024.0 * 1024 * 1024;
}  // namespace

Cubic::Cubic(int64_t mss_bytes, int64_t initial_window_segments)
    : mss_(static_cast<double>(mss_bytes)),
      cwnd_(static_cast<double>(mss_bytes * initial_window_segments)),
      ssthresh_(1e18) {}

int64_t Cubic::pacing_rate_bps(int64_t srtt_ns) const {
  const double rtt_s = static_cast<double>(std::max<int64_t>(srtt_ns, 1000)) * 1e-9;
  return std::max<int64_t>(static_cast<int64_t>(1.25 * cwnd_ * 8.0 / rtt_s), 8000);
}

void Cubic::on_ack(int64_t acked_bytes, int64_t sent_ns, int64_t now_ns, int64_t srtt_ns,
                   bool cwnd_limited) {
  const int64_t since_last_ack_ns = last_ack_ns_ < 0 ? 0 : now_ns - last_ack_ns_;
  last_ack_ns_ = now_ns;
  // Acks of segments sent before the current episode began do not grow the window.
  if (sent_ns <= recovery_start_ns_) return;
  if (!cwnd_limited) {
    // Not validated: no growth, and the curve's time does not advance (Linux moves the epoch
    // on by the time the window was not in use).
    if (epoch_start_ns_ >= 0) epoch_start_ns_ += since_last_ack_ns;
    return;
  }
  const double acked = static_cast<double>(acked_bytes);
  if (cwnd_ < ssthresh_) {
    cwnd_ = std::min(cwnd_ + acked, kMaxWindowBytes);
    return;
  }
  if (epoch_start_ns_ < 0) {
    // Congestion avoidance entered without a loss episode (ssthresh set by a timeout).
    epoch_start_ns_ = now_ns;
    w_max_ = cwnd_;
    w_est_ = cwnd_;
    k_s_ = 0;
  }
  const double t = static_cast<double>(now_ns - epoch_start_ns_) * 1e-9;
  const double rtt_s = static_cast<double>(srtt_ns) * 1e-9;
  // W_cubic(t + RTT) in segments, converted to bytes.
  const double dt = t + rtt_s - k_s_;
  const double target_bytes = std::clamp((kC * dt * dt * dt) * mss_ + w_max_, cwnd_, 1.5 * cwnd_);
  // Reno-friendly region: alpha = 3 (1 - beta) / (1 + beta).
  const double alpha = 3.0 * (1.0 - kBeta) / (1.0 + kBeta);
  w_est_ += alpha * acked * mss_ / cwnd_;
  if (w_est_ > target_bytes) {
    cwnd_ = std::max(cwnd_, w_est_);
  } else {
    cwnd_ += (target_bytes - cwnd_) / cwnd_ * acked;
  }
  cwnd_ = std::min(cwnd_, kMaxWindowBytes);
}

void Cubic::start_episode(int64_t now_ns) {
  recovery_start_ns_ = now_ns;
  epoch_start_ns_ = now_ns;
  // Fast convergence: release bandwidth when the window stopped short of the last W_max.
  if (cwnd_ < w_max_) {
    w_max_ = cwnd_ * (1.0 + kBeta) / 2.0;
  } else {
    w_max_ = cwnd_;
  }
  cwnd_ = std::max(cwnd_ * kBeta, 2.0 * mss_);
  ssthresh_ = cwnd_;
  w_est_ = cwnd_;
  k_s_ = std::cbrt(std::max(w_max_ - cwnd_, 0.0) / mss_ / kC);
}

void Cubic::on_loss(int64_t sent_ns, int64_t now_ns) {
  if (sent_ns <= recovery_start_ns_) return;  // one reduction per episode
  start_episode(now_ns);
}

void Cubic::on_timeout(int64_t now_ns) {
  start_episode(now_ns);
  cwnd_ = 2.0 * mss_;
  epoch_start_ns_ = -1;
}

}  // namespace detwan::transport::proto

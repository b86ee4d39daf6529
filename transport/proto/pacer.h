#pragma once
// Token-bucket pacer of one path (docs/transport.md "Pacing and congestion control").
//
// `horizon_ns_` is the time at which everything sent so far has "drained" at the rate. A send
// is allowed while horizon <= now; each send pushes the horizon by its serialisation time.
// The horizon never lags more than `burst` datagrams behind now, which bounds the burst after
// an idle period. Costs are integer ns with the division remainder carried so long
// transfers do not drift.
//
// Send quantum (best-effort paths; 0 elsewhere): once what was sent has drained, one wake-up may
// send up to `quantum` ahead of now, then the path sleeps until all of it has drained: the
// average stays the rate, and the datagrams of one wake-up leave back to back, so the link can
// hand them to the kernel as one GSO send. TCP sizes its TSO bursts the same way (about 1 ms
// at the pacing rate, tcp_tso_autosize).
#include <algorithm>
#include <cstdint>

namespace detwan::transport::proto {

class Pacer {
 public:
  Pacer() = default;
  Pacer(int64_t rate_bps, int32_t frame_overhead_bytes, int32_t burst_datagrams,
        int32_t datagram_bytes)
      : rate_bps_(rate_bps),
        overhead_bytes_(frame_overhead_bytes),
        burst_datagrams_(burst_datagrams),
        datagram_bytes_(datagram_bytes) {}

  void set_rate_bps(int64_t rate_bps) {
    rate_bps_ = std::max<int64_t>(rate_bps, 1);
    update_quantum();
  }
  [[nodiscard]] int64_t rate_bps() const { return rate_bps_; }
  // A send quantum of up to `datagrams` full datagrams (0 or 1: none) and at most
  // kMaxQuantumNs, recomputed whenever the rate changes.
  void set_quantum_datagrams(int32_t datagrams) {
    quantum_datagrams_ = datagrams;
    update_quantum();
  }
  [[nodiscard]] int64_t quantum_ns() const { return quantum_ns_; }

  // Earliest time a datagram may leave (<= now means: now).
  [[nodiscard]] int64_t release_ns(int64_t now_ns) const {
    if (drain_until_ns_ > now_ns) return drain_until_ns_;
    return horizon_ns_ - quantum_ns_ > now_ns ? horizon_ns_ - quantum_ns_ : now_ns;
  }
  [[nodiscard]] bool can_send(int64_t now_ns) const { return release_ns(now_ns) <= now_ns; }

  // Control datagrams (ACK, keepalive, handshake, CLOSE) leave unpaced. They are charged so
  // that data yields to them, but never push the horizon more than one burst past now: a side
  // that mostly acknowledges (a receiver without a rate sample paces at cwnd / initial RTT)
  // must not build a backlog in front of its own next data.
  void on_unpaced_send(int64_t now_ns, size_t datagram_bytes) {
    on_send(now_ns, datagram_bytes);
    horizon_ns_ = std::min(horizon_ns_, now_ns + burst_ns());
    drain_until_ns_ = std::min(drain_until_ns_, horizon_ns_);
  }

  void on_send(int64_t now_ns, size_t datagram_bytes) {
    const int64_t bits = (static_cast<int64_t>(datagram_bytes) + overhead_bytes_) * 8;
    // ns = bits * 1e9 / rate, with the remainder carried to the next datagram.
    const int64_t num = bits * 1'000'000'000 + remainder_;  // < 2^63 for datagrams < 1 MB
    const int64_t cost_ns = num / rate_bps_;
    remainder_ = num % rate_bps_;
    const int64_t floor_ns = now_ns - burst_ns();
    if (horizon_ns_ < floor_ns) {
      horizon_ns_ = floor_ns;
      remainder_ = 0;
    }
    horizon_ns_ += cost_ns;
    // Past the quantum: nothing more until all of it has drained.
    if (horizon_ns_ > now_ns + quantum_ns_) drain_until_ns_ = horizon_ns_;
  }

  static constexpr int64_t kMaxQuantumNs = 1'000'000;

 private:
  void update_quantum() {
    if (quantum_datagrams_ <= 1) {
      quantum_ns_ = 0;
      return;
    }
    const int64_t bits = (static_cast<int64_t>(datagram_bytes_) + overhead_bytes_) * 8;
    quantum_ns_ =
        std::min(kMaxQuantumNs, bits * 1'000'000'000 * (quantum_datagrams_ - 1) / rate_bps_);
  }

  [[nodiscard]] int64_t burst_ns() const {
    const int64_t bits = (static_cast<int64_t>(datagram_bytes_) + overhead_bytes_) * 8;
    return bits * 1'000'000'000 / rate_bps_ * (burst_datagrams_ - 1);
  }

  int64_t rate_bps_ = 1;
  int32_t overhead_bytes_ = 42;
  int32_t burst_datagrams_ = 4;
  int32_t datagram_bytes_ = 1472;
  int32_t quantum_datagrams_ = 0;
  int64_t quantum_ns_ = 0;
  int64_t horizon_ns_ = INT64_MIN / 2;
  int64_t drain_until_ns_ = INT64_MIN / 2;  // after a quantum: when it has all drained
  int64_t remainder_ = 0;
};

}  // namespace detwan::transport::proto

#pragma once
// What the probe receiver learns from the packets of one sender run. Pure logic (no I/O, no
// clock reads), so it is checked with hand-made sequences.
//
// - one-way delay = receive time - transmit time (both CLOCK_REALTIME of one kernel), in a
//   LogLinearHistogram;
// - IPDV (RFC 3393/5481): owd[n] - owd[n-1] for packets n-1, n that arrive back to back in
//   sequence;
// - received counts unique sequence numbers; duplicates and reordered (arrived after a higher
//   sequence number) are counted apart; lost and loss bursts come from the gaps in [0, sent).
//
// Threading: one thread. Memory grows with the highest sequence number (1 bit each, bounded by
// kMaxSeq).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/histogram.h"

namespace detwan::probe {

struct LossBursts {
  uint64_t count = 0;
  uint64_t total = 0;  // packets lost in bursts (= lost)
  uint64_t max_len = 0;
  std::map<uint64_t, uint64_t> by_length;  // burst length -> bursts of that length
  [[nodiscard]] double mean_len() const noexcept {
    return count == 0 ? 0.0 : static_cast<double>(total) / static_cast<double>(count);
  }
};

// events / span as a rate per second; 0 when either is not positive.
[[nodiscard]] double per_second(uint64_t events, int64_t span_ns) noexcept;

class ReceiverStats {
 public:
  ReceiverStats();

  // A data packet of the tracked run; seq < kMaxSeq (decode() guarantees it).
  void on_data(uint64_t seq, int64_t tx_ns, int64_t rx_ns, uint64_t payload_bytes);
  // The sender's end-of-run notice: data packets sent and the first/last transmit time.
  void on_fin(uint64_t sent, int64_t first_tx_ns, int64_t last_tx_ns) noexcept;
  void on_malformed() noexcept { ++malformed_; }
  void on_foreign() noexcept { ++foreign_; }

  [[nodiscard]] bool fin_seen() const noexcept { return fin_seen_; }
  [[nodiscard]] uint64_t received() const noexcept { return received_; }
  [[nodiscard]] int64_t max_owd_ns() const noexcept { return owd_ns_.max(); }

  // Packets the sender sent: the fin's count if seen, else max(expected, highest seq + 1).
  [[nodiscard]] uint64_t sent(uint64_t expected) const noexcept;
  [[nodiscard]] LossBursts loss_bursts(uint64_t sent) const;

  // The JSON report (one object). `expected`: the receiver's --count (0 if not given).
  [[nodiscard]] std::string json(uint64_t expected) const;

  [[nodiscard]] const common::LogLinearHistogram& owd_ns() const noexcept { return owd_ns_; }
  [[nodiscard]] const common::LogLinearHistogram& ipdv_ns() const noexcept { return ipdv_ns_; }

 private:
  [[nodiscard]] bool seen(uint64_t seq) const noexcept;
  void mark(uint64_t seq);

  std::vector<uint64_t> seen_bits_;
  common::LogLinearHistogram owd_ns_;
  common::LogLinearHistogram ipdv_ns_;
  uint64_t received_ = 0;
  uint64_t duplicates_ = 0;
  uint64_t reordered_ = 0;
  uint64_t malformed_ = 0;
  uint64_t foreign_ = 0;
  uint64_t payload_bytes_ = 0;
  uint64_t highest_seq_ = 0;
  bool any_ = false;
  bool have_prev_ = false;
  uint64_t prev_seq_ = 0;
  int64_t prev_owd_ns_ = 0;
  int64_t first_rx_ns_ = 0;
  int64_t last_rx_ns_ = 0;
  bool fin_seen_ = false;
  uint64_t fin_sent_ = 0;
  int64_t fin_first_tx_ns_ = 0;
  int64_t fin_last_tx_ns_ = 0;
};

}  // namespace detwan::probe

#pragma once
// Per-direction measurements of a test stream, sans-I/O: the I/O code feeds packets in, tests
// feed synthetic ones. Definitions (docs/perf.md has the long form):
//   one-way delay   RFC 7679: receive time - send time - clock correction (never clamped)
//   IPDV            RFC 3393: owd(i) - owd(i-1) for consecutive sequence numbers both received
//   PDV             RFC 5481: owd(i) - min owd over the same set (the whole test or the interval)
//   RFC 3550 jitter J += (|D| - J) / 16 over arrival order (iperf3's number, for comparison)
//   loss            sent - distinct received; loss bursts: lengths of runs of missing sequence
//                   numbers in [0, sent)
//   reordering      RFC 4737: a packet whose sequence number is below the next expected one
//                   (highest seen + 1) is reordered
//   beyond bound    received packets whose one-way delay exceeds bound_ns (plus the lost ones
//                   are counted separately in `lost`)
// Memory is bounded: one bit per sequence number up to max_packets (chosen by the caller from
// the negotiated rate x duration) plus fixed-size histograms. on_packet() never allocates.
#include <cstdint>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "common/histogram.h"
#include "common/status.h"

namespace detwan::perf {

// Percentile summary of a histogram (values in ns).
struct Distribution {
  uint64_t count = 0;
  int64_t min = 0;
  double mean = 0;
  int64_t p50 = 0, p90 = 0, p99 = 0, p99_9 = 0, p99_99 = 0, p99_999 = 0, max = 0;
};
// Summary of `h` with `shift_ns` subtracted from every value (exact: a shift is monotonic).
Distribution summarize(const common::LogLinearHistogram& h, int64_t shift_ns = 0);

// One direction's result, for the whole test or for one interval.
struct DirectionResult {
  int64_t start_ns = 0, end_ns = 0;  // span covered (sender's clock for intervals)
  uint64_t sent = 0;
  uint64_t received = 0;             // distinct sequence numbers received
  uint64_t lost = 0;
  uint64_t reordered = 0;
  uint64_t duplicates = 0;
  uint64_t malformed = 0;            // short, foreign or undecodable datagrams ignored
  uint64_t beyond_bound = 0;
  int64_t bound_ns = 0;              // 0: no bound was given
  uint64_t received_bytes = 0;       // UDP payload bytes of the distinct packets
  double throughput_bps = 0;         // received payload bits / (end - start)
  double rfc3550_jitter_ns = 0;
  int64_t clock_offset_ns = 0;       // receiver clock - sender clock (estimate)
  int64_t clock_error_ns = 0;        // bound on that estimate's error
  bool clock_corrected = false;      // whether owd_ns had the offset subtracted
  Distribution owd_ns, rtt_ns, ipdv_ns, pdv_ns, schedule_error_ns;
  std::vector<std::pair<uint64_t, uint64_t>> loss_bursts;  // (run length, how many), ascending
};

// One received test packet, for --raw and --plot.
struct PacketRecord {
  uint64_t seq = 0;
  int64_t tx_ns = 0;  // sender clock
  int64_t rx_ns = 0;  // receiver clock (kernel timestamp where available)
};

// Receiver side of one direction.
class StreamReceiver {
 public:
  // Sequence numbers >= max_packets are out of range (counted as malformed).
  StreamReceiver(uint64_t max_packets, int64_t bound_ns);

  enum class Verdict : uint8_t { kNew, kDuplicate, kOutOfRange };
  // tx_ns: sender clock; rx_ns: receiver clock. `correction_ns` is the clock correction in
  // force (subtracted from rx - tx for the bound check and the interval records).
  Verdict on_packet(uint64_t seq, int64_t tx_ns, int64_t rx_ns, uint32_t bytes,
                    int64_t correction_ns) noexcept;
  void on_malformed() noexcept { ++malformed_; ++interval_malformed_; }
  // The sender's count (from its fin / the control connection); until then the highest
  // sequence number seen + 1 stands in.
  void set_sent(uint64_t sent) noexcept { sent_ = sent; }

  // Whole-test result with the final correction applied to the delay distributions.
  // start/end: the test's span.
  [[nodiscard]] DirectionResult result(int64_t correction_ns, int64_t start_ns,
                                       int64_t end_ns) const;
  // The result of the samples since the previous call (or the start) and resets that interval
  // state. Loss in an interval counts the sequence numbers between the interval's first and
  // highest seen that have not arrived by the call (a later straggler is not taken back).
  DirectionResult take_interval(int64_t correction_ns, int64_t end_ns);

  [[nodiscard]] uint64_t received() const noexcept { return received_; }
  [[nodiscard]] uint64_t malformed() const noexcept { return malformed_; }

 private:
  // One arrival remembered for IPDV: slot seq % kIpdvRing. `seq_plus_one` 0 marks an empty slot.
  struct IpdvSlot {
    uint64_t seq_plus_one = 0;
    int64_t owd_raw_ns = 0;
  };
  // Span of sequence numbers over which a pair (i-1, i) can still be matched when one of them
  // arrives out of order: 4096 covers reordering far beyond what real paths show.
  static constexpr uint64_t kIpdvRing = 4096;

  [[nodiscard]] bool has(uint64_t seq) const noexcept {
    return ((bitmap_[seq >> 6] >> (seq & 63)) & 1) != 0;
  }
  // First position in [from, limit) whose bit is `want`, else limit; positions at or beyond
  // max_packets_ read as not received.
  [[nodiscard]] uint64_t find_bit(bool want, uint64_t from, uint64_t limit) const noexcept;
  // Received sequence numbers in [begin, end).
  [[nodiscard]] uint64_t count_received(uint64_t begin, uint64_t end) const noexcept;
  // Runs of missing sequence numbers in [begin, end), as sorted (length, count) pairs; numbers
  // at or beyond max_packets_ count as missing.
  [[nodiscard]] std::vector<std::pair<uint64_t, uint64_t>> loss_runs(uint64_t begin,
                                                                     uint64_t end) const;

  std::vector<uint64_t> bitmap_;  // one bit per sequence number in [0, max_packets_)
  std::vector<IpdvSlot> ipdv_ring_;
  uint64_t max_packets_;
  int64_t bound_ns_;
  static constexpr uint64_t kSentUnknown = UINT64_MAX;  // set_sent() not called yet
  uint64_t sent_ = kSentUnknown;
  // Whole-test counters, then the same for the current interval.
  uint64_t received_ = 0, reordered_ = 0, duplicates_ = 0, malformed_ = 0, beyond_bound_ = 0,
           received_bytes_ = 0;
  uint64_t interval_received_ = 0, interval_reordered_ = 0, interval_duplicates_ = 0,
           interval_malformed_ = 0, interval_beyond_bound_ = 0, interval_bytes_ = 0;
  common::LogLinearHistogram owd_raw_;   // rx - tx, uncorrected
  common::LogLinearHistogram owd_rel_;   // owd - first owd: PDV precision at small values
  common::LogLinearHistogram ipdv_;
  common::LogLinearHistogram interval_owd_raw_, interval_owd_rel_, interval_ipdv_;
  int64_t first_owd_raw_ns_ = 0;
  bool have_first_ = false;
  uint64_t highest_seq_ = 0;
  bool have_highest_ = false;
  uint64_t interval_begin_seq_ = 0;  // interval loss is counted from here to highest_seq_
  int64_t interval_start_ns_ = 0;
  bool interval_start_known_ = false;
  int64_t last_transit_ns_ = 0;  // previous arrival's transit (RFC 3550)
  double jitter_ns_ = 0;
  bool have_transit_ = false;
};

// Sender side of one direction: what left, and how far from its deadline.
class StreamSender {
 public:
  StreamSender();
  void on_sent(int64_t deadline_ns, int64_t actual_ns, uint32_t bytes) noexcept;
  [[nodiscard]] uint64_t sent() const noexcept { return sent_; }
  [[nodiscard]] uint64_t sent_bytes() const noexcept { return sent_bytes_; }
  [[nodiscard]] const common::LogLinearHistogram& schedule_error() const noexcept {
    return schedule_error_;
  }
  // Interval view: schedule error since the previous call, then reset.
  common::LogLinearHistogram take_interval_schedule_error() noexcept;

 private:
  uint64_t sent_ = 0, sent_bytes_ = 0;
  common::LogLinearHistogram schedule_error_, interval_schedule_error_;
};

// JSON codec of DirectionResult (docs/perf-json.md, "direction object"). Used on the control
// connection (server to client) and in --json output. from_json names the missing or mistyped
// field in its error (ErrorCode::kInvalidArgument).
boost::json::object direction_to_json(const DirectionResult& r);
common::Result<DirectionResult> direction_from_json(const boost::json::value& v);
boost::json::object distribution_to_json(const Distribution& d);

}  // namespace detwan::perf

#include "tools/probe/receiver_stats.h"

#include <algorithm>

#include <fmt/format.h>

#include "tools/probe/wire.h"

namespace detwan::probe {
namespace {

// Burst lengths from this one up are reported together as "64+".
constexpr uint64_t kBurstLengthCap = 64;

std::string percentiles_json(const common::LogLinearHistogram& h) {
  static constexpr struct {
    const char* name;
    double q;
  } kPoints[] = {{"p0_1", 0.001}, {"p1", 0.01},  {"p5", 0.05},    {"p10", 0.10},
                 {"p25", 0.25},   {"p50", 0.50}, {"p75", 0.75},   {"p90", 0.90},
                 {"p95", 0.95},   {"p99", 0.99}, {"p99_9", 0.999}};
  std::string out = "{";
  for (const auto& point : kPoints) {
    if (out.size() > 1) out += ",";
    out += fmt::format("\"{}\":{}", point.name, h.percentile(point.q));
  }
  return out + "}";
}

}  // namespace

double per_second(uint64_t events, int64_t span_ns) noexcept {
  if (events == 0 || span_ns <= 0) return 0.0;
  return static_cast<double>(events) * static_cast<double>(kNsPerSec) /
         static_cast<double>(span_ns);
}

// 12 sub-bucket bits: buckets are 1/4096 of the value (2.4 us at 10 ms), so a delay-fidelity
// figure measured in microseconds is not swamped by bucket width (7 bits would be 78 us).
constexpr int kProbeHistogramBits = 12;

ReceiverStats::ReceiverStats()
    : owd_ns_(kProbeHistogramBits), ipdv_ns_(kProbeHistogramBits) {}

bool ReceiverStats::seen(uint64_t seq) const noexcept {
  const uint64_t word = seq / 64;
  return word < seen_bits_.size() && ((seen_bits_[word] >> (seq % 64)) & 1U) != 0;
}

void ReceiverStats::mark(uint64_t seq) {
  const uint64_t word = seq / 64;
  if (word >= seen_bits_.size()) {
    // Grow geometrically; seq < kMaxSeq bounds this at kMaxSeq / 8 bytes.
    seen_bits_.resize(std::max<uint64_t>(word + 1, seen_bits_.size() * 2), 0);
  }
  seen_bits_[word] |= uint64_t{1} << (seq % 64);
}

void ReceiverStats::on_data(uint64_t seq, int64_t tx_ns, int64_t rx_ns, uint64_t payload_bytes) {
  if (seq >= kMaxSeq) {
    ++malformed_;
    return;
  }
  if (seen(seq)) {
    ++duplicates_;
    return;
  }
  mark(seq);
  ++received_;
  payload_bytes_ += payload_bytes;
  if (!any_) first_rx_ns_ = rx_ns;
  last_rx_ns_ = std::max(last_rx_ns_, rx_ns);
  if (any_ && seq < highest_seq_) ++reordered_;
  const int64_t owd = rx_ns - tx_ns;
  owd_ns_.record(owd);
  if (have_prev_ && seq == prev_seq_ + 1) ipdv_ns_.record(owd - prev_owd_ns_);
  have_prev_ = true;
  prev_seq_ = seq;
  prev_owd_ns_ = owd;
  highest_seq_ = any_ ? std::max(highest_seq_, seq) : seq;
  any_ = true;
}

void ReceiverStats::on_fin(uint64_t sent, int64_t first_tx_ns, int64_t last_tx_ns) noexcept {
  fin_seen_ = true;
  fin_sent_ = sent;
  fin_first_tx_ns_ = first_tx_ns;
  fin_last_tx_ns_ = last_tx_ns;
}

uint64_t ReceiverStats::sent(uint64_t expected) const noexcept {
  if (fin_seen_) return fin_sent_;
  return std::max(expected, any_ ? highest_seq_ + 1 : 0);
}

LossBursts ReceiverStats::loss_bursts(uint64_t sent) const {
  LossBursts bursts;
  uint64_t run = 0;
  auto close_run = [&] {
    if (run == 0) return;
    ++bursts.count;
    bursts.total += run;
    bursts.max_len = std::max(bursts.max_len, run);
    ++bursts.by_length[std::min(run, kBurstLengthCap)];
    run = 0;
  };
  for (uint64_t seq = 0; seq < sent; ++seq) {
    if (seen(seq)) {
      close_run();
    } else {
      ++run;
    }
  }
  close_run();
  return bursts;
}

std::string ReceiverStats::json(uint64_t expected) const {
  const uint64_t total_sent = sent(expected);
  const LossBursts bursts = loss_bursts(total_sent);
  // Received packets beyond what the sender claims (a lying fin) are not counted as negative loss.
  const uint64_t lost = bursts.total;
  std::string lengths = "{";
  for (const auto& [len, n] : bursts.by_length) {
    if (lengths.size() > 1) lengths += ",";
    lengths += len >= kBurstLengthCap ? fmt::format("\"{}+\":{}", kBurstLengthCap, n)
                                      : fmt::format("\"{}\":{}", len, n);
  }
  lengths += "}";
  const int64_t rx_span_ns = last_rx_ns_ - first_rx_ns_;
  const int64_t tx_span_ns = fin_seen_ ? fin_last_tx_ns_ - fin_first_tx_ns_ : 0;
  const double rx_pps = per_second(received_ > 1 ? received_ - 1 : 0, rx_span_ns);
  const double rx_payload_bps = per_second(payload_bytes_ * 8, rx_span_ns);
  const double tx_pps = per_second(fin_sent_ > 1 ? fin_sent_ - 1 : 0, tx_span_ns);
  return fmt::format(
      "{{\"sent\":{},\"sent_known\":{},\"received\":{},\"lost\":{},\"loss_rate\":{:.6f},"
      "\"loss_bursts\":{{\"count\":{},\"mean_len\":{:.4f},\"max_len\":{},\"lengths\":{}}},"
      "\"reordered\":{},\"duplicates\":{},\"malformed\":{},\"foreign\":{},"
      "\"owd_ns\":{},\"owd_percentiles_ns\":{},\"ipdv_ns\":{},\"ipdv_percentiles_ns\":{},"
      "\"rx_pps\":{:.1f},\"rx_payload_bps\":{:.0f},\"tx_pps\":{:.1f},\"rx_span_ns\":{},"
      "\"timestamps\":\"CLOCK_REALTIME; rx from the kernel (SO_TIMESTAMPNS)\"}}",
      total_sent, fin_seen_ ? "\"fin\"" : (expected > 0 ? "\"count\"" : "\"highest_seq\""),
      received_, lost,
      total_sent == 0 ? 0.0 : static_cast<double>(lost) / static_cast<double>(total_sent),
      bursts.count, bursts.mean_len(), bursts.max_len, lengths, reordered_, duplicates_, malformed_,
      foreign_, owd_ns_.summary_json(), percentiles_json(owd_ns_), ipdv_ns_.summary_json(),
      percentiles_json(ipdv_ns_), rx_pps, rx_payload_bps, tx_pps, rx_span_ns);
}

}  // namespace detwan::probe

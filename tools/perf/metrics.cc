#include "tools/perf/metrics.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>

namespace detwan::perf {
namespace {

// 2^-10 relative precision (0.1 %) for delays: a 20 ms one-way delay resolves to ~20 us in
// owd_raw, while owd_rel keeps PDV and IPDV (small values) precise to a few ns.
constexpr int kDelaySubBucketBits = 10;

// Timestamps come from the network and may be anything: their differences wrap rather than
// overflow (undefined behaviour). Real values never come near the wrap.
int64_t wrapping_sub(int64_t a, int64_t b) noexcept {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}

double throughput_bps(uint64_t bytes, int64_t start_ns, int64_t end_ns) noexcept {
  if (end_ns <= start_ns) return 0;
  const double span_ns = static_cast<double>(end_ns) - static_cast<double>(start_ns);
  return static_cast<double>(bytes) * 8e9 / span_ns;
}

}  // namespace

Distribution summarize(const common::LogLinearHistogram& h, int64_t shift_ns) {
  Distribution d;
  if (h.count() == 0) return d;
  d.count = h.count();
  d.min = wrapping_sub(h.min(), shift_ns);
  d.mean = h.mean() - static_cast<double>(shift_ns);
  d.p50 = wrapping_sub(h.percentile(0.5), shift_ns);
  d.p90 = wrapping_sub(h.percentile(0.9), shift_ns);
  d.p99 = wrapping_sub(h.percentile(0.99), shift_ns);
  d.p99_9 = wrapping_sub(h.percentile(0.999), shift_ns);
  d.p99_99 = wrapping_sub(h.percentile(0.9999), shift_ns);
  d.p99_999 = wrapping_sub(h.percentile(0.99999), shift_ns);
  d.max = wrapping_sub(h.max(), shift_ns);
  return d;
}

StreamReceiver::StreamReceiver(uint64_t max_packets, int64_t bound_ns)
    : bitmap_(max_packets / 64 + (max_packets % 64 != 0 ? 1 : 0), 0),
      ipdv_ring_(kIpdvRing),
      max_packets_(max_packets),
      bound_ns_(bound_ns),
      owd_raw_(kDelaySubBucketBits),
      owd_rel_(kDelaySubBucketBits),
      ipdv_(kDelaySubBucketBits),
      interval_owd_raw_(kDelaySubBucketBits),
      interval_owd_rel_(kDelaySubBucketBits),
      interval_ipdv_(kDelaySubBucketBits) {}

StreamReceiver::Verdict StreamReceiver::on_packet(uint64_t seq, int64_t tx_ns, int64_t rx_ns,
                                                  uint32_t bytes,
                                                  int64_t correction_ns) noexcept {
  if (seq >= max_packets_) {
    ++malformed_;
    ++interval_malformed_;
    return Verdict::kOutOfRange;
  }
  uint64_t& word = bitmap_[seq >> 6];
  const uint64_t bit = uint64_t{1} << (seq & 63);
  if ((word & bit) != 0) {
    ++duplicates_;
    ++interval_duplicates_;
    return Verdict::kDuplicate;
  }
  word |= bit;
  ++received_;
  ++interval_received_;
  received_bytes_ += bytes;
  interval_bytes_ += bytes;
  if (!interval_start_known_) {
    interval_start_ns_ = tx_ns;
    interval_start_known_ = true;
  }

  // RFC 4737: below the next expected (highest + 1); seq == highest is a duplicate, so "<".
  if (have_highest_ && seq < highest_seq_) {
    ++reordered_;
    ++interval_reordered_;
  } else {
    highest_seq_ = seq;
    have_highest_ = true;
  }

  const int64_t owd_raw_ns = wrapping_sub(rx_ns, tx_ns);
  if (!have_first_) {
    first_owd_raw_ns_ = owd_raw_ns;
    have_first_ = true;
  }
  const int64_t owd_rel_ns = wrapping_sub(owd_raw_ns, first_owd_raw_ns_);
  owd_raw_.record(owd_raw_ns);
  interval_owd_raw_.record(owd_raw_ns);
  owd_rel_.record(owd_rel_ns);
  interval_owd_rel_.record(owd_rel_ns);

  // RFC 3393 IPDV of the pairs (seq-1, seq) and (seq, seq+1): a pair is recorded when its second
  // member arrives, whichever that is, so reordering within the ring's span changes nothing.
  // The clock offset cancels in the difference, so the raw delays are used.
  const IpdvSlot& prev = ipdv_ring_[(seq - 1) % kIpdvRing];  // seq 0: wraps, never matches
  if (seq > 0 && prev.seq_plus_one == seq) {
    const int64_t ipdv_ns = wrapping_sub(owd_raw_ns, prev.owd_raw_ns);
    ipdv_.record(ipdv_ns);
    interval_ipdv_.record(ipdv_ns);
  }
  const IpdvSlot& next = ipdv_ring_[(seq + 1) % kIpdvRing];
  if (next.seq_plus_one == seq + 2) {
    const int64_t ipdv_ns = wrapping_sub(next.owd_raw_ns, owd_raw_ns);
    ipdv_.record(ipdv_ns);
    interval_ipdv_.record(ipdv_ns);
  }
  ipdv_ring_[seq % kIpdvRing] = IpdvSlot{seq + 1, owd_raw_ns};

  // RFC 3550 interarrival jitter, in arrival order; transit = rx - tx.
  if (have_transit_) {
    const double d_ns = std::fabs(static_cast<double>(wrapping_sub(owd_raw_ns, last_transit_ns_)));
    jitter_ns_ += (d_ns - jitter_ns_) / 16.0;
  }
  last_transit_ns_ = owd_raw_ns;
  have_transit_ = true;

  if (bound_ns_ > 0 && wrapping_sub(owd_raw_ns, correction_ns) > bound_ns_) {
    ++beyond_bound_;
    ++interval_beyond_bound_;
  }
  return Verdict::kNew;
}

uint64_t StreamReceiver::find_bit(bool want, uint64_t from, uint64_t limit) const noexcept {
  while (from < limit) {
    if (from >= max_packets_) return want ? limit : from;
    const uint64_t w = from >> 6;
    // Bits of the last word beyond max_packets_ are 0, i.e. read as missing, as they should.
    const uint64_t bits = (want ? bitmap_[w] : ~bitmap_[w]) >> (from & 63);
    if (bits != 0) return std::min(limit, from + static_cast<uint64_t>(std::countr_zero(bits)));
    from = (w + 1) << 6;
  }
  return limit;
}

uint64_t StreamReceiver::count_received(uint64_t begin, uint64_t end) const noexcept {
  end = std::min(end, max_packets_);
  uint64_t n = 0;
  while (begin < end) {
    const uint64_t w = begin >> 6;
    const uint64_t chunk_end = std::min(end, (w + 1) << 6);
    const uint64_t width = chunk_end - begin;  // 1..64
    uint64_t bits = bitmap_[w] >> (begin & 63);
    if (width < 64) bits &= (uint64_t{1} << width) - 1;
    n += static_cast<uint64_t>(std::popcount(bits));
    begin = chunk_end;
  }
  return n;
}

std::vector<std::pair<uint64_t, uint64_t>> StreamReceiver::loss_runs(uint64_t begin,
                                                                     uint64_t end) const {
  std::map<uint64_t, uint64_t> runs;  // length -> how many; few distinct lengths in practice
  uint64_t pos = begin;
  while (pos < end) {
    const uint64_t gap = find_bit(false, pos, end);
    if (gap >= end) break;
    const uint64_t next = find_bit(true, gap, end);
    ++runs[next - gap];
    pos = next;
  }
  return {runs.begin(), runs.end()};
}

DirectionResult StreamReceiver::result(int64_t correction_ns, int64_t start_ns,
                                       int64_t end_ns) const {
  DirectionResult r;
  r.start_ns = start_ns;
  r.end_ns = end_ns;
  if (sent_ != kSentUnknown) {
    r.sent = sent_;
  } else {
    r.sent = have_highest_ ? highest_seq_ + 1 : 0;
  }
  r.received = received_;
  r.lost = r.sent - count_received(0, r.sent);
  r.loss_bursts = loss_runs(0, r.sent);
  r.reordered = reordered_;
  r.duplicates = duplicates_;
  r.malformed = malformed_;
  r.beyond_bound = beyond_bound_;
  r.bound_ns = bound_ns_;
  r.received_bytes = received_bytes_;
  r.throughput_bps = throughput_bps(received_bytes_, start_ns, end_ns);
  r.rfc3550_jitter_ns = jitter_ns_;
  r.clock_corrected = correction_ns != 0;
  r.owd_ns = summarize(owd_raw_, correction_ns);
  // owd_rel - min(owd_rel) = owd - min(owd), with owd_rel's finer buckets near zero.
  r.pdv_ns = summarize(owd_rel_, owd_rel_.min());
  r.ipdv_ns = summarize(ipdv_);
  return r;
}

DirectionResult StreamReceiver::take_interval(int64_t correction_ns, int64_t end_ns) {
  DirectionResult r;
  r.start_ns = interval_start_known_ ? interval_start_ns_ : end_ns;
  r.end_ns = end_ns;
  // Loss over [where the previous interval stopped, highest seen]: each sequence number is
  // judged in exactly one interval, by what has arrived when that interval is taken.
  const uint64_t range_end = have_highest_ ? highest_seq_ + 1 : 0;
  const uint64_t range_begin = std::min(interval_begin_seq_, range_end);
  r.sent = range_end - range_begin;
  r.lost = r.sent - count_received(range_begin, range_end);
  r.loss_bursts = loss_runs(range_begin, range_end);
  r.received = interval_received_;
  r.reordered = interval_reordered_;
  r.duplicates = interval_duplicates_;
  r.malformed = interval_malformed_;
  r.beyond_bound = interval_beyond_bound_;
  r.bound_ns = bound_ns_;
  r.received_bytes = interval_bytes_;
  r.throughput_bps = throughput_bps(interval_bytes_, r.start_ns, end_ns);
  r.rfc3550_jitter_ns = jitter_ns_;  // the running value: RFC 3550 jitter has no window
  r.clock_corrected = correction_ns != 0;
  r.owd_ns = summarize(interval_owd_raw_, correction_ns);
  r.pdv_ns = summarize(interval_owd_rel_, interval_owd_rel_.min());
  r.ipdv_ns = summarize(interval_ipdv_);

  interval_received_ = interval_reordered_ = interval_duplicates_ = interval_malformed_ = 0;
  interval_beyond_bound_ = interval_bytes_ = 0;
  interval_owd_raw_.reset();
  interval_owd_rel_.reset();
  interval_ipdv_.reset();
  interval_begin_seq_ = range_end;
  interval_start_ns_ = end_ns;
  interval_start_known_ = true;
  return r;
}

StreamSender::StreamSender() = default;

void StreamSender::on_sent(int64_t deadline_ns, int64_t actual_ns, uint32_t bytes) noexcept {
  const int64_t error_ns = wrapping_sub(actual_ns, deadline_ns);  // signed: early is negative
  schedule_error_.record(error_ns);
  interval_schedule_error_.record(error_ns);
  ++sent_;
  sent_bytes_ += bytes;
}

common::LogLinearHistogram StreamSender::take_interval_schedule_error() noexcept {
  common::LogLinearHistogram interval = interval_schedule_error_;
  interval_schedule_error_.reset();
  return interval;
}

}  // namespace detwan::perf

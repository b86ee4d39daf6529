// Sender: segmentation, ACK/SACK processing, per-path loss detection, RTO, path choice.
#include <algorithm>

#include "transport/proto/connection_impl.h"

namespace detwan::transport::proto {

namespace {

// RACK reordering window: a segment is lost once a later one on its path was acked and
// srtt + srtt/4 passed since it was sent.
int64_t reorder_deadline_ns(const Segment& s, const PathState& p) {
  const int64_t srtt = p.rtt.srtt_ns();
  return std::max(s.sent_ns + srtt + srtt / 4, s.fec_guard_ns);
}

bool stale(const Segment* s, const Flight& f, uint32_t path) {
  return s == nullptr || s->sacked || !s->in_flight || s->path != path || s->tx_index != f.tx_index;
}

}  // namespace

// The oldest flight of `path` still in flight (stale entries dropped on the way); nullptr if
// none. *flight is set to it.
Segment* ConnectionImpl::front_flight(uint32_t path, Flight* flight) {
  PathState& p = paths_[path];
  while (!p.flights.empty()) {
    *flight = p.flights.front();
    Segment* s = segment(flight->seq);
    if (!stale(s, *flight, path)) return s;
    p.flights.pop_front();
  }
  return nullptr;
}

Segment* ConnectionImpl::segment(uint64_t seq) {
  if (seq < seg_base_ || seq - seg_base_ >= segments_.size()) return nullptr;
  return &segments_[seq - seg_base_];
}

void ConnectionImpl::update_pacing(uint32_t path) {
  PathState& p = paths_[path];
  if (p.cubic) p.pacer.set_rate_bps(p.cubic->pacing_rate_bps(p.rtt.srtt_ns()));
}

Status ConnectionImpl::on_ack(uint32_t path, const wire::Header& /*h*/, const wire::AckBody& ack,
                              int64_t now_ns) {
  const uint64_t next_seq = seg_base_ + segments_.size();
  if (ack.cumulative > next_seq) {
    stats_.dropped_malformed++;  // acknowledges data never sent
    return Status::kMalformed;
  }
  for (size_t i = 0; i < ack.range_count; ++i) {
    if (ack.ranges[i].end > next_seq) {
      stats_.dropped_malformed++;
      return Status::kMalformed;
    }
  }
  peer_window_bytes_ = ack.window_bytes;

  // RTT from the echoed send time: unambiguous even for retransmitted segments. The echo is
  // the send time in microseconds modulo 2^32 (71 minutes): the latest time not after now with
  // those low bits (1 us below the exact send time at most).
  PathState& p = paths_[path];
  const int64_t now_us = now_ns / 1000;
  const int64_t echo_ns =
      (now_us - static_cast<int64_t>(static_cast<uint32_t>(now_us) - ack.echo_tx_time_us)) * 1000;
  if (echo_ns > p.last_echo_tx_ns && echo_ns >= 0) {
    int64_t rtt = now_ns - echo_ns;
    if (rtt > ack.ack_delay_ns) rtt -= ack.ack_delay_ns;
    p.rtt.on_sample(rtt);
    p.last_echo_tx_ns = echo_ns;
  }

  while (seg_base_ < ack.cumulative) {
    Segment& s = segments_.front();
    if (!s.sacked) on_segment_acked(s, now_ns);
    segments_.pop_front();
    seg_base_++;
  }
  for (size_t i = 0; i < ack.range_count; ++i) {
    for (uint64_t seq = std::max(ack.ranges[i].start, seg_base_); seq < ack.ranges[i].end; ++seq) {
      Segment& s = segments_[seq - seg_base_];
      if (s.sacked) continue;
      on_segment_acked(s, now_ns);
      s.sacked = true;
    }
  }
  for (uint32_t i = 0; i < paths_.size(); ++i) {
    detect_losses(i, now_ns);
    update_pacing(i);
  }
  complete_messages();
  return Status::kOk;
}

void ConnectionImpl::on_segment_acked(Segment& s, int64_t now_ns) {
  PathState& p = paths_[s.path];
  p.last_acked_ns = now_ns;
  if (p.dead) {  // a probe (or a late original) got through: the path works again
    p.dead = false;
    stats_.paths_recovered++;
  }
  // An ACK of a retransmitted segment is ambiguous: it may acknowledge the original (merely
  // queued, spuriously declared lost). Taking the retransmission's tx_index would declare
  // everything sent in between lost by count, a cascade that refills the queue with
  // duplicates. Loss of the retransmission itself is still detected by later new segments.
  if (s.retransmits == 0 && s.tx_index > p.largest_acked_tx) p.largest_acked_tx = s.tx_index;
  if (s.in_flight) {
    p.bytes_in_flight -= s.wire_bytes;
    s.in_flight = false;
    if (p.cubic) {
      p.cubic->on_ack(s.wire_bytes, s.sent_ns, now_ns, p.rtt.srtt_ns(), cwnd_in_use(p, now_ns));
    }
  }
}

bool ConnectionImpl::cwnd_in_use(PathState& p, int64_t now_ns) {
  if (now_ns >= p.inflight_period_end_ns) {
    p.inflight_peak_prev_bytes = p.inflight_peak_bytes;
    p.inflight_peak_bytes = p.bytes_in_flight;
    p.inflight_period_end_ns = now_ns + std::max<int64_t>(p.rtt.srtt_ns(), 1);
  }
  const int64_t peak = std::max(p.inflight_peak_bytes, p.inflight_peak_prev_bytes);
  return p.cubic->cwnd_bytes() < 2 * peak + static_cast<int64_t>(max_datagram_bytes_);
}

void ConnectionImpl::mark_lost(uint64_t seq, Segment& s, int64_t now_ns) {
  PathState& p = paths_[s.path];
  if (s.in_flight) {
    p.bytes_in_flight -= s.wire_bytes;
    s.in_flight = false;
  }
  if (!s.queued_lost) {
    s.queued_lost = true;
    lost_queue_.push_back(seq);
  }
  window_lost_++;
  // Reserved paths keep their rate: loss is repaired, never answered with a rate cut.
  if (p.cubic) p.cubic->on_loss(s.sent_ns, now_ns);
}

void ConnectionImpl::detect_losses(uint32_t path, int64_t now_ns) {
  PathState& p = paths_[path];
  Flight f;
  while (Segment* s = front_flight(path, &f)) {
    if (p.largest_acked_tx <= f.tx_index) break;  // nothing sent later on this path was acked
    const bool by_count = p.largest_acked_tx >= f.tx_index + 3;
    const bool lost =
        (by_count && now_ns >= s->fec_guard_ns) || now_ns >= reorder_deadline_ns(*s, p);
    if (!lost) break;  // the front is the oldest: nothing behind it is lost either
    mark_lost(f.seq, *s, now_ns);
    p.flights.pop_front();
  }
}

void ConnectionImpl::check_rto(uint32_t path, int64_t now_ns) {
  PathState& p = paths_[path];
  const int64_t rto = p.rtt.rto_ns();
  bool fired = false;
  Flight f;
  while (Segment* s = front_flight(path, &f)) {
    if (now_ns - s->sent_ns < rto) break;
    fired = true;
    mark_lost(f.seq, *s, now_ns);
    p.flights.pop_front();
  }
  if (fired) {
    stats_.timeouts++;
    p.rtt.on_timeout();
    if (p.cubic) p.cubic->on_timeout(now_ns);
    update_pacing(path);
  }
}

int64_t ConnectionImpl::path_dead_after_ns(const PathState& p) const {
  return 3 * p.rtt.srtt_ns() + kPathDeadSlackNs;
}

void ConnectionImpl::check_path_alive(uint32_t path, int64_t now_ns) {
  if (paths_.size() < 2) return;
  PathState& p = paths_[path];
  const int64_t limit = path_dead_after_ns(p);
  Flight f;
  while (Segment* s = front_flight(path, &f)) {
    if (now_ns - s->sent_ns <= limit) return;  // the oldest is recent: nothing to say yet
    if (!p.dead) {
      // Silence alone is not a dead path: the peer may be slow or gone. Another path's data
      // acknowledged after this segment left proves the peer answers.
      bool others_answer = false;
      for (uint32_t i = 0; i < paths_.size(); ++i) {
        others_answer =
            others_answer || (i != path && !paths_[i].dead && paths_[i].last_acked_ns > s->sent_ns);
      }
      if (!others_answer) return;
      p.dead = true;
      p.next_probe_ns = now_ns + std::max(kPathProbeMinNs, 2 * p.rtt.srtt_ns());
      stats_.paths_failed++;
    }
    mark_lost(f.seq, *s, now_ns);  // resent on a live path (pick_path avoids dead ones)
    p.flights.pop_front();
  }
}

bool ConnectionImpl::path_usable(uint32_t path, int64_t now_ns) const {
  const PathState& p = paths_[path];
  return !p.dead || now_ns >= p.next_probe_ns;
}

void ConnectionImpl::complete_messages() {
  while (!out_messages_.empty() && out_messages_.front().segmented &&
         out_messages_.front().last_seq < seg_base_) {
    const OutMessage& m = out_messages_.front();
    stats_.messages_sent++;
    stats_.bytes_sent += m.bytes.size();
    events_.push_back(make_event(Event::Kind::kSendComplete, m.token));
    out_messages_.pop_front();
    segmenting_index_--;
  }
  if (window_sent_ >= 128) {
    loss_estimator_.on_window(window_sent_, std::min(window_lost_, window_sent_));
    window_sent_ = 0;
    window_lost_ = 0;
    if (options_.fec.enabled && options_.fec.adaptive) {
      fec_m_current_ = fec_policy_.parity_for(
          options_.fec.data_segments, loss_estimator_.loss_rate(), options_.fec.parity_segments);
    }
  }
}

bool ConnectionImpl::has_new_data() const { return segmenting_index_ < out_messages_.size(); }

bool ConnectionImpl::window_allows_new() const {
  const uint64_t unit = std::max<uint64_t>(payload_bytes_, kWindowUnitBytes);
  const uint64_t limit = std::max<uint64_t>(peer_window_bytes_ / unit, 1);
  // send_buffer_bytes bounds the sender's per-segment metadata (and parity buffers).
  const uint64_t held_bytes =
      segments_.size() * sizeof(Segment) + parity_queue_.size() * max_datagram_bytes_;
  return segments_.size() < limit &&
         held_bytes < static_cast<uint64_t>(std::max<int64_t>(options_.send_buffer_bytes, 1));
}

bool ConnectionImpl::cwnd_allows(uint32_t path) const {
  const PathState& p = paths_[path];
  if (!p.cubic || p.bytes_in_flight == 0) return true;
  return p.bytes_in_flight + static_cast<int64_t>(max_datagram_bytes_) <= p.cubic->cwnd_bytes();
}

std::optional<uint32_t> ConnectionImpl::pick_path(int64_t now_ns, std::optional<uint32_t> avoid,
                                                  int64_t* release_ns) const {
  std::optional<uint32_t> best;
  int64_t best_release = INT64_MAX;
  for (int pass = 0; pass < 2 && !best; ++pass) {
    for (uint32_t i = 0; i < paths_.size(); ++i) {
      if (pass == 0 && avoid && *avoid == i && paths_.size() > 1) continue;
      if (!cwnd_allows(i) || !path_usable(i, now_ns)) continue;
      const int64_t r = path_release_ns(i, now_ns);
      if (r < best_release) {
        best_release = r;
        best = i;
      }
    }
  }
  *release_ns = best_release;
  return best;
}

int64_t ConnectionImpl::path_release_ns(uint32_t path, int64_t now_ns) const {
  const PathState& p = paths_[path];
  const int64_t own = p.pacer.release_ns(now_ns);
  return p.group ? std::max(own, p.group->release_ns(now_ns)) : own;
}

int64_t ConnectionImpl::data_release_ns(int64_t now_ns) const {
  if (!established_) return INT64_MAX;
  int64_t release = INT64_MAX;
  if (lost_queue_.empty() && parity_queue_.empty() && !(has_new_data() && window_allows_new())) {
    return INT64_MAX;
  }
  // Same choice as send_data: a retransmission avoids its original path.
  std::optional<uint32_t> avoid;
  if (!lost_queue_.empty()) {
    const Segment* s = const_cast<ConnectionImpl*>(this)->segment(lost_queue_.front());
    if (s != nullptr && !s->sacked && s->queued_lost) avoid = s->path;
  }
  if (!pick_path(now_ns, avoid, &release)) return INT64_MAX;
  return release;
}

int64_t ConnectionImpl::sender_timer_ns() const {
  int64_t t = INT64_MAX;
  for (uint32_t i = 0; i < paths_.size(); ++i) {
    const PathState& p = paths_[i];
    for (const Flight& f : p.flights) {
      const Segment* s = const_cast<ConnectionImpl*>(this)->segment(f.seq);
      if (stale(s, f, i)) continue;
      t = std::min(t, s->sent_ns + p.rtt.rto_ns());
      if (paths_.size() > 1) t = std::min(t, s->sent_ns + path_dead_after_ns(p) + 1);
      if (p.largest_acked_tx > f.tx_index) t = std::min(t, reorder_deadline_ns(*s, p));
      break;
    }
  }
  return t;
}

size_t ConnectionImpl::transmit_segment(uint64_t seq, uint32_t path, int64_t now_ns,
                                        std::span<std::byte> out) {
  Segment& s = segments_[seq - seg_base_];
  const OutMessage& m = out_messages_[s.message_id - out_messages_.front().id];
  wire::DataBody b;
  b.seq = seq;
  b.index = static_cast<uint32_t>(seq - m.first_seq);
  b.last_index = m.last_index;
  b.payload = m.bytes.subspan(s.offset, s.len);
  // An ACK owed on this path rides along if it fits beside the payload (piggy-backed).
  wire::AckBody ack;
  const wire::AckBody* ride = nullptr;
  if (ack_owed() && ack_path_ == path) {
    fill_ack(now_ns, ack);
    if (wire::kDataHeaderBytes + wire::ack_body_bytes(ack) + s.len + tag_bytes_ <=
        max_datagram_bytes_) {
      ride = &ack;
    }
  }
  const size_t n = wire::encode_data(header(wire::Type::kData, path, now_ns), b, out, ride);
  if (ride != nullptr) {
    ack_sent();
    stats_.acks_piggybacked++;
  }
  PathState& p = paths_[path];
  if (p.dead) p.next_probe_ns = now_ns + std::max(kPathProbeMinNs, 2 * p.rtt.srtt_ns());
  s.sent_ns = now_ns;
  s.path = path;
  s.tx_index = ++p.tx_counter;
  s.in_flight = true;
  s.wire_bytes = static_cast<uint32_t>(n + tag_bytes_);
  p.bytes_in_flight += static_cast<int64_t>(s.wire_bytes);
  p.inflight_peak_bytes = std::max(p.inflight_peak_bytes, p.bytes_in_flight);
  p.flights.push_back(Flight{seq, s.tx_index});
  p.data_segments_sent++;
  stats_.segments_sent++;
  window_sent_++;
  charge(path, n, now_ns);
  if (s.retransmits == 0 && options_.fec.enabled) fec_on_new_segment(seq, b, now_ns);
  return n;
}

size_t ConnectionImpl::send_data(int64_t now_ns, std::span<std::byte> out, uint32_t* path) {
  if (!established_) return 0;
  int64_t release = 0;
  while (!lost_queue_.empty()) {
    const uint64_t seq = lost_queue_.front();
    Segment* s = segment(seq);
    if (s == nullptr || s->sacked || !s->queued_lost) {
      lost_queue_.pop_front();  // acknowledged while waiting
      continue;
    }
    const std::optional<uint32_t> p = pick_path(now_ns, s->path, &release);
    if (!p || release > now_ns) return 0;
    lost_queue_.pop_front();
    s->queued_lost = false;
    s->retransmits++;
    s->fec_guard_ns = 0;
    stats_.segments_retransmitted++;
    *path = *p;
    return transmit_segment(seq, *p, now_ns, out);
  }
  if (!parity_queue_.empty()) return fec_send_parity(now_ns, out, path);
  if (!has_new_data() || !window_allows_new()) return 0;
  const std::optional<uint32_t> p = pick_path(now_ns, std::nullopt, &release);
  if (!p || release > now_ns) return 0;

  OutMessage& m = out_messages_[segmenting_index_];
  const uint64_t len = std::min<uint64_t>(payload_bytes_, m.bytes.size() - m.next_offset);
  const uint64_t seq = seg_base_ + segments_.size();
  if (m.next_offset == 0) {
    m.first_seq = seq;
    m.last_index =
        m.bytes.empty() ? 0 : static_cast<uint32_t>((m.bytes.size() - 1) / payload_bytes_);
  }
  Segment s;
  s.message_id = m.id;
  s.offset = m.next_offset;
  s.len = static_cast<uint32_t>(len);
  segments_.push_back(s);
  m.next_offset += len;
  if (m.next_offset == m.bytes.size()) {
    m.segmented = true;
    m.last_seq = seq;
    segmenting_index_++;
  }
  *path = *p;
  const size_t n = transmit_segment(seq, *p, now_ns, out);
  if (options_.fec.enabled && options_.fec.protect_tail && !has_new_data()) {
    fec_close_block(now_ns);
  }
  return n;
}

}  // namespace detwan::transport::proto

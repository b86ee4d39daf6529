// Receiver: duplicate and window checks, reassembly, in-order delivery, ACK generation.
#include <algorithm>
#include <cstring>

#include "transport/proto/connection_impl.h"

namespace detwan::transport::proto {

uint64_t ConnectionImpl::recv_window_segments() const {
  return std::max<uint64_t>(static_cast<uint64_t>(recv_window_bytes_) / kWindowUnitBytes, 1);
}

bool ConnectionImpl::seq_received(uint64_t seq) const {
  if (seq < rcv_cum_) return true;
  auto it = rcv_ranges_.upper_bound(seq);
  if (it == rcv_ranges_.begin()) return false;
  --it;
  return seq < it->second;
}

void ConnectionImpl::mark_received(uint64_t seq) {
  last_rcv_seq_ = seq;
  if (seq == rcv_cum_) {
    rcv_cum_++;
    while (!rcv_ranges_.empty() && rcv_ranges_.begin()->first <= rcv_cum_) {
      rcv_cum_ = std::max(rcv_cum_, rcv_ranges_.begin()->second);
      rcv_ranges_.erase(rcv_ranges_.begin());
    }
    return;
  }
  // Insert [seq, seq + 1) and merge with neighbours.
  uint64_t start = seq;
  uint64_t end = seq + 1;
  auto next = rcv_ranges_.lower_bound(seq);
  if (next != rcv_ranges_.begin()) {
    auto prev = std::prev(next);
    if (prev->second == seq) {
      start = prev->first;
      rcv_ranges_.erase(prev);
    }
  }
  if (next != rcv_ranges_.end() && next->first == end) {
    end = next->second;
    rcv_ranges_.erase(next);
  }
  rcv_ranges_.emplace(start, end);
}

namespace {

// Records [offset, offset + len) as received unless it overlaps a range already held.
bool claim_range(InMessage& m, uint64_t offset, uint64_t len) {
  const uint64_t end = offset + len;
  auto next = m.ranges.lower_bound(offset);
  if (next != m.ranges.end() && next->first < end) return false;
  if (next != m.ranges.begin()) {
    auto prev = std::prev(next);
    if (prev->second > offset) return false;
    if (prev->second == offset) {
      prev->second = end;
      if (next != m.ranges.end() && next->first == end) {
        prev->second = next->second;
        m.ranges.erase(next);
      }
      return true;
    }
  }
  if (next != m.ranges.end() && next->first == end) {
    const uint64_t next_end = next->second;
    m.ranges.erase(next);
    m.ranges.emplace(offset, next_end);
    return true;
  }
  m.ranges.emplace(offset, end);
  return true;
}

}  // namespace

Status ConnectionImpl::on_data(uint32_t path, const wire::Header& h, const wire::DataBody& d,
                               int64_t now_ns, bool recovered) {
  if (seq_received(d.seq)) {
    stats_.dropped_duplicate++;
    // The sender may have missed our ACK: answer at once.
    ack_now_ = true;
    ack_path_ = path;
    ack_echo_tx_ns_ = h.tx_time_ns;
    ack_echo_rx_ns_ = now_ns;
    return Status::kDropped;
  }
  if (d.seq - rcv_cum_ >= recv_window_segments()) {
    dropped_window_++;
    return Status::kDropped;
  }
  const uint64_t size = d.message_size;
  const uint64_t len = d.payload.size();
  if (size > static_cast<uint64_t>(options_.max_message_bytes) || d.offset > size ||
      len > size - d.offset || (size > 0 && len == 0) || d.message_id < next_deliver_id_) {
    stats_.dropped_malformed++;
    return Status::kMalformed;
  }
  auto it = in_messages_.find(d.message_id);
  if (it != in_messages_.end()) {
    InMessage& m = it->second;
    if (m.bytes.size() != size || m.complete || m.received_bytes + len > size) {
      stats_.dropped_malformed++;
      return Status::kMalformed;
    }
  } else {
    // The buffer is allocated once, on the message's first segment (size from the header),
    // within the budget, which also counts delivered messages the application has not taken
    // yet (back-pressure: a receiver that does not read stops the sender). The next message to
    // deliver is admitted beyond it while nothing is unread (no deadlock between messages
    // being reassembled).
    const auto budget = static_cast<uint64_t>(options_.max_reassembly_bytes);
    const bool next = d.message_id == next_deliver_id_;
    if ((!next && reassembly_bytes_ + unread_bytes_ + size > budget) ||
        (next && unread_bytes_ > 0 && unread_bytes_ + size > budget)) {
      stats_.dropped_memory++;  // not acknowledged: the sender resends it later
      return Status::kDropped;
    }
    it = in_messages_.emplace(d.message_id, InMessage{}).first;
    it->second.bytes.resize(size);
    reassembly_bytes_ += size;
  }
  InMessage& m = it->second;
  if (len > 0 && !claim_range(m, d.offset, len)) {
    stats_.dropped_malformed++;  // overlaps bytes another segment already delivered
    if (m.received_bytes == 0) {
      reassembly_bytes_ -= m.bytes.size();
      in_messages_.erase(it);
    }
    return Status::kMalformed;
  }
  if (len > 0) std::memcpy(m.bytes.data() + d.offset, d.payload.data(), len);
  m.received_bytes += len;
  if (m.received_bytes == size) m.complete = true;

  const bool in_order = d.seq == rcv_cum_ && rcv_ranges_.empty();
  mark_received(d.seq);
  if (!fec_rx_ring_.empty() && !recovered) {
    fec_store_rx_symbol(d.seq, std::span<const std::byte>(
                                   d.payload.data() - wire::kDataFixedBytes,
                                   wire::kDataFixedBytes + len));
  }
  deliver_ready();

  pending_ack_segments_++;
  ack_path_ = path;
  ack_echo_tx_ns_ = h.tx_time_ns;
  ack_echo_rx_ns_ = now_ns;
  const bool reserved = path < paths_.size() && paths_[path].spec.rate_bps > 0;
  const int ack_every = reserved ? kReservedAckEverySegments : kAckEverySegments;
  if (!in_order || recovered || pending_ack_segments_ >= ack_every) {
    ack_now_ = true;
  } else if (ack_deadline_ns_ == INT64_MAX) {
    ack_deadline_ns_ = now_ns + kDelayedAckNs;
  }
  return Status::kOk;
}

void ConnectionImpl::deliver_ready() {
  while (!in_messages_.empty()) {
    auto it = in_messages_.begin();
    if (it->first != next_deliver_id_ || !it->second.complete) return;
    stats_.messages_received++;
    stats_.bytes_received += it->second.bytes.size();
    reassembly_bytes_ -= it->second.bytes.size();
    unread_bytes_ += it->second.bytes.size();  // until consumed() says the application has it
    Event e = make_event(Event::Kind::kMessage);
    e.message = std::move(it->second.bytes);
    events_.push_back(std::move(e));
    in_messages_.erase(it);
    next_deliver_id_++;
  }
}

size_t ConnectionImpl::build_ack(int64_t now_ns, std::span<std::byte> out) {
  wire::AckBody a;
  a.cumulative = rcv_cum_;
  a.echo_tx_time_ns = ack_echo_tx_ns_;
  a.ack_delay_ns = std::max<int64_t>(now_ns - ack_echo_rx_ns_, 0);
  a.window_bytes = static_cast<uint64_t>(recv_window_bytes_);
  // Most recent block first (RFC 2018), then the others from the highest down.
  uint64_t first_start = UINT64_MAX;
  if (!rcv_ranges_.empty()) {
    auto it = rcv_ranges_.upper_bound(last_rcv_seq_);
    if (it != rcv_ranges_.begin()) {
      --it;
      if (last_rcv_seq_ < it->second) {
        a.ranges[a.range_count++] = wire::SackRange{it->first, it->second};
        first_start = it->first;
      }
    }
    for (auto r = rcv_ranges_.rbegin();
         r != rcv_ranges_.rend() && a.range_count < wire::kMaxSackRanges; ++r) {
      if (r->first == first_start) continue;
      a.ranges[a.range_count++] = wire::SackRange{r->first, r->second};
    }
  }
  pending_ack_segments_ = 0;
  ack_now_ = false;
  ack_deadline_ns_ = INT64_MAX;
  return wire::encode_ack(header(wire::Type::kAck, ack_path_, now_ns), a, out);
}

}  // namespace detwan::transport::proto

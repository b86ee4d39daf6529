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

std::optional<uint64_t> ConnectionImpl::expand_seq(uint64_t wire_seq) const {
  const auto delta =
      static_cast<int32_t>(static_cast<uint32_t>(wire_seq) - static_cast<uint32_t>(rcv_cum_));
  if (delta < 0 && static_cast<uint64_t>(-static_cast<int64_t>(delta)) > rcv_cum_) {
    return std::nullopt;
  }
  return rcv_cum_ + static_cast<uint64_t>(static_cast<int64_t>(delta));
}

Status ConnectionImpl::on_data(uint32_t path, const wire::Header& h, const wire::DataBody& d,
                               int64_t now_ns, bool recovered) {
  if (seq_received(d.seq)) {
    stats_.dropped_duplicate++;
    // The sender may have missed our ACK: answer at once.
    ack_now_ = true;
    ack_path_ = path;
    ack_echo_tx_us_ = h.tx_time_us;
    ack_echo_rx_ns_ = now_ns;
    return Status::kDropped;
  }
  if (d.seq - rcv_cum_ >= recv_window_segments()) {
    dropped_window_++;
    return Status::kDropped;
  }
  // The segment's message starts at seq - index and ends at seq - index + last_index; every
  // segment but the last carries exactly the peer's segment size.
  const uint64_t unit = peer_segment_bytes_;
  const uint64_t len = d.payload.size();
  const bool last = d.index == d.last_index;
  const uint64_t max_size = static_cast<uint64_t>(options_.max_message_bytes);
  const uint64_t min_size = uint64_t{d.last_index} * unit + (d.last_index > 0 ? 1 : 0);
  if (d.index > d.seq || (!last && len != unit) ||
      (last && (len > unit || (len == 0 && d.last_index > 0))) || min_size > max_size ||
      (last && uint64_t{d.last_index} * unit + len > max_size)) {
    stats_.dropped_malformed++;
    return Status::kMalformed;
  }
  const uint64_t first = d.seq - d.index;
  const uint64_t end = first + d.last_index;  // the message's last seq
  if (first < next_deliver_seq_) {
    stats_.dropped_malformed++;  // claims a message already delivered
    return Status::kMalformed;
  }
  auto it = in_messages_.find(first);
  if (it != in_messages_.end()) {
    if (it->second.last_index != d.last_index || it->second.complete) {
      stats_.dropped_malformed++;
      return Status::kMalformed;
    }
  } else {
    // A new message must not overlap one being reassembled (each seq belongs to one message).
    auto next = in_messages_.lower_bound(first);
    const bool overlaps_next = next != in_messages_.end() && next->first <= end;
    const bool overlaps_prev = next != in_messages_.begin() &&
                               std::prev(next)->first + std::prev(next)->second.last_index >= first;
    if (overlaps_next || overlaps_prev) {
      stats_.dropped_malformed++;
      return Status::kMalformed;
    }
    // Nothing is allocated for the announcement itself: the buffer grows as segments land
    // (reserve_reassembly), each step within the budgets.
    it = in_messages_.emplace(first, InMessage{}).first;
    it->second.last_index = d.last_index;
    it->second.bound = last ? uint64_t{d.last_index} * unit + len
                            : std::min(max_size, (uint64_t{d.last_index} + 1) * unit);
  }
  InMessage& m = it->second;
  const uint64_t offset = uint64_t{d.index} * unit;
  if (offset + len > m.bound) {
    stats_.dropped_malformed++;  // beyond the size its last segment gave (or max_message_bytes)
    return Status::kMalformed;
  }
  if (!reserve_reassembly(m, offset + len, first == next_deliver_seq_)) {
    if (m.received_segments == 0) in_messages_.erase(it);
    stats_.dropped_memory++;  // not acknowledged: the sender resends it later
    return Status::kDropped;
  }
  if (last && !m.size_known) {
    m.bound = offset + len;
    if (m.bytes.size() > m.bound) m.bytes.resize(m.bound);  // shrinks: the bytes placed stay
    m.size_known = true;
  }
  if (len > 0) std::memcpy(m.bytes.data() + offset, d.payload.data(), len);
  m.received_segments++;
  if (m.received_segments == m.last_index + 1) m.complete = true;

  const bool in_order = d.seq == rcv_cum_ && rcv_ranges_.empty();
  mark_received(d.seq);
  if (!fec_rx_ring_.empty() && !recovered) fec_store_rx_symbol(d.seq, d);
  deliver_ready();

  pending_ack_segments_++;
  ack_path_ = path;
  ack_echo_tx_us_ = h.tx_time_us;
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
    if (it->first != next_deliver_seq_ || !it->second.complete) return;
    // Every segment arrived, so the buffer's size is the message's (the last set its bound).
    it->second.bytes.resize(it->second.bound);
    stats_.messages_received++;
    stats_.bytes_received += it->second.bytes.size();
    reassembly_bytes_ -= it->second.charged;
    unread_bytes_ += it->second.bytes.size();  // until consumed() says the application has it
    Event e = make_event(Event::Kind::kMessage);
    e.message = std::move(it->second.bytes);
    events_.push_back(std::move(e));
    next_deliver_seq_ = it->first + it->second.last_index + 1;
    in_messages_.erase(it);
  }
  settle_budget();
}

bool ConnectionImpl::reserve_reassembly(InMessage& m, uint64_t end, bool next_to_deliver) {
  if (end <= m.bytes.size()) return true;
  if (end > m.charged) {
    std::vector<std::byte> recycled;
    uint64_t target = 0;
    if (m.charged == 0 && rx_pool_ != nullptr) {
      // A recycled buffer big enough for the whole message: its pages are mapped already and
      // its bytes are overwritten, never zero-filled again.
      recycled = rx_pool_->take_recycled(m.bound);
      target = recycled.capacity();
    }
    if (target == 0) {
      // Once the next step would reach half the bound, take the bound: a 64 MiB message grows
      // 4 -> 64 MiB (4 MiB moved), not 4 -> 32 -> 64 (36 MiB moved).
      target = kReassemblyGrowth * m.charged >= m.bound / 2
                   ? m.bound
                   : std::min(m.bound, std::max({end, kReassemblyReserveBytes,
                                                 kReassemblyGrowth * m.charged}));
    }
    const uint64_t grow = target - m.charged;
    // The channel's budget counts what is being reassembled and what is unread; the next
    // message to deliver may go beyond it while nothing is unread (no deadlock between
    // messages). The endpoint's budget has no exception.
    const auto budget = static_cast<uint64_t>(options_.max_reassembly_bytes);
    if ((!next_to_deliver && reassembly_bytes_ + unread_bytes_ + grow > budget) ||
        (next_to_deliver && unread_bytes_ > 0 && unread_bytes_ + target > budget)) {
      if (!recycled.empty() && rx_pool_ != nullptr) rx_pool_->put(std::move(recycled));
      return false;
    }
    if (endpoint_budget_ != nullptr && !endpoint_budget_->try_take(grow)) {
      if (!recycled.empty() && rx_pool_ != nullptr) rx_pool_->put(std::move(recycled));
      return false;
    }
    budget_charged_ += endpoint_budget_ != nullptr ? grow : 0;
    reassembly_bytes_ += grow;
    m.charged = target;
    if (!recycled.empty()) {
      m.bytes = std::move(recycled);  // as handed back: its size counts as placed bytes
      if (m.bytes.size() > m.bound) m.bytes.resize(m.bound);
    } else {
      m.bytes.reserve(target);  // moves what was placed (at most 1 / kReassemblyGrowth of it)
    }
  }
  // A fresh buffer's bytes are zero-filled as its size grows: in steps of kReassemblyFillBytes
  // (within the capacity taken), one large memset instead of one per segment.
  if (m.bytes.size() < end) {
    m.bytes.resize(std::min<uint64_t>(m.charged, std::max<uint64_t>(end, m.bytes.size() +
                                                                          kReassemblyFillBytes)));
  }
  return true;
}

size_t ConnectionImpl::build_ack(int64_t now_ns, std::span<std::byte> out) {
  wire::AckBody a;
  fill_ack(now_ns, a);
  ack_sent();
  return wire::encode_ack(header(wire::Type::kAck, ack_path_, now_ns), a, out);
}

void ConnectionImpl::ack_sent() {
  pending_ack_segments_ = 0;
  ack_now_ = false;
  ack_ride_tried_ = false;
  ack_deadline_ns_ = INT64_MAX;
}

void ConnectionImpl::fill_ack(int64_t now_ns, wire::AckBody& a) const {
  a.cumulative = rcv_cum_;
  a.echo_tx_time_us = ack_echo_tx_us_;
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
}

}  // namespace detwan::transport::proto

// FEC blocks (docs/transport.md "FEC block layout").
//
// Sender: the first transmissions of k consecutive segments form a block; their symbols (the
// seq-independent DATA body, zero-padded to the block's longest) are copied as they are sent
// (the message span may be released before the block closes) and m parity datagrams follow the
// k-th segment. protect_tail closes a partial block (k' < k) when the send queue runs dry.
// Segments of a block are not declared lost by reordering until the parity had time to rescue
// them (fec_guard_ns); the RTO still applies.
//
// Receiver: recent data symbols are kept in a ring; when a parity arrives and any k of the
// block's k + m symbols are present, the missing data segments are rebuilt and processed as if
// received (fec_recovered).
#include <algorithm>
#include <array>
#include <cstring>

#include "transport/proto/connection_impl.h"

namespace detwan::transport::proto {

namespace {
constexpr size_t kRxRingSlots = 256;
constexpr size_t kMaxRxBlocks = 16;
}  // namespace

size_t ConnectionImpl::fec_symbol_capacity() const {
  return wire::kDataSymbolFixedBytes + payload_bytes_;
}

void ConnectionImpl::fec_on_new_segment(uint64_t seq, const wire::DataBody& body,
                                        int64_t now_ns) {
  if (fec_tx_.count > 0 && seq != fec_tx_.first_seq + static_cast<uint64_t>(fec_tx_.count)) {
    fec_close_block(now_ns);
  }
  if (fec_m_current_ == 0) return;
  const size_t cap = fec_symbol_capacity();
  if (fec_tx_.symbols.size() < static_cast<size_t>(options_.fec.data_segments) * cap) return;
  if (fec_tx_.count == 0) {
    fec_tx_.first_seq = seq;
    fec_tx_.max_len = 0;
  }
  const std::span<std::byte> slot(fec_tx_.symbols.data() + static_cast<size_t>(fec_tx_.count) * cap,
                                  cap);
  std::memset(slot.data(), 0, cap);
  const size_t len = wire::encode_data_symbol(body, slot);
  fec_tx_.max_len = std::max(fec_tx_.max_len, len);
  fec_tx_.count++;
  if (Segment* s = segment(seq)) s->fec_guard_ns = INT64_MAX;
  if (fec_tx_.count >= options_.fec.data_segments) fec_close_block(now_ns);
}

void ConnectionImpl::fec_close_block(int64_t /*now_ns*/) {
  const int k = fec_tx_.count;
  if (k == 0) return;
  fec_tx_.count = 0;
  const int m = fec_m_current_;
  const size_t cap = fec_symbol_capacity();
  std::array<const std::byte*, fec::kMaxDataSymbols> data{};
  std::array<std::byte*, fec::kMaxParitySymbols> parity{};
  const size_t first_parity = parity_queue_.size();
  for (int i = 0; i < k; ++i) data[i] = fec_tx_.symbols.data() + static_cast<size_t>(i) * cap;
  for (int i = 0; i < m; ++i) {
    ParityOut& po = parity_queue_.emplace_back();
    po.first_seq = fec_tx_.first_seq;
    po.k = static_cast<uint8_t>(k);
    po.m = static_cast<uint8_t>(m);
    po.index = static_cast<uint8_t>(i);
    po.symbol.resize(fec_tx_.max_len);
  }
  for (int i = 0; i < m; ++i) parity[i] = parity_queue_[first_parity + i].symbol.data();
  const bool ok = m > 0 && codec_.encode(std::span(data.data(), k), std::span(parity.data(), m),
                                         fec_tx_.max_len) == Status::kOk;
  if (!ok) {
    parity_queue_.resize(first_parity);
    for (int i = 0; i < k; ++i) {
      if (Segment* s = segment(fec_tx_.first_seq + i)) s->fec_guard_ns = 0;
    }
  }
}

size_t ConnectionImpl::fec_send_parity(int64_t now_ns, std::span<std::byte> out, uint32_t* path) {
  int64_t release = 0;
  const std::optional<uint32_t> p = pick_path(now_ns, std::nullopt, &release);
  if (!p || release > now_ns) return 0;
  const ParityOut& po = parity_queue_.front();
  wire::FecBody b;
  b.first_seq = po.first_seq;
  b.k = po.k;
  b.m = po.m;
  b.index = po.index;
  b.symbol = po.symbol;
  const size_t n = wire::encode_fec(header(wire::Type::kFec, *p, now_ns), b, out);
  charge(*p, n, now_ns);
  stats_.fec_parity_sent++;
  if (po.index + 1 == po.m) {
    // Last parity out: the receiver can rebuild within about one RTT from now.
    for (uint64_t seq = po.first_seq; seq < po.first_seq + po.k; ++seq) {
      Segment* s = segment(seq);
      if (s == nullptr || s->fec_guard_ns != INT64_MAX) continue;
      const int64_t srtt = paths_[s->path].rtt.srtt_ns();
      s->fec_guard_ns = now_ns + srtt + srtt / 4;
    }
  }
  parity_queue_.pop_front();
  *path = *p;
  return n;
}

void ConnectionImpl::fec_alloc_rx() {
  fec_rx_ring_.resize(kRxRingSlots * max_datagram_bytes_);
  fec_rx_ring_seq_.assign(kRxRingSlots, 0);
  fec_rx_ring_len_.assign(kRxRingSlots, 0);
}

void ConnectionImpl::fec_store_rx_symbol(uint64_t seq, const wire::DataBody& body) {
  const size_t slot = seq % kRxRingSlots;
  const size_t cap = max_datagram_bytes_;
  const size_t n = wire::encode_data_symbol(body, std::span(fec_rx_ring_.data() + slot * cap, cap));
  if (n == 0) return;  // larger than any symbol this side expects: no recovery from it
  fec_rx_ring_seq_[slot] = seq + 1;
  fec_rx_ring_len_[slot] = static_cast<uint32_t>(n);
}

Status ConnectionImpl::on_fec(uint32_t path, const wire::Header& h, const wire::FecBody& f,
                              int64_t now_ns) {
  if (fec_rx_ring_.empty()) fec_alloc_rx();
  if (f.symbol.size() > max_datagram_bytes_ || f.k + f.m > static_cast<int>(kRxRingSlots) / 2) {
    stats_.dropped_malformed++;
    return Status::kMalformed;
  }
  if (f.first_seq + f.k <= rcv_cum_) return Status::kOk;  // whole block already here
  auto it = std::find_if(fec_rx_blocks_.begin(), fec_rx_blocks_.end(),
                         [&](const FecRxBlock& b) { return b.first_seq == f.first_seq; });
  if (it == fec_rx_blocks_.end()) {
    if (fec_rx_blocks_.size() >= kMaxRxBlocks) fec_rx_blocks_.pop_front();
    FecRxBlock b;
    b.first_seq = f.first_seq;
    b.k = f.k;
    b.m = f.m;
    b.symbol_bytes = f.symbol.size();
    b.parity.resize(static_cast<size_t>(f.m) * f.symbol.size());
    b.parity_present.assign(f.m, false);
    fec_rx_blocks_.push_back(std::move(b));
    it = std::prev(fec_rx_blocks_.end());
  } else if (it->k != f.k || it->m != f.m || it->symbol_bytes != f.symbol.size()) {
    stats_.dropped_malformed++;
    return Status::kMalformed;
  }
  if (it->parity_present[f.index]) {
    stats_.dropped_duplicate++;
    return Status::kDropped;
  }
  std::memcpy(it->parity.data() + f.index * it->symbol_bytes, f.symbol.data(), f.symbol.size());
  it->parity_present[f.index] = true;
  fec_try_recover(*it, path, h, now_ns);
  return Status::kOk;
}

void ConnectionImpl::fec_try_recover(FecRxBlock& block, uint32_t path, const wire::Header& h,
                                     int64_t now_ns) {
  if (block.done) return;
  const int k = block.k;
  const int m = block.m;
  const size_t len = block.symbol_bytes;
  const size_t cap = max_datagram_bytes_;
  int available = 0;
  int needed = 0;
  std::array<bool, fec::kMaxDataSymbols + fec::kMaxParitySymbols> present{};
  for (int i = 0; i < k; ++i) {
    const uint64_t seq = block.first_seq + i;
    const size_t slot = seq % kRxRingSlots;
    if (!seq_received(seq)) {
      needed++;
    } else if (fec_rx_ring_seq_[slot] == seq + 1 && fec_rx_ring_len_[slot] <= len) {
      present[i] = true;
      available++;
    }
  }
  if (needed == 0) {
    block.done = true;
    return;
  }
  for (int i = 0; i < m; ++i) {
    present[k + i] = block.parity_present[i];
    if (present[k + i]) available++;
  }
  if (available < k) return;

  std::vector<std::byte> scratch(static_cast<size_t>(k + m) * len);
  std::array<std::byte*, fec::kMaxDataSymbols + fec::kMaxParitySymbols> ptrs{};
  for (int i = 0; i < k + m; ++i) {
    ptrs[i] = scratch.data() + static_cast<size_t>(i) * len;
    if (i < k && present[i]) {
      const size_t slot = (block.first_seq + i) % kRxRingSlots;
      std::memcpy(ptrs[i], fec_rx_ring_.data() + slot * cap, fec_rx_ring_len_[slot]);
    } else if (i >= k && present[i]) {
      std::memcpy(ptrs[i], block.parity.data() + static_cast<size_t>(i - k) * len, len);
    }
  }
  if (codec_.decode(k, m, std::span(ptrs.data(), k + m), std::span(present.data(), k + m), len) !=
      Status::kOk) {
    return;
  }
  block.done = true;
  for (int i = 0; i < k; ++i) {
    const uint64_t seq = block.first_seq + i;
    if (seq_received(seq)) continue;
    wire::DataBody d;
    if (wire::decode_data_symbol(std::span<const std::byte>(ptrs[i], len), d) != Status::kOk) {
      stats_.dropped_malformed++;
      continue;
    }
    d.seq = seq;
    if (on_data(path, h, d, now_ns, true) == Status::kOk) stats_.fec_recovered++;
  }
}

}  // namespace detwan::transport::proto

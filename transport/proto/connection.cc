// Setup, public forwarding, events, stats, failure and close of a proto::Connection.
#include "transport/proto/connection.h"

#include <algorithm>
#include <utility>

#include "transport/proto/connection_impl.h"

namespace detwan::transport::proto {

namespace {

int64_t auto_window_bytes(const ChannelOptions& o) {
  if (o.recv_window_bytes > 0) return o.recv_window_bytes;
  int64_t sum_rate_bps = 0;
  for (const PathSpec& p : o.paths) sum_rate_bps += p.rate_bps;
  // 2 x rate x RTT, in bytes; rate in bit/s, RTT in ns.
  const double bdp_bytes = 2.0 * static_cast<double>(sum_rate_bps) / 8.0 *
                           static_cast<double>(o.initial_rtt_ns) * 1e-9;
  return std::max<int64_t>(int64_t{4} << 20, static_cast<int64_t>(bdp_bytes));
}

}  // namespace

size_t segment_payload_bytes(const ChannelOptions& options, SecurityMode mode) {
  const size_t max_datagram = static_cast<size_t>(std::clamp(options.mtu_bytes, 256, 65535)) - 28;
  // A DATA datagram is its 24-byte header + the payload; with FEC, a parity datagram (common
  // header, FEC fields, a symbol holding a full segment) must fit too; a sealed datagram ends
  // in its 16-byte tag.
  const size_t fixed = options.fec.enabled
                           ? wire::kHeaderBytes + wire::kFecFixedBytes + wire::kDataSymbolFixedBytes
                           : wire::kDataHeaderBytes;
  return max_datagram - fixed - (mode == SecurityMode::kNone ? 0 : wire::kTagBytes);
}

int64_t receive_window_bytes(const ChannelOptions& options) {
  // The receiver expands a DATA seq's low 32 bits against its cumulative ACK point: its window
  // stays far below 2^31 segments.
  return std::min(auto_window_bytes(options), kMaxWindowSegments * kWindowUnitBytes);
}

// The pacer of a reserved path: its rate, a catch-up burst (bounded by the path's shaper where
// it names one) and a send quantum taken out of that burst, so the most that can leave at once
// stays the burst; none where the shaper bounds the burst (max_burst_bytes).
Pacer ConnectionImpl::reserved_pacer(const PathSpec& spec) const {
  const auto wire_bytes = static_cast<int64_t>(max_datagram_bytes_ + spec.frame_overhead_bytes);
  int32_t burst = reserved_burst_datagrams(spec.rate_bps, wire_bytes);
  if (spec.max_burst_bytes > 0) {
    burst = static_cast<int32_t>(std::clamp<int64_t>(spec.max_burst_bytes / wire_bytes, 1, burst));
  }
  const int32_t quantum = spec.max_burst_bytes > 0
                              ? 0
                              : reserved_quantum_datagrams(spec.rate_bps, wire_bytes, burst);
  Pacer pacer(spec.rate_bps, spec.frame_overhead_bytes, burst - quantum,
              static_cast<int32_t>(max_datagram_bytes_));
  pacer.set_quantum_datagrams(quantum);
  return pacer;
}

Status ConnectionImpl::set_reserved_rate(uint32_t path, int64_t rate_bps,
                                         int64_t max_burst_bytes) {
  if (path >= paths_.size() || paths_[path].spec.rate_bps <= 0 || rate_bps <= 0 ||
      max_burst_bytes < 0) {
    return Status::kInvalidArgument;
  }
  PathState& p = paths_[path];
  p.spec.rate_bps = rate_bps;
  if (max_burst_bytes > 0) p.spec.max_burst_bytes = max_burst_bytes;
  p.pacer = reserved_pacer(p.spec);
  return Status::kOk;
}

Status ConnectionImpl::set_pacing_group(uint32_t path, std::shared_ptr<PacingGroup> group) {
  if (path >= paths_.size()) return Status::kInvalidArgument;
  paths_[path].group = std::move(group);
  return Status::kOk;
}

ConnectionImpl::ConnectionImpl(const ConnectionConfig& config, int64_t now_ns)
    : role_(config.role),
      connection_id_(config.connection_id),
      options_(config.options),
      rx_pool_(config.rx_pool),
      created_ns_(now_ns),
      last_peer_rx_ns_(now_ns),
      last_tx_ns_(now_ns),
      endpoint_budget_(config.endpoint_budget) {
  if (options_.paths.empty()) {
    PathSpec p;
    p.rate_bps = options_.rate_bps;
    options_.paths.push_back(p);
  }
  // A datagram must hold the largest header + body; clamp silly MTUs instead of failing here.
  options_.mtu_bytes = std::clamp(options_.mtu_bytes, 256, 65535);
  max_datagram_bytes_ = static_cast<size_t>(options_.mtu_bytes) - 28;
  if (config.keyring != nullptr && config.keyring->sealed()) {
    mode_ = config.keyring->mode();
    keyring_ = config.keyring;
    tag_bytes_ = wire::kTagBytes;
  }
  payload_bytes_ = segment_payload_bytes(options_, mode_);
  // A message has at most 2^28 segments (the DATA header's index fields): at least 48 GB.
  options_.max_message_bytes =
      std::min<int64_t>(options_.max_message_bytes, static_cast<int64_t>(payload_bytes_) *
                                                        (int64_t{wire::kMaxSegmentIndex} + 1));
  recv_window_bytes_ = receive_window_bytes(options_);
  peer_window_bytes_ = static_cast<uint64_t>(recv_window_bytes_);
  options_.fec.data_segments = std::clamp(options_.fec.data_segments, 1, fec::kMaxDataSymbols);
  options_.fec.parity_segments =
      std::clamp(options_.fec.parity_segments, 0, fec::kMaxParitySymbols);
  fec_m_current_ = options_.fec.adaptive ? 0 : options_.fec.parity_segments;
  if (options_.fec.enabled) {
    fec_tx_.symbols.resize(static_cast<size_t>(options_.fec.data_segments) *
                           fec_symbol_capacity());
    fec_alloc_rx();
  }

  for (const PathSpec& spec : options_.paths) {
    PathState p;
    p.spec = spec;
    p.rtt = RttEstimator(options_.initial_rtt_ns, options_.min_rto_ns);
    if (spec.rate_bps > 0) {
      p.pacer = reserved_pacer(spec);
    } else {
      p.cubic.emplace(static_cast<int64_t>(max_datagram_bytes_));
      p.pacer = Pacer(1, spec.frame_overhead_bytes, kPacerBurstDatagrams,
                      static_cast<int32_t>(max_datagram_bytes_));
      p.pacer.set_quantum_datagrams(kQuantumDatagrams);
    }
    paths_.push_back(std::move(p));
  }
  for (uint32_t i = 0; i < paths_.size(); ++i) update_pacing(i);
  if (mode_ != SecurityMode::kNone) {
    setup_security(config);
    return;
  }
  if (role_ == Role::kServer) {
    // The server exists because a HELLO arrived: it may send at once.
    established_ = true;
    events_.push_back(make_event(Event::Kind::kEstablished));
  }
}

Status ConnectionImpl::queue_message(std::span<const std::byte> message, uint64_t token) {
  if (failed_ || closed_) return Status::kClosed;
  if (static_cast<int64_t>(message.size()) > options_.max_message_bytes) {
    return Status::kInvalidArgument;
  }
  OutMessage m;
  m.bytes = message;
  m.token = token;
  m.id = next_message_id_++;
  out_messages_.push_back(m);
  return Status::kOk;
}

ConnectionImpl::~ConnectionImpl() {
  reassembly_bytes_ = 0;
  unread_bytes_ = 0;
  settle_budget();
}

void ConnectionImpl::settle_budget() {
  const uint64_t held = reassembly_bytes_ + unread_bytes_;
  if (endpoint_budget_ != nullptr && budget_charged_ > held) {
    endpoint_budget_->give(budget_charged_ - held);
  }
  budget_charged_ = std::min(budget_charged_, held);
}

std::optional<Event> ConnectionImpl::poll_event() {
  if (events_.empty()) return std::nullopt;
  Event e = std::move(events_.front());
  events_.pop_front();
  return e;
}

void ConnectionImpl::release_buffers() {
  out_messages_.clear();
  segmenting_index_ = 0;
  segments_.clear();
  lost_queue_.clear();
  in_messages_.clear();
  reassembly_bytes_ = 0;
  unread_bytes_ = 0;
  settle_budget();
  rcv_ranges_.clear();
  parity_queue_.clear();
  fec_rx_blocks_.clear();
  std::vector<std::byte>().swap(fec_rx_ring_);
  std::vector<std::byte>().swap(fec_tx_.symbols);
  for (PathState& p : paths_) {
    p.flights.clear();
    p.bytes_in_flight = 0;
  }
}

void ConnectionImpl::fail(ErrorCode code, std::string message) {
  if (failed_) return;
  failed_ = true;
  closed_ = true;
  close_pending_ = false;
  release_buffers();
  Event e = make_event(Event::Kind::kFailed);
  e.error = Error{code, std::move(message)};
  events_.push_back(std::move(e));
}

void ConnectionImpl::close(int64_t /*now_ns*/) {
  if (failed_ || closed_) return;
  closed_ = true;
  close_pending_ = true;
  release_buffers();
}

void ConnectionImpl::on_established() {
  if (established_) return;
  established_ = true;
  events_.push_back(make_event(Event::Kind::kEstablished));
}

std::vector<uint64_t> ConnectionImpl::path_datagrams_sent() const {
  std::vector<uint64_t> out;
  for (const PathState& p : paths_) out.push_back(p.data_segments_sent);
  return out;
}

ChannelStats ConnectionImpl::stats() const {
  ChannelStats s = stats_;
  s.reassembly_bytes = reassembly_bytes_;
  // Path 0 represents the connection's RTT; cwnd sums the best-effort paths.
  s.srtt_ns = paths_.front().rtt.srtt_ns();
  s.rttvar_ns = paths_.front().rtt.rttvar_ns();
  s.cwnd_bytes = 0;
  for (const PathState& p : paths_) {
    if (p.cubic) s.cwnd_bytes += p.cubic->cwnd_bytes();
    if (!p.cubic) s.reserved_rate_bps += p.spec.rate_bps;
  }
  s.loss_estimate = loss_estimator_.loss_rate();
  s.fec_parity_current = fec_m_current_;
  if (rx_pool_ != nullptr) s.recv_buffers_reused = rx_pool_->reused();
  return s;
}

// ---- Connection: forwarding ----

Connection::Connection(const ConnectionConfig& config, int64_t now_ns)
    : impl_(std::make_unique<ConnectionImpl>(config, now_ns)) {}
Connection::~Connection() = default;
Connection::Connection(Connection&&) noexcept = default;
Connection& Connection::operator=(Connection&&) noexcept = default;

Status Connection::queue_message(std::span<const std::byte> message, uint64_t token) {
  return impl_->queue_message(message, token);
}
Status Connection::on_datagram(uint32_t path, std::span<const std::byte> datagram,
                               int64_t now_ns) {
  return impl_->on_datagram(path, datagram, now_ns);
}
Transmit Connection::poll_transmit(int64_t now_ns, std::span<std::byte> out) {
  return impl_->poll_transmit(now_ns, out);
}
int64_t Connection::next_wakeup_ns() const { return impl_->next_wakeup_ns(); }
std::optional<Event> Connection::poll_event() { return impl_->poll_event(); }
void Connection::close(int64_t now_ns) { impl_->close(now_ns); }
Status Connection::set_reserved_rate(uint32_t path, int64_t rate_bps, int64_t max_burst_bytes) {
  return impl_->set_reserved_rate(path, rate_bps, max_burst_bytes);
}
Status Connection::set_pacing_group(uint32_t path, std::shared_ptr<PacingGroup> group) {
  return impl_->set_pacing_group(path, std::move(group));
}
bool Connection::failed() const { return impl_->failed(); }
bool Connection::established() const { return impl_->established(); }
size_t Connection::max_datagram_bytes() const { return impl_->max_datagram_bytes(); }
size_t Connection::segment_bytes() const { return impl_->segment_bytes(); }
uint64_t Connection::reassembly_bytes() const { return impl_->reassembly_bytes(); }
ChannelStats Connection::stats() const { return impl_->stats(); }
uint64_t Connection::connection_id() const { return impl_->connection_id(); }
uint64_t Connection::dropped_beyond_window() const { return impl_->dropped_beyond_window(); }
void Connection::consumed(uint64_t bytes) { impl_->consumed(bytes); }
uint64_t Connection::unread_bytes() const { return impl_->unread_bytes(); }
std::vector<uint64_t> Connection::path_segments_sent() const {
  return impl_->path_datagrams_sent();
}

std::optional<PeekedId> peek_connection_id(std::span<const std::byte> datagram) {
  wire::Header h;
  if (wire::decode_header(datagram, h) != Status::kOk) return std::nullopt;
  return PeekedId{h.connection_id, h.short_form};
}

bool is_hello(std::span<const std::byte> datagram, uint8_t* version) {
  wire::Header h;
  if (wire::decode_header(datagram, h) != Status::kOk || h.type != wire::Type::kHello) return false;
  if (version != nullptr) *version = h.version;
  return true;
}

}  // namespace detwan::transport::proto

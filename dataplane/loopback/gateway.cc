#include "dataplane/loopback/gateway.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

namespace detwan::dataplane::loopback {
namespace {

using common::Status;

// Largest payload a buffer holds (a 9216-byte jumbo MTU), after the header headroom.
constexpr std::size_t kMaxPayloadBytes = 9216;
// Room for an AEAD tag after the largest payload.
constexpr std::size_t kBufferBytes = wire::kHeaderSize + kMaxPayloadBytes + aead::kTagBytes;
// Rounds of polling at one instant before the driver declares the engines stuck.
constexpr int kMaxRoundsPerInstant = 100'000;

int64_t saturating_sub(int64_t a, int64_t b) {
  int64_t out = 0;
  if (!__builtin_sub_overflow(a, b, &out)) return out;
  return b < 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
}

}  // namespace

common::Result<std::unique_ptr<Gateway>> Gateway::create(std::vector<EngineSpec> engines,
                                                         const Options& options) {
  std::unique_ptr<Gateway> g(new Gateway());
  g->rng_.seed(options.seed);
  g->now_ns_ = options.start_ns;
  g->capture_ = options.capture_deliveries;
  g->buffers_.resize(options.buffer_count);
  g->free_.reserve(options.buffer_count);
  for (uint32_t i = options.buffer_count; i-- > 0;) g->free_.push_back(i);
  for (uint32_t i = 0; i < engines.size(); ++i) {
    const gw::ShardSpec shard = i < options.shards.size() ? options.shards[i] : gw::ShardSpec{};
    auto engine =
        gw::Engine::create(engines[i].config, options.start_ns + engines[i].clock_offset_ns, shard);
    if (!engine) {
      return common::make_error(engine.error().code, "engine " + std::to_string(i) + " ('" +
                                                         engines[i].config.name +
                                                         "'): " + engine.error().message);
    }
    Node node;
    node.engine = std::move(*engine);
    node.config = engines[i].config;
    node.shard = shard;
    node.offset_ns = engines[i].clock_offset_ns;
    g->engines_.push_back(std::move(node));
  }
  return g;
}

Gateway::~Gateway() = default;

void Gateway::set_faults(uint32_t from, uint32_t to, const LinkFaults& faults) {
  faults_[{from, to}] = faults;
}

void Gateway::set_port_faults(uint32_t from, uint32_t port, const LinkFaults& faults) {
  port_faults_[{from, port}] = faults;
}

void Gateway::set_alive(uint32_t i, bool alive) { engines_.at(i).alive = alive; }

common::Result<void> Gateway::restart(uint32_t i) {
  Node& node = engines_.at(i);
  auto engine = gw::Engine::create(node.config, now_ns_ + node.offset_ns, node.shard);
  if (!engine) return std::unexpected(engine.error());
  for (uint64_t h = 0; h < buffers_.size(); ++h) {
    if (buffers_[h].in_use && buffers_[h].holder == i) {
      ++restart_lost_;
      release(h);
    }
  }
  node.engine = std::move(*engine);
  return {};
}

const LinkFaults& Gateway::faults(uint32_t from, uint32_t to) const {
  const auto it = faults_.find({from, to});
  return it == faults_.end() ? default_faults_ : it->second;
}

double Gateway::uniform01() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }
uint64_t Gateway::below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }

bool Gateway::allocate(uint64_t* handle) {
  if (free_.empty()) return false;
  *handle = free_.back();
  free_.pop_back();
  Buffer& b = buffers_[*handle];
  if (b.bytes.empty()) b.bytes.resize(kBufferBytes);
  b.in_use = true;
  b.holder = UINT32_MAX;
  b.size = 0;
  b.payload_bytes = 0;
  b.type = wire::DataType::kDatagram;
  return true;
}

void Gateway::release(uint64_t handle) {
  if (handle >= buffers_.size() || !buffers_[handle].in_use) {
    ++bad_frees_;
    return;
  }
  buffers_[handle].in_use = false;
  free_.push_back(handle);
}

uint32_t Gateway::owner_shard(uint32_t i, uint32_t tunnel_id) const {
  const Node& node = engines_.at(i);
  if (node.shard.count <= 1) return i;
  const uint32_t wanted = gw::shard_of_tunnel(tunnel_id, node.shard.count);
  for (uint32_t j = 0; j < engines_.size(); ++j) {
    const Node& other = engines_[j];
    if (other.config.name == node.config.name && other.shard.count == node.shard.count &&
        other.shard.index == wanted) {
      return j;
    }
  }
  return i;
}

void Gateway::sync_shards() {
  for (uint32_t j = 0; j < engines_.size(); ++j) {
    Node& follower = engines_[j];
    if (follower.shard.count <= 1 || !follower.alive) continue;
    for (uint32_t p = 0; p < follower.engine->peer_count(); ++p) {
      if (follower.engine->leads_peer(p)) continue;
      for (uint32_t k = 0; k < engines_.size(); ++k) {
        const Node& lead = engines_[k];
        if (k == j || lead.config.name != follower.config.name || !lead.engine->leads_peer(p)) {
          continue;
        }
        follower.engine->adopt_peer_st(p, lead.engine->peer_sync_st(p));
      }
    }
  }
}

Status Gateway::inject_tun(uint32_t i, std::span<const std::byte> ip_packet) {
  if (engines_.at(i).shard.count > 1) {
    const uint32_t index = engines_[i].engine->route_st(ip_packet);
    if (index != gw::Engine::kNoTunnel) i = owner_shard(i, engines_[i].engine->tunnel_id(index));
  }
  Node& node = engines_.at(i);
  ++node.engine->local_io().tun_rx_packets;
  uint64_t h = 0;
  if (ip_packet.size() > kMaxPayloadBytes) return Status::kInvalidArgument;
  if (!allocate(&h)) {
    ++node.counters.no_buffer;
    return Status::kBusy;
  }
  Buffer& b = buffer(h);
  std::copy(ip_packet.begin(), ip_packet.end(), b.bytes.begin() + wire::kHeaderSize);
  b.payload_bytes = static_cast<uint32_t>(ip_packet.size());
  const uint8_t version = ip_packet.empty() ? 0 : std::to_integer<uint8_t>(ip_packet[0]) >> 4;
  b.type = version == 6 ? wire::DataType::kIpv6 : wire::DataType::kIpv4;
  gw::SubmitInfo submit;
  const Status status = node.engine->submit_tun_st(
      h, std::span<const std::byte>(b.bytes.data() + wire::kHeaderSize, b.payload_bytes),
      now_ns_ + node.offset_ns, &submit);
  if (submit.wants_replica()) submit_replica(i, submit, h);
  switch (status) {
    case Status::kOk:
      ++node.counters.submit_ok;
      buffer(h).holder = i;
      return status;
    case Status::kDropped:
      ++node.counters.submit_dropped;
      break;
    case Status::kMalformed:
      ++node.counters.submit_malformed;
      break;
    default:
      ++node.counters.submit_invalid;
      break;
  }
  release(h);
  return status;
}

void Gateway::submit_replica(uint32_t i, const gw::SubmitInfo& submit, uint64_t original) {
  Node& node = engines_.at(i);
  uint64_t h = 0;
  if (!allocate(&h)) {
    ++node.counters.no_buffer;
    node.engine->replica_not_made_st(submit);
    return;
  }
  const Buffer& from = buffer(original);
  Buffer& b = buffer(h);
  std::copy_n(from.bytes.begin() + wire::kHeaderSize, from.payload_bytes,
              b.bytes.begin() + wire::kHeaderSize);
  b.payload_bytes = from.payload_bytes;
  b.type = from.type;
  if (node.engine->submit_replica_st(submit, h, b.payload_bytes, now_ns_ + node.offset_ns) ==
      Status::kOk) {
    ++node.counters.submit_ok;
    b.holder = i;
  } else {
    ++node.counters.submit_dropped;
    release(h);
  }
}

Status Gateway::inject_service(uint32_t i, uint32_t tunnel_index,
                               std::span<const std::byte> payload) {
  i = owner_shard(i, engines_.at(i).engine->tunnel_id(tunnel_index));
  Node& node = engines_.at(i);
  ++node.engine->local_io().service_rx_packets;
  uint64_t h = 0;
  if (payload.size() > kMaxPayloadBytes) return Status::kInvalidArgument;
  if (!allocate(&h)) {
    ++node.counters.no_buffer;
    return Status::kBusy;
  }
  Buffer& b = buffer(h);
  std::copy(payload.begin(), payload.end(), b.bytes.begin() + wire::kHeaderSize);
  b.payload_bytes = static_cast<uint32_t>(payload.size());
  b.type = wire::DataType::kDatagram;
  gw::SubmitInfo submit;
  const Status status = node.engine->submit_service_st(tunnel_index, h, b.payload_bytes,
                                                       now_ns_ + node.offset_ns, &submit);
  if (submit.wants_replica()) submit_replica(i, submit, h);
  if (status == Status::kOk) {
    ++node.counters.submit_ok;
    buffer(h).holder = i;
  } else {
    ++(status == Status::kDropped ? node.counters.submit_dropped : node.counters.submit_invalid);
    release(h);
  }
  return status;
}

void Gateway::inject_wan(uint32_t i, uint32_t port, const gw::Endpoint& source,
                         std::span<const std::byte> udp_payload, int64_t delay_ns) {
  uint64_t h = 0;
  if (udp_payload.size() > kBufferBytes || !allocate(&h)) {
    ++engines_.at(i).counters.no_buffer;
    return;
  }
  Buffer& b = buffer(h);
  std::copy(udp_payload.begin(), udp_payload.end(), b.bytes.begin());
  b.size = static_cast<uint32_t>(udp_payload.size());
  ++wan_.injected;
  in_flight_.push({now_ns_ + delay_ns, next_order_++, i, port, source, h});
}

void Gateway::on_tx(uint32_t i, int64_t engine_ns, const gw::TxEmit& emit) {
  Node& node = engines_[i];
  TxRecord record;
  record.engine = i;
  record.engine_ns = engine_ns;
  record.true_ns = now_ns_;
  record.emit = emit;
  if (!emit.control && emit.handle < buffers_.size()) record.type = buffers_[emit.handle].type;
  if (tx_observer_) tx_observer_(record);

  if (emit.control) {
    ++node.counters.tx_control;
    uint64_t h = 0;
    if (!allocate(&h)) {
      ++node.counters.no_buffer;
      return;
    }
    Buffer& b = buffer(h);
    std::copy(emit.bytes.begin(), emit.bytes.end(), b.bytes.begin());
    b.size = static_cast<uint32_t>(emit.bytes.size());
    send_wan(i, emit.port_index, *emit.destination, h);
    return;
  }
  if (!emit.send) {
    ++node.counters.tx_not_sent;
    release(emit.handle);
    return;
  }
  ++node.counters.tx_data;
  Buffer& b = buffer(emit.handle);
  const std::size_t size = node.engine->encode_frame_st(
      emit, b.type, std::span<std::byte>(b.bytes.data(), b.bytes.size()), b.payload_bytes);
  if (size == 0) {
    ++node.engine->port_io(emit.port_index).tx_errors;
    release(emit.handle);
    return;
  }
  b.size = static_cast<uint32_t>(size);
  send_wan(i, emit.port_index, *emit.destination, emit.handle);
}

void Gateway::send_wan(uint32_t from, uint32_t port, const gw::Endpoint& destination,
                       uint64_t handle) {
  Node& sender = engines_[from];
  buffer(handle).holder = UINT32_MAX;  // on the wire: no engine holds it
  gw::PortIo& io = sender.engine->port_io(port);
  ++io.tx_packets;
  io.tx_bytes += buffer(handle).size;
  ++wan_.sent;
  uint32_t to = UINT32_MAX;
  uint32_t to_port = 0;
  const uint32_t tunnel_id = gw::Engine::peek_tunnel_id(
      std::span<const std::byte>(buffer(handle).bytes.data(), buffer(handle).size));
  for (uint32_t j = 0; j < engines_.size() && to == UINT32_MAX; ++j) {
    const gw::ShardSpec& shard = engines_[j].shard;
    if (shard.count > 1 && gw::shard_of_tunnel(tunnel_id, shard.count) != shard.index) continue;
    const auto& ports = engines_[j].engine->config().wan_ports;
    for (uint32_t q = 0; q < ports.size(); ++q) {
      if (ports[q].local == destination) {
        to = j;
        to_port = q;
        break;
      }
    }
  }
  if (to == UINT32_MAX) {
    ++wan_.unroutable;
    release(handle);
    return;
  }
  const auto port_faults = port_faults_.find({from, port});
  const LinkFaults& f = port_faults != port_faults_.end() ? port_faults->second : faults(from, to);
  if (f.down || (f.loss > 0 && uniform01() < f.loss)) {
    ++wan_.lost;
    release(handle);
    return;
  }
  Buffer& b = buffer(handle);
  if (f.corrupt > 0 && uniform01() < f.corrupt && b.size > 0) {
    ++wan_.corrupted;
    b.bytes[below(b.size)] ^= std::byte(static_cast<uint8_t>(1 + below(255)));
  }
  if (f.truncate > 0 && uniform01() < f.truncate && b.size > 0) {
    ++wan_.truncated;
    b.size = static_cast<uint32_t>(below(b.size));
  }
  uint64_t copies[2] = {handle, 0};
  int count = 1;
  if (f.duplicate > 0 && uniform01() < f.duplicate && allocate(&copies[1])) {
    ++wan_.duplicated;
    Buffer& copy = buffer(copies[1]);
    std::memcpy(copy.bytes.data(), b.bytes.data(), b.size);
    copy.size = b.size;
    count = 2;
  }
  const gw::Endpoint source = sender.engine->config().wan_ports[port].local;
  if (wire_observer_) {
    wire_observer_(WireRecord{from, port, to, to_port, source,
                              std::span<const std::byte>(b.bytes.data(), b.size)});
  }
  Link& link = links_[{from, to, port}];
  for (int c = 0; c < count; ++c) {
    int64_t at =
        now_ns_ + f.delay_ns +
        (f.jitter_ns > 0 ? static_cast<int64_t>(below(static_cast<uint64_t>(f.jitter_ns) + 1)) : 0);
    if (f.reorder > 0 && uniform01() < f.reorder) {
      ++wan_.reordered;
      at += f.reorder_delay_ns;  // out of FIFO order: later datagrams may overtake it
    } else {
      at = std::max(at, link.last_arrival_ns);
      link.last_arrival_ns = at;
    }
    in_flight_.push({at, next_order_++, to, to_port, source, copies[c]});
  }
}

void Gateway::deliver(const InFlight& d) {
  Node& node = engines_[d.engine];
  if (!node.alive) {
    ++wan_.to_dead;
    release(d.handle);
    return;
  }
  ++wan_.delivered;
  Buffer& b = buffer(d.handle);
  gw::PortIo& io = node.engine->port_io(d.port);
  ++io.rx_packets;
  io.rx_bytes += b.size;
  gw::RxInfo info;
  const Status status = node.engine->on_wan_datagram_st(
      d.port, d.source, d.handle, std::span<std::byte>(b.bytes.data(), b.size),
      now_ns_ + node.offset_ns, &info);
  switch (status) {
    case Status::kOk:
      ++node.counters.rx_ok;
      b.holder = d.engine;
      b.type = info.type;
      b.payload_bytes = info.payload_bytes;
      return;  // the engine holds the buffer until poll_rx_st
    case Status::kBusy:
      ++node.counters.rx_consumed;
      break;
    case Status::kDropped:
      ++node.counters.rx_dropped;
      break;
    case Status::kMalformed:
      ++node.counters.rx_malformed;
      break;
    default:
      ++node.counters.rx_invalid;
      break;
  }
  release(d.handle);
}

void Gateway::on_rx(uint32_t i, int64_t engine_ns, const gw::RxEmit& emit) {
  Node& node = engines_[i];
  ++node.counters.released;
  if (emit.late) ++node.counters.released_late;
  if (emit.service_deliver != nullptr) {
    ++node.engine->local_io().service_tx_packets;
  } else {
    ++node.engine->local_io().tun_tx_packets;
  }
  if (capture_ || delivery_observer_) {
    const Buffer& b = buffer(emit.handle);
    Delivery d;
    d.engine = i;
    d.tunnel_index = emit.tunnel_index;
    d.tunnel_id = node.engine->tunnel_id(emit.tunnel_index);
    d.type = b.type;
    d.late = emit.late;
    d.best_effort = emit.best_effort;
    d.to_service = emit.service_deliver != nullptr;
    d.release_ns = engine_ns;
    d.true_release_ns = now_ns_;
    d.tx_timestamp_ns = emit.tx_timestamp_ns;
    d.target_ns = emit.target_ns;
    const auto* payload = b.bytes.data() + wire::kHeaderSize;
    d.payload.assign(payload, payload + b.payload_bytes);
    if (delivery_observer_) delivery_observer_(d);
    if (capture_) node.deliveries.push_back(std::move(d));
  }
  release(emit.handle);
}

void Gateway::process(int64_t t) {
  for (int round = 0; round < kMaxRoundsPerInstant; ++round) {
    while (!in_flight_.empty() && in_flight_.top().at_ns <= t) {
      const InFlight d = in_flight_.top();
      in_flight_.pop();
      deliver(d);
    }
    for (uint32_t i = 0; i < engines_.size(); ++i) {
      Node& node = engines_[i];
      if (!node.alive) continue;
      const int64_t local = t + node.offset_ns;
      node.engine->poll_control_st(local);
      (void)node.engine->poll_tx_st(local, [&](const gw::TxEmit& e) { on_tx(i, local, e); });
      (void)node.engine->poll_rx_st(local, [&](const gw::RxEmit& e) { on_rx(i, local, e); });
    }
    bool pending = !in_flight_.empty() && in_flight_.top().at_ns <= t;
    for (const Node& node : engines_) {
      pending = pending ||
                (node.alive && saturating_sub(node.engine->next_event_ns(), node.offset_ns) <= t);
    }
    if (!pending) return;
  }
  stalled_ = true;
}

int64_t Gateway::next_event_ns() const {
  int64_t t = in_flight_.empty() ? std::numeric_limits<int64_t>::max() : in_flight_.top().at_ns;
  for (const Node& node : engines_) {
    if (!node.alive) continue;
    const int64_t e = node.engine->next_event_ns();
    if (e != std::numeric_limits<int64_t>::max())
      t = std::min(t, saturating_sub(e, node.offset_ns));
  }
  return t == std::numeric_limits<int64_t>::max() ? t : std::max(t, now_ns_);
}

bool Gateway::step() {
  if (stalled_) return false;
  const int64_t t = next_event_ns();
  if (t == std::numeric_limits<int64_t>::max()) return false;
  now_ns_ = t;
  process(t);
  sync_shards();
  return !stalled_;
}

void Gateway::run_until(int64_t t_ns) {
  while (!stalled_ && next_event_ns() <= t_ns) {
    if (!step()) break;
  }
  now_ns_ = std::max(now_ns_, t_ns);
}

}  // namespace detwan::dataplane::loopback

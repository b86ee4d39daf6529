// Datagram dispatch, handshake, timers and the order of what poll_transmit emits.
#include <algorithm>
#include <string>

#include "transport/proto/connection_impl.h"

namespace detwan::transport::proto {

wire::Header ConnectionImpl::header(wire::Type type, uint32_t path, int64_t now_ns) const {
  wire::Header h;
  h.type = type;
  if (mode_ != SecurityMode::kNone) {
    h.version = wire::kVersionSealed;
    h.packet_number = static_cast<uint32_t>(tx_packet_number_);  // seal_datagram uses it next
  }
  h.path_id = static_cast<uint8_t>(path);
  h.connection_id = connection_id_;
  h.tx_time_ns = now_ns;
  return h;
}

// Both count the tag a sealed datagram will carry.
void ConnectionImpl::charge(uint32_t path, size_t bytes, int64_t now_ns) {
  paths_[path].pacer.on_send(now_ns, bytes + tag_bytes_);
  if (paths_[path].group) paths_[path].group->on_send(now_ns, bytes + tag_bytes_);
  paths_[path].datagrams_sent++;
  last_tx_ns_ = now_ns;
}

void ConnectionImpl::charge_control(uint32_t path, size_t bytes, int64_t now_ns) {
  paths_[path].pacer.on_unpaced_send(now_ns, bytes + tag_bytes_);
  if (paths_[path].group) paths_[path].group->on_unpaced_send(now_ns, bytes + tag_bytes_);
  paths_[path].datagrams_sent++;
  last_tx_ns_ = now_ns;
}

Status ConnectionImpl::on_datagram(uint32_t path, std::span<const std::byte> d, int64_t now_ns) {
  stats_.datagrams_received++;
  if (path >= paths_.size()) {
    stats_.dropped_malformed++;
    return Status::kInvalidArgument;
  }
  wire::Header h;
  if (wire::decode_header(d, h) != Status::kOk) {
    stats_.dropped_malformed++;
    return Status::kMalformed;
  }
  if (mode_ != SecurityMode::kNone) return on_sealed_datagram(path, h, d, now_ns);
  if (h.version != wire::kVersion) {  // the sealed protocol at a plain connection
    stats_.dropped_malformed++;
    return Status::kMalformed;
  }
  // Structure first (a truncated datagram is malformed), then the checksum (corrupt).
  Parsed parsed;
  if (parse_body(h, d.subspan(wire::header_bytes(h)), parsed) != Status::kOk) {
    stats_.dropped_malformed++;
    return Status::kMalformed;
  }
  if (!wire::crc_ok(d)) {
    stats_.dropped_corrupt++;
    return Status::kDropped;
  }
  // DATA names the connection by its id's low 32 bits, every other type by the whole id.
  if (h.connection_id != (h.short_form ? connection_id_ & 0xFFFF'FFFFu : connection_id_)) {
    stats_.dropped_foreign++;
    return Status::kDropped;
  }
  return apply(path, h, parsed, now_ns);
}

Status ConnectionImpl::parse_body(const wire::Header& h, std::span<const std::byte> body,
                                  Parsed& p) {
  switch (h.type) {
    case wire::Type::kHello:
    case wire::Type::kHelloAck: return wire::decode_hello(body, p.hello);
    case wire::Type::kData:
      return wire::decode_data(body, p.data, (h.flags & wire::kFlagAck) != 0 ? &p.ack : nullptr);
    case wire::Type::kAck: return wire::decode_ack(body, p.ack);
    case wire::Type::kFec: return wire::decode_fec(body, p.fec);
    case wire::Type::kKeepalive: return body.empty() ? Status::kOk : Status::kMalformed;
    case wire::Type::kClose: return wire::decode_close(body, p.close);
  }
  return Status::kMalformed;
}

Status ConnectionImpl::apply(uint32_t path, const wire::Header& h, Parsed& p, int64_t now_ns) {
  if (failed_) return Status::kClosed;
  if (closed_) return Status::kClosed;
  note_peer_alive(now_ns);
  advance_timers(now_ns);
  if (failed_) return Status::kClosed;

  switch (h.type) {
    case wire::Type::kHello:
      if (role_ != Role::kServer) {
        stats_.dropped_malformed++;
        return Status::kMalformed;
      }
      peer_window_bytes_ = p.hello.recv_window_bytes;
      peer_segment_bytes_ = p.hello.segment_bytes;
      hello_ack_pending_ = true;
      ack_path_ = path;
      return Status::kOk;
    case wire::Type::kHelloAck:
      if (role_ != Role::kClient) {
        stats_.dropped_malformed++;
        return Status::kMalformed;
      }
      peer_window_bytes_ = p.hello.recv_window_bytes;
      peer_segment_bytes_ = p.hello.segment_bytes;
      on_established();
      return Status::kOk;
    case wire::Type::kData: {
      if ((h.flags & wire::kFlagAck) != 0) {  // an ACK riding on the peer's DATA comes first
        on_established();
        if (Status s = on_ack(path, h, p.ack, now_ns); s != Status::kOk) return s;
      }
      // Segments can be placed only once the peer's HELLO / HELLO_ACK told their size: before
      // that (a client whose HELLO_ACK was lost) they are dropped unacknowledged and resent,
      // and the client keeps repeating its HELLO.
      if (peer_segment_bytes_ == 0) {
        dropped_window_++;
        return Status::kDropped;
      }
      on_established();
      const std::optional<uint64_t> seq = expand_seq(p.data.seq);
      if (!seq) {
        stats_.dropped_malformed++;
        return Status::kMalformed;
      }
      p.data.seq = *seq;
      return on_data(path, h, p.data, now_ns, false);
    }
    case wire::Type::kAck:
      on_established();
      return on_ack(path, h, p.ack, now_ns);
    case wire::Type::kFec:
      return on_fec(path, h, p.fec, now_ns);
    case wire::Type::kKeepalive:
      return Status::kOk;
    case wire::Type::kClose:
      if (p.close.reason == wire::kCloseSecurityMismatch && role_ == Role::kClient &&
          !established_) {
        fail(ErrorCode::kConfig,
             "security mode mismatch: the peer runs authenticated channels and refuses this "
             "endpoint's plain HELLO (Security::none()): give both endpoints the job's key "
             "(EndpointOptions::security = Security::keyed(...); tools: --key-file)");
        return Status::kClosed;
      }
      closed_ = true;
      release_buffers();
      {
        Event e = make_event(Event::Kind::kClosed);
        e.error = Error{ErrorCode::kUnavailable, "peer closed the channel"};
        events_.push_back(std::move(e));
      }
      return Status::kOk;
  }
  return Status::kOk;
}

void ConnectionImpl::advance_timers(int64_t now_ns) {
  if (failed_ || closed_) return;
  const int64_t silent_ns = now_ns - last_peer_rx_ns_;
  if (silent_ns >= options_.peer_timeout_ns) {
    const std::string ms = std::to_string(silent_ns / 1'000'000) + " ms (peer_timeout_ns " +
                           std::to_string(options_.peer_timeout_ns) + ")";
    std::string why;
    if (!established_ && mode_ != SecurityMode::kNone) {
      why = peer_runs_plain_
                ? ": security mode mismatch: the peer answered in the plain protocol "
                  "(it runs Security::none()); give both endpoints the same mode and key"
                : ": no authenticated HELLO_ACK (a peer without this key, or none, looks the "
                  "same: check both endpoints' key and context)";
    }
    fail(ErrorCode::kTimeout, established_ ? "peer sent nothing for " + ms
                                           : "handshake not answered for " + ms + why);
    return;
  }
  for (uint32_t p = 0; p < paths_.size(); ++p) {
    detect_losses(p, now_ns);
    check_path_alive(p, now_ns);
    check_rto(p, now_ns);
  }
  if (now_ns >= ack_deadline_ns_) ack_now_ = true;
  if (options_.fec.enabled && options_.fec.protect_tail && fec_tx_.count > 0 &&
      !has_new_data()) {
    fec_close_block(now_ns);
  }
}

Transmit ConnectionImpl::poll_transmit(int64_t now_ns, std::span<std::byte> out) {
  Transmit t;
  if (out.size() < max_datagram_bytes_) return t;
  tx_unsealed_ = false;
  // Room for the tag: the plaintext never takes the last tag_bytes_ of a datagram.
  t = build_transmit(now_ns, out.first(max_datagram_bytes_ - tag_bytes_));
  if (t.size_bytes == 0 || mode_ == SecurityMode::kNone || tx_unsealed_) return t;
  t.size_bytes = seal_datagram(out, t.size_bytes);
  return t;
}

Transmit ConnectionImpl::build_transmit(int64_t now_ns, std::span<std::byte> out) {
  Transmit t;
  if (close_pending_) {
    if ((ack_now_ || ack_deadline_ns_ != INT64_MAX) && !failed_) {  // the ACK we owe first
      t.path = ack_path_;
      t.size_bytes = build_ack(now_ns, out);
      charge_control(t.path, t.size_bytes, now_ns);
      return t;
    }
    close_pending_ = false;
    t.size_bytes = wire::encode_close(header(wire::Type::kClose, 0, now_ns), {}, out);
    charge_control(0, t.size_bytes, now_ns);
    return t;
  }
  advance_timers(now_ns);
  if (failed_ || closed_) return t;

  if (role_ == Role::kClient && !established_) {
    if (now_ns < hello_next_ns_) return t;
    const uint32_t path = static_cast<uint32_t>(hello_attempts_ % paths_.size());
    hello_attempts_++;
    hello_next_ns_ = now_ns + std::max<int64_t>(paths_[path].rtt.rto_ns(), options_.initial_rtt_ns)
                               * std::min(hello_attempts_, 8);
    t.path = path;
    if (mode_ != SecurityMode::kNone) {
      t.size_bytes = build_sealed_hello(now_ns, path, out);
    } else {
      wire::HelloBody b;
      b.recv_window_bytes = static_cast<uint64_t>(recv_window_bytes_);
      b.segment_bytes = static_cast<uint16_t>(payload_bytes_);
      t.size_bytes = wire::encode_hello(header(wire::Type::kHello, path, now_ns), b, out);
    }
    charge_control(path, t.size_bytes, now_ns);
    return t;
  }
  if (confirm_pending_) {
    // The server creates the channel when a datagram sealed with its keys arrives: the first
    // goes out now, whether or not data is waiting.
    confirm_pending_ = false;
    t.path = keepalive_path_;
    t.size_bytes = wire::encode_empty(header(wire::Type::kKeepalive, t.path, now_ns), out);
    charge_control(t.path, t.size_bytes, now_ns);
    return t;
  }
  if (hello_ack_pending_) {
    hello_ack_pending_ = false;
    wire::HelloBody b;
    b.recv_window_bytes = static_cast<uint64_t>(recv_window_bytes_);
    b.segment_bytes = static_cast<uint16_t>(payload_bytes_);
    t.path = ack_path_;
    t.size_bytes = wire::encode_hello(header(wire::Type::kHelloAck, t.path, now_ns), b, out);
    charge_control(t.path, t.size_bytes, now_ns);
    return t;
  }
  if (ack_now_) {
    // Once per ACK owed: a DATA that may leave now on the ACK's path carries it (a reply
    // acknowledges the request). If none may, or the ACK does not fit beside a full segment,
    // the ACK goes alone, at the latest after that one DATA.
    if (!ack_ride_tried_) {
      ack_ride_tried_ = true;
      uint32_t path = 0;
      if (size_t n = send_data(now_ns, out, &path); n > 0) {
        t.size_bytes = n;
        t.path = path;
        return t;
      }
    }
    t.path = ack_path_;
    t.size_bytes = build_ack(now_ns, out);
    charge_control(t.path, t.size_bytes, now_ns);
    return t;
  }
  uint32_t path = 0;
  if (size_t n = send_data(now_ns, out, &path); n > 0) {
    t.size_bytes = n;
    t.path = path;
    return t;
  }
  if (now_ns - last_tx_ns_ >= options_.keepalive_interval_ns) {
    t.path = keepalive_path_;
    keepalive_path_ = static_cast<uint32_t>((keepalive_path_ + 1) % paths_.size());
    t.size_bytes = wire::encode_empty(header(wire::Type::kKeepalive, t.path, now_ns), out);
    charge_control(t.path, t.size_bytes, now_ns);
  }
  return t;
}

int64_t ConnectionImpl::next_wakeup_ns() const {
  if (close_pending_) return INT64_MIN / 2;
  if (failed_ || closed_) return INT64_MAX;
  int64_t t = last_peer_rx_ns_ + options_.peer_timeout_ns;
  if (role_ == Role::kClient && !established_) return std::min(t, hello_next_ns_);
  if (hello_ack_pending_ || ack_now_ || confirm_pending_) return INT64_MIN / 2;
  t = std::min(t, ack_deadline_ns_);
  t = std::min(t, last_tx_ns_ + options_.keepalive_interval_ns);
  t = std::min(t, sender_timer_ns());
  t = std::min(t, data_release_ns(last_tx_ns_));
  return t;
}

}  // namespace detwan::transport::proto

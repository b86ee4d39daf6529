// Authenticated channels (docs/transport.md "Authenticated channels", handshake.h): the
// client's HELLO and its check of the HELLO_ACK, sealing every datagram after the handshake
// and opening every one received before it touches any state.
#include <algorithm>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "transport/proto/connection_impl.h"

namespace detwan::transport::proto {

// Setup (constructor): cipher contexts exist from the start, keyed once the keys are known;
// per packet only the nonce changes.
void ConnectionImpl::setup_security(const ConnectionConfig& config) {
  auto tx = crypto::PacketCipher::create();
  auto rx = crypto::PacketCipher::create();
  if (!tx || !rx) return fail(ErrorCode::kInternal, (!tx ? tx.error() : rx.error()).message);
  tx_cipher_.emplace(std::move(*tx));
  rx_cipher_.emplace(std::move(*rx));
  if (mode_ == SecurityMode::kEncrypt) rx_plain_.resize(max_datagram_bytes_);
  if (role_ == Role::kClient) {
    if (auto ok = crypto::random_bytes(own_nonce_); !ok)
      return fail(ok.error().code, ok.error().message);
    return;
  }
  // Server: the acceptor verified the client's HELLO and its first sealed datagram.
  if (config.accepted == nullptr) {
    return fail(ErrorCode::kInternal, "authenticated server connection without its handshake");
  }
  const AcceptedHandshake& accepted = *config.accepted;
  if (!tx_cipher_->rekey(accepted.keys.server_to_client) ||
      !rx_cipher_->rekey(accepted.keys.client_to_server)) {
    return fail(ErrorCode::kInternal, "cannot key aes-256-gcm");
  }
  peer_window_bytes_ = accepted.peer.recv_window_bytes;
  peer_segment_bytes_ = accepted.peer.segment_bytes;
  established_ = true;
  events_.push_back(make_event(Event::Kind::kEstablished));
}

size_t ConnectionImpl::build_sealed_hello(int64_t now_ns, uint32_t path, std::span<std::byte> out) {
  wire::Header h = header(wire::Type::kHello, path, now_ns);
  h.packet_number = 0;  // not sealed: the MAC proves it
  wire::SealedHelloBody body;
  body.hello.recv_window_bytes = static_cast<uint64_t>(recv_window_bytes_);
  body.hello.version = wire::kVersionSealed;
  body.hello.segment_bytes = static_cast<uint16_t>(payload_bytes_);
  body.mode = static_cast<uint8_t>(mode_);
  body.nonce = own_nonce_;
  const size_t n = wire::encode_sealed_hello(h, body, out);
  crypto::Tag mac{};
  if (n == 0 || !keyring_->hello_mac(out.first(n - wire::kHandshakeMacBytes), nullptr, mac)) {
    fail(ErrorCode::kInternal, "cannot compute the HELLO's MAC");
    return 0;
  }
  std::memcpy(out.data() + n - wire::kHandshakeMacBytes, mac.data(), mac.size());
  tx_unsealed_ = true;
  return n;
}

size_t ConnectionImpl::seal_datagram(std::span<std::byte> out, size_t size) {
  if (tx_packet_number_ >= (uint64_t{1} << 62)) {
    fail(ErrorCode::kUnavailable, "packet numbers of this channel exhausted");
    return 0;
  }
  wire::Header h;
  if (wire::decode_header(out.first(size), h) != Status::kOk) return 0;
  const size_t header = wire::header_bytes(h);
  const auto tag = out.subspan(size).first<wire::kTagBytes>();
  const bool ok = mode_ == SecurityMode::kEncrypt
                      ? tx_cipher_->seal(tx_packet_number_, out.first(header),
                                         out.subspan(header, size - header), tag)
                      : tx_cipher_->seal(tx_packet_number_, out.first(size), {}, tag);
  if (!ok) {
    fail(ErrorCode::kInternal, "aes-256-gcm failed to seal a datagram");
    return 0;
  }
  ++tx_packet_number_;
  return size + wire::kTagBytes;
}

Status ConnectionImpl::on_sealed_datagram(uint32_t path, const wire::Header& h,
                                          std::span<const std::byte> d, int64_t now_ns) {
  if (!h.short_form && h.version != wire::kVersionSealed) {
    // The plain protocol. Its one answer to a sealed HELLO, "security mismatch", is noted for
    // the error connect() reports: it changes nothing else (anyone can forge it).
    wire::CloseBody close;
    if (role_ == Role::kClient && !established_ && h.type == wire::Type::kClose &&
        h.connection_id == connection_id_ &&
        wire::decode_close(d.subspan(wire::kHeaderBytes), close) == Status::kOk &&
        close.reason == wire::kCloseSecurityMismatch && wire::crc_ok(d)) {
      peer_runs_plain_ = true;
    }
    stats_.dropped_auth++;
    return Status::kDropped;
  }
  if (h.type == wire::Type::kHello || h.type == wire::Type::kHelloAck) {
    return on_sealed_hello(path, h, d, now_ns);
  }
  if (h.connection_id != (h.short_form ? connection_id_ & 0xFFFF'FFFFu : connection_id_)) {
    stats_.dropped_foreign++;
    return Status::kDropped;
  }
  const size_t header = wire::header_bytes(h);
  if (d.size() < header + wire::kTagBytes) {
    stats_.dropped_malformed++;
    return Status::kMalformed;
  }
  if (!rx_cipher_ || !rx_cipher_->keyed()) {  // a client before its HELLO_ACK: nothing opens
    stats_.dropped_auth++;
    return Status::kDropped;
  }
  const uint64_t pn = rx_window_.expand(h.packet_number);
  if (!rx_window_.fresh(pn)) {
    stats_.dropped_replay++;
    return Status::kDropped;
  }
  const auto tag = d.last<wire::kTagBytes>();
  const std::span<const std::byte> text = d.subspan(header, d.size() - header - wire::kTagBytes);
  std::span<const std::byte> body = text;
  bool opened = false;
  if (mode_ == SecurityMode::kEncrypt) {
    if (text.size() > rx_plain_.size()) {
      stats_.dropped_malformed++;
      return Status::kMalformed;
    }
    const std::span<std::byte> plain = std::span(rx_plain_).first(text.size());
    opened = rx_cipher_->open(pn, d.first(header), text, plain, tag);
    body = plain;
  } else {
    opened = rx_cipher_->open(pn, d.first(d.size() - wire::kTagBytes), {}, {}, tag);
  }
  if (!opened) {
    stats_.dropped_auth++;
    return Status::kDropped;
  }
  rx_window_.mark(pn);
  Parsed parsed;
  if (parse_body(h, body, parsed) != Status::kOk) {
    stats_.dropped_malformed++;
    return Status::kMalformed;
  }
  return apply(path, h, parsed, now_ns);
}

Status ConnectionImpl::on_sealed_hello(uint32_t /*path*/, const wire::Header& h,
                                       std::span<const std::byte> d, int64_t now_ns) {
  wire::SealedHelloBody body;
  if (h.connection_id != connection_id_) {
    stats_.dropped_foreign++;
    return Status::kDropped;
  }
  if (wire::decode_sealed_hello(d.subspan(wire::kHeaderBytes), body) != Status::kOk) {
    stats_.dropped_malformed++;
    return Status::kMalformed;
  }
  // A server's HELLOs were answered by its acceptor; a client never takes a HELLO.
  if (role_ != Role::kClient || h.type != wire::Type::kHelloAck) {
    stats_.dropped_duplicate++;
    return Status::kDropped;
  }
  crypto::Tag mac{};
  if (!keyring_->hello_mac(d.first(d.size() - wire::kHandshakeMacBytes), &own_nonce_, mac) ||
      !crypto::equal_ct(mac, body.mac)) {
    stats_.dropped_auth++;  // not from a holder of the key, or not an answer to our HELLO
    return Status::kDropped;
  }
  if (failed_ || closed_) return Status::kClosed;
  if (established_) {
    // The answer to a repeated HELLO: the server may have missed our first sealed datagram.
    if (crypto::equal_ct(body.nonce, peer_nonce_)) confirm_pending_ = true;
    stats_.dropped_duplicate++;
    return Status::kDropped;
  }
  note_peer_alive(now_ns);
  if (body.mode != static_cast<uint8_t>(mode_)) {
    const auto peer_mode = static_cast<SecurityMode>(body.mode);
    fail(ErrorCode::kConfig,
         fmt::format("security mode mismatch: the peer runs '{}', this endpoint '{}' (both ends "
                     "of a channel need the same EndpointOptions::security mode)",
                     body.mode <= 2 ? to_string(peer_mode) : std::string_view("unknown"),
                     to_string(mode_)));
    return Status::kClosed;
  }
  auto keys = keyring_->derive(connection_id_, own_nonce_, body.nonce);
  if (!keys || !tx_cipher_->rekey(keys->client_to_server) ||
      !rx_cipher_->rekey(keys->server_to_client)) {
    fail(ErrorCode::kInternal, keys ? std::string("cannot key aes-256-gcm") : keys.error().message);
    return Status::kClosed;
  }
  peer_nonce_ = body.nonce;
  peer_window_bytes_ = body.hello.recv_window_bytes;
  peer_segment_bytes_ = body.hello.segment_bytes;
  confirm_pending_ = true;
  on_established();
  return Status::kOk;
}

}  // namespace detwan::transport::proto

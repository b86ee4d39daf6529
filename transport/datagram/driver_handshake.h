#pragma once
// The datagram driver's acceptor for authenticated channels (driver.h, half_open.h,
// transport/proto/handshake.h): HELLOs on the listen socket, half-open entries, the first
// sealed datagram that creates the channel, and the answers. Per datagram: no allocation before
// a HELLO's MAC verified (the entry and the answer live in fixed tables); a verified HELLO costs
// the derivation of its keys.
#include <algorithm>
#include <cstring>
#include <span>

#include "transport/datagram/driver.h"

namespace detwan::transport::datagram {

template <DatagramLink Link>
void DatagramEndpoint<Link>::on_hello_st(SocketId socket, const Address& source,
                                         std::span<const std::byte> bytes, uint8_t version,
                                         uint64_t connection_id, int64_t now_ns) {
  const bool sealed = keyring_->sealed();
  if ((version == proto::wire::kVersionSealed) != sealed) {
    // The other protocol: say so in the plain protocol (28 bytes, less than either HELLO), so
    // a plain client fails at once with a clear error and a sealed one can name the reason.
    ++counters_.dropped_mode_mismatch;
    if (Answer<Address>* answer = queue_answer_st(socket, source)) {
      answer->size_bytes = proto::write_mismatch_close(connection_id, 0, now_ns, answer->bytes);
    }
    return;
  }
  if (!sealed) {
    create_server_st(connection_id, socket, source, now_ns);
    return;
  }
  proto::wire::Header h;
  proto::wire::SealedHelloBody body;
  const common::Status checked = proto::check_hello(*keyring_, bytes, h, body);
  if (checked != common::Status::kOk) {
    ++counters_.dropped_auth;  // malformed, or not from a holder of the key: no answer
    return;
  }
  crypto::Nonce server_nonce{};
  if (body.mode != static_cast<uint8_t>(keyring_->mode())) {
    // A holder of the key in another mode: an answer (same size) that tells it, and no entry.
    ++counters_.dropped_mode_mismatch;
    if (!crypto::random_bytes(server_nonce)) return;
  } else {
    HalfOpen<Address>* entry = half_open_.find(connection_id, false, now_ns);
    if (entry == nullptr || !crypto::equal_ct(entry->client_nonce, body.nonce)) {
      // A new handshake (a repeated HELLO keeps its entry, so its answer is the same).
      if (!crypto::random_bytes(server_nonce)) return;
      auto keys = keyring_->derive(connection_id, body.nonce, server_nonce);
      if (!keys) return;
      if (entry == nullptr) {
        bool evicted = false;
        entry = &half_open_.insert(now_ns, &evicted);
        if (evicted) ++counters_.half_open_evicted;
      }
      entry->connection_id = connection_id;
      entry->client_nonce = body.nonce;
      entry->server_nonce = server_nonce;
      entry->handshake.keys = *keys;
      entry->handshake.peer = body.hello;
      entry->socket = socket;
      entry->source = source;
      entry->created_ns = now_ns;
    }
    server_nonce = entry->server_nonce;
  }
  Answer<Address>* answer = queue_answer_st(socket, source);
  if (answer == nullptr) return;
  answer->size_bytes = proto::write_hello_ack(*keyring_, h, own_hello_, body.nonce, server_nonce,
                                              now_ns, answer->bytes);
  if (answer->size_bytes > 0) ++counters_.handshakes_answered;
}

template <DatagramLink Link>
void DatagramEndpoint<Link>::on_half_open_st(const proto::PeekedId& id,
                                             std::span<const std::byte> bytes, int64_t now_ns) {
  HalfOpen<Address>* entry = half_open_.find(id.id, id.short_form, now_ns);
  if (entry == nullptr) {
    ++counters_.dropped_unknown_connection;
    return;
  }
  if (!proto::opens_as_client(*keyring_, entry->handshake.keys.client_to_server, bytes)) {
    ++counters_.dropped_auth;
    return;
  }
  const HalfOpen<Address> confirmed = *entry;
  half_open_.remove(entry);
  create_server_st(confirmed.connection_id, confirmed.socket, confirmed.source, now_ns,
                   &confirmed.handshake);
}

template <DatagramLink Link>
auto DatagramEndpoint<Link>::queue_answer_st(SocketId socket, const Address& destination)
    -> Answer<Address>* {
  if (answer_count_ >= answers_.size()) {
    ++counters_.dropped_answers;
    return nullptr;
  }
  Answer<Address>& answer = answers_[answer_count_++];
  answer.socket = socket;
  answer.destination = destination;
  answer.size_bytes = 0;
  return &answer;
}

template <DatagramLink Link>
void DatagramEndpoint<Link>::send_answers_st() {
  for (size_t i = 0; i < answer_count_; ++i) {
    const Answer<Address>& answer = answers_[i];
    if (answer.size_bytes == 0) continue;
    std::span<std::byte> buffer = link_->tx_buffer();
    if (buffer.size() < answer.size_bytes) {
      counters_.dropped_answers += answer_count_ - i;  // every send buffer in flight
      break;
    }
    std::memcpy(buffer.data(), answer.bytes.data(), answer.size_bytes);
    (void)link_->send(answer.socket, answer.destination, answer.size_bytes);
  }
  answer_count_ = 0;
}

}  // namespace detwan::transport::datagram

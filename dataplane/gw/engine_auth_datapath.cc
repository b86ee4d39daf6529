// Per-packet sealing and opening of an authenticated tunnel's packets (engine_auth.h).
#include "dataplane/gw/engine_auth.h"
#include "dataplane/gw/engine_impl.h"

namespace detwan::dataplane::gw {

std::size_t seal_frame(TunnelAuthState& auth, std::span<std::byte> frame,
                       std::size_t plaintext_bytes) noexcept {
  const std::size_t size = aead::seal_packet(auth.keys[auth.tx].key, frame, plaintext_bytes);
  if (size == 0) {
    ++auth.counters.seal_failed;
  } else {
    ++auth.counters.sealed_packets;
  }
  return size;
}

std::optional<std::size_t> open_frame(TunnelAuthState& auth, std::span<std::byte> datagram,
                                      uint32_t session, AuthDrop* why) noexcept {
  const auto refuse = [&](AuthDrop reason) -> std::optional<std::size_t> {
    ++auth.counters.drops[static_cast<int>(reason)];
    *why = reason;
    return std::nullopt;
  };
  if (datagram.size() < wire::kHeaderSize + aead::kTagBytes) return refuse(AuthDrop::kTruncated);
  const auto opened = [&](uint32_t k, std::size_t bytes) {
    ++auth.keys[k].opened_packets;
    ++auth.counters.opened_packets;
    return bytes;
  };
  // A known session: its key, once. A failed open leaves the payload garbled, so no other key
  // is tried on the same bytes (a genuine packet of that session never fails).
  for (const auto& rx : auth.rx) {
    if (rx.session != session) continue;
    const auto bytes = aead::open_packet(auth.keys[rx.key].key, datagram);
    if (!bytes) return refuse(AuthDrop::kFailed);
    return opened(rx.key, *bytes);
  }
  // A new session: each key held, transmit key first. OpenSSL writes the plaintext before it
  // checks the tag, so a failed try restores the ciphertext for the next key (open_packet's
  // `restore`). A forged packet costs at most two opens per key held: no amplification.
  const auto count = static_cast<uint32_t>(auth.keys.size());
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t k = (auth.tx + i) % count;
    const auto bytes = aead::open_packet(auth.keys[k].key, datagram, i + 1 < count);
    if (!bytes) continue;
    auth.rx[auth.rx_next] = TunnelAuthState::RxSession{session, k};
    auth.rx_next = (auth.rx_next + 1) % static_cast<uint32_t>(auth.rx.size());
    ++auth.counters.new_sessions;
    return opened(k, *bytes);
  }
  return refuse(AuthDrop::kFailed);
}

bool Engine::Impl::open(TunnelState& tunnel, std::span<std::byte> datagram,
                        wire::PacketView* packet) noexcept {
  const auto refuse = [&](AuthDrop reason, EngineDrop drop) {
    count(drop);
    if (tunnel.auth) {
      ++tunnel.auth->counters.drops[static_cast<int>(reason)];
    } else {
      ++tunnel.counters.auth_unexpected_packets;
    }
    return false;
  };
  if (!tunnel.auth) return refuse(AuthDrop::kUnexpected, EngineDrop::kAuthUnexpected);
  if (!packet->header.is_auth()) return refuse(AuthDrop::kMissing, EngineDrop::kAuthMissing);
  AuthDrop why = AuthDrop::kFailed;
  const auto bytes = open_frame(*tunnel.auth, datagram, packet->header.session, &why);
  if (!bytes) {  // counted on the tunnel by open_frame
    count(why == AuthDrop::kTruncated ? EngineDrop::kAuthTruncated : EngineDrop::kAuthFailed);
    return false;
  }
  packet->payload = datagram.subspan(wire::kHeaderSize, *bytes);
  packet->header.payload_length = static_cast<uint16_t>(*bytes);
  return true;
}

}  // namespace detwan::dataplane::gw

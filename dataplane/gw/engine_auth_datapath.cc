// Per-packet sealing and opening of an authenticated tunnel's packets (engine_auth.h).
#include "dataplane/gw/engine_auth.h"
#include "dataplane/gw/engine_impl.h"

namespace detwan::dataplane::gw {

std::size_t seal_frame(TunnelAuthState& auth, std::span<std::byte> frame,
                       std::size_t plaintext_bytes, bool control) noexcept {
  AuthKeySlot& slot = auth.keys[auth.tx];
  if (!control && !auth.has_data_keys()) {
    ++auth.counters.drops[static_cast<int>(AuthDrop::kAwaitingPeer)];
    return 0;
  }
  const std::size_t size =
      aead::seal_packet(control ? slot.tx_control : slot.tx_data, frame, plaintext_bytes);
  if (size == 0) {
    ++auth.counters.seal_failed;
  } else {
    ++auth.counters.sealed_packets;
  }
  return size;
}

namespace {

// The key of `slot` that opens a packet of this class and epoch; nullptr if there is none.
aead::AeadKey* opener(TunnelAuthState& auth, AuthKeySlot& slot, bool control,
                      uint64_t epoch) noexcept {
  if (!control) return auth.has_data_keys() ? &slot.rx_data : nullptr;
  if (epoch != 0 && epoch == auth.peer_epoch) return &slot.rx_control;
  if (epoch != 0 && epoch == auth.candidate_epoch) return &slot.candidate_control;
  return nullptr;
}

}  // namespace

std::optional<std::size_t> open_frame(TunnelAuthState& auth, std::span<std::byte> datagram,
                                      uint32_t session, bool control, uint64_t epoch,
                                      AuthDrop* why) noexcept {
  const auto refuse = [&](AuthDrop reason) -> std::optional<std::size_t> {
    ++auth.counters.drops[static_cast<int>(reason)];
    *why = reason;
    return std::nullopt;
  };
  if (datagram.size() < wire::kHeaderSize + aead::kTagBytes) return refuse(AuthDrop::kTruncated);
  if (opener(auth, auth.keys[0], control, epoch) == nullptr) {
    return refuse(control ? AuthDrop::kFailed : AuthDrop::kAwaitingPeer);
  }
  const auto opened = [&](uint32_t k, std::size_t bytes) {
    ++auth.keys[k].opened_packets;
    ++auth.counters.opened_packets;
    return bytes;
  };
  // A known session: its key, once. A failed open leaves the payload garbled, so no other key
  // is tried on the same bytes (a genuine packet of that session never fails). The sessions
  // remembered are the current peer epoch's: a candidate epoch's packet tries every key.
  const bool candidate = control && epoch != auth.peer_epoch;
  for (const auto& rx : auth.rx) {
    if (candidate || rx.session != session) continue;
    const auto bytes =
        aead::open_packet(*opener(auth, auth.keys[rx.key], control, epoch), datagram);
    if (!bytes) return refuse(AuthDrop::kFailed);
    return opened(rx.key, *bytes);
  }
  // A new session: each key held, transmit key first. OpenSSL writes the plaintext before it
  // checks the tag, so a failed try restores the ciphertext for the next key (open_packet's
  // `restore`). A forged packet costs at most two opens per key held: no amplification.
  const auto count = static_cast<uint32_t>(auth.keys.size());
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t k = (auth.tx + i) % count;
    const auto bytes = aead::open_packet(*opener(auth, auth.keys[k], control, epoch), datagram,
                                         i + 1 < count);
    if (!bytes) continue;
    // A candidate epoch's session is not remembered: the epoch may still be refused.
    if (!candidate) {
      auth.rx[auth.rx_next] = TunnelAuthState::RxSession{session, k};
      auth.rx_next = (auth.rx_next + 1) % static_cast<uint32_t>(auth.rx.size());
      ++auth.counters.new_sessions;
    }
    return opened(k, *bytes);
  }
  return refuse(AuthDrop::kFailed);
}

bool Engine::Impl::open(TunnelState& tunnel, uint32_t peer_index, std::span<std::byte> datagram,
                        wire::PacketView* packet, int64_t now_ns) noexcept {
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
  TunnelAuthState& auth = *tunnel.auth;
  const bool control = packet->header.is_control();
  // A control packet names its sender's epoch (cycle_id): the current peer epoch's key opens
  // it, another epoch needs a candidate key, derived at most once per kCandidateSpacingNs per
  // peer path (HKDF costs ~10 opens: a flood of made-up epochs cannot take the core).
  const uint64_t epoch = control ? packet->header.cycle_id : 0;
  if (control && epoch != 0 && epoch != auth.peer_epoch && epoch != auth.candidate_epoch) {
    PeerState& peer = peers[peer_index];
    if (now_ns < peer.next_candidate_ns) {
      return refuse(AuthDrop::kRateLimited, EngineDrop::kAuthRateLimited);
    }
    peer.next_candidate_ns = now_ns + kCandidateSpacingNs;
    if (!set_candidate_epoch(auth, epoch, *deriver)) {
      return refuse(AuthDrop::kFailed, EngineDrop::kAuthFailed);
    }
  }
  AuthDrop why = AuthDrop::kFailed;
  const auto bytes =
      open_frame(auth, datagram, packet->header.session, control, epoch, &why);
  if (!bytes) {  // counted on the tunnel by open_frame
    count(why == AuthDrop::kTruncated      ? EngineDrop::kAuthTruncated
          : why == AuthDrop::kAwaitingPeer ? EngineDrop::kAuthAwaitingPeer
                                           : EngineDrop::kAuthFailed);
    return false;
  }
  packet->payload = datagram.subspan(wire::kHeaderSize, *bytes);
  packet->header.payload_length = static_cast<uint16_t>(*bytes);
  return true;
}

}  // namespace detwan::dataplane::gw

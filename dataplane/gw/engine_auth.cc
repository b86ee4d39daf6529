// Setup of a tunnel's AEAD state, and the key derivations of a peer epoch (engine_auth.h).
#include <utility>

#include <fmt/format.h>

#include "dataplane/gw/engine_auth.h"

namespace detwan::dataplane::gw {

std::string_view to_string(AuthDrop reason) noexcept {
  switch (reason) {
    case AuthDrop::kMissing:
      return "auth_missing";
    case AuthDrop::kUnexpected:
      return "auth_unexpected";
    case AuthDrop::kTruncated:
      return "auth_truncated";
    case AuthDrop::kFailed:
      return "auth_failed";
    case AuthDrop::kReflected:
      return "auth_reflected";
    case AuthDrop::kAwaitingPeer:
      return "auth_awaiting_peer";
    case AuthDrop::kRateLimited:
      return "auth_rate_limited";
    case AuthDrop::kCount:
      break;
  }
  return "unknown";
}

namespace {

using aead::KeyPurpose;

// Derives one key into an existing AeadKey; the derived bytes are wiped afterwards.
bool derive_into(aead::KeyDeriver& deriver, const AuthKeySlot& slot, KeyPurpose purpose,
                 uint32_t tunnel_id, uint64_t sender, uint64_t receiver,
                 aead::AeadKey& key) noexcept {
  aead::Key derived{};
  const bool ok = deriver.derive(slot.secret, purpose, tunnel_id, sender, receiver, &derived) &&
                  key.rekey(derived);
  derived.fill(std::byte{0});
  return ok;
}

}  // namespace

bool set_peer_epoch(TunnelAuthState& auth, uint64_t epoch, aead::KeyDeriver& deriver) noexcept {
  auth.peer_epoch = 0;
  auth.rx = {};
  auth.rx_next = 0;
  if (epoch == 0 || epoch == auth.own_epoch) return false;
  for (AuthKeySlot& slot : auth.keys) {
    if (!derive_into(deriver, slot, KeyPurpose::kControl, auth.tunnel_id, epoch, 0,
                     slot.rx_control) ||
        !derive_into(deriver, slot, KeyPurpose::kData, auth.tunnel_id, auth.own_epoch, epoch,
                     slot.tx_data) ||
        !derive_into(deriver, slot, KeyPurpose::kData, auth.tunnel_id, epoch, auth.own_epoch,
                     slot.rx_data)) {
      return false;
    }
    auth.counters.key_derivations += 3;
  }
  auth.peer_epoch = epoch;
  if (auth.candidate_epoch == epoch) auth.candidate_epoch = 0;
  return true;
}

bool set_candidate_epoch(TunnelAuthState& auth, uint64_t epoch,
                         aead::KeyDeriver& deriver) noexcept {
  if (auth.candidate_epoch == epoch) return true;
  auth.candidate_epoch = 0;
  if (epoch == 0 || epoch == auth.own_epoch) return false;
  for (AuthKeySlot& slot : auth.keys) {
    if (!derive_into(deriver, slot, KeyPurpose::kControl, auth.tunnel_id, epoch, 0,
                     slot.candidate_control)) {
      return false;
    }
  }
  ++auth.counters.candidate_derivations;
  auth.candidate_epoch = epoch;
  return true;
}

common::Result<std::unique_ptr<TunnelAuthState>> make_auth(const TunnelAuth& config,
                                                           uint32_t tunnel_id, uint64_t peer_epoch,
                                                           const TunnelAuthState* previous,
                                                           AuthEnv& env) {
  const auto fail = [&](uint8_t id, std::string_view what) {
    return common::make_error(common::ErrorCode::kConfig,
                              fmt::format("auth key {}: {}", id, what));
  };
  if (env.deriver == nullptr || env.own_epoch == 0) {
    return common::make_error(common::ErrorCode::kInternal, "auth: no key schedule");
  }
  auto state = std::make_unique<TunnelAuthState>();
  state->cipher = config.cipher;
  state->tunnel_id = tunnel_id;
  state->own_epoch = env.own_epoch;
  for (const TunnelKey& key : config.keys) {
    // Five contexts per secret, keyed with zeros until derived: a key is used only once its
    // epoch is set (peer_epoch, candidate_epoch), and derive_into rekeys it first.
    auto a = aead::AeadKey::create(config.cipher, aead::Key{});
    auto b = aead::AeadKey::create(config.cipher, aead::Key{});
    auto c = aead::AeadKey::create(config.cipher, aead::Key{});
    auto d = aead::AeadKey::create(config.cipher, aead::Key{});
    auto e = aead::AeadKey::create(config.cipher, aead::Key{});
    for (auto* k : {&a, &b, &c, &d, &e}) {
      if (!k->has_value()) return fail(key.id, k->error().message);
    }
    AuthKeySlot slot{key.id,     key.secret,     std::move(*a), std::move(*b),
                     std::move(*c), std::move(*d), std::move(*e), 0};
    if (!derive_into(*env.deriver, slot, KeyPurpose::kControl, tunnel_id, env.own_epoch, 0,
                     slot.tx_control)) {
      return fail(key.id, "cannot derive its control key (OpenSSL HKDF failed)");
    }
    if (key.id == config.tx_key) state->tx = static_cast<uint32_t>(state->keys.size());
    state->keys.push_back(std::move(slot));
  }
  if (state->keys.empty()) {
    return common::make_error(common::ErrorCode::kConfig, "auth: no keys");
  }
  if (peer_epoch != 0 && !set_peer_epoch(*state, peer_epoch, *env.deriver)) {
    return common::make_error(common::ErrorCode::kConfig,
                              "auth: cannot derive the data keys (OpenSSL HKDF failed)");
  }
  // The same key and cipher as before: the keys' counters and remembered sessions go on.
  const auto same_key = [&](const AuthKeySlot& a, const AuthKeySlot& b) {
    return a.id == b.id && a.secret == b.secret && previous->cipher == config.cipher;
  };
  // A new transmit session, numbered per engine: within one boot (one epoch, so one set of
  // keys) no two sessions of a tunnel share a number, so no nonce repeats when a tunnel is
  // removed and added again or its transmit key changes (docs/wire-format.md, "Nonce").
  if (env.next_session == 0) {  // 2^32 - 1 sessions in one boot: never reuse one
    return common::make_error(common::ErrorCode::kConfig,
                              "auth: this boot's session numbers are spent; restart the gateway");
  }
  state->tx_session = env.next_session++;
  if (previous != nullptr) {
    state->counters = previous->counters;
    for (AuthKeySlot& slot : state->keys) {
      for (const AuthKeySlot& old : previous->keys) {
        if (same_key(slot, old)) slot.opened_packets = old.opened_packets;
      }
    }
    // Same transmit key: the sequence numbers go on, so the session may too (the nonce stays
    // unique); another key starts a new session.
    if (same_key(state->keys[state->tx], previous->keys[previous->tx])) {
      state->tx_session = previous->tx_session;
    }
    uint32_t kept = 0;
    for (const auto& rx : previous->rx) {
      if (rx.session == 0) continue;
      for (uint32_t k = 0; k < state->keys.size(); ++k) {
        if (same_key(state->keys[k], previous->keys[rx.key]) && kept < state->rx.size()) {
          state->rx[kept++] = TunnelAuthState::RxSession{rx.session, k};
        }
      }
    }
    state->rx_next = kept % static_cast<uint32_t>(state->rx.size());
  }
  return state;
}

}  // namespace detwan::dataplane::gw

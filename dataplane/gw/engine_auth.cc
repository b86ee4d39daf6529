// Setup of a tunnel's AEAD state (engine_auth.h).
#include <random>
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
    case AuthDrop::kCount:
      break;
  }
  return "unknown";
}

namespace {

uint32_t random_session() {
  std::random_device random;
  uint32_t session = 0;
  while (session == 0) session = random();
  return session;
}

}  // namespace

common::Result<std::unique_ptr<TunnelAuthState>> make_auth(const TunnelAuth& config,
                                                           const TunnelAuthState* previous) {
  auto state = std::make_unique<TunnelAuthState>();
  state->cipher = config.cipher;
  for (const TunnelKey& key : config.keys) {
    auto made = aead::AeadKey::create(config.cipher, key.secret);
    if (!made) {
      return common::make_error(common::ErrorCode::kConfig,
                                fmt::format("auth key {}: {}", key.id, made.error().message));
    }
    if (key.id == config.tx_key) state->tx = static_cast<uint32_t>(state->keys.size());
    state->keys.push_back(AuthKeySlot{key.id, key.secret, std::move(*made), 0});
  }
  if (state->keys.empty()) {
    return common::make_error(common::ErrorCode::kConfig, "auth: no keys");
  }
  // The same key and cipher as before: the keys' counters and remembered sessions go on.
  const auto same_key = [&](const AuthKeySlot& a, const AuthKeySlot& b) {
    return a.id == b.id && a.secret == b.secret && previous->cipher == config.cipher;
  };
  state->tx_session = random_session();
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
